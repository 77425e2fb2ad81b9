/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Every qemu-img call (SPEC §19, decision 13): spawned through the spawn primitive with an
 * explicit format, resource limits and a deadline; `info --output=json` parsed strictly (GEN-5);
 * the format of an outside file probed here, from its magic bytes, and never by qemu-img.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/json-util.h"
#include "storage/storage.h"

/* ---- parsing `qemu-img info --output=json` -------------------------------------------------- */

void qemu_img_info_done(QemuImgInfo *info)
{
        freep(&info->format);
        freep(&info->backing);
        freep(&info->data_file);
        *info = (QemuImgInfo){0};
}

/* json_schema_read() stores every field it reads: keys vgpud does not use get a slot too. */
typedef struct Qcow2Keys {
        const char *data_file, *compat, *compression_type;
        json_t *encrypt, *bitmaps;
        json_int_t refcount_bits;
        bool corrupt, lazy_refcounts, extended_l2, data_file_raw;
} Qcow2Keys;

#define KEY(k, t, s, m)                                      \
        {                                                    \
                .key = k, .type = t, .offset = JSON_AT(s, m) \
        }
#define OBJECTS(k, s, m)                                                     \
        {                                                                    \
                .key = k, .type = JSON_FIELD_ARRAY, .offset = JSON_AT(s, m), \
                .element_type = JSON_FIELD_OBJECT                            \
        }

/* qcow2's format-specific data, qemu-img 7.2 to 9.x. */
static const JsonField qcow2_fields[] = {
    KEY("compat", JSON_FIELD_STRING, Qcow2Keys, compat),
    KEY("compression-type", JSON_FIELD_STRING, Qcow2Keys, compression_type),
    KEY("lazy-refcounts", JSON_FIELD_BOOLEAN, Qcow2Keys, lazy_refcounts),
    KEY("refcount-bits", JSON_FIELD_INTEGER, Qcow2Keys, refcount_bits),
    KEY("corrupt", JSON_FIELD_BOOLEAN, Qcow2Keys, corrupt),
    KEY("extended-l2", JSON_FIELD_BOOLEAN, Qcow2Keys, extended_l2),
    KEY("data-file", JSON_FIELD_STRING, Qcow2Keys, data_file),
    KEY("data-file-raw", JSON_FIELD_BOOLEAN, Qcow2Keys, data_file_raw),
    KEY("encrypt", JSON_FIELD_OBJECT, Qcow2Keys, encrypt),
    OBJECTS("bitmaps", Qcow2Keys, bitmaps),
    {},
};

typedef struct SpecificKeys {
        const char *type;
        json_t *data;
} SpecificKeys;

static const JsonField specific_fields[] = {
    {"type", JSON_FIELD_STRING, true, JSON_AT(SpecificKeys, type)},
    {"data", JSON_FIELD_OBJECT, true, JSON_AT(SpecificKeys, data)},
    {},
};

typedef struct InfoKeys {
        const char *format, *filename, *backing, *full_backing, *backing_format;
        json_int_t virtual_size, actual_size, cluster_size;
        bool encrypted, dirty, compressed;
        json_t *specific, *backing_image, *snapshots, *children;
} InfoKeys;

/* The top level as qemu-img 7.2 to 9.x print it; a key outside it fails closed. */
static const JsonField info_fields[] = {
    {"virtual-size", JSON_FIELD_INTEGER, true, JSON_AT(InfoKeys, virtual_size)},
    {"filename", JSON_FIELD_STRING, true, JSON_AT(InfoKeys, filename)},
    {"format", JSON_FIELD_STRING, true, JSON_AT(InfoKeys, format)},
    KEY("actual-size", JSON_FIELD_INTEGER, InfoKeys, actual_size),
    KEY("cluster-size", JSON_FIELD_INTEGER, InfoKeys, cluster_size),
    KEY("dirty-flag", JSON_FIELD_BOOLEAN, InfoKeys, dirty),
    KEY("encrypted", JSON_FIELD_BOOLEAN, InfoKeys, encrypted),
    KEY("compressed", JSON_FIELD_BOOLEAN, InfoKeys, compressed),
    KEY("backing-filename", JSON_FIELD_STRING, InfoKeys, backing),
    KEY("full-backing-filename", JSON_FIELD_STRING, InfoKeys, full_backing),
    KEY("backing-filename-format", JSON_FIELD_STRING, InfoKeys, backing_format),
    KEY("backing-image", JSON_FIELD_OBJECT, InfoKeys, backing_image),
    OBJECTS("snapshots", InfoKeys, snapshots),
    KEY("format-specific", JSON_FIELD_OBJECT, InfoKeys, specific),
    OBJECTS("children", InfoKeys, children),
    {},
};

