/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * base: the house conventions every other module stands on.
 *
 * Promises:
 *  - functions returning int return >= 0 on success and -errno on failure;
 *  - out-parameters (ret, ret_<name>) are written only on success;
 *  - parsers are strict: no leading/trailing garbage, no sign, no whitespace, no overflow;
 *  - file reads are bounded and report -EFBIG instead of truncating;
 *  - atomic writes leave either the old or the new file, never a mix, and no temp file.
 */

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- compiler helpers and cleanup ---------------------------------------------------------- */

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _sentinel_ __attribute__((sentinel))
#define _warn_unused_result_ __attribute__((warn_unused_result))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/*
 * An object left to the process exit on purpose (a detached thread may still use it): under
 * LeakSanitizer it and what it reaches are not reported as a leak; elsewhere this does nothing.
 */
#if defined(__SANITIZE_ADDRESS__)
#define BASE_HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BASE_HAVE_LSAN 1
#endif
#endif
#ifdef BASE_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
static inline void keep_until_exit(const void *p)
{
        __lsan_ignore_object(p);
}
#else
static inline void keep_until_exit(const void *p)
{
}
#endif

/*
 * Defines func##p(type *p), which calls func(*p) unless *p is NULL: the cleanup function for
 * _cleanup_(). DEFINE_TRIVIAL_CLEANUP_FUNC(Root *, root_free) gives root_freep(Root **).
 */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func) \
        static inline void func##p(type *p)     \
        {                                       \
                if (*p)                         \
                        func(*p);               \
        }

static inline void freep(void *p)
{
        free(*(void **)p);
}

/*
 * Closes *fd and sets it to -1, so that a cleanup after an early closep() never closes the
 * number again: by then another thread may have been given it (an accepted socket), and a
 * second close would take that away.
 */
static inline void closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
                *fd = -1;
        }
}

DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose);
DEFINE_TRIVIAL_CLEANUP_FUNC(DIR *, closedir);

/* Frees a NULL-terminated vector and its strings; accepts NULL, returns NULL. */
static inline char **strv_free(char **strv)
{
        for (char **s = strv; s && *s; s++)
                free(*s);
        free(strv);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, strv_free);

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_closedir_ _cleanup_(closedirp)
#define _cleanup_strv_free_ _cleanup_(strv_freep)

/* Hands ownership on: returns the value and leaves the cleanup variable empty. */
#define TAKE_PTR(p)                         \
        ({                                  \
                __typeof__(p) _taken = (p); \
                (p) = NULL;                 \
                _taken;                     \
        })
#define TAKE_FD(fd)                \
        ({                         \
                int _taken = (fd); \
                (fd) = -1;         \
                _taken;            \
        })

/* errno as a negative return, never 0 even if libc forgot to set it. */
static inline int negative_errno(void)
{
        return errno > 0 ? -errno : -EIO;
}

static inline bool streq(const char *a, const char *b)
{
        return strcmp(a, b) == 0;
}

static inline bool streq_ptr(const char *a, const char *b)
{
        if (!a || !b)
                return a == b;
        return streq(a, b);
}

/* Returns the rest of s after prefix, or NULL when s does not start with it. */
static inline const char *startswith(const char *s, const char *prefix)
{
        size_t n = strlen(prefix);
        return strncmp(s, prefix, n) == 0 ? s + n : NULL;
}

