/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Profiles: the pure parsers of what the driver says about vGPU types, and the per-GPU catalog
 * look-ups. Nothing here touches the file system.
 */
#include "gpu.h"

#include <ctype.h>
#include <inttypes.h>

/* ---- frameworks ---------------------------------------------------------------------------- */

const char *gpu_framework_to_string(GpuFramework f)
{
        switch (f) {
        case GPU_FRAMEWORK_MDEV:
                return "mdev";
        case GPU_FRAMEWORK_VENDOR_VFIO:
                return "vendor-vfio";
        case GPU_FRAMEWORK_NONE:
                break;
        }
        return "none";
}

int gpu_framework_from_string(const char *s, GpuFramework *ret, char **error)
{
        if (streq(s, "mdev")) {
                *ret = GPU_FRAMEWORK_MDEV;
                return 0;
        }
        if (streq(s, "vendor-vfio")) {
                *ret = GPU_FRAMEWORK_VENDOR_VFIO;
                return 0;
        }
        _cleanup_free_ char *shown = escape_text(s, strlen(s), SIZE_MAX, ESCAPE_QUOTE);
        if (!shown)
                return error_set_oom(error);
        return error_set(error, -EINVAL, "unknown vGPU framework %s", shown);
}

/* ---- names and sizes ----------------------------------------------------------------------- */

