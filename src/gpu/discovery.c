/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Discovery (DISC-1..DISC-19): a pass over the sysfs tree that decides the host framework and
 * builds the GPU, VF and mdev tables, in the steps of gpu-internal.h (the walks, each VF, the
 * table, the GPUs) so that the tracker can run each VF's reads as a job of its own. Every path
 * is relative to the configured root.
 */
#include "gpu-internal.h"

#include <inttypes.h>

/* ---- small helpers ------------------------------------------------------------------------- */

/* Makes room for one more element in a growable array. */
static int grow(void **array, size_t *cap, size_t n, size_t size)
{
        if (n < *cap)
                return 0;
        size_t next = *cap ? *cap * 2 : 16;
        void *grown = realloc(*array, next * size);
        if (!grown)
                return -ENOMEM;
        *array = grown;
        *cap = next;
        return 0;
}

void gpu_vf_done(GpuVf *vf)
{
        free(vf->error);
        strv_freep(&vf->mdev_uuids);
        free(vf->current_profile);
        gpu_profiles_free(vf->creatable, vf->n_creatable);
        *vf = (GpuVf){};
}

GpuHost *gpu_host_free(GpuHost *h)
{
        if (!h)
                return NULL;
        for (size_t i = 0; i < h->n_gpus; i++) {
                free(h->gpus[i].model);
                gpu_profiles_free(h->gpus[i].catalog, h->gpus[i].n_catalog);
        }
        free(h->gpus);
        for (size_t i = 0; i < h->n_vfs; i++)
                gpu_vf_done(&h->vfs[i]);
        free(h->vfs);
        for (size_t i = 0; i < h->n_mdevs; i++) {
                free(h->mdevs[i].uuid);
                free(h->mdevs[i].mdev_type);
                free(h->mdevs[i].profile);
        }
        free(h->mdevs);
        strv_freep(&h->warnings);
        free(h);
        return NULL;
}

/* A host under construction: the growable arrays' capacities live beside it. */
typedef struct Builder {
        GpuHost *host;
        size_t cap_gpus, cap_vfs, cap_mdevs;
} Builder;

/* Takes the VF's contents over on success; on failure the caller still owns them. */
static int builder_add_vf(Builder *b, GpuVf *vf)
{
        int r = grow((void **)&b->host->vfs, &b->cap_vfs, b->host->n_vfs, sizeof(GpuVf));
        if (r < 0)
                return r;
        b->host->vfs[b->host->n_vfs++] = *vf;
        *vf = (GpuVf){};
        return 0;
}

/*
 * Logs a warning as "<4>message key=value ..." and keeps "message: detail" in the host's
 * warnings, for callers that show them without a log (inventory, tests). The pairs end with
 * NULL; a NULL value skips its key.
 */
_sentinel_ static int builder_warn(Builder *b, const char *message, const char *detail, ...)
{
        _cleanup_free_ char *text = NULL;
        char line[LOG_LINE_MAX];
        va_list ap;

        snprintf(line, sizeof line, "%s", message);
        va_start(ap, detail);
        for (;;) {
                const char *key = va_arg(ap, const char *);
                if (!key)
                        break;
                const char *value = va_arg(ap, const char *);
                if (value)
                        logfmt_append(line, sizeof line, key, value);
        }
        va_end(ap);

        log_kv(LOG_LEVEL_WARNING, 0, "%s", line);
        int r = strprintf(&text, "%s: %s", message, detail);
        if (r < 0)
                return r;
        return strv_push(&b->host->warnings, text);
}

/* The cause may be a link target, which is outside input: the recorded text escapes it. */
static int warn_mdev(Builder *b, const char *message, const char *uuid, const char *cause,
                     const char *cause_key)
{
        _cleanup_free_ char *shown = escape_text(cause, strlen(cause), SIZE_MAX, 0), *detail = NULL;
        if (!shown)
                return -ENOMEM;
        int r = strprintf(&detail, "%s: %s", uuid, shown);
        if (r < 0)
                return r;
        return builder_warn(b, message, detail, "mdev", uuid, cause_key, cause, NULL);
}

/* A directory entry's name is outside input: the recorded text escapes it. */
static int warn_entry(Builder *b, const char *message, const char *entry, const char *cause)
{
        _cleanup_free_ char *shown = escape_text(entry, strlen(entry), SIZE_MAX, ESCAPE_QUOTE),
                            *detail = NULL;
        if (!shown)
                return -ENOMEM;
        int r = strprintf(&detail, "%s%s%s", shown, cause ? ": " : "", cause ?: "");
        if (r < 0)
                return r;
        return builder_warn(b, message, detail, "entry", entry, "error", cause, NULL);
}

static int warn_gpu(Builder *b, const char *message, const char *pf, const char *cause)
{
        _cleanup_free_ char *detail = NULL;
        int r = strprintf(&detail, "%s: %s", pf, cause);
        if (r < 0)
                return r;
        return builder_warn(b, message, detail, "gpu", pf, "error", cause, NULL);
}

/* Appends "VF <address>: <message>" to a "; "-joined list, and the address to another. */
static int join_failure(char **failures, char **addresses, const char *address, const char *message)
{
        int r = strextend(failures, "%sVF %s: %s", *failures ? "; " : "", address, message);
        if (r < 0)
                return r;
        return strextend(addresses, "%s%s", *addresses ? "," : "", address);
}

static int compare_vfs(const void *a, const void *b)
{
        return strcmp(((const GpuVf *)a)->address, ((const GpuVf *)b)->address);
}