/* Whether s ends with suffix. */
static inline bool endswith(const char *s, const char *suffix)
{
        size_t n = strlen(s), k = strlen(suffix);
        return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* ---- strings ------------------------------------------------------------------------------- */

/* Like asprintf(), but -ENOMEM on failure and the result only on success. */
int strprintf(char **ret, const char *fmt, ...) _printf_(2, 3);

/* *ret = a copy of s, or NULL when s is NULL; -ENOMEM. */
int strdup_nullable(const char *s, char **ret);

/* Appends to a malloc'd string; *s may be NULL. */
int strextend(char **s, const char *fmt, ...) _printf_(2, 3);

/* Removes one trailing "\n" in place, and returns s. */
char *strchomp(char *s);

/* Removes leading and trailing ASCII white space in place; returns the start. */
char *strstrip(char *s);

/*
 * True when s[0..n) is well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing
 * above U+10FFFF, no sequence cut short. A NUL byte is U+0000 and valid here; callers that
 * refuse it check for it themselves.
 */
bool utf8_is_valid(const char *s, size_t n);

/* The two base64 forms vgpud reads (RFC 4648). */
typedef enum Base64Form {
        BASE64_PADDED,       /* section 4, as OpenSSH writes a key: whole quanta, '=' at the end */
        BASE64_URL_UNPADDED, /* section 5 without '=', as JWT (RFC 7515) writes a token's parts */
} Base64Form;

/*
 * Decodes s[0..n) strictly: only the form's alphabet, padding exactly where the form puts it,
 * a length no encoder writes refused, and zero bits in the last character's unused tail (so
 * each blob has one spelling). -EINVAL otherwise, -ENOMEM; *ret is malloc'd.
 */
int base64_decode(const char *s, size_t n, Base64Form form, uint8_t **ret, size_t *ret_size);

/* Number of strings in a NULL-terminated vector. */
size_t strv_length(char *const *strv);

/* Appends a copy of s; *strv may be NULL. */
int strv_push(char ***strv, const char *s);

/* *ret = a deep copy of strv, or NULL when strv is NULL; -ENOMEM. */
int strv_copy(char *const *strv, char ***ret);

/* qsort()'s comparison of two char * entries, by strcmp(). */
int strv_compare(const void *a, const void *b);

/* Sorts a NULL-terminated vector in place by strcmp(); strv may be NULL. */
void strv_sort(char **strv);

/* How deep JSON from outside may nest its arrays and objects (GEN-6). */
#define JSON_DEPTH_MAX 16

/*
 * True when JSON text nests arrays and objects deeper than max (GEN-6). A byte-level pre-check
 * run before the parser, so a hostile document cannot drive a recursive parser deep.
 */
bool json_text_too_deep(const char *buf, size_t size, unsigned max);

/* ---- outside text in messages and log lines ------------------------------------------------- */

/*
 * The one rule for showing text from outside (sysfs, NVML, HTTP clients, files, the command
 * line) in a message or a log line, so that an operator reading the line sees what the text
 * was and nothing it pretends to be. Byte by byte:
 *  - below 0x20, and 0x7f (DEL), becomes "\xNN" (two lowercase hex digits): the text stays on
 *    one line and cannot move the cursor, colour or clear a terminal;
 *  - "\" becomes "\\": every backslash in the output starts an escape, so a literal "\x0a"
 *    in the text cannot pass for an escaped newline;
 *  - '"' becomes "\"": the text cannot close the quotes around it or open new ones;
 *  - 0x80 and above becomes "\xNN" too: the output is printable ASCII, and a stray high byte
 *    (0x9b is a terminal control in 8-bit mode) is shown, not interpreted;
 *  - every other byte is copied.
 * Flags, for where the text goes:
 *  - ESCAPE_QUOTE puts the result in double quotes: "<text>";
 *  - ESCAPE_ECHO copies '"' and '\' as they are, for text echoed as written, whose quotes and
 *    escapes are its own (an argument read back to the operator, a whole message); only its
 *    control bytes (and high bytes) are escaped; not with ESCAPE_QUOTE;
 *  - ESCAPE_UTF8 copies 0x80 and above, for UTF-8 the operator wrote (the configuration, the
 *    command line), so that it reads as written.
 * With max < n, only the first max bytes are shown, cut back to the start of a UTF-8
 * character, and "..." follows (inside the quotes); SIZE_MAX shows all.
 */
typedef enum EscapeFlags {
        ESCAPE_QUOTE = 1 << 0,
        ESCAPE_ECHO = 1 << 1,
        ESCAPE_UTF8 = 1 << 2,
} EscapeFlags;

/* The escaped text of s[0..n), malloc'd; NULL when out of memory. */
char *escape_text(const char *s, size_t n, size_t max, EscapeFlags flags);

/*
 * The same into buf (capacity size), NUL-terminated and cut before the first escape that does
 * not fit; returns the length of the whole escaped text, as snprintf() does. buf may be NULL
 * when size is 0.
 */
size_t escape_text_buf(char *buf, size_t size, const char *s, size_t n, size_t max,
                       EscapeFlags flags);

/* ---- failure messages --------------------------------------------------------------------- */

/*
 * Functions whose failures need more than an errno (SPEC error texts) take `char **error` as
 * their last parameter. On every failure, out of memory included, they store a malloc'd message
 * naming the object and the cause, which the caller frees; on success they leave it untouched.
 * error may be NULL. So a caller never needs a text of its own for a missing message, and
 * decides by the return code (or a failure-kind enum), never by the text (ARCHITECTURE.md
 * decision 6).
 */

#define ERROR_OUT_OF_MEMORY "out of memory"

/*
 * Stores the formatted message in *error (replacing any old one, which the arguments may still
 * use) and returns r (< 0). When the message cannot be formatted for lack of memory, *error
 * reads ERROR_OUT_OF_MEMORY instead; a process that cannot even allocate that is aborted, so
 * *error is never left without a message.
 */
int error_set(char **error, int r, const char *fmt, ...) _printf_(3, 4);
/* error_set() with the arguments as a va_list. */
int error_setv(char **error, int r, const char *fmt, va_list ap) _printf_(3, 0);
/* error_set(error, -ENOMEM, ERROR_OUT_OF_MEMORY): the one wording of a failed allocation. */
int error_set_oom(char **error);

/* Rewrites *error as "<prefix>: <old message>" and returns r; with no old message, the
 * message is strerror(-r). */
int error_prefix(char **error, int r, const char *fmt, ...) _printf_(3, 4);

/* ---- logging (OPS-4) ----------------------------------------------------------------------- */

enum {
        LOG_LEVEL_ERR = 3,
        LOG_LEVEL_WARNING = 4,
        LOG_LEVEL_NOTICE = 5,
        LOG_LEVEL_INFO = 6,
        LOG_LEVEL_DEBUG = 7,
};

#define LOG_LINE_MAX 4096

void log_set_max_level(int level);
int log_get_max_level(void);
/* Maps "err", "warning", "notice", "info", "debug" to a level. */
int log_level_from_string(const char *s, int *ret);
/* Where log lines go; stderr by default. Tests point it at a memory stream. */
void log_set_stream(FILE *f);

/*
 * Writes "<N>message key=value ..." as one line of at most LOG_LINE_MAX bytes. The key/value
 * pairs are (const char *key, const char *value) and end with NULL; a NULL value skips the pair.
 * Values that need it are quoted logfmt-style. error, when non-zero, is the -errno that "%m" in
 * the message expands to. Returns -abs(error) so callers can "return log_...".
 */
int log_kv(int level, int error, const char *fmt, ...) _printf_(3, 4);
int log_kvv(int level, int error, const char *message, va_list pairs);
int log_line(int level, int error, const char *message, ...) _sentinel_;

/*
 * Appends one " key=value" pair to buf (capacity size), cut to fit (OPS-4): the value as it is
 * when it is non-empty printable ASCII without space, '"', '=' or '\', else as escape_text()
 * with ESCAPE_QUOTE writes it.
 */
void logfmt_append(char *buf, size_t size, const char *key, const char *value);

/*
 * OPS-13: when JOURNAL_STREAM names the stream stderr is (systemd started the process with its
 * output to the journal), log lines go to the journal through its native protocol instead, with
 * PRIORITY, SYSLOG_IDENTIFIER (identifier), ERRNO and the fields VGPUD_INSTANCE, VGPUD_VF and
 * VGPUD_GPU from the pairs instance_id, vf and gpu; a datagram that cannot be sent at once (the
 * socket never blocks) falls back to stderr. 1: the journal is used; 0: stderr stays; -errno:
 * the socket cannot be had.
 */
int log_open_journal(const char *identifier);

#define log_full_errno(level, error, ...) log_kv(level, error, __VA_ARGS__)
#define log_error_errno(error, ...) log_kv(LOG_LEVEL_ERR, error, __VA_ARGS__)
#define log_warning_errno(error, ...) log_kv(LOG_LEVEL_WARNING, error, __VA_ARGS__)
#define log_error(...) log_kv(LOG_LEVEL_ERR, 0, __VA_ARGS__)
#define log_warning(...) log_kv(LOG_LEVEL_WARNING, 0, __VA_ARGS__)
#define log_notice(...) log_kv(LOG_LEVEL_NOTICE, 0, __VA_ARGS__)
#define log_info(...) log_kv(LOG_LEVEL_INFO, 0, __VA_ARGS__)
#define log_debug(...) log_kv(LOG_LEVEL_DEBUG, 0, __VA_ARGS__)

/* ---- strict parsers ------------------------------------------------------------------------ */

/* Unsigned decimal: one or more ASCII digits and nothing else. -EINVAL, or -ERANGE on overflow. */
int parse_uint64(const char *s, uint64_t *ret);
/* As parse_uint64, and the value must lie in [min, max] (-ERANGE otherwise). */
int parse_uint64_range(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
int parse_uint32(const char *s, uint32_t *ret);

/* The value of a hex digit: 0..15 for 0-9, a-f and A-F; -EINVAL for anything else. */
int hex_value(char c);
/* As hex_value(), lowercase only: the canonical form that the kernel and sysfs print. */
int hex_value_lower(char c);

/* A PCI address "dddd:bb:dd.f", lowercase hex, function 0-7. */
typedef struct PciAddress {
        uint16_t domain;
        uint8_t bus;
        uint8_t device;
        uint8_t function;
} PciAddress;

#define PCI_ADDRESS_STRLEN 13 /* "dddd:bb:dd.f" plus NUL */

bool pci_address_is_valid(const char *s);
int parse_pci_address(const char *s, PciAddress *ret);
/* Writes the canonical form into buf. */
char *pci_address_format(const PciAddress *a, char buf[static PCI_ADDRESS_STRLEN]);

/*
 * A UUID in its 8-4-4-4-12 text form: exactly n bytes of hex digits with dashes at 8, 13, 18 and
 * 23. lowercase_only refuses A-F, for values compared as strings (what the kernel prints in
 * sysfs and /proc, and what Placement prints for consumers), where another spelling would be
 * another name.
 */
#define UUID_STRLEN 37 /* 36 characters and the NUL */
bool uuid_text_is_valid(const char *s, size_t n, bool lowercase_only);
/* A NUL-terminated lowercase UUID; false for NULL. */
bool uuid_is_lowercase(const char *s);
/* A MAC address as vgpud writes and QEMU reads it: six lowercase hex pairs joined by ':'. */
bool mac_address_is_valid(const char *s);
/*
 * An IPv4 address in its one canonical dotted-quad spelling ("10.0.0.1", never "010.0.0.1"), as
 * records compare addresses as text; *ret in host byte order.
 */
int parse_ipv4(const char *s, uint32_t *ret);
/* Writes a host-order address as a dotted quad. */
#define IPV4_STRLEN 16
char *format_ipv4(uint32_t addr, char buf[static IPV4_STRLEN]);
/*
 * "a.b.c.d/n" with n in [min_prefix, max_prefix] and no host bits set (a network, not an
 * address in it). -EINVAL for the form, -ERANGE for the prefix, -EADDRNOTAVAIL for host bits.
 */
int parse_ipv4_network(const char *s, unsigned min_prefix, unsigned max_prefix, uint32_t *ret,
                       unsigned *ret_prefix);
/*
 * A network interface name the kernel takes: 1..IFNAME_MAX bytes of printable ASCII without
 * white space, '/' or ':', and not "." or "..".
 */
#define IFNAME_MAX 15 /* IFNAMSIZ less the NUL */
bool ifname_is_valid(const char *s);
/* "<lo>-<hi>", 1 <= lo <= hi <= 65535. -EINVAL, -ERANGE. */
int parse_port_range(const char *s, uint16_t *ret_lo, uint16_t *ret_hi);
/*
 * QEMU's rule for ids and node names (-chardev id=, -blockdev node-name=, -netdev id=): a letter,
 * then letters, digits, '-', '.' and '_', at most 31 in all. Such a name needs no escaping in a
 * keyval option (VMM-2).
 */
bool qemu_id_is_valid(const char *s);
/* INST-3's ids, for instances and volumes: 20 characters of [a-z0-9] from getrandom(). */
#define RANDOM_ID_LEN 20
int random_id_generate(char ret[static RANDOM_ID_LEN + 1]);
bool random_id_is_valid(const char *id);
/* INST-4's pattern, for the names of instances, images and volumes and a guest's host name
 * (SEED-1):
 * ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ */
#define RESOURCE_NAME_MAX 63
bool resource_name_is_valid(const char *name);
/* INST-6's form of a host path: absolute, at most HOST_PATH_MAX bytes, no "." or ".."
 * component. */
#define HOST_PATH_MAX 4096
bool host_path_form_is_valid(const char *path);

/*
 * Arrays of pointers kept sorted by a string key each item holds (key_of), for lookups by id or
 * name: sorted_find() says where key is (true) or would go (false, *ret_at the place);
 * sorted_get() returns the item or NULL (a NULL key too); sorted_insert() grows the array by one
 * (-EEXIST for a key already there, -ENOMEM); sorted_remove() takes that very item out (false
 * when it is not there). Items are cast to and from void *.
 */
typedef const char *(*SortedKeyFunc)(const void *item);
bool sorted_find(void *const *items, size_t n, const char *key, SortedKeyFunc key_of,
                 size_t *ret_at);
void *sorted_get(void *const *items, size_t n, const char *key, SortedKeyFunc key_of);
int sorted_insert(void ***items, size_t *n, void *item, SortedKeyFunc key_of);
bool sorted_remove(void **items, size_t *n, const void *item, SortedKeyFunc key_of);

/* Durations in nanoseconds. */
typedef uint64_t nsec_t;
#define NSEC_PER_USEC ((nsec_t)1000)
#define NSEC_PER_MSEC ((nsec_t)1000000)
#define NSEC_PER_SEC ((nsec_t)1000000000)
#define NSEC_PER_MIN (60 * NSEC_PER_SEC)
#define NSEC_PER_HOUR (60 * NSEC_PER_MIN)
/* No deadline: a time that never comes. */
#define NSEC_INFINITY ((nsec_t)UINT64_MAX)

/*
 * "<digits><unit>" with unit ms, s, m or h, concatenable ("1m30s", "1h0m0s"), each unit at
 * most once and larger units first ("1m1m", "1s1m" are refused). At least one component; no
 * sign, no fraction, no white space; -ERANGE beyond UINT64_MAX nanoseconds.
 */
int parse_duration(const char *s, nsec_t *ret);

/* Go's time.Duration.String(): "100ms", "30s", "1m30s", "1h0m0s", "1.5s", "0s" (GEN-12). */
#define DURATION_STRLEN 40
char *format_duration(nsec_t d, char buf[static DURATION_STRLEN]);

/*
 * Timestamps (GEN-8, GEN-9). Parsing accepts RFC 3339 with "Z" or a numeric offset and 0-9
 * fractional digits, and yields UTC. Formatting writes UTC with trailing fractional zeros
 * removed. The zero value (0001-01-01T00:00:00Z) means "missing".
 */
typedef struct Timestamp {
        int64_t sec; /* seconds since the Unix epoch, UTC */
        uint32_t nsec;
} Timestamp;

#define TIMESTAMP_STRLEN 40
#define TIMESTAMP_ZERO_SEC INT64_C(-62135596800) /* 0001-01-01T00:00:00Z */

int parse_timestamp(const char *s, Timestamp *ret);
char *format_timestamp(Timestamp t, char buf[static TIMESTAMP_STRLEN]);
bool timestamp_is_zero(Timestamp t);
int timestamp_compare(Timestamp a, Timestamp b);
Timestamp timestamp_from_timespec(struct timespec ts);

/* An injectable clock: production uses clock_realtime(); tests pass their own. */
typedef struct Clock {
        Timestamp (*now)(void *userdata);
        void *userdata;
} Clock;

Timestamp clock_now(const Clock *c);
extern const Clock clock_realtime;

/* ---- files --------------------------------------------------------------------------------- */

/*
 * Reads a whole file relative to dirfd (or AT_FDCWD) into a NUL-terminated buffer. More than
 * max bytes gives -EFBIG; the file is read until EOF whatever its stat size says (sysfs). Only a
 * regular file is read: a directory gives -EISDIR and anything else (a FIFO, a device, a
 * socket) -EBADFD, without waiting for a writer.
 */
int read_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_size);

/*
 * INST-2a: the one way to open a file vgpud keeps under data_dir or runtime_dir (records, logs,
 * the console, the health file). O_NOFOLLOW and O_NONBLOCK, then fstat: anything but a regular
 * file (a link, a FIFO, a device, a socket) gives -EBADFD at once, a directory -EISDIR, and
 * nothing ever waits for a FIFO's peer. flags are openat()'s (O_CLOEXEC is added; O_NONBLOCK is
 * cleared again on the returned descriptor); mode is for O_CREAT. Returns the descriptor.
 */
int open_own_file_at(int dirfd, const char *path, int flags, mode_t mode);

/* read_file_at() through open_own_file_at(): for files under data_dir and runtime_dir. */
int read_own_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_size);