bool gpu_profile_name_is_valid(const char *name)
{
        size_t n = strlen(name);
        if (n < 1 || n > GPU_PROFILE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (name[i] < 0x20 || name[i] > 0x7e)
                        return false;
        return true;
}

static bool is_size_letter(char c)
{
        return c == 'A' || c == 'B' || c == 'C' || c == 'Q';
}

uint64_t gpu_profile_framebuffer_mib(const char *name)
{
        size_t len = strlen(name), letter = 0, dash = 0;
        bool found = false;

        /* The size letter cannot be the first byte: "Q" alone names no size. */
        for (size_t k = len; k-- > 1;)
                if (is_size_letter(name[k])) {
                        letter = k;
                        found = true;
                        break;
                }
        if (!found)
                return 0;

        found = false;
        for (size_t k = letter; k-- > 0;)
                if (name[k] == '-') {
                        dash = k;
                        found = true;
                        break;
                }
        if (!found || dash + 1 == letter)
                return 0;

        uint64_t gib = 0;
        for (size_t k = dash + 1; k < letter; k++) {
                if (name[k] < '0' || name[k] > '9')
                        return 0;
                unsigned d = (unsigned)(name[k] - '0');
                if (gib > (UINT64_MAX / 1024 - d) / 10)
                        return 0; /* a size no card has: treat the shape as unknown */
                gib = gib * 10 + d;
        }
        return gib * 1024;
}

static bool is_description_separator(char c)
{
        return c == ',' || isspace((unsigned char)c);
}

uint64_t gpu_mdev_description_framebuffer_mib(const char *description)
{
        const char *p = description;

        for (;;) {
                while (*p && is_description_separator(*p))
                        p++;
                if (!*p)
                        return 0;
                const char *end = p;
                while (*end && !is_description_separator(*end))
                        end++;

                const char *v = startswith(p, "framebuffer=");
                if (v && v < end) {
                        uint64_t mib = 0;
                        const char *d = v;
                        bool ok = true;
                        for (; d < end && *d >= '0' && *d <= '9'; d++) {
                                unsigned digit = (unsigned)(*d - '0');
                                if (mib > (UINT64_MAX - digit) / 10) {
                                        ok = false;
                                        break;
                                }
                                mib = mib * 10 + digit;
                        }
                        /* Exactly "framebuffer=<digits>M"; another shape is not the token. */
                        if (ok && d > v && d + 1 == end && *d == 'M')
                                return mib;
                }
                p = end;
        }
}

int gpu_profile_model(const char *name, char **ret)
{
        const char *dash = strrchr(name, '-');
        if (!dash || dash == name)
                return -EINVAL;
        char *model = strndup(name, (size_t)(dash - name));
        if (!model)
                return -ENOMEM;
        *ret = model;
        return 0;
}

/* ---- profile lists ------------------------------------------------------------------------- */

void gpu_profiles_free(GpuProfile *profiles, size_t n)
{
        for (size_t i = 0; profiles && i < n; i++) {
                free(profiles[i].name);
                free(profiles[i].mdev_type);
        }
        free(profiles);
}

typedef struct ProfileList {
        GpuProfile *items;
        size_t *lines; /* the 1-based line of each item, for duplicate reports */
        size_t n, cap;
} ProfileList;

static void profile_list_done(ProfileList *l)
{
        gpu_profiles_free(l->items, l->n);
        free(l->lines);
}

static int profile_list_add(ProfileList *l, uint32_t type_id, const char *name, size_t line)
{
        if (l->n == l->cap) {
                size_t next = l->cap ? l->cap * 2 : 32;
                GpuProfile *items = realloc(l->items, next * sizeof *items);
                if (!items)
                        return -ENOMEM;
                l->items = items;
                size_t *lines = realloc(l->lines, next * sizeof *lines);
                if (!lines)
                        return -ENOMEM;
                l->lines = lines;
                l->cap = next;
        }
        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        l->items[l->n] = (GpuProfile){
            .name = copy,
            .type_id = type_id,
            .framebuffer_mib = gpu_profile_framebuffer_mib(name),
        };
        l->lines[l->n++] = line;
        return 0;
}

/* Parses one line of creatable_vgpu_types and appends its type; header and blank lines add
 * nothing. */
static int parse_creatable_line(const char *p, size_t len, size_t line, ProfileList *l,
                                char **error)
{
        if (memchr(p, 0, len)) {
                _cleanup_free_ char *shown = escape_text(p, len, SIZE_MAX, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, -EINVAL, "parse creatable vGPU types line %zu: %s", line,
                                 shown);
        }

        _cleanup_free_ char *copy = strndup(p, len);
        if (!copy)
                return error_set_oom(error);
        char *t = strstrip(copy);
        if (!*t)
                return 0;

        char *colon = strchr(t, ':');
        const char *right = colon ? colon + 1 : NULL;
        while (right && isspace((unsigned char)*right))
                right++;
        if (!right || !*right) {
                _cleanup_free_ char *shown = escape_text(t, strlen(t), SIZE_MAX, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, -EINVAL, "parse creatable vGPU types line %zu: %s", line,
                                 shown);
        }

        *colon = 0;
        const char *id = strstrip(t);
        char *name = strstrip(colon + 1);
        if (streq(id, "ID"))
                return 0;

        uint64_t v;
        int r = parse_uint64_range(id, 1, UINT32_MAX, &v);
        if (r < 0) {
                _cleanup_free_ char *shown = escape_text(id, strlen(id), SIZE_MAX, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, -EINVAL, "parse vGPU type ID %s: %s", shown,
                                 r == -ERANGE ? "out of range 1..4294967295"
                                              : "not a decimal number");
        }

        if (!gpu_profile_name_is_valid(name)) {
                _cleanup_free_ char *shown =
                    escape_text(name, strlen(name), SIZE_MAX, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, -EINVAL,
                                 "parse creatable vGPU types line %zu: invalid vGPU type name %s",
                                 line, shown);
        }
        if (profile_list_add(l, (uint32_t)v, name, line) < 0)
                return error_set_oom(error);
        return 0;
}

static int compare_by_type_id(const void *a, const void *b, void *userdata)
{
        const ProfileList *l = userdata;
        size_t i = *(const size_t *)a, j = *(const size_t *)b;
        if (l->items[i].type_id != l->items[j].type_id)
                return l->items[i].type_id < l->items[j].type_id ? -1 : 1;
        return i < j ? -1 : i > j;
}

static int compare_by_name(const void *a, const void *b, void *userdata)
{
        const ProfileList *l = userdata;
        size_t i = *(const size_t *)a, j = *(const size_t *)b;
        int c = strcmp(l->items[i].name, l->items[j].name);
        if (c != 0)
                return c;
        return i < j ? -1 : i > j;
}

static bool same_type_id(const GpuProfile *a, const GpuProfile *b)
{
        return a->type_id == b->type_id;
}

static bool same_name(const GpuProfile *a, const GpuProfile *b)
{
        return streq(a->name, b->name);
}

/*
 * Finds the earliest item that repeats an earlier one (same() holds; cmp sorts by that key), by
 * sorting indexes rather than comparing all pairs: a 64 KiB file can hold thousands of lines.
 * Returns its index, or l->n when there is none; -ENOMEM on failure.
 */
static ssize_t find_first_repeat(const ProfileList *l,
                                 int (*cmp)(const void *, const void *, void *),
                                 bool (*same)(const GpuProfile *, const GpuProfile *))
{
        if (l->n < 2)
                return (ssize_t)l->n;
        _cleanup_free_ size_t *idx = malloc(l->n * sizeof *idx);
        if (!idx)
                return -ENOMEM;
        for (size_t i = 0; i < l->n; i++)
                idx[i] = i;
        qsort_r(idx, l->n, sizeof *idx, cmp, (void *)l);

        size_t first = l->n;
        for (size_t k = 1; k < l->n; k++) {
                /* Sorted by key then index: equal neighbours mean idx[k] repeats idx[k - 1]. */
                size_t b = idx[k];
                if (same(&l->items[idx[k - 1]], &l->items[b]) && b < first)
                        first = b;
        }
        return (ssize_t)first;
}

int gpu_parse_creatable_types(const char *buf, size_t size, GpuProfile **ret, size_t *ret_n,
                              char **error)
{
        _cleanup_(profile_list_done) ProfileList l = {};
        _cleanup_free_ char *line_error = NULL;
        size_t error_line = SIZE_MAX;
        int line_r = 0;

        if (size > GPU_CREATABLE_TYPES_MAX)
                return error_set(error, -EFBIG, "creatable vGPU types exceed %zu bytes",
                                 GPU_CREATABLE_TYPES_MAX);

        size_t line = 0;
        for (const char *p = buf, *end = buf + size; p < end;) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
                line++;
                line_r = parse_creatable_line(p, len, line, &l, &line_error);
                if (line_r == -ENOMEM)
                        return error_set_oom(error);
                if (line_r < 0) {
                        error_line = line;
                        break;
                }
                p += len + (nl ? 1 : 0);
        }

        /*
         * Duplicates are checked after the syntax, but reported as a line-by-line reader would:
         * whichever problem comes first in the file wins.
         */
        ssize_t dup_id = find_first_repeat(&l, compare_by_type_id, same_type_id);
        if (dup_id < 0)
                return error_set_oom(error);
        ssize_t dup_name = find_first_repeat(&l, compare_by_name, same_name);
        if (dup_name < 0)
                return error_set_oom(error);

        if ((size_t)dup_id < l.n && ((size_t)dup_name >= l.n || dup_id <= dup_name))
                return error_set(error, -EINVAL,
                                 "parse creatable vGPU types line %zu: duplicate vGPU type ID "
                                 "%" PRIu32,
                                 l.lines[dup_id], l.items[dup_id].type_id);
        if ((size_t)dup_name < l.n)
                /* Two IDs for one name would make the name ambiguous on this card (DISC-19). */
                return error_set(error, -EINVAL,
                                 "parse creatable vGPU types line %zu: duplicate vGPU type name "
                                 "\"%s\"",
                                 l.lines[dup_name], l.items[dup_name].name);
        if (error_line != SIZE_MAX) {
                if (error) {
                        free(*error);
                        *error = TAKE_PTR(line_error);
                }
                return line_r;
        }

        /* The list lives as long as the VF table (one per VF): give back the growth slack. */
        if (l.n > 0 && l.n < l.cap) {
                GpuProfile *fitted = realloc(l.items, l.n * sizeof *fitted);
                if (fitted)
                        l.items = fitted;
        }
        *ret = TAKE_PTR(l.items);
        *ret_n = l.n;
        l.n = 0;
        return 0;
}

