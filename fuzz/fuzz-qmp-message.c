/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * QMP messages (REL-5, VMM-5, VMM-6). Invariants beyond "no crash": a refused line gets one
 * printable line of message and leaves the message alone; an accepted one has what its kind
 * promises; and the message written back as QEMU would send it parses to the same message.
 */
#include "vmm/vmm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void assert_printable(const char *s)
{
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
                        abort();
}

/* The message as a QMP line: its kind's key and what the parser kept. */
static json_t *reencode(const VmmQmpMessage *m)
{
        switch (m->kind) {
        case VMM_QMP_GREETING:
                return json_pack("{s:O}", "QMP", m->value);
        case VMM_QMP_RETURN:
                return json_pack("{s:O}", "return", m->value);
        case VMM_QMP_ERROR:
                return json_pack("{s:{s:s,s:s}}", "error", "class", m->error_class, "desc",
                                 m->error_desc);
        case VMM_QMP_EVENT:
                return json_pack("{s:s,s:O*,s:{s:i,s:i}}", "event", m->event, "data", m->value,
                                 "timestamp", "seconds", 1, "microseconds", 2);
        }
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_free_ char *error = NULL, *line = NULL;
        _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = {.kind = (VmmQmpKind)42};
        _cleanup_(vmm_qmp_message_done) VmmQmpMessage again = {};

        int r = vmm_qmp_message_parse((const char *)data, size, &m, &error);
        if (r < 0) {
                if (!error || m.kind != (VmmQmpKind)42 || m.value)
                        abort();
                assert_printable(error);
                if ((r == -E2BIG) != (size > VMM_QMP_LINE_MAX + 1 ||
                                      (size == VMM_QMP_LINE_MAX + 1 && data[size - 1] != '\r')))
                        abort();
                return 0;
        }
        if (error)
                abort();

        switch (m.kind) {
        case VMM_QMP_GREETING:
                if (!json_is_object(m.value) || m.event || m.error_class || m.error_desc)
                        abort();
                break;
        case VMM_QMP_RETURN:
                if (!m.value || m.event || m.error_class || m.error_desc)
                        abort();
                break;
        case VMM_QMP_ERROR:
                if (m.value || m.event || !m.error_class || !m.error_desc)
                        abort();
                break;
        case VMM_QMP_EVENT:
                if (!m.event || !*m.event || (m.value && !json_is_object(m.value)) ||
                    m.error_class || m.error_desc)
                        abort();
                break;
        default:
                abort();
        }

        json_auto_t *j = reencode(&m);
        if (!j)
                abort();
        line = json_dumps(j, JSON_COMPACT);
        if (!line)
                abort();
        if (vmm_qmp_message_parse(line, strlen(line), &again, NULL) < 0 || again.kind != m.kind ||
            !streq_ptr(again.event, m.event) || !streq_ptr(again.error_class, m.error_class) ||
            !streq_ptr(again.error_desc, m.error_desc))
                abort();
        if ((m.value || again.value) && !json_equal(m.value, again.value))
                abort();
        return 0;
}