static int compare_gpus(const void *a, const void *b)
{
        return strcmp(((const Gpu *)a)->address, ((const Gpu *)b)->address);
}

const Gpu *gpu_host_find_gpu(const GpuHost *h, const char *address)
{
        Gpu key = {};
        if (!h || !pci_address_is_valid(address) || h->n_gpus == 0)
                return NULL;
        memcpy(key.address, address, PCI_ADDRESS_STRLEN);
        return bsearch(&key, h->gpus, h->n_gpus, sizeof key, compare_gpus);
}

const GpuVf *gpu_host_find_vf(const GpuHost *h, const char *address)
{
        GpuVf key = {};
        if (!h || !pci_address_is_valid(address) || h->n_vfs == 0)
                return NULL;
        memcpy(key.address, address, PCI_ADDRESS_STRLEN);
        return bsearch(&key, h->vfs, h->n_vfs, sizeof key, compare_vfs);
}

/*
 * Reads a device's parent PF from its physfn link (DISC-8) into parent: 1, or 0 when there is
 * no link (no failure: callers decide what that means), or -errno for an unreadable link.
 */
static int read_parent(const Root *sysfs, const char *device_dir,
                       char parent[static PCI_ADDRESS_STRLEN], char **error)
{
        _cleanup_free_ char *path = NULL, *target = NULL;

        if (strprintf(&path, "%s/physfn", device_dir) < 0)
                return error_set_oom(error);
        int r = root_readlink_basename(sysfs, path, &target);
        if (r == -ENOENT)
                return 0;
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "read physfn link: %s", strerror(-r));
        if (!pci_address_is_valid(target)) {
                _cleanup_free_ char *shown =
                    escape_text(target, strlen(target), SIZE_MAX, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, -EINVAL, "invalid parent address %s", shown);
        }
        memcpy(parent, target, PCI_ADDRESS_STRLEN);
        return 1;
}

/* Reads a short attribute, trimmed; a missing file or a name that breaks DISC-13 gives NULL. */
static int read_type_name(const Root *sysfs, const char *path, char **ret)
{
        _cleanup_free_ char *raw = NULL;
        int r = root_read_attr(sysfs, path, GPU_ATTR_MAX, &raw);
        if (r == -ENOENT) {
                *ret = NULL;
                return 0;
        }
        if (r < 0)
                return r;
        char *name = strstrip(raw);
        if (!gpu_profile_name_is_valid(name)) {
                *ret = NULL;
                return 0;
        }
        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        *ret = copy;
        return 0;
}

/* ---- the listing (step 1) ------------------------------------------------------------------ */

static void listing_clear_vfs(GpuListing *l)
{
        for (size_t i = 0; i < l->n_vfs; i++) {
                strv_free(l->vfs[i].mdev_types);
                free(l->vfs[i].error);
        }
        free(l->vfs);
        l->vfs = NULL;
        l->n_vfs = 0;
}

GpuListing *gpu_listing_free(GpuListing *l)
{
        if (!l)
                return NULL;
        listing_clear_vfs(l);
        gpu_host_free(l->host);
        free(l);
        return NULL;
}

/* Appends an entry; takes *types and *message over (either may be NULL). */
static int listing_add(GpuListing *l, size_t *cap, const char *address, char ***types,
                       char **message, int error_r)
{
        int r = grow((void **)&l->vfs, cap, l->n_vfs, sizeof(GpuListedVf));
        if (r < 0)
                return r;
        GpuListedVf *v = &l->vfs[l->n_vfs++];
        *v = (GpuListedVf){
            .mdev_types = types ? TAKE_PTR(*types) : NULL,
            .error = message ? TAKE_PTR(*message) : NULL,
            .error_r = error_r,
        };
        memcpy(v->address, address, PCI_ADDRESS_STRLEN);
        return 0;
}

/* ---- mdev detection (DISC-1..DISC-3, DISC-9, DISC-16) -------------------------------------- */

/* Reads one mdev type of a parent into a profile. */
static int read_mdev_type(const Root *sysfs, const char *types_dir, const char *type,
                          GpuProfile *ret, char **error)
{
        _cleanup_free_ char *path = NULL, *name = NULL, *description = NULL;
        _cleanup_free_ char *mdev_type = strdup(type);
        if (!mdev_type)
                return error_set_oom(error);

        if (strprintf(&path, "%s/%s/name", types_dir, type) < 0)
                return error_set_oom(error);
        int r = read_type_name(sysfs, path, &name);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "read mdev type %s name: %s", type, strerror(-r));
        if (!name) {
                /* Without a usable name the type string is the only handle operators see. */
                name = strdup(type);
                if (!name)
                        return error_set_oom(error);
        }

        free(path);
        path = NULL;
        if (strprintf(&path, "%s/%s/description", types_dir, type) < 0)
                return error_set_oom(error);
        uint64_t framebuffer_mib = 0;
        r = root_read_attr(sysfs, path, GPU_ATTR_MAX, &description);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0 && r != -ENOENT)
                return error_set(error, r, "read mdev type %s description: %s", type, strerror(-r));
        if (r >= 0)
                framebuffer_mib = gpu_mdev_description_framebuffer_mib(description);

        /* PLACE-6: availability that cannot be read is no availability (fail closed). */
        _cleanup_free_ char *available = NULL;
        uint32_t available_instances = 0;
        free(path);
        path = NULL;
        if (strprintf(&path, "%s/%s/available_instances", types_dir, type) < 0)
                return error_set_oom(error);
        r = root_read_attr(sysfs, path, GPU_MDEV_AVAILABLE_MAX, &available);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0 || parse_uint32(available, &available_instances) < 0)
                available_instances = 0;

        *ret = (GpuProfile){
            .name = TAKE_PTR(name),
            .mdev_type = TAKE_PTR(mdev_type),
            .framebuffer_mib = framebuffer_mib,
            .available_instances = available_instances,
        };
        return 0;
}