static int info_failed(char **error, int r)
{
        return error_prefix(error, r, "qemu-img info");
}

int qemu_img_info_parse(const char *json, size_t size, QemuImgInfo *ret, char **error)
{
        if (size > QEMU_IMG_INFO_MAX)
                return error_set(error, -EFBIG, "qemu-img info: more than %d bytes of output",
                                 QEMU_IMG_INFO_MAX);
        json_error_t jerr;
        json_auto_t *o = json_loadb(json, size, JSON_REJECT_DUPLICATES, &jerr);
        if (!o)
                return error_set(error, -EINVAL, "qemu-img info: not JSON: %s", jerr.text);
        if (!json_is_object(o))
                return error_set(error, -EINVAL, "qemu-img info: not a JSON object");

        InfoKeys k = {0};
        int r = json_schema_read(o, NULL, info_fields, &k, -EINVAL, error);
        if (r < 0)
                return info_failed(error, r);
        if (k.virtual_size < 0 || k.actual_size < 0)
                return error_set(error, -EINVAL, "qemu-img info: negative size");

        Qcow2Keys q = {0};
        if (k.specific) {
                SpecificKeys sp = {0};
                r = json_schema_read(k.specific, "format-specific", specific_fields, &sp, -EINVAL,
                                     error);
                if (r >= 0 && streq(sp.type, "qcow2"))
                        r = json_schema_read(sp.data, "format-specific.data", qcow2_fields, &q,
                                             -EINVAL, error);
                if (r < 0)
                        return info_failed(error, r);
        }

        _cleanup_(qemu_img_info_done) QemuImgInfo info = {
            .virtual_size = (uint64_t)k.virtual_size,
            .actual_size = (uint64_t)k.actual_size,
            .encrypted = k.encrypted || q.encrypt || streq(k.format, "luks"),
            .corrupt = q.corrupt,
        };
        const char *backing = k.backing ? k.backing : k.full_backing;
        if (strdup_nullable(k.format, &info.format) < 0 ||
            strdup_nullable(backing, &info.backing) < 0 ||
            strdup_nullable(q.data_file, &info.data_file) < 0)
                return error_set_oom(error);
        *ret = info;
        info = (QemuImgInfo){0};
        return 0;
}

/* ---- the refusals (DISK-3) ------------------------------------------------------------------ */

static int refuse_named(char **error, const char *what, const char *name)
{
        _cleanup_free_ char *shown = escape_text(name, strlen(name), 256, ESCAPE_QUOTE);
        if (!shown)
                return error_set_oom(error);
        return error_set(error, -EINVAL, "image has %s %s: refused, an image must stand alone",
                         what, shown);
}

int qemu_img_info_check(const QemuImgInfo *info, const char *probed, uint64_t max_size,
                        char **error)
{
        if (!streq(info->format, "raw") && !streq(info->format, "qcow2"))
                return error_set(error, -EINVAL,
                                 "image format %s is not accepted: only raw and qcow2",
                                 info->format);
        if (probed && !streq(info->format, probed))
                return error_set(error, -EINVAL, "qemu-img reads the image as %s, not as %s",
                                 info->format, probed);
        if (info->backing)
                return refuse_named(error, "a backing file", info->backing);
        if (info->data_file)
                return refuse_named(error, "an external data file", info->data_file);
        if (info->encrypted)
                return error_set(error, -EINVAL, "image is encrypted: refused");
        if (info->corrupt)
                return error_set(error, -EINVAL, "image is marked corrupt: refused");
        if (info->virtual_size > max_size)
                return error_set(error, -EINVAL,
                                 "image virtual size %" PRIu64
                                 " bytes exceeds storage.max_image_size (%" PRIu64 " bytes)",
                                 info->virtual_size, max_size);
        return 0;
}

