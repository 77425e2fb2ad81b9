/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpuctl's disk commands (OPS-7; DISK-1, DISK-2, DISK-7): the image and volume tables, and
 * `images import`, which follows the import it started by polling the image until it is no
 * longer importing, with a progress bar on a terminal and a line per ten percent otherwise.
 */
#include <inttypes.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define IMPORT_POLL_MS 250
#define INT_STRLEN 24 /* a json_int_t in decimal, sign and NUL included */

static int shape(char **error, const char *what, const json_error_t *e)
{
        return error_set(error, -EBADMSG, "unexpected %s in the response: %s", what, e->text);
}

static int table_failed(char **error, int r)
{
        return error_set(error, r, "format the output: %s", strerror(-r));
}

/* 4.0 GiB, 512 MiB, 12 KiB, 17 B */
static const char *format_bytes(json_int_t n, char buf[static 32])
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        double v = (double)n;
        size_t u = 0;
        while (v >= 1024 && u + 1 < ELEMENTSOF(units)) {
                v /= 1024;
                u++;
        }
        snprintf(buf, 32, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
        return buf;
}

typedef struct ImageView {
        const char *name, *state, *format, *error, *sha256, *created_at;
        json_int_t virtual_size, actual_size, instances;
        double progress;
} ImageView;

static int image_unpack(json_t *j, ImageView *v, char **error)
{
        json_error_t e;
        json_t *progress = NULL;
        *v = (ImageView){.virtual_size = -1, .actual_size = -1, .instances = -1};
        if (json_unpack_ex(j, &e, 0, "{s:s, s:s, s?s, s?o, s?s, s?I, s?I, s?s, s?s, s?I}", "name",
                           &v->name, "state", &v->state, "format", &v->format, "progress",
                           &progress, "error", &v->error, "virtual_size_bytes", &v->virtual_size,
                           "actual_size_bytes", &v->actual_size, "sha256", &v->sha256, "created_at",
                           &v->created_at, "instances", &v->instances) < 0)
                return shape(error, "image", &e);
        v->progress = json_is_number(progress) ? json_number_value(progress) : -1;
        return 0;
}

int ctl_print_images(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        size_t i;
        json_t *j;

        if (json_array_size(body) == 0) {
                fputs("no images\n", out);
                return 0;
        }
        int r = ctl_table_init(&t, 6);
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"NAME", "STATE", "FORMAT", "SIZE",
                                                           "INSTANCES", "CREATED"});
        if (r < 0)
                return table_failed(error, r);
        json_array_foreach (body, i, j) {
                ImageView v;
                char size[32] = "", users[INT_STRLEN] = "", state[48];
                r = image_unpack(j, &v, error);
                if (r < 0)
                        return r;
                if (v.virtual_size >= 0)
                        format_bytes(v.virtual_size, size);
                if (v.instances >= 0)
                        snprintf(users, sizeof users, "%" JSON_INTEGER_FORMAT, v.instances);
                if (v.progress >= 0)
                        snprintf(state, sizeof state, "%.32s %.0f%%", v.state, v.progress * 100);
                else
                        snprintf(state, sizeof state, "%.47s", v.state);
                r = ctl_table_add_row(&t, (const char *[]){v.name, state, v.format ? v.format : "",
                                                           size, users,
                                                           v.created_at ? v.created_at : ""});
                if (r < 0)
                        return table_failed(error, r);
        }
        r = ctl_table_print(&t, out, "");
        return r < 0 ? table_failed(error, r) : 0;
}

int ctl_print_image(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        ImageView v;
        char vsize[32] = "", asize[32] = "", users[INT_STRLEN] = "", progress[16] = "";
        int r = image_unpack(body, &v, error);
        if (r < 0)
                return r;
        if (v.virtual_size >= 0)
                format_bytes(v.virtual_size, vsize);
        if (v.actual_size >= 0)
                format_bytes(v.actual_size, asize);
        if (v.instances >= 0)
                snprintf(users, sizeof users, "%" JSON_INTEGER_FORMAT, v.instances);
        if (v.progress >= 0)
                snprintf(progress, sizeof progress, "%.0f%%", v.progress * 100);
        const char *const rows[][2] = {
            {"name", v.name},
            {"state", v.state},
            {"progress", progress[0] ? progress : NULL},
            {"error", v.error},
            {"format", v.format},
            {"virtual size", vsize[0] ? vsize : NULL},
            {"actual size", asize[0] ? asize : NULL},
            {"sha256", v.sha256},
            {"instances", users[0] ? users : NULL},
            {"created", v.created_at},
        };
        r = ctl_table_init(&t, 2);
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(rows); i++)
                if (rows[i][1])
                        r = ctl_table_add_row(&t, rows[i]);
        if (r >= 0)
                r = ctl_table_print(&t, out, "");
        return r < 0 ? table_failed(error, r) : 0;
}

