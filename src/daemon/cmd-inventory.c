/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpud inventory [--sysfs-root DIR] [--json]: runs discovery once (SPEC §1) and prints what it
 * found, as text for people or as one JSON object for scripts and golden tests. It reads only;
 * NVML is not consulted, so catalogs and models come from sysfs (DISC-17, DISC-18).
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>

#include "base/base.h"
#include "base/json-util.h"
#include "commands.h"
#include "gpu/gpu.h"
#include "sysfs/sysfs.h"

#define INVENTORY_USAGE "usage: vgpud inventory [--sysfs-root DIR] [--json]\n"

/* ---- JSON ---------------------------------------------------------------------------------- */

static json_t *json_string_or_null(const char *s)
{
        return s ? json_string(s) : json_null();
}

static json_t *json_mib(uint64_t mib)
{
        return mib > 0 ? json_integer((json_int_t)mib) : json_null();
}

static json_t *catalog_to_json(const Gpu *g)
{
        json_auto_t *a = json_array();
        if (!a)
                return NULL;
        for (size_t i = 0; i < g->n_catalog; i++) {
                const GpuProfile *p = &g->catalog[i];
                json_t *o = json_object();
                if (json_push(a, o) < 0 || json_set(o, "name", json_string(p->name)) < 0)
                        return NULL;
                int r = p->mdev_type ? json_set(o, "mdev_type", json_string(p->mdev_type))
                                     : json_set(o, "type_id", json_integer(p->type_id));
                if (r < 0 || json_set(o, "framebuffer_mib", json_mib(p->framebuffer_mib)) < 0)
                        return NULL;
        }
        return json_incref(a);
}

static json_t *vf_to_json(const GpuHost *h, const GpuVf *vf)
{
        json_auto_t *o = json_object();
        if (!o || json_set(o, "address", json_string(vf->address)) < 0 ||
            json_set(o, "parent", json_string_or_null(*vf->parent ? vf->parent : NULL)) < 0)
                return NULL;

        if (!gpu_vf_is_readable(vf)) {
                if (json_set(o, "state", json_string("unreadable")) < 0 ||
                    json_set(o, "error", json_string(vf->error)) < 0)
                        return NULL;
                return json_incref(o);
        }

        if (json_set(o, "state", json_string(gpu_vf_is_configured(vf) ? "configured" : "free")) < 0)
                return NULL;

        if (h->framework == GPU_FRAMEWORK_MDEV) {
                json_t *mdevs = json_array();
                if (json_set(o, "mdevs", mdevs) < 0)
                        return NULL;
                for (char **u = vf->mdev_uuids; u && *u; u++)
                        if (json_push(mdevs, json_string(*u)) < 0)
                                return NULL;
                if (json_set(o, "profile", json_string_or_null(vf->current_profile)) < 0)
                        return NULL;
                json_t *creatable = json_array();
                if (json_set(o, "mdev_types", creatable) < 0)
                        return NULL;
                for (size_t i = 0; i < vf->n_creatable; i++)
                        if (json_push(creatable, json_string(vf->creatable[i].mdev_type)) < 0)
                                return NULL;
        } else {
                if (json_set(o, "type_id", json_integer(vf->current_type_id)) < 0 ||
                    json_set(o, "profile", json_string_or_null(vf->current_profile)) < 0)
                        return NULL;
                json_t *creatable = json_array();
                if (json_set(o, "creatable_type_ids", creatable) < 0)
                        return NULL;
                for (size_t i = 0; i < vf->n_creatable; i++)
                        if (json_push(creatable, json_integer(vf->creatable[i].type_id)) < 0)
                                return NULL;
        }
        return json_incref(o);
}