/*
 * Lists one class/mdev_bus entry's types (DISC-2): 0 for a typeless entry, 1 and *ret for one
 * with types, -errno with a message when the directory cannot be listed (DISC-3).
 */
static int list_mdev_types(const Root *sysfs, const char *address, char ***ret, char **error)
{
        _cleanup_free_ char *types_dir = NULL;
        _cleanup_strv_free_ char **types = NULL;

        if (strprintf(&types_dir, "class/mdev_bus/%s/mdev_supported_types", address) < 0)
                return error_set_oom(error);
        int r = root_list_dir(sysfs, types_dir, &types);
        if (r == -ENOENT)
                return 0;
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "list mdev_supported_types: %s", strerror(-r));
        if (strv_length(types) == 0)
                return 0;
        *ret = TAKE_PTR(types);
        return 1;
}

/* Reads one mdev VF (step 2): its parent (DISC-8) and each type the listing found. */
static int read_mdev_vf(const Root *sysfs, const char *address, char *const *types, GpuVf *vf,
                        char **error)
{
        _cleanup_free_ char *dir = NULL, *types_dir = NULL;

        if (strprintf(&dir, "class/mdev_bus/%s", address) < 0 ||
            strprintf(&types_dir, "%s/mdev_supported_types", dir) < 0)
                return error_set_oom(error);

        int r = read_parent(sysfs, dir, vf->parent, error);
        if (r == 0)
                /* No physfn: a card without SR-IOV (pre-Ampere) is its own mdev parent. */
                memcpy(vf->parent, address, PCI_ADDRESS_STRLEN);
        else if (r < 0)
                return r;

        size_t n = strv_length(types);
        vf->creatable = calloc(n ? n : 1, sizeof(GpuProfile));
        if (!vf->creatable)
                return error_set_oom(error);
        for (size_t i = 0; i < n; i++) {
                r = read_mdev_type(sysfs, types_dir, types[i], &vf->creatable[i], error);
                if (r < 0)
                        return r;
                vf->n_creatable++;
        }
        return 0;
}

/*
 * Walks class/mdev_bus (DISC-1..DISC-3): an mdev VF is an entry with at least one type. With
 * one, the host is an mdev host and the entries whose types cannot be listed wait in the
 * listing for DISC-3's verdict, which is given with the VFs' own failures; without one, the
 * verdict is given here, before vendor detection.
 */
static int list_mdev_vfs(const Root *sysfs, GpuListing *l, size_t *cap, Builder *b, char **error)
{
        _cleanup_strv_free_ char **entries = NULL;
        size_t n_typed = 0, n_unreadable = 0;

        int r = root_list_dir(sysfs, "class/mdev_bus", &entries);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return error_set(error, r, "list class/mdev_bus: %s", strerror(-r));

        for (char **e = entries; *e; e++) {
                if (!pci_address_is_valid(*e)) {
                        if (warn_entry(b, "skipping mdev parent with invalid PCI address", *e,
                                       NULL) < 0)
                                return error_set_oom(error);
                        continue;
                }
                l->n_mdev_entries++;

                _cleanup_strv_free_ char **types = NULL;
                _cleanup_free_ char *message = NULL;
                r = list_mdev_types(sysfs, *e, &types, &message);
                if (r == -ENOMEM)
                        return error_set_oom(error);
                if (r == 0)
                        continue;
                if (r > 0)
                        n_typed++;
                else
                        n_unreadable++;
                if (listing_add(l, cap, *e, &types, &message, r < 0 ? r : 0) < 0)
                        return error_set_oom(error);
        }
        if (n_typed > 0) {
                l->framework = GPU_FRAMEWORK_MDEV;
                return 0;
        }
        if (n_unreadable == 0)
                return 0;

        _cleanup_free_ char *failures = NULL, *failed = NULL;
        int first_r = 0;
        for (size_t i = 0; i < l->n_vfs; i++) {
                if (first_r == 0)
                        first_r = l->vfs[i].error_r;
                if (join_failure(&failures, &failed, l->vfs[i].address, l->vfs[i].error) < 0)
                        return error_set_oom(error);
        }
        listing_clear_vfs(l);
        *cap = 0;
        /* DISC-3: one bad entry must not hide the others, but all of them bad is a failure. */
        if (n_unreadable == l->n_mdev_entries)
                return error_set(error, first_r, "%s", failures);
        if (builder_warn(b, "skipping unreadable mdev parents", failures, "vfs", failed, "error",
                         failures, NULL) < 0)
                return error_set_oom(error);
        return 0;
}

/* DISC-9: the parent VF is the component just before the UUID in the device link's target. */
static int mdev_parent_from_target(const char *target, const char *uuid,
                                   char ret[static PCI_ADDRESS_STRLEN])
{
        _cleanup_free_ char *copy = strdup(target);
        if (!copy)
                return -ENOMEM;

        const char *previous = NULL;
        char *save = NULL;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                if (streq(c, uuid) && previous && pci_address_is_valid(previous)) {
                        memcpy(ret, previous, PCI_ADDRESS_STRLEN);
                        return 0;
                }
                previous = c;
        }
        return -ENOENT;
}

/*
 * Reads bus/mdev/devices/<uuid>'s links (DISC-9); returns 0 and skips with a warning what
 * cannot be read. Its profile is named when the table is assembled, from its VF's types.
 */