typedef struct VolumeView {
        const char *id, *name, *created_at;
        json_int_t size_gb;
        json_t *attachments;
} VolumeView;

static int volume_unpack(json_t *j, VolumeView *v, char **error)
{
        json_error_t e;
        *v = (VolumeView){0};
        if (json_unpack_ex(j, &e, 0, "{s:s, s:s, s:I, s?s, s?o}", "id", &v->id, "name", &v->name,
                           "size_gb", &v->size_gb, "created_at", &v->created_at, "attachments",
                           &v->attachments) < 0)
                return shape(error, "volume", &e);
        if (v->attachments && !json_is_array(v->attachments))
                return error_set(error, -EBADMSG,
                                 "unexpected volume in the response: attachments is no array");
        return 0;
}

/* "k3x9q2m8v1c4z7n5b0wd (ro), ..." of a volume's attachments; "-" for none. */
static int format_holders(const VolumeView *v, char **ret)
{
        _cleanup_free_ char *s = NULL;
        size_t i;
        json_t *a;
        json_array_foreach (v->attachments, i, a) {
                const char *inst = json_string_value(json_object_get(a, "instance"));
                bool ro = json_is_true(json_object_get(a, "readonly"));
                if (!inst)
                        continue;
                if (strextend(&s, "%s%s%s", s ? ", " : "", inst, ro ? " (ro)" : "") < 0)
                        return -ENOMEM;
        }
        if (!s && !(s = strdup("-")))
                return -ENOMEM;
        *ret = TAKE_PTR(s);
        return 0;
}

int ctl_print_volumes(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        size_t i;
        json_t *j;

        if (json_array_size(body) == 0) {
                fputs("no volumes\n", out);
                return 0;
        }
        int r = ctl_table_init(&t, 5);
        if (r >= 0)
                r = ctl_table_add_row(
                    &t, (const char *[]){"ID", "NAME", "SIZE", "ATTACHED TO", "CREATED"});
        if (r < 0)
                return table_failed(error, r);
        json_array_foreach (body, i, j) {
                VolumeView v;
                _cleanup_free_ char *holders = NULL;
                char size[INT_STRLEN + 4];
                r = volume_unpack(j, &v, error);
                if (r < 0)
                        return r;
                if (format_holders(&v, &holders) < 0)
                        return table_failed(error, -ENOMEM);
                snprintf(size, sizeof size, "%" JSON_INTEGER_FORMAT " GiB", v.size_gb);
                r = ctl_table_add_row(&t, (const char *[]){v.id, v.name, size, holders,
                                                           v.created_at ? v.created_at : ""});
                if (r < 0)
                        return table_failed(error, r);
        }
        r = ctl_table_print(&t, out, "");
        return r < 0 ? table_failed(error, r) : 0;
}

int ctl_print_volume(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        _cleanup_free_ char *holders = NULL;
        VolumeView v;
        char size[INT_STRLEN + 4];
        int r = volume_unpack(body, &v, error);
        if (r < 0)
                return r;
        if (format_holders(&v, &holders) < 0)
                return table_failed(error, -ENOMEM);
        snprintf(size, sizeof size, "%" JSON_INTEGER_FORMAT " GiB", v.size_gb);
        const char *const rows[][2] = {
            {"id", v.id},
            {"name", v.name},
            {"size", size},
            {"attached to", holders},
            {"created", v.created_at},
        };
        r = ctl_table_init(&t, 2);
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(rows); i++)
                if (rows[i][1])
                        r = ctl_table_add_row(&t, rows[i]);
        if (r >= 0)
                r = ctl_table_print(&t, out, "");
        return r < 0 ? table_failed(error, r) : 0;
}

/* ---- images import ----------------------------------------------------------------------------
 */