/* ---- probing (DISK-3: the format is never qemu-img's guess) --------------------------------- */

typedef struct Magic {
        const char *format;
        int64_t offset; /* from the start, or from the end when negative */
        const char *bytes;
        size_t size;
} Magic;

#define MAGIC(f, o, b)                \
        {                             \
                f, o, b, sizeof b - 1 \
        }

static const Magic magics[] = {
    MAGIC("qcow2", 0, "QFI\xfb\x00\x00\x00\x02"),
    MAGIC("qcow2", 0, "QFI\xfb\x00\x00\x00\x03"),
    MAGIC("qcow", 0, "QFI\xfb"), /* version 1, or one qemu-img does not know */
    MAGIC("vmdk", 0, "KDMV"),
    MAGIC("vmdk", 0, "COWD"),
    MAGIC("vmdk", 0, "# Disk DescriptorFile"),
    MAGIC("vpc", 0, "conectix"),
    MAGIC("vpc", -512, "conectix"), /* a fixed VHD has its footer only at the end */
    MAGIC("vhdx", 0, "vhdxfile"),
    MAGIC("vdi", 0x40, "\x7f\x10\xda\xbe"),
    MAGIC("qed", 0, "QED\0"),
    MAGIC("luks", 0, "LUKS\xba\xbe"),
    MAGIC("parallels", 0, "WithoutFreeSpace"),
    MAGIC("parallels", 0, "WithouFreSpacExt"),
    MAGIC("cloop", 0, "#!/bin/sh\n#V2.0 Format"),
    MAGIC("dmg", -512, "koly"),
    MAGIC("bochs", 0, "Bochs Virtual HD Image"),
};

static bool magic_matches(const Magic *m, const char *head, size_t n_head, const char *tail,
                          size_t n_tail)
{
        if (m->offset >= 0)
                return (size_t)m->offset + m->size <= n_head &&
                       memcmp(head + m->offset, m->bytes, m->size) == 0;
        return n_tail == 512 && memcmp(tail, m->bytes, m->size) == 0;
}