static int list_active_mdev(const Root *sysfs, Builder *b, const char *uuid)
{
        _cleanup_free_ char *path = NULL, *target = NULL, *type = NULL, *id = NULL;
        char vf[PCI_ADDRESS_STRLEN];

        if (!uuid_is_lowercase(uuid))
                return warn_entry(b, "skipping mdev with invalid UUID", uuid, NULL);

        int r = strprintf(&path, "bus/mdev/devices/%s", uuid);
        if (r < 0)
                return r;
        r = root_readlink(sysfs, path, &target);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return warn_mdev(b, "skipping unreadable mdev", uuid, strerror(-r), "error");
        r = mdev_parent_from_target(target, uuid, vf);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return warn_mdev(b, "skipping mdev without a parent VF", uuid, target, "target");

        free(path);
        path = NULL;
        r = strprintf(&path, "bus/mdev/devices/%s/mdev_type", uuid);
        if (r < 0)
                return r;
        r = root_readlink_basename(sysfs, path, &type);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return warn_mdev(b, "skipping mdev with unreadable type", uuid, strerror(-r),
                                 "error");

        id = strdup(uuid);
        if (!id)
                return -ENOMEM;
        r = grow((void **)&b->host->mdevs, &b->cap_mdevs, b->host->n_mdevs, sizeof(GpuMdev));
        if (r < 0)
                return r;
        GpuMdev *m = &b->host->mdevs[b->host->n_mdevs++];
        *m = (GpuMdev){
            .uuid = TAKE_PTR(id),
            .mdev_type = TAKE_PTR(type),
        };
        memcpy(m->vf, vf, PCI_ADDRESS_STRLEN);
        return 0;
}

static int list_active_mdevs(const Root *sysfs, Builder *b, char **error)
{
        _cleanup_strv_free_ char **uuids = NULL;

        int r = root_list_dir(sysfs, "bus/mdev/devices", &uuids);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return error_set(error, r, "list bus/mdev/devices: %s", strerror(-r));
        for (char **u = uuids; *u; u++)
                /* Only out of memory stops it: what cannot be read is skipped with a warning. */
                if (list_active_mdev(sysfs, b, *u) < 0)
                        return error_set_oom(error);
        return 0;
}

/* ---- vendor VFIO detection (DISC-4..DISC-8, DISC-10..DISC-13) ------------------------------ */

int gpu_read_current_type(const Root *sysfs, const char *vf, uint32_t *ret, char **error)
{
        _cleanup_free_ char *path = NULL, *buf = NULL;
        size_t size;

        if (strprintf(&path, "bus/pci/devices/%s/nvidia/current_vgpu_type", vf) < 0)
                return error_set_oom(error);
        int r = root_read_file(sysfs, path, GPU_CURRENT_TYPE_MAX, &buf, &size);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "read current vGPU type: %s", strerror(-r));
        return gpu_parse_current_type(buf, size, ret, error);
}

/* Reads one vendor VF; on failure vf keeps what was read and the message says what was not. */
static int read_vendor_vf(const Root *sysfs, const char *address, GpuVf *vf, char **error)
{
        _cleanup_free_ char *dir = NULL, *path = NULL, *buf = NULL;
        size_t size;

        if (strprintf(&dir, "bus/pci/devices/%s", address) < 0)
                return error_set_oom(error);
        int r = read_parent(sysfs, dir, vf->parent, error);
        if (r == 0)
                /* It vanished between the check and the read: as unreadable as it gets. */
                return error_set(error, -ENOENT, "read physfn link: %s", strerror(ENOENT));
        if (r < 0)
                return r;

        r = gpu_read_current_type(sysfs, address, &vf->current_type_id, error);
        if (r < 0)
                return r;

        if (strprintf(&path, "%s/nvidia/creatable_vgpu_types", dir) < 0)
                return error_set_oom(error);
        r = root_read_file(sysfs, path, GPU_CREATABLE_TYPES_MAX, &buf, &size);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "read creatable vGPU types: %s", strerror(-r));
        return gpu_parse_creatable_types(buf, size, &vf->creatable, &vf->n_creatable, error);
}

/*
 * Classifies one bus/pci/devices entry (DISC-4): 1 for a vendor VF, 0 for anything else,
 * -errno when that cannot be told.
 */
static int is_vendor_vf(const Root *sysfs, const char *entry, char **error)
{
        _cleanup_free_ char *path = NULL;

        if (strprintf(&path, "bus/pci/devices/%s/nvidia/creatable_vgpu_types", entry) < 0)
                return error_set_oom(error);
        int r = root_exists(sysfs, path);
        if (r < 0)
                return error_set(error, r, "check nvidia/creatable_vgpu_types: %s", strerror(-r));
        if (r == 0)
                return 0;

        free(path);
        path = NULL;
        if (strprintf(&path, "bus/pci/devices/%s/physfn", entry) < 0)
                return error_set_oom(error);
        r = root_exists(sysfs, path);
        if (r < 0)
                return error_set(error, r, "check physfn link: %s", strerror(-r));
        /* With nvidia/ but no physfn it is a PF: some drivers give PFs the directory too. */
        return r;
}

