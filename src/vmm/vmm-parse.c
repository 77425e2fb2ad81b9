/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The strict parsers of what the kernel and QEMU tell vgpud (GEN-5, REL-5): /proc/<pid>/stat
 * (VMM-16), /proc/net/unix (VMM-17, VMM-18) and QMP messages (VMM-5, VMM-6, VMM-20). Each
 * takes a buffer and its size, never reads past it, and accepts exactly what the kernel or
 * QEMU prints; anything else is refused with a message, never guessed at.
 */
#include <limits.h>

#include "base/json-util.h"
#include "vmm/vmm.h"

/* ---- numbers ------------------------------------------------------------------------------- */

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

/*
 * A decimal as the kernel prints it: digits without a leading zero (except "0" itself), and
 * with allow_sign a "-" before a non-zero value. The magnitude goes to *ret_abs, the sign to
 * *ret_negative. -EINVAL for anything else, -ERANGE beyond UINT64_MAX, or for a negative value,
 * beyond INT64_MIN.
 */
static int parse_decimal(const char *s, size_t n, bool allow_sign, uint64_t *ret_abs,
                         bool *ret_negative)
{
        bool negative = false;
        if (n > 0 && s[0] == '-' && allow_sign) {
                negative = true;
                s++;
                n--;
        }
        if (n == 0 || (s[0] == '0' && (n > 1 || negative)))
                return -EINVAL;

        uint64_t v = 0;
        for (size_t i = 0; i < n; i++) {
                if (!is_digit(s[i]))
                        return -EINVAL;
                unsigned d = (unsigned)(s[i] - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        if (negative && v > (uint64_t)INT64_MAX + 1)
                return -ERANGE;
        *ret_abs = v;
        *ret_negative = negative;
        return 0;
}

static int parse_unsigned(const char *s, size_t n, uint64_t max, uint64_t *ret)
{
        uint64_t v;
        bool negative;
        int r = parse_decimal(s, n, false, &v, &negative);
        if (r < 0)
                return r;
        if (v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

/* ---- /proc/<pid>/stat ---------------------------------------------------------------------- */

#define STAT_FIELDS_MIN 22

static const char *stat_field_name(unsigned field)
{
        switch (field) {
        case 1:
                return " (pid)";
        case 2:
                return " (comm)";
        case 3:
                return " (state)";
        case 4:
                return " (ppid)";
        case 5:
                return " (pgrp)";
        case 6:
                return " (session)";
        case 22:
                return " (start_time)";
        default:
                return "";
        }
}

static int stat_error(char **error, unsigned field, const char *what)
{
        return error_set(error, -EBADMSG, "stat field %u%s: %s", field, stat_field_name(field),
                         what);
}

static int stat_number_error(char **error, unsigned field, int r)
{
        return stat_error(error, field, r == -ERANGE ? "out of range" : "not a decimal number");
}

static bool stat_state_is_valid(char c)
{
        return c && strchr("RSDZTtXxKWPI", c);
}

int vmm_parse_proc_stat(const char *buf, size_t size, VmmProcStat *ret, char **error)
{
        if (size > VMM_PROC_STAT_MAX)
                return error_set(error, -EFBIG, "stat longer than %d bytes", VMM_PROC_STAT_MAX);
        if (size > 0 && buf[size - 1] == '\n')
                size--;
        if (size == 0)
                return error_set(error, -EBADMSG, "stat is empty");

        /* Field 1, then " (". */
        const char *open = memchr(buf, '(', size);
        if (!open || open - buf < 2 || open[-1] != ' ')
                return stat_error(error, 2, "no \" (\" after the pid");
        uint64_t pid;
        int r = parse_unsigned(buf, (size_t)(open - 1 - buf), INT32_MAX, &pid);
        if (r < 0 || pid == 0)
                return stat_number_error(error, 1, r < 0 ? r : -ERANGE);

        /*
         * comm is whatever the process named itself, ")" and " " included: only the last ")"
         * ends it, since everything after it is the kernel's own.
         */
        const char *close = memrchr(open, ')', size - (size_t)(open - buf));
        if (!close)
                return stat_error(error, 2, "no \")\" after \"(\"");
        const char *end = buf + size;
        const char *p = close + 1;

        if (end - p < 2 || p[0] != ' ')
                return stat_error(error, 3, "missing");
        char state = p[1];
        if (!stat_state_is_valid(state) || (end - p > 2 && p[2] != ' '))
                return stat_error(error, 3, "not a known process state");
        p += 2;

        VmmProcStat st = {.pid = (pid_t)pid, .state = state};
        unsigned field = 3;
        /* Each further field is one space and a decimal; a newline could only end the text. */
        while (p < end) {
                field++;
                if (*p != ' ')
                        return stat_error(error, field, "not separated by one space");
                p++;
                const char *sep = memchr(p, ' ', (size_t)(end - p));
                size_t n = sep ? (size_t)(sep - p) : (size_t)(end - p);
                if (n == 0)
                        return stat_error(error, field, "empty");

                uint64_t v;
                bool negative;
                switch (field) {
                case 4:
                case 5:
                case 6:
                        r = parse_unsigned(p, n, INT32_MAX, &v);
                        if (r < 0)
                                return stat_number_error(error, field, r);
                        if (field == 4)
                                st.ppid = (pid_t)v;
                        else if (field == 5)
                                st.pgrp = (pid_t)v;
                        else
                                st.session = (pid_t)v;
                        break;
                case 22:
                        r = parse_unsigned(p, n, UINT64_MAX, &st.start_time);
                        if (r < 0)
                                return stat_number_error(error, field, r);
                        break;
                default:
                        /* tty_pgrp, priority, nice, exit_signal, ... print signed. */
                        r = parse_decimal(p, n, true, &v, &negative);
                        if (r < 0)
                                return stat_number_error(error, field, r);
                }
                p += n;
        }
        if (field < STAT_FIELDS_MIN)
                return error_set(error, -EBADMSG, "stat has %u fields, fewer than %u", field,
                                 STAT_FIELDS_MIN);

        *ret = st;
        return 0;
}

/* ---- /proc/net/unix ------------------------------------------------------------------------ */

#define NET_UNIX_HEADER "Num       RefCount Protocol Flags    Type St Inode Path"

static bool is_upper_hex(char c)
{
        return is_digit(c) || (c >= 'A' && c <= 'F');
}

static bool is_lower_hex(char c)
{
        return is_digit(c) || (c >= 'a' && c <= 'f');
}

/* Exactly n hex digits of the kernel's "%0<n>X" at *p, then one space; advances *p. */
static bool take_upper_hex(const char **p, const char *end, size_t n, uint32_t *ret)
{
        const char *s = *p;
        if ((size_t)(end - s) < n + 1)
                return false;
        uint32_t v = 0;
        for (size_t i = 0; i < n; i++) {
                if (!is_upper_hex(s[i]))
                        return false;
                v = v << 4 | (uint32_t)hex_value(s[i]);
        }
        if (s[n] != ' ')
                return false;
        *p = s + n + 1;
        *ret = v;
        return true;
}

typedef struct NetUnixEntry {
        uint32_t flags;
        uint64_t inode;
        const char *path; /* NULL for an unbound socket */
        size_t path_len;
} NetUnixEntry;

/*
 * One entry line (without its "\n") as af_unix prints it:
 * "%pK: %08X %08X %08X %04X %02X %5lu", then " " and the path for a bound socket. NULL, or what
 * is wrong with the line.
 */
static const char *parse_net_unix_line(const char *line, size_t size, NetUnixEntry *ret)
{
        const char *p = line, *end = line + size;

        if (memchr(line, '\0', size))
                return "contains a NUL byte";

        /* The socket's address, hashed or zeroed: pointer-wide lowercase hex. */
        size_t n = 0;
        while (p + n < end && is_lower_hex(p[n]))
                n++;
        if ((n != 16 && n != 8) || end - (p + n) < 2 || p[n] != ':' || p[n + 1] != ' ')
                return "no \"<address>: \" at its start";
        p += n + 2;

        uint32_t refcount, protocol, flags, type, st;
        if (!take_upper_hex(&p, end, 8, &refcount) || !take_upper_hex(&p, end, 8, &protocol) ||
            !take_upper_hex(&p, end, 8, &flags) || !take_upper_hex(&p, end, 4, &type) ||
            !take_upper_hex(&p, end, 2, &st))
                return "RefCount, Protocol, Flags, Type or St is not the kernel's hex";

        /* "%5lu": right-aligned in five columns, so exactly 5 - digits spaces pad it. */
        size_t pad = 0;
        while (p + pad < end && p[pad] == ' ')
                pad++;
        size_t digits = 0;
        while (p + pad + digits < end && is_digit(p[pad + digits]))
                digits++;
        uint64_t inode;
        if (digits == 0 || pad != (digits < 5 ? 5 - digits : 0) ||
            parse_unsigned(p + pad, digits, UINT64_MAX, &inode) < 0)
                return "Inode is not a decimal number";
        p += pad + digits;

        NetUnixEntry e = {.flags = flags, .inode = inode};
        if (p < end) {
                /* The path is raw: everything after one space, spaces included. */
                if (*p != ' ' || end - p < 2)
                        return "no path after the inode";
                e.path = p + 1;
                e.path_len = (size_t)(end - p - 1);
        }
        *ret = e;
        return NULL;
}

static bool net_unix_matches(const NetUnixEntry *e, const char *path, size_t path_len)
{
        return (e->flags & VMM_NET_UNIX_FLAGS_LISTENING) && e->path && e->path_len == path_len &&
               memcmp(e->path, path, path_len) == 0;
}

int vmm_net_unix_find_listening(const char *buf, size_t size, const char *path, uint64_t *inodes,
                                size_t max, size_t *ret_n, char **error)
{
        if (size > VMM_NET_UNIX_MAX)
                return error_set(error, -EFBIG, "/proc/net/unix longer than %u bytes",
                                 VMM_NET_UNIX_MAX);

        const char *end = buf + size;
        const char *nl = memchr(buf, '\n', size);
        if (!nl || (size_t)(nl - buf) != strlen(NET_UNIX_HEADER) ||
            memcmp(buf, NET_UNIX_HEADER, strlen(NET_UNIX_HEADER)) != 0)
                return error_set(error, -EBADMSG, "/proc/net/unix line 1: not the kernel's header");

        size_t path_len = strlen(path), found = 0;
        const char *first_match = NULL;
        unsigned line_no = 1;

        /* The whole text is checked before any inode is stored (out-parameters on success). */
        for (const char *line = nl + 1; line < end; line = nl + 1) {
                line_no++;
                nl = memchr(line, '\n', (size_t)(end - line));
                if (!nl)
                        return error_set(error, -EBADMSG,
                                         "/proc/net/unix line %u: no newline at its end", line_no);
                NetUnixEntry e = {};
                const char *why = parse_net_unix_line(line, (size_t)(nl - line), &e);
                if (why)
                        return error_set(error, -EBADMSG, "/proc/net/unix line %u: %s", line_no,
                                         why);
                if (net_unix_matches(&e, path, path_len)) {
                        if (found == 0)
                                first_match = line;
                        found++;
                }
        }

        size_t stored = 0;
        for (const char *line = first_match; line && stored < max && stored < found;
             line = nl + 1) {
                nl = memchr(line, '\n', (size_t)(end - line));
                NetUnixEntry e = {};
                (void)parse_net_unix_line(line, (size_t)(nl - line), &e);
                if (net_unix_matches(&e, path, path_len))
                        inodes[stored++] = e.inode;
        }
        *ret_n = found;
        return 0;
}

/* ---- QMP messages -------------------------------------------------------------------------- */

static int qmp_error(char **error, const char *fmt, ...) _printf_(2, 3);
static int qmp_error(char **error, const char *fmt, ...)
{
        _cleanup_free_ char *what = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = error_setv(&what, -EBADMSG, fmt, ap);
        va_end(ap);
        return error_set(error, r, "invalid QMP message: %s", what);
}

/* Text from QEMU in a message: quoted, escaped, cut (base.h's one rule for outside text). */
#define QMP_QUOTE_MAX 64

/* Every key of o is one of the NULL-terminated allowed; else the first other one is named. */
static int only_keys(json_t *o, const char *const *allowed, const char *where, char **error)
{
        const char *key = json_first_unknown_key(o, allowed);
        if (!key)
                return 0;
        _cleanup_free_ char *quoted = escape_text(key, strlen(key), QMP_QUOTE_MAX, ESCAPE_QUOTE);
        if (!quoted)
                return error_set_oom(error);
        return qmp_error(error, "unknown key %s in %s", quoted, where);
}

static char *dup_string(json_t *s)
{
        return strndup(json_string_value(s), json_string_length(s));
}

static int qmp_greeting(json_t *root, VmmQmpMessage *m, char **error)
{
        static const char *const keys[] = {"QMP", NULL};
        int r = only_keys(root, keys, "a greeting", error);
        if (r < 0)
                return r;
        json_t *qmp = json_object_get(root, "QMP");
        if (!json_is_object(qmp))
                return qmp_error(error, "\"QMP\" is not an object");
        m->value = json_incref(qmp);
        return 0;
}

static int qmp_return(json_t *root, VmmQmpMessage *m, char **error)
{
        static const char *const keys[] = {"return", "id", NULL};
        int r = only_keys(root, keys, "a reply", error);
        if (r < 0)
                return r;
        m->value = json_incref(json_object_get(root, "return"));
        return 0;
}

static int qmp_error_reply(json_t *root, VmmQmpMessage *m, char **error)
{
        static const char *const keys[] = {"error", "id", NULL};
        static const char *const error_keys[] = {"class", "desc", NULL};
        int r = only_keys(root, keys, "an error reply", error);
        if (r < 0)
                return r;
        json_t *e = json_object_get(root, "error");
        if (!json_is_object(e))
                return qmp_error(error, "\"error\" is not an object");
        r = only_keys(e, error_keys, "\"error\"", error);
        if (r < 0)
                return r;
        json_t *class = json_object_get(e, "class"), *desc = json_object_get(e, "desc");
        if (!json_is_string(class))
                return qmp_error(error, "\"error\" has no string \"class\"");
        if (!json_is_string(desc))
                return qmp_error(error, "\"error\" has no string \"desc\"");

        m->error_class = dup_string(class);
        m->error_desc = dup_string(desc);
        if (!m->error_class || !m->error_desc)
                return error_set_oom(error);
        return 0;
}

static int qmp_event(json_t *root, VmmQmpMessage *m, char **error)
{
        static const char *const keys[] = {"event", "data", "timestamp", NULL};
        static const char *const timestamp_keys[] = {"seconds", "microseconds", NULL};
        int r = only_keys(root, keys, "an event", error);
        if (r < 0)
                return r;
        json_t *name = json_object_get(root, "event");
        if (!json_is_string(name) || json_string_length(name) == 0)
                return qmp_error(error, "\"event\" is not a name");

        json_t *ts = json_object_get(root, "timestamp");
        if (!json_is_object(ts))
                return qmp_error(error, "an event has no \"timestamp\" object");
        r = only_keys(ts, timestamp_keys, "\"timestamp\"", error);
        if (r < 0)
                return r;
        if (!json_is_integer(json_object_get(ts, "seconds")) ||
            !json_is_integer(json_object_get(ts, "microseconds")))
                return qmp_error(error, "\"timestamp\" lacks integer seconds and microseconds");

        json_t *data = json_object_get(root, "data");
        if (data && !json_is_object(data))
                return qmp_error(error, "\"data\" is not an object");

        m->event = dup_string(name);
        if (!m->event)
                return error_set_oom(error);
        m->value = data ? json_incref(data) : NULL;
        return 0;
}

int vmm_qmp_message_parse(const char *line, size_t size, VmmQmpMessage *ret, char **error)
{
        /* QEMU ends its lines with "\r\n"; the reader took the "\n". */
        if (size > 0 && line[size - 1] == '\r')
                size--;
        if (size > VMM_QMP_LINE_MAX)
                return error_set(error, -E2BIG, "QMP message longer than %u bytes",
                                 VMM_QMP_LINE_MAX);
        if (memchr(line, '\0', size))
                return qmp_error(error, "contains a NUL byte");
        if (json_text_too_deep(line, size, JSON_DEPTH_MAX))
                return qmp_error(error, "nested deeper than %d levels", JSON_DEPTH_MAX);

        json_error_t jerr;
        json_auto_t *root = json_loadb(line, size, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                /* jansson quotes the input near the error: keep the message one printable line. */
                for (char *p = jerr.text; *p; p++)
                        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                                *p = '?';
                return qmp_error(error, "%s (column %d)", jerr.text, jerr.column);
        }
        if (!json_is_object(root))
                return qmp_error(error, "not an object");

        static const struct {
                const char *key;
                VmmQmpKind kind;
        } kinds[] = {
            {"QMP", VMM_QMP_GREETING},
            {"return", VMM_QMP_RETURN},
            {"error", VMM_QMP_ERROR},
            {"event", VMM_QMP_EVENT},
        };
        const char *found = NULL;
        VmmQmpKind kind = VMM_QMP_RETURN;
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++) {
                if (!json_object_get(root, kinds[i].key))
                        continue;
                if (found)
                        return qmp_error(error, "both \"%s\" and \"%s\"", found, kinds[i].key);
                found = kinds[i].key;
                kind = kinds[i].kind;
        }
        if (!found)
                return qmp_error(error, "none of \"QMP\", \"return\", \"error\", \"event\"");

        _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = {.kind = kind};
        int r;
        switch (kind) {
        case VMM_QMP_GREETING:
                r = qmp_greeting(root, &m, error);
                break;
        case VMM_QMP_RETURN:
                r = qmp_return(root, &m, error);
                break;
        case VMM_QMP_ERROR:
                r = qmp_error_reply(root, &m, error);
                break;
        case VMM_QMP_EVENT:
                r = qmp_event(root, &m, error);
                break;
        default:
                r = qmp_error(error, "unknown kind");
        }
        if (r < 0)
                return r;

        *ret = m;
        m = (VmmQmpMessage){};
        return 0;
}

void vmm_qmp_message_done(VmmQmpMessage *m)
{
        if (!m)
                return;
        json_decref(m->value);
        free(m->event);
        free(m->error_class);
        free(m->error_desc);
        *m = (VmmQmpMessage){};
}