static int pread_full(int fd, char *buf, size_t size, off_t offset, size_t *ret)
{
        size_t done = 0;
        while (done < size) {
                ssize_t n = pread(fd, buf + done, size - done, offset + (off_t)done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        break;
                done += (size_t)n;
        }
        *ret = done;
        return 0;
}

int storage_probe_format(int fd, const char **ret, char **error)
{
        char head[512], tail[512];
        size_t n_head = 0, n_tail = 0;
        struct stat st;

        if (fstat(fd, &st) < 0) {
                int r = negative_errno();
                return error_set(error, r, "probe format: %s", strerror(-r));
        }
        if (!S_ISREG(st.st_mode))
                return error_set(error, -EBADFD, "probe format: not a regular file");
        int r = pread_full(fd, head, sizeof head, 0, &n_head);
        if (r >= 0 && st.st_size >= (off_t)sizeof tail)
                r = pread_full(fd, tail, sizeof tail, st.st_size - (off_t)sizeof tail, &n_tail);
        if (r < 0)
                return error_set(error, r, "probe format: read: %s", strerror(-r));
        for (size_t i = 0; i < ELEMENTSOF(magics); i++)
                if (magic_matches(&magics[i], head, n_head, tail, n_tail)) {
                        *ret = magics[i].format;
                        return 0;
                }
        *ret = "raw";
        return 0;
}

/* ---- running qemu-img ------------------------------------------------------------------------ */

/* The last non-empty line of what qemu-img printed, as one printable line. */
static char *last_line(const char *output)
{
        const char *end = output + strlen(output);
        while (end > output && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
                end--;
        const char *start = end;
        while (start > output && start[-1] != '\n' && start[-1] != '\r')
                start--;
        return escape_text(start, (size_t)(end - start), 512, 0);
}

/* The wait status as words, with the helper's last line when it said something. */
static int helper_failed(char **error, const char *verb, int status, const char *output)
{
        _cleanup_free_ char *line = last_line(output ? output : "");
        if (!line)
                return error_set_oom(error);
        if (WIFSIGNALED(status))
                return error_set(error, -EIO, "qemu-img %s killed by signal %d%s%s", verb,
                                 WTERMSIG(status), line[0] ? ": " : "", line);
        return error_set(error, -EIO, "qemu-img %s exited with status %d%s%s", verb,
                         WEXITSTATUS(status), line[0] ? ": " : "", line);
}

static bool format_is_accepted(const char *format)
{
        return streq(format, "raw") || streq(format, "qcow2");
}

int qemu_img_info(const char *binary, int source_fd, const char *format, nsec_t deadline,
                  QemuImgInfo *ret, char **error)
{
        if (!format_is_accepted(format))
                return error_set(error, -EINVAL, "qemu-img info: format %s is not accepted",
                                 format);
        char *argv[] = {(char *)binary,
                        (char *)"info",
                        (char *)"--output=json",
                        (char *)"-f",
                        (char *)format,
                        (char *)"/dev/fd/3",
                        NULL};
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.argv = argv;
        req.fds = &source_fd;
        req.n_fds = 1;
        req.limits =
            (SpawnLimits){.as_bytes = QEMU_IMG_AS_BYTES, .cpu_seconds = QEMU_IMG_INFO_CPU_SECONDS};

        _cleanup_free_ char *output = NULL;
        int status = 0;
        /* One byte over the bound tells oversize from exactly the bound (GEN-5). */
        int r = spawn_run_helper(&req, deadline, QEMU_IMG_INFO_MAX + 1, &output, &status, error);
        if (r < 0)
                return info_failed(error, r);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return helper_failed(error, "info", status, output);
        return qemu_img_info_parse(output, strlen(output), ret, error);
}

/* ---- conversion with progress ---------------------------------------------------------------- */

/*
 * `qemu-img convert -p` prints "    (12.34/100%)\r" as it goes. Pieces of output may split
 * such a figure, so the text since the last '(' is kept until its ')' arrives.
 */
typedef struct ProgressParse {
        char pending[32];
        size_t n;
        bool in_figure;
        /* The text outside figures, line by line: what qemu-img says when it fails comes last,
         * after more progress than the kept output holds. */
        char line[512], last[512];
        size_t n_line;
        QemuImgProgressFunc progress;
        void *userdata;
} ProgressParse;

static void progress_figure(ProgressParse *p)
{
        /* "12.34/100%": whole percent, then hundredths; anything else is not progress. */
        p->pending[p->n] = 0;
        unsigned whole = 0, hundredths = 0;
        char tail[8];
        if (sscanf(p->pending, "%3u.%2u/100%1[%]", &whole, &hundredths, tail) != 3 || whole > 100)
                return;
        unsigned permille = whole * 10 + hundredths / 10;
        if (p->progress)
                p->progress(permille > 1000 ? 1000 : permille, p->userdata);
}

static void on_convert_output(const char *data, size_t size, void *userdata)
{
        ProgressParse *p = userdata;
        for (size_t i = 0; i < size; i++) {
                char c = data[i];
                if (c == '(') {
                        p->in_figure = true;
                        p->n = 0;
                } else if (c == ')' && p->in_figure) {
                        progress_figure(p);
                        p->in_figure = false;
                } else if (p->in_figure) {
                        if (p->n + 1 < sizeof p->pending)
                                p->pending[p->n++] = c;
                        else
                                p->in_figure = false;
                } else if (c == '\n' || c == '\r') {
                        while (p->n_line > 0 && p->line[p->n_line - 1] == ' ')
                                p->n_line--;
                        if (p->n_line > 0) {
                                memcpy(p->last, p->line, p->n_line);
                                p->last[p->n_line] = 0;
                        }
                        p->n_line = 0;
                } else if (p->n_line + 1 < sizeof p->line && (c != ' ' || p->n_line > 0)) {
                        p->line[p->n_line++] = c;
                }
        }
}

int qemu_img_convert(const char *binary, int source_fd, const char *format, const char *target,
                     nsec_t deadline, QemuImgProgressFunc progress, void *userdata, char **error)
{
        if (!format_is_accepted(format))
                return error_set(error, -EINVAL, "qemu-img convert: format %s is not accepted",
                                 format);
        /*
         * The source by its descriptor and its driver, with no backing node: the header was
         * checked, but the file is outside vgpud's store, and this way no header can name
         * another file that qemu-img would then open.
         */
        _cleanup_free_ char *source = NULL;
        if (strprintf(&source,
                      "json:{\"driver\": \"%s\",%s \"file\": {\"driver\": \"file\", "
                      "\"filename\": \"/dev/fd/3\"}}",
                      format, streq(format, "qcow2") ? " \"backing\": null," : "") < 0)
                return error_set_oom(error);
        char *argv[] = {
            (char *)binary, (char *)"convert", (char *)"-p", (char *)"-f",   (char *)format,
            (char *)"-O",   (char *)"qcow2",   source,       (char *)target, NULL};
        ProgressParse parse = {.progress = progress, .userdata = userdata};
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.argv = argv;
        req.fds = &source_fd;
        req.n_fds = 1;
        req.limits = (SpawnLimits){.as_bytes = QEMU_IMG_CONVERT_AS_BYTES,
                                   .cpu_seconds = QEMU_IMG_CONVERT_CPU_SECONDS,
                                   .nice = QEMU_IMG_CONVERT_NICE};
        req.on_output = on_convert_output;
        req.output_userdata = &parse;

        _cleanup_free_ char *output = NULL;
        int status = 0;
        int r = spawn_run_helper(&req, deadline, QEMU_IMG_OUTPUT_MAX, &output, &status, error);
        if (r < 0)
                return error_prefix(error, r, "qemu-img convert");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                on_convert_output("\n", 1, &parse); /* a last line without its newline */
                return helper_failed(error, "convert", status, parse.last);
        }
        return 0;
}

/* ---- creation (DISK-5, DISK-7) --------------------------------------------------------------- */

int qemu_img_create(const char *binary, const char *target, const char *backing, uint64_t size,
                    nsec_t deadline, char **error)
{
        char size_text[32];
        snprintf(size_text, sizeof size_text, "%" PRIu64, size);
        /* The backing file by absolute path and with its format named, never probed. */
        char *argv[] = {(char *)binary,  (char *)"create", (char *)"-q",    (char *)"-f",
                        (char *)"qcow2", (char *)"-F",     (char *)"qcow2", (char *)"-b",
                        (char *)backing, (char *)target,   size_text,       NULL};
        char *plain[] = {(char *)binary,  (char *)"create", (char *)"-q", (char *)"-f",
                         (char *)"qcow2", (char *)target,   size_text,    NULL};
        if (backing && backing[0] != '/')
                return error_set(error, -EINVAL, "qemu-img create: backing file %s is not absolute",
                                 backing);
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.argv = backing ? argv : plain;
        req.limits =
            (SpawnLimits){.as_bytes = QEMU_IMG_AS_BYTES, .cpu_seconds = QEMU_IMG_INFO_CPU_SECONDS};
        _cleanup_free_ char *output = NULL;
        int status = 0;
        int r = spawn_run_helper(&req, deadline, QEMU_IMG_OUTPUT_MAX, &output, &status, error);
        if (r < 0)
                return error_prefix(error, r, "qemu-img create");
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return helper_failed(error, "create", status, output);
        return 0;
}