/* Walks bus/pci/devices (DISC-4): the vendor VFs to read. */
static int list_vendor_vfs(const Root *sysfs, GpuListing *l, size_t *cap, Builder *b, char **error)
{
        _cleanup_strv_free_ char **entries = NULL;

        int r = root_list_dir(sysfs, "bus/pci/devices", &entries);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return error_set(error, r, "list bus/pci/devices: %s", strerror(-r));

        for (char **e = entries; *e; e++) {
                _cleanup_free_ char *message = NULL;
                r = is_vendor_vf(sysfs, *e, &message);
                if (r == -ENOMEM)
                        return error_set_oom(error);
                if (r < 0) {
                        /* Not known to be a VF, so never touched: skipping is the safe side. */
                        if (warn_entry(b, "skipping unreadable PCI device", *e, message) < 0)
                                return error_set_oom(error);
                        continue;
                }
                if (r == 0)
                        continue;
                if (!pci_address_is_valid(*e)) {
                        if (warn_entry(b, "skipping vendor VFIO VF with invalid PCI address", *e,
                                       NULL) < 0)
                                return error_set_oom(error);
                        continue;
                }
                if (listing_add(l, cap, *e, NULL, NULL, 0) < 0)
                        return error_set_oom(error);
        }
        if (l->n_vfs > 0)
                l->framework = GPU_FRAMEWORK_VENDOR_VFIO;
        return 0;
}

int gpu_listing_new(const Root *sysfs, GpuListing **ret, char **error)
{
        _cleanup_(gpu_listing_freep) GpuListing *l = calloc(1, sizeof *l);
        if (!l || !(l->host = calloc(1, sizeof *l->host)))
                return error_set(error, -ENOMEM, "discover mdev VFs: %s", ERROR_OUT_OF_MEMORY);
        Builder b = {.host = l->host};
        _cleanup_free_ char *message = NULL;
        size_t cap = 0;

        int r = list_mdev_vfs(sysfs, l, &cap, &b, &message);
        if (r >= 0 && l->framework == GPU_FRAMEWORK_MDEV)
                r = list_active_mdevs(sysfs, &b, &message);
        if (r < 0)
                return error_set(error, r, "discover mdev VFs: %s", message);
        if (l->framework == GPU_FRAMEWORK_NONE) {
                /* DISC-1: only a host without mdev VFs is looked at as a vendor VFIO host. */
                r = list_vendor_vfs(sysfs, l, &cap, &b, &message);
                if (r < 0)
                        return error_set(error, r, "discover vendor VFIO VFs: %s", message);
        }
        *ret = TAKE_PTR(l);
        return 0;
}

int gpu_read_listed_vf(const Root *sysfs, GpuFramework framework, const GpuListedVf *in, GpuVf *ret,
                       char **error)
{
        memcpy(ret->address, in->address, PCI_ADDRESS_STRLEN);
        if (framework == GPU_FRAMEWORK_MDEV)
                return read_mdev_vf(sysfs, in->address, in->mdev_types, ret, error);
        return read_vendor_vf(sysfs, in->address, ret, error);
}

/* ---- GPUs, catalogs and models (DISC-8, DISC-15, DISC-17..DISC-19) ------------------------- */

/* The PF's device ID: "0x" and four lowercase hex digits. */
static int read_device_id(const Root *sysfs, const char *pf, uint16_t *ret)
{
        _cleanup_free_ char *path = NULL, *raw = NULL;

        int r = strprintf(&path, "bus/pci/devices/%s/device", pf);
        if (r < 0)
                return r;
        r = root_read_attr(sysfs, path, GPU_ATTR_MAX, &raw);
        if (r < 0)
                return r;

        const char *hex = startswith(raw, "0x");
        if (!hex || strlen(hex) != 4)
                return -EINVAL;
        unsigned v = 0;
        for (const char *p = hex; *p; p++) {
                /* sysfs prints lowercase; anything else is not what the kernel wrote. */
                int d = hex_value_lower(*p);
                if (d < 0)
                        return d;
                v = v * 16 + (unsigned)d;
        }
        *ret = (uint16_t)v;
        return 0;
}

/* By type ID; mdev types (ID 0) by their directory, so "nvidia-1000" follows "nvidia-999". */
static int compare_catalog_entries(const void *a, const void *b)
{
        const GpuProfile *x = a, *y = b;
        if (x->type_id != y->type_id)
                return x->type_id < y->type_id ? -1 : 1;
        if (!x->mdev_type != !y->mdev_type)
                return x->mdev_type ? 1 : -1;
        if (x->mdev_type) {
                int c = strverscmp(x->mdev_type, y->mdev_type);
                if (c != 0)
                        return c;
        }
        return strcmp(x->name, y->name);
}

static int profile_copy(const GpuProfile *p, GpuProfile *ret)
{
        _cleanup_free_ char *name = strdup(p->name);
        _cleanup_free_ char *mdev_type = p->mdev_type ? strdup(p->mdev_type) : NULL;
        if (!name || (p->mdev_type && !mdev_type))
                return -ENOMEM;
        *ret = (GpuProfile){
            .name = TAKE_PTR(name),
            .type_id = p->type_id,
            .mdev_type = TAKE_PTR(mdev_type),
            .framebuffer_mib = p->framebuffer_mib,
        };
        return 0;
}