/* strerror(-r), but "not a regular file" for the -EBADFD of the readers above. */
const char *file_strerror(int r);

/*
 * openat2() of path beneath dirfd with every symlink and magic link refused and no ".." out of
 * it (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS); O_CLOEXEC is added. For a
 * path already resolved by realpath(): what was checked is what gets opened, or -ELOOP/-EXDEV.
 * Returns the descriptor.
 */
int openat_beneath(int dirfd, const char *path, int flags);

/*
 * Deletes dirfd/name and, for a directory, everything below it: never through a symlink (a link
 * is removed as itself), never into another filesystem (-EXDEV), at most 32 levels deep (-ELOOP).
 * A name that is gone already is no failure; name must be a single component (-EINVAL).
 */
int tree_delete_at(int dirfd, const char *name, char **error);

/*
 * A directory stream on dirfd/path ("." for dirfd itself) with an open file description of its
 * own, so that its offset is shared with neither dirfd nor an earlier stream (a dup of dirfd
 * would start where the last reader stopped). flags are added to O_RDONLY | O_DIRECTORY |
 * O_CLOEXEC (O_NOFOLLOW, say).
 */
int opendir_at(int dirfd, const char *path, int flags, DIR **ret);

/* The next entry of d but "." and "..": 1 with *ret set, 0 at the end, or a negative errno. */
int readdir_next(DIR *d, struct dirent **ret);

/* Writes all of buf, retrying short writes and EINTR. */
int write_all(int fd, const void *buf, size_t size);

/* fsync() of a directory relative to dirfd ("." for dirfd itself). */
int fsync_directory_at(int dirfd, const char *path);

/* The steps of write_file_atomic_at, so callers can name the one that failed. */
typedef enum WriteStep {
        WRITE_STEP_CREATE,   /* open the temp file */
        WRITE_STEP_WRITE,    /* write its contents */
        WRITE_STEP_SYNC,     /* fsync it */
        WRITE_STEP_CLOSE,    /* close it */
        WRITE_STEP_RENAME,   /* rename it over the target */
        WRITE_STEP_SYNC_DIR, /* fsync the directory */
} WriteStep;

/*
 * Crash-safe replace of dirfd/name: writes "<name>.tmp" (O_TRUNC, mode), fsyncs and closes it,
 * renames it over name, fsyncs dirfd. On failure the temp file is removed, *failed_step (if
 * non-NULL) names the step, and the result is -errno. This is a failure report rather than an
 * out-parameter: it is the one value a caller needs exactly when the call fails.
 */
int write_file_atomic_at(int dirfd, const char *name, const void *buf, size_t size, mode_t mode,
                         WriteStep *failed_step);