static json_t *host_to_json(const GpuHost *h)
{
        const char *framework = gpu_framework_to_string(h->framework);
        json_auto_t *root = json_object();
        if (!root)
                return NULL;

        /* Set every key up front, so the order is fixed whatever the host holds. */
        json_t *gpus = json_array(), *orphans, *mdevs, *warnings;
        if (json_set(root, "framework", json_string(framework)) < 0 ||
            json_set(root, "gpus", gpus) < 0 ||
            json_set(root, "vfs_without_gpu", orphans = json_array()) < 0 ||
            json_set(root, "mdevs", mdevs = json_array()) < 0 ||
            json_set(root, "warnings", warnings = json_array()) < 0)
                return NULL;

        for (size_t i = 0; i < h->n_gpus; i++) {
                const Gpu *g = &h->gpus[i];
                char device[8];
                snprintf(device, sizeof device, "0x%04x", g->device_id);

                json_t *o = json_object(), *vfs = json_array();
                if (json_push(gpus, o) < 0 || json_set(o, "address", json_string(g->address)) < 0 ||
                    json_set(o, "device_id", g->device_id ? json_string(device) : json_null()) <
                        0 ||
                    json_set(o, "model", json_string(g->model)) < 0 ||
                    json_set(o, "framework", json_string(framework)) < 0 ||
                    json_set(o, "catalog_source",
                             json_string(g->catalog_source == GPU_CATALOG_NVML ? "nvml"
                                                                               : "sysfs")) < 0 ||
                    json_set(o, "vfs", vfs) < 0 || json_set(o, "catalog", catalog_to_json(g)) < 0)
                        return NULL;
                for (size_t k = 0; k < h->n_vfs; k++)
                        if (streq(h->vfs[k].parent, g->address) &&
                            json_push(vfs, vf_to_json(h, &h->vfs[k])) < 0)
                                return NULL;
        }

        for (size_t k = 0; k < h->n_vfs; k++)
                if (!*h->vfs[k].parent && json_push(orphans, vf_to_json(h, &h->vfs[k])) < 0)
                        return NULL;

        for (size_t i = 0; i < h->n_mdevs; i++) {
                const GpuMdev *m = &h->mdevs[i];
                json_t *o = json_object();
                if (json_push(mdevs, o) < 0 || json_set(o, "uuid", json_string(m->uuid)) < 0 ||
                    json_set(o, "vf", json_string(m->vf)) < 0 ||
                    json_set(o, "mdev_type", json_string(m->mdev_type)) < 0 ||
                    json_set(o, "profile", json_string(m->profile)) < 0)
                        return NULL;
        }

        for (char **w = h->warnings; w && *w; w++)
                if (json_push(warnings, json_string(*w)) < 0)
                        return NULL;
        return json_incref(root);
}

static int print_json(const GpuHost *h, FILE *f)
{
        json_auto_t *root = host_to_json(h);
        if (!root)
                return -ENOMEM;
        if (json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0)
                return -EIO;
        fputc('\n', f);
        return 0;
}

/* ---- text ---------------------------------------------------------------------------------- */

static void print_vf_text(const GpuHost *h, const GpuVf *vf, FILE *f)
{
        fprintf(f, "  VF %s  ", vf->address);
        if (!gpu_vf_is_readable(vf)) {
                fprintf(f, "unreadable: %s\n", vf->error);
                return;
        }
        if (h->framework == GPU_FRAMEWORK_MDEV) {
                if (vf->mdev_uuids)
                        for (char **u = vf->mdev_uuids; *u; u++)
                                fprintf(f, "mdev %s  ", *u);
                else
                        fputs("free  ", f);
                if (vf->current_profile)
                        fprintf(f, "%s  ", vf->current_profile);
                fputs("types:", f);
                for (size_t i = 0; i < vf->n_creatable; i++)
                        fprintf(f, " %s", vf->creatable[i].mdev_type);
                fputc('\n', f);
                return;
        }
        if (vf->current_type_id != 0)
                fprintf(f, "type %" PRIu32 "  %s  ", vf->current_type_id,
                        vf->current_profile ? vf->current_profile : "(profile unknown)");
        else
                fputs("free  ", f);
        fputs("creatable:", f);
        if (vf->n_creatable == 0)
                fputs(" none", f);
        for (size_t i = 0; i < vf->n_creatable; i++)
                fprintf(f, " %" PRIu32, vf->creatable[i].type_id);
        fputc('\n', f);
}