/* DISC-18, sysfs branch: the union by name of the lists of the GPU's readable VFs. */
static int sysfs_catalog(const GpuHost *h, const char *pf, GpuProfile **ret, size_t *ret_n)
{
        GpuProfile *items = NULL;
        size_t n = 0, cap = 0;
        int r = 0;

        for (size_t i = 0; r >= 0 && i < h->n_vfs; i++) {
                const GpuVf *vf = &h->vfs[i];
                if (!gpu_vf_is_readable(vf) || !streq(vf->parent, pf))
                        continue;
                for (size_t k = 0; r >= 0 && k < vf->n_creatable; k++) {
                        bool known = false;
                        for (size_t j = 0; !known && j < n; j++)
                                known = streq(items[j].name, vf->creatable[k].name);
                        if (known)
                                continue;
                        r = grow((void **)&items, &cap, n, sizeof *items);
                        if (r >= 0)
                                r = profile_copy(&vf->creatable[k], &items[n]);
                        if (r >= 0)
                                n++;
                }
        }
        if (r < 0) {
                gpu_profiles_free(items, n);
                return r;
        }
        if (n > 0)
                qsort(items, n, sizeof *items, compare_catalog_entries);
        *ret = items;
        *ret_n = n;
        return 0;
}

/*
 * DISC-18, NVML branch: the GPU's supported types. Sizes derived from sysfs (DISC-14, DISC-16)
 * are kept so figures stay stable; NVML's size fills in only where they are unknown (DISC-15).
 * mdev type directories come from the sysfs catalog by name.
 */
static int nvml_catalog(const GpuNvml *nvml, const char *pf, const GpuProfile *sysfs_items,
                        size_t n_sysfs, GpuProfile **ret, size_t *ret_n, char **error)
{
        GpuNvmlType *types = NULL;
        size_t n_types = 0;

        int r = nvml->supported_types(nvml->userdata, pf, &types, &n_types);
        if (r < 0)
                return error_set(error, r, "query supported vGPU types: %s", strerror(-r));

        GpuProfile *items = n_types > 0 ? calloc(n_types, sizeof *items) : NULL;
        size_t n = 0;
        if (n_types > 0 && !items)
                r = error_set_oom(error);

        for (size_t i = 0; r >= 0 && i < n_types; i++) {
                const GpuNvmlType *t = &types[i];
                if (t->type_id == 0 || !t->name || !gpu_profile_name_is_valid(t->name)) {
                        r = error_set(error, -EBADMSG, "NVML reported an invalid vGPU type");
                        break;
                }
                for (size_t j = 0; j < n; j++)
                        if (items[j].type_id == t->type_id || streq(items[j].name, t->name)) {
                                r = error_set(error, -EBADMSG,
                                              "NVML reported vGPU type %" PRIu32 " twice",
                                              t->type_id);
                                break;
                        }
                if (r < 0)
                        break;

                const GpuProfile *known = NULL;
                for (size_t j = 0; !known && j < n_sysfs; j++)
                        if (streq(sysfs_items[j].name, t->name))
                                known = &sysfs_items[j];

                uint64_t mib = known ? known->framebuffer_mib : 0;
                if (mib == 0)
                        mib = gpu_profile_framebuffer_mib(t->name);
                if (mib == 0)
                        mib = t->framebuffer_bytes / (1024 * 1024);

                items[n] = (GpuProfile){
                    .name = strdup(t->name),
                    .type_id = t->type_id,
                    .mdev_type = known && known->mdev_type ? strdup(known->mdev_type) : NULL,
                    .framebuffer_mib = mib,
                };
                if (!items[n].name || (known && known->mdev_type && !items[n].mdev_type)) {
                        free(items[n].name);
                        r = error_set_oom(error);
                        break;
                }
                n++;
        }
        gpu_nvml_types_free(types, n_types);
        if (r < 0) {
                gpu_profiles_free(items, n);
                return r;
        }
        if (n > 0)
                qsort(items, n, sizeof *items, compare_catalog_entries);
        *ret = items;
        *ret_n = n;
        return 0;
}

void gpu_nvml_types_free(GpuNvmlType *types, size_t n)
{
        for (size_t i = 0; types && i < n; i++)
                free(types[i].name);
        free(types);
}

/* DISC-17, sysfs branch: from a profile name, else from the PCI IDs. */
static int model_from_catalog(const Gpu *g, char **ret)
{
        for (size_t i = 0; i < g->n_catalog; i++) {
                int r = gpu_profile_model(g->catalog[i].name, ret);
                if (r != -EINVAL)
                        return r;
        }
        if (g->device_id != 0)
                return strprintf(ret, "10de:%04x", g->device_id);
        char *s = strdup("10de:unknown");
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static bool nvml_usable(const GpuNvml *nvml, const char *pf)
{
        return nvml && nvml->usable && nvml->usable(nvml->userdata, pf) > 0;
}

static int fill_gpu(const Root *sysfs, const GpuNvml *nvml, Builder *b, Gpu *g)
{
        const char *pf = g->address;

        int r = read_device_id(sysfs, pf, &g->device_id);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                r = warn_gpu(b, "unknown device ID of GPU", pf, strerror(-r));
                if (r < 0)
                        return r;
        }

        r = sysfs_catalog(b->host, pf, &g->catalog, &g->n_catalog);
        if (r < 0)
                return r;
        g->catalog_source = GPU_CATALOG_SYSFS;

        bool usable = nvml_usable(nvml, pf);
        if (usable && nvml->supported_types) {
                _cleanup_free_ char *message = NULL;
                GpuProfile *items = NULL;
                size_t n = 0;
                r = nvml_catalog(nvml, pf, g->catalog, g->n_catalog, &items, &n, &message);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        r = warn_gpu(b, "NVML catalog unavailable; using sysfs lists", pf, message);
                        if (r < 0)
                                return r;
                } else {
                        gpu_profiles_free(g->catalog, g->n_catalog);
                        g->catalog = items;
                        g->n_catalog = n;
                        g->catalog_source = GPU_CATALOG_NVML;
                }
        }

        if (usable && nvml->device_name) {
                _cleanup_free_ char *name = NULL;
                r = nvml->device_name(nvml->userdata, pf, &name);
                if (r >= 0 && name && gpu_profile_name_is_valid(name)) {
                        g->model = TAKE_PTR(name);
                        return 0;
                }
                r = warn_gpu(b, "NVML device name unavailable", pf,
                             r < 0 ? strerror(-r) : "invalid name");
                if (r < 0)
                        return r;
        }
        return model_from_catalog(g, &g->model);
}