/* One exchange whose 2xx answer is an image; r < 0 with *ret_status the CTL_EXIT_* to end with. */
static int image_request(const CtlArgs *a, const CtlEnv *env, const char *method, const char *path,
                         const char *body, json_t **ret, int *ret_status)
{
        _cleanup_(ctl_response_done) CtlResponse resp = {};
        _cleanup_free_ char *error = NULL;
        const CtlRequest req = {.method = method,
                                .path = path,
                                .json_body = body,
                                .accept = "application/json",
                                .timeout_ms = env->timeout_ms};
        int r = ctl_http_request(a, env, &req, &resp, &error);
        if (r < 0) {
                fprintf(env->err, "error: %s\n", error ? error : strerror(-r));
                *ret_status = r == -EMSGSIZE || r == -ENOMEM ? CTL_EXIT_API : CTL_EXIT_CONNECT;
                return r;
        }
        if (resp.status < 200 || resp.status > 299) {
                *ret_status = ctl_print_api_error(a, env, &resp);
                return -EREMOTEIO;
        }
        json_error_t e;
        json_t *j = json_loadb(resp.body, resp.size, JSON_REJECT_DUPLICATES, &e);
        if (!json_is_object(j)) {
                fprintf(env->err, "error: invalid JSON in the response (HTTP %ld): %s\n",
                        resp.status, j ? "not an object" : e.text);
                json_decref(j);
                *ret_status = CTL_EXIT_API;
                return -EBADMSG;
        }
        *ret = j;
        return 0;
}

/* A terminal gets a bar redrawn in place; a pipe or file a line at each tenth. */
static void show_progress(const CtlEnv *env, bool tty, const char *name, double p, int *shown)
{
        int pct = (int)(p * 100);
        if (pct < 0 || pct > 100 || pct == *shown)
                return;
        if (tty) {
                char bar[31];
                int fill = pct * 30 / 100;
                memset(bar, '#', (size_t)fill);
                memset(bar + fill, '.', (size_t)(30 - fill));
                bar[30] = 0;
                fprintf(env->out, "\rimporting %s [%s] %3d%%", name, bar, pct);
                fflush(env->out);
        } else if (pct / 10 != *shown / 10 || *shown < 0) {
                fprintf(env->out, "importing %s: %d%%\n", name, pct);
                fflush(env->out);
        }
        *shown = pct;
}

int ctl_images_import(const CtlArgs *a, const CtlEnv *env)
{
        _cleanup_free_ char *path = NULL;
        json_t *j = NULL;
        int status = CTL_EXIT_API;
        if (strprintf(&path, "/images/%s", a->target) < 0) {
                fputs("vgpuctl: out of memory\n", env->err);
                return CTL_EXIT_API;
        }
        if (image_request(a, env, "POST", "/images", a->body, &j, &status) < 0)
                return status;
        bool tty = !a->json && isatty(fileno(env->out));
        int shown = -1;
        for (;;) {
                json_auto_t *image = j;
                ImageView v;
                _cleanup_free_ char *error = NULL;
                if (image_unpack(image, &v, &error) < 0) {
                        fprintf(env->err, "error: %s\n", error);
                        return CTL_EXIT_API;
                }
                if (!streq(v.state, "importing")) {
                        if (tty && shown >= 0)
                                fputc('\n', env->out);
                        if (a->json) {
                                _cleanup_free_ char *text = json_dumps(image, JSON_COMPACT);
                                if (text)
                                        fprintf(env->out, "%s\n", text);
                        } else if (ctl_print_image(env->out, image, &error) < 0) {
                                fprintf(env->err, "error: %s\n", error);
                                return CTL_EXIT_API;
                        }
                        if (streq(v.state, "ready"))
                                return CTL_EXIT_OK;
                        fputs("error: import failed: ", env->err);
                        ctl_print_sanitized(env->err, v.error ? v.error : v.state);
                        fputc('\n', env->err);
                        return CTL_EXIT_API;
                }
                if (!a->json && v.progress >= 0)
                        show_progress(env, tty, a->target, v.progress, &shown);
                (void)nanosleep(&(struct timespec){.tv_nsec = IMPORT_POLL_MS * 1000000L}, NULL);
                j = NULL;
                if (image_request(a, env, "GET", path, NULL, &j, &status) < 0)
                        return status;
        }
}
