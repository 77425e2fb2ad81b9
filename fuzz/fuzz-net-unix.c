/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * /proc/net/unix (REL-5, VMM-17, VMM-18). The input's first line is the socket path searched
 * for, the rest the file. Invariants beyond "no crash": a refused file gets a one-line message
 * and leaves the out-parameters alone; an accepted one stores min(n, max) inodes, the same ones
 * whatever max is; and one more listening line of the path counts once more.
 */
#include <inttypes.h>

#include "vmm/vmm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *buf = (const char *)data;
        const char *nl = memchr(buf, '\n', size);
        if (!nl)
                return 0;
        _cleanup_free_ char *path = strndup(buf, (size_t)(nl - buf));
        if (!path)
                abort();
        const char *text = nl + 1;
        size_t text_size = size - (size_t)(text - buf);

        uint64_t inodes[FUZZ_MAX], one[1] = {7};
        size_t n = 99, n1 = 99;
        _cleanup_free_ char *error = NULL;
        for (size_t i = 0; i < FUZZ_MAX; i++)
                inodes[i] = 7;

        if (vmm_net_unix_find_listening(text, text_size, path, inodes, FUZZ_MAX, &n, &error) < 0) {
                if (!error || strchr(error, '\n') || n != 99)
                        abort();
                for (size_t i = 0; i < FUZZ_MAX; i++)
                        if (inodes[i] != 7)
                                abort();
                return 0;
        }
        if (error)
                abort();
        for (size_t i = n; i < FUZZ_MAX; i++)
                if (inodes[i] != 7)
                        abort();

        /* A smaller max stores a prefix of the same inodes and counts the same. */
        if (vmm_net_unix_find_listening(text, text_size, path, one, 1, &n1, NULL) < 0 || n1 != n)
                abort();
        if (n > 0 && one[0] != inodes[0])
                abort();

        /* One more listening entry of the path (a path the kernel could print: no newline). */
        if (strchr(path, '\n') || strlen(path) != (size_t)(nl - buf) || !*path)
                return 0;
        _cleanup_free_ char *more = NULL;
        if (strprintf(&more, "%.*s0000000000000000: 00000002 00000000 00010000 0001 01 424242 %s\n",
                      (int)text_size, text, path) < 0)
                abort();
        size_t n2 = 0;
        uint64_t last[FUZZ_MAX];
        if (vmm_net_unix_find_listening(more, strlen(more), path, last, FUZZ_MAX, &n2, NULL) < 0)
                abort();
        if (n2 != n + 1 || (n2 <= FUZZ_MAX && last[n2 - 1] != 424242))
                abort();
        return 0;
}