static int build_gpus(const Root *sysfs, const GpuNvml *nvml, Builder *b)
{
        GpuHost *h = b->host;
        int r;

        for (size_t i = 0; i < h->n_vfs; i++) {
                const char *pf = h->vfs[i].parent;
                bool known = !*pf;
                for (size_t k = 0; !known && k < h->n_gpus; k++)
                        known = streq(h->gpus[k].address, pf);
                if (known)
                        continue;
                r = grow((void **)&h->gpus, &b->cap_gpus, h->n_gpus, sizeof(Gpu));
                if (r < 0)
                        return r;
                h->gpus[h->n_gpus] = (Gpu){};
                memcpy(h->gpus[h->n_gpus++].address, pf, PCI_ADDRESS_STRLEN);
        }
        if (h->n_gpus > 0)
                qsort(h->gpus, h->n_gpus, sizeof(Gpu), compare_gpus);

        for (size_t i = 0; i < h->n_gpus; i++) {
                r = fill_gpu(sysfs, nvml, b, &h->gpus[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Names each configured VF's profile from its own GPU's catalog (DISC-19) or its mdev. */
static int resolve_current_profiles(GpuHost *h)
{
        for (size_t i = 0; i < h->n_vfs; i++) {
                GpuVf *vf = &h->vfs[i];
                const char *name = NULL;

                if (vf->mdev_uuids) {
                        for (size_t k = 0; !name && k < h->n_mdevs; k++)
                                if (streq(h->mdevs[k].uuid, vf->mdev_uuids[0]))
                                        name = h->mdevs[k].profile;
                } else if (vf->current_type_id != 0) {
                        const Gpu *g = gpu_host_find_gpu(h, vf->parent);
                        const GpuProfile *p =
                            g ? gpu_find_profile_by_type_id(g, vf->current_type_id) : NULL;
                        name = p ? p->name : NULL;
                }
                if (name) {
                        vf->current_profile = strdup(name);
                        if (!vf->current_profile)
                                return -ENOMEM;
                }
        }
        return 0;
}

/* ---- the table (step 3) and the GPUs (step 4) ---------------------------------------------- */

void gpu_vf_readings_free(GpuVfReading *readings, size_t n)
{
        for (size_t i = 0; readings && i < n; i++) {
                gpu_vf_done(&readings[i].vf);
                free(readings[i].error);
        }
        free(readings);
}

/*
 * What the previous table read for an unsettled VF. Its mdevs and its profile's name are not
 * copied: the listing and step 4 give them for this table.
 */
static int copy_vf_reading(const GpuVf *from, GpuVf *to)
{
        *to = (GpuVf){.current_type_id = from->current_type_id};
        memcpy(to->address, from->address, PCI_ADDRESS_STRLEN);
        memcpy(to->parent, from->parent, PCI_ADDRESS_STRLEN);
        if (strdup_nullable(from->error, &to->error) < 0)
                return -ENOMEM;
        if (from->n_creatable == 0)
                return 0;
        to->creatable = calloc(from->n_creatable, sizeof(GpuProfile));
        if (!to->creatable)
                return -ENOMEM;
        for (size_t k = 0; k < from->n_creatable; k++) {
                if (profile_copy(&from->creatable[k], &to->creatable[k]) < 0)
                        return -ENOMEM;
                to->creatable[k].available_instances = from->creatable[k].available_instances;
                to->n_creatable++;
        }
        return 0;
}

/*
 * The VF one reading gives, into *vf: 0 for a readable VF, or its failure (-errno) with
 * vf->error set: it is unreadable. -ENOMEM only when out of memory.
 */
static int take_reading(GpuVfReading *rd, const char *address, const GpuHost *previous, GpuVf *vf)
{
        int failure = rd->r < 0 ? rd->r : -EIO;

        if (rd->unsettled) {
                /* GEN-4: the read is still stuck, so the last word on the VF stands. */
                const GpuVf *last = gpu_host_find_vf(previous, address);
                if (last) {
                        if (copy_vf_reading(last, vf) < 0)
                                return -ENOMEM;
                        return vf->error ? failure : 0;
                }
        } else if (rd->r >= 0) {
                *vf = rd->vf;
                rd->vf = (GpuVf){};
                return 0;
        }
        if (rd->r == -ENOMEM)
                return -ENOMEM;

        /* DISC-6: kept with its address and parent, never with what it half read. */
        *vf = rd->vf;
        rd->vf = (GpuVf){};
        memcpy(vf->address, address, PCI_ADDRESS_STRLEN);
        gpu_profiles_free(vf->creatable, vf->n_creatable);
        vf->creatable = NULL;
        vf->n_creatable = 0;
        vf->current_type_id = 0;
        free(vf->error);
        vf->error = rd->error ? TAKE_PTR(rd->error) : strdup(strerror(-failure));
        if (!vf->error)
                return -ENOMEM;
        return failure;
}

/* DISC-9: each active mdev onto its VF, named from that VF's types, else by its type string. */
static int place_mdevs(GpuHost *h)
{
        for (size_t i = 0; i < h->n_mdevs; i++) {
                GpuMdev *m = &h->mdevs[i];
                GpuVf *vf = (GpuVf *)gpu_host_find_vf(h, m->vf);
                const char *name = NULL;
                for (size_t k = 0; vf && !name && k < vf->n_creatable; k++)
                        if (streq_ptr(vf->creatable[k].mdev_type, m->mdev_type))
                                name = vf->creatable[k].name;
                m->profile = strdup(name ?: m->mdev_type);
                if (!m->profile)
                        return -ENOMEM;
                if (vf && strv_push(&vf->mdev_uuids, m->uuid) < 0)
                        return -ENOMEM;
        }
        return 0;
}

int gpu_host_assemble(GpuListing *l, GpuVfReading *readings, const GpuHost *previous, GpuHost **ret,
                      char **error)
{
        bool mdev = l->framework == GPU_FRAMEWORK_MDEV;
        const char *step = mdev ? "discover mdev VFs" : "discover vendor VFIO VFs";
        _cleanup_free_ char *failures = NULL, *failed = NULL;
        size_t n_unreadable = 0;
        int first_r = 0, r;

        if (previous && previous->framework != l->framework)
                previous = NULL; /* another kind of VF: nothing of it carries over */
        _cleanup_gpu_host_ GpuHost *h = TAKE_PTR(l->host);
        if (!h)
                return error_set(error, -EINVAL, "%s: listing already used", step);
        Builder b = {.host = h, .cap_mdevs = h->n_mdevs};

        for (size_t i = 0; i < l->n_vfs; i++) {
                const GpuListedVf *in = &l->vfs[i];
                _cleanup_(gpu_vf_done) GpuVf vf = {};
                r = in->error ? in->error_r
                              : take_reading(&readings[i], in->address, previous, &vf);
                if (r == -ENOMEM)
                        return error_set(error, r, "%s: %s", step, ERROR_OUT_OF_MEMORY);
                if (r < 0) {
                        n_unreadable++;
                        if (first_r == 0)
                                first_r = r;
                        if (join_failure(&failures, &failed, in->address, in->error ?: vf.error) <
                            0)
                                return error_set(error, -ENOMEM, "%s: %s", step,
                                                 ERROR_OUT_OF_MEMORY);
                        /* DISC-3 skips an unreadable mdev parent; DISC-6 keeps a vendor VF in
                         * the table, so /gpus can show it, but it is never used. */
                        if (mdev)
                                continue;
                }
                if (builder_add_vf(&b, &vf) < 0)
                        return error_set(error, -ENOMEM, "%s: %s", step, ERROR_OUT_OF_MEMORY);
        }

        /* DISC-3, DISC-6: one bad VF must not hide the others, but all of them bad is a
         * failure. DISC-3 counts typeless entries too. */
        size_t n_entries = mdev ? l->n_mdev_entries : l->n_vfs;
        if (n_entries > 0 && n_unreadable == n_entries)
                return error_set(error, first_r, "%s: %s", step, failures);
        if (n_unreadable > 0) {
                /* The VFs' records say why; the warning names them. */
                r = mdev ? builder_warn(&b, "skipping unreadable mdev parents", failures, "vfs",
                                        failed, "error", failures, NULL)
                         : builder_warn(&b, "skipping unreadable vendor VFIO VFs", failed, "vfs",
                                        failed, "error", failures, NULL);
                if (r < 0)
                        return error_set(error, r, "%s: %s", step, ERROR_OUT_OF_MEMORY);
        }
        if (h->n_vfs > 0) {
                /* DISC-7: zero VFs is framework none, without error. */
                h->framework = l->framework;
                qsort(h->vfs, h->n_vfs, sizeof(GpuVf), compare_vfs);
        }
        if (place_mdevs(h) < 0)
                return error_set(error, -ENOMEM, "%s: %s", step, ERROR_OUT_OF_MEMORY);
        *ret = TAKE_PTR(h);
        return 0;
}

int gpu_host_finish(const Root *sysfs, const GpuNvml *nvml, GpuHost *h, char **error)
{
        Builder b = {
            .host = h, .cap_gpus = h->n_gpus, .cap_vfs = h->n_vfs, .cap_mdevs = h->n_mdevs};
        int r = build_gpus(sysfs, nvml, &b);
        if (r >= 0)
                r = resolve_current_profiles(h);
        if (r < 0)
                return error_set(error, r, "discover GPUs: %s", strerror(-r));
        return 0;
}

/* ---- the whole pass ------------------------------------------------------------------------ */

int gpu_discover(const Root *sysfs, const GpuNvml *nvml, GpuHost **ret, char **error)
{
        _cleanup_(gpu_listing_freep) GpuListing *l = NULL;
        int r = gpu_listing_new(sysfs, &l, error);
        if (r < 0)
                return r;

        GpuVfReading *readings = calloc(l->n_vfs + 1, sizeof *readings);
        if (!readings)
                return error_set(error, -ENOMEM, "discover GPUs: %s", ERROR_OUT_OF_MEMORY);
        for (size_t i = 0; i < l->n_vfs; i++)
                if (!l->vfs[i].error)
                        readings[i].r = gpu_read_listed_vf(sysfs, l->framework, &l->vfs[i],
                                                           &readings[i].vf, &readings[i].error);
        _cleanup_gpu_host_ GpuHost *h = NULL;
        r = gpu_host_assemble(l, readings, NULL, &h, error);
        gpu_vf_readings_free(readings, l->n_vfs);
        if (r < 0)
                return r;
        r = gpu_host_finish(sysfs, nvml, h, error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(h);
        return 0;
}