static void print_text(const GpuHost *h, FILE *f)
{
        const char *framework = gpu_framework_to_string(h->framework);

        fprintf(f, "framework: %s\n", framework);
        for (size_t i = 0; i < h->n_gpus; i++) {
                const Gpu *g = &h->gpus[i];
                size_t n_vfs = 0;
                for (size_t k = 0; k < h->n_vfs; k++)
                        n_vfs += streq(h->vfs[k].parent, g->address);

                fprintf(f, "\nGPU %s  %s  %s  (device ", g->address, g->model, framework);
                if (g->device_id)
                        fprintf(f, "10de:%04x", g->device_id);
                else
                        fputs("unknown", f);
                fprintf(f, ", %zu VFs, catalog from %s)\n", n_vfs,
                        g->catalog_source == GPU_CATALOG_NVML ? "NVML" : "sysfs");

                for (size_t k = 0; k < h->n_vfs; k++)
                        if (streq(h->vfs[k].parent, g->address))
                                print_vf_text(h, &h->vfs[k], f);

                fprintf(f, "  catalog:%s\n", g->n_catalog == 0 ? " empty" : "");
                for (size_t k = 0; k < g->n_catalog; k++) {
                        const GpuProfile *p = &g->catalog[k];
                        if (p->mdev_type)
                                fprintf(f, "    %-12s", p->mdev_type);
                        else
                                fprintf(f, "    %-6" PRIu32, p->type_id);
                        fprintf(f, "  %-24s", p->name);
                        if (p->framebuffer_mib > 0)
                                fprintf(f, "  %" PRIu64 " MiB\n", p->framebuffer_mib);
                        else
                                fputs("  size unknown\n", f);
                }
        }

        bool header = false;
        for (size_t k = 0; k < h->n_vfs; k++)
                if (!*h->vfs[k].parent) {
                        if (!header)
                                fputs("\nVFs without a known GPU:\n", f);
                        header = true;
                        print_vf_text(h, &h->vfs[k], f);
                }

        if (h->warnings)
                fputc('\n', f);
        for (char **w = h->warnings; w && *w; w++)
                fprintf(f, "warning: %s\n", *w);
}

/* ---- the command --------------------------------------------------------------------------- */

#define usage_error(...) command_usage_error("inventory", INVENTORY_USAGE, __VA_ARGS__)

int cmd_inventory(int argc, char **argv)
{
        static const struct option options[] = {
            {"sysfs-root", required_argument, NULL, 'r'},
            {"json", no_argument, NULL, 'j'},
            {"help", no_argument, NULL, 'h'},
            {},
        };
        const char *sysfs_root = "/sys"; /* the configuration default (GEN-1) */
        bool json = false;
        int c;

        /* getopt's state is libc's; start it afresh and let us word the errors. */
        optind = 0;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+:", options, NULL)) >= 0) {
                switch (c) {
                case 'r':
                        sysfs_root = optarg;
                        break;
                case 'j':
                        json = true;
                        break;
                case 'h':
                        fputs(INVENTORY_USAGE, stdout);
                        return 0;
                case ':':
                        return usage_error("option %s needs a value", argv[optind - 1]);
                default:
                        /* getopt names the option it took in optopt, and 0 for unknown ones. */
                        if (optopt == 'r' || optopt == 'j' || optopt == 'h')
                                return usage_error("option %s takes no value", argv[optind - 1]);
                        return usage_error("unknown option %s", argv[optind - 1]);
                }
        }
        if (optind < argc)
                return usage_error("unexpected argument \"%s\"", argv[optind]);
        if (sysfs_root[0] != '/')
                return usage_error("--sysfs-root must be an absolute path, not \"%s\"", sysfs_root);

        _cleanup_root_ Root *root = NULL;
        int r = root_open(sysfs_root, &root);
        if (r < 0) {
                fprintf(stderr, "vgpud inventory: open sysfs root %s: %s\n", sysfs_root,
                        strerror(-r));
                return 1;
        }

        _cleanup_gpu_host_ GpuHost *host = NULL;
        _cleanup_free_ char *error = NULL;
        r = gpu_discover(root, NULL, &host, &error);
        if (r < 0) {
                fprintf(stderr, "vgpud inventory: %s\n", error);
                return 1;
        }

        if (json)
                r = print_json(host, stdout);
        else
                print_text(host, stdout);
        if (r >= 0 && fflush(stdout) != 0)
                r = negative_errno();
        if (r >= 0 && ferror(stdout))
                r = -EIO;
        if (r < 0) {
                fprintf(stderr, "vgpud inventory: write output: %s\n", strerror(-r));
                return 1;
        }
        return 0;
}
