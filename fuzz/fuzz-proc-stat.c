/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * /proc/<pid>/stat (REL-5, VMM-16). Invariants beyond "no crash": a refused text gets a one-line
 * message; an accepted one has a pid above 0, pid-like fields that fit a pid_t and a state the
 * kernel prints; the same fields written back as a stat line parse to the same values; and one
 * trailing newline more or less changes nothing.
 */
#include <inttypes.h>

#include "vmm/vmm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *buf = (const char *)data;
        _cleanup_free_ char *error = NULL, *again = NULL, *line = NULL;
        VmmProcStat st, st2, st3;

        if (vmm_parse_proc_stat(buf, size, &st, &error) < 0) {
                if (!error || strchr(error, '\n'))
                        abort();
                return 0;
        }
        if (error)
                abort();
        if (st.pid <= 0 || st.ppid < 0 || st.pgrp < 0 || st.session < 0 ||
            !strchr("RSDZTtXxKWPI", st.state) || st.state == '\0')
                abort();

        /* The kernel's layout of the same values (fields 7..21 zero) reads back the same. */
        if (strprintf(&line, "%d (comm) %c %d %d %d 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 %" PRIu64 "\n",
                      (int)st.pid, st.state, (int)st.ppid, (int)st.pgrp, (int)st.session,
                      st.start_time) < 0)
                abort();
        if (vmm_parse_proc_stat(line, strlen(line), &st2, NULL) < 0)
                abort();
        if (memcmp(&st, &st2, sizeof st) != 0)
                abort();

        /* A newline added to a text without one is the kernel's own ending. */
        if (size > 0 && buf[size - 1] != '\n' && size < VMM_PROC_STAT_MAX) {
                again = malloc(size + 1);
                if (!again)
                        abort();
                memcpy(again, buf, size);
                again[size] = '\n';
                if (vmm_parse_proc_stat(again, size + 1, &st3, NULL) < 0 ||
                    memcmp(&st, &st3, sizeof st) != 0)
                        abort();
        }
        return 0;
}