int gpu_parse_current_type(const char *buf, size_t size, uint32_t *ret, char **error)
{
        if (size > GPU_CURRENT_TYPE_MAX)
                return error_set(error, -EFBIG, "current vGPU type exceeds %zu bytes",
                                 GPU_CURRENT_TYPE_MAX);

        size_t n = size;
        if (n > 0 && buf[n - 1] == '\n')
                n--;

        uint64_t v = 0;
        bool ok = n > 0;
        for (size_t i = 0; ok && i < n; i++) {
                if (buf[i] < '0' || buf[i] > '9')
                        ok = false;
                else
                        v = v * 10 + (uint64_t)(buf[i] - '0'); /* at most 16 digits: no wrap */
        }
        if (!ok || v > UINT32_MAX) {
                _cleanup_free_ char *shown = escape_text(buf, n, SIZE_MAX, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, -EINVAL, "invalid current vGPU type %s", shown);
        }
        *ret = (uint32_t)v;
        return 0;
}

/* ---- catalogs ------------------------------------------------------------------------------ */

const GpuProfile *gpu_find_profile(const Gpu *g, const char *name)
{
        for (size_t i = 0; i < g->n_catalog; i++)
                if (streq(g->catalog[i].name, name))
                        return &g->catalog[i];
        return NULL;
}

const GpuProfile *gpu_find_profile_by_type_id(const Gpu *g, uint32_t type_id)
{
        for (size_t i = 0; type_id != 0 && i < g->n_catalog; i++)
                if (g->catalog[i].type_id == type_id)
                        return &g->catalog[i];
        return NULL;
}

static int compare_profile_names(const void *a, const void *b)
{
        return strcmp(((const GpuProfile *)a)->name, ((const GpuProfile *)b)->name);
}

int gpu_host_model_catalog(const GpuHost *h, const char *model, GpuProfile **ret, size_t *ret_n)
{
        GpuProfile *items = NULL;
        size_t n = 0;

        for (size_t i = 0; i < h->n_gpus; i++) {
                const Gpu *g = &h->gpus[i];
                if (!streq(g->model, model))
                        continue;
                for (size_t k = 0; k < g->n_catalog; k++) {
                        const GpuProfile *p = &g->catalog[k];
                        size_t j;
                        for (j = 0; j < n && !streq(items[j].name, p->name); j++)
                                ;
                        if (j < n) {
                                /* One card may know a size another cannot tell. */
                                if (items[j].framebuffer_mib == 0)
                                        items[j].framebuffer_mib = p->framebuffer_mib;
                                continue;
                        }
                        GpuProfile *grown = realloc(items, (n + 1) * sizeof *items);
                        if (!grown) {
                                gpu_profiles_free(items, n);
                                return -ENOMEM;
                        }
                        items = grown;
                        items[n] = (GpuProfile){.name = strdup(p->name),
                                                .framebuffer_mib = p->framebuffer_mib};
                        if (!items[n].name) {
                                gpu_profiles_free(items, n);
                                return -ENOMEM;
                        }
                        n++;
                }
        }
        if (n > 0)
                qsort(items, n, sizeof *items, compare_profile_names);
        *ret = items;
        *ret_n = n;
        return 0;
}
