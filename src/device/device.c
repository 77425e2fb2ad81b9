/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The synchronous device primitives (DEV-1, DEV-3..DEV-9, DEV-16..DEV-18, DISC-22). They run on
 * a worker thread and touch nothing but the roots and the scan they are given.
 */
#include "device.h"

#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>

#include "gpu/gpu.h"

#define VENDOR_TYPE_ATTR "nvidia/current_vgpu_type"
#define MDEV_NAME_MAX GPU_ATTR_MAX

const char *device_failure_kind_to_string(DeviceFailureKind k)
{
        static const char *const names[] = {
            [DEVICE_FAILURE_ERROR] = "error",
            [DEVICE_FAILURE_CAPACITY] = "capacity",
            [DEVICE_FAILURE_IN_USE] = "in_use",
            [DEVICE_FAILURE_REFUSED] = "refused",
            [DEVICE_FAILURE_UNVERIFIED] = "unverified",
            [DEVICE_FAILURE_QUARANTINED] = "quarantined",
            [DEVICE_FAILURE_STORE] = "store",
            [DEVICE_FAILURE_TIMEOUT] = "timeout",
            [DEVICE_FAILURE_UNCERTAIN] = "uncertain",
        };
        return (unsigned)k < ELEMENTSOF(names) ? names[k] : "error";
}

/* Fills the failure report and returns r, so failure paths stay one statement. */
static int report(DeviceFailure *failure, int r, DeviceFailureKind kind, uint32_t type_id)
{
        if (failure)
                *failure = (DeviceFailure){.kind = kind, .type_id = type_id};
        return r;
}

/* ---- the write guard (DEV-18) -------------------------------------------------------------- */

/* The next path component of *p (advanced past it and its slash) into buf; false at the end. */
static bool next_component(const char **p, char *buf, size_t size)
{
        if (!**p)
                return false;
        size_t n = strcspn(*p, "/");
        if (n == 0 || n >= size)
                return false;
        memcpy(buf, *p, n);
        buf[n] = 0;
        *p += n;
        if (**p == '/')
                (*p)++;
        return true;
}

bool device_mdev_uuid_is_valid(const char *uuid)
{
        /* Version nibble 4, variant 10xx: what random generation produces. The shape check
         * makes uuid[19] a hex digit, so strchr() never matches the terminator. */
        return uuid_is_lowercase(uuid) && uuid[14] == '4' && strchr("89ab", uuid[19]);
}

static bool ends_with_component(const char *rel, const char *tail)
{
        size_t n = strlen(rel), t = strlen(tail);
        return n >= t && streq(rel + n - t, tail) && (n == t || rel[n - t - 1] == '/');
}

/*
 * The shape check of device_guard_write(): 0 and the VF whose physfn must exist ("" for an
 * mdev's remove), or -EPERM with the reason.
 */
static int guard_shape(const char *rel, char vf[static PCI_ADDRESS_STRLEN], char **error)
{
        static const char *const forbidden[] = {
            "driver/unbind", "driver_override", "sriov_numvfs", "reset", "remove",
        };
        char c[7][NAME_MAX + 1];
        const char *p = rel;
        size_t n = 0;

        if (root_check_path(rel) < 0)
                return error_set(error, -EPERM, "refuse to write %s: not a plain relative path",
                                 rel ? rel : "(null)");
        while (n < ELEMENTSOF(c) && next_component(&p, c[n], sizeof c[n]))
                n++;
        if (*p)
                n = 0; /* longer than any allowed path, or a component beyond NAME_MAX */

        if (n == 5 && streq(c[0], "bus") && streq(c[1], "mdev") && streq(c[2], "devices") &&
            uuid_is_lowercase(c[3]) && streq(c[4], "remove")) {
                vf[0] = 0;
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(forbidden); i++)
                if (ends_with_component(rel, forbidden[i]))
                        return error_set(error, -EPERM, "refuse to write %s: %s is never written",
                                         rel, forbidden[i]);

        const char *device = NULL;
        if (n == 6 && streq(c[0], "bus") && streq(c[1], "pci") && streq(c[2], "devices") &&
            streq(c[4], "nvidia") && streq(c[5], "current_vgpu_type"))
                device = c[3];
        else if (n == 6 && streq(c[0], "class") && streq(c[1], "mdev_bus") &&
                 streq(c[3], "mdev_supported_types") && streq(c[5], "create"))
                device = c[2];
        if (!device || !pci_address_is_valid(device))
                return error_set(error, -EPERM, "refuse to write %s: not a vGPU attribute", rel);
        memcpy(vf, device, PCI_ADDRESS_STRLEN);
        return 0;
}

int device_guard_write(const Root *sysfs, const char *rel, char **error)
{
        char vf[PCI_ADDRESS_STRLEN];
        int r = guard_shape(rel, vf, error);
        if (r < 0 || !vf[0])
                return r;

        /* A PF has no physfn link: refusing here keeps every PF attribute out of reach. */
        _cleanup_free_ char *physfn = NULL;
        if (strprintf(&physfn, "bus/pci/devices/%s/physfn", vf) < 0)
                return error_set_oom(error);
        r = root_exists(sysfs, physfn);
        if (r < 0)
                return error_set(error, -EPERM, "refuse to write %s: check %s: %s", rel, physfn,
                                 strerror(-r));
        if (r == 0)
                return error_set(error, -EPERM, "refuse to write %s: %s is not a VF", rel, vf);
        return 0;
}

/*
 * Every write is the guard, then one write() (DEV-5, DEV-18), in two steps at each caller: the
 * guard's refusal is its own failure (DEVICE_FAILURE_ERROR, its text), the driver's refusal of
 * the write the caller's to word and classify.
 */

/* ---- open-handle scans --------------------------------------------------------------------- */

/* The given scan, or a fresh one in *fresh (`scan open VFIO handles: <err>`). */
static int get_scan(const DeviceRoots *roots, const VfioScan *given, VfioScan **fresh,
                    const VfioScan **ret, char **error)
{
        if (given) {
                *ret = given;
                return 0;
        }
        if (!*fresh) {
                _cleanup_free_ char *e = NULL;
                if (!roots->proc || !roots->dev_root)
                        return error_set(error, -EINVAL,
                                         "scan open VFIO handles: no proc or dev root configured");
                int r = vfio_scan(roots->proc, roots->dev_root, fresh, &e);
                if (r < 0)
                        return error_set(error, r, "scan open VFIO handles: %s", e);
        }
        *ret = *fresh;
        return 0;
}

/* ---- vendor VFIO --------------------------------------------------------------------------- */

static int check_vf(const char *vf, char **error)
{
        if (!vf || !pci_address_is_valid(vf))
                return error_set(error, -EINVAL, "invalid VF address \"%s\"", vf ? vf : "");
        return 0;
}

static int type_attr(const char *vf, char **ret)
{
        return strprintf(ret, "bus/pci/devices/%s/" VENDOR_TYPE_ATTR, vf);
}

int device_vfio_read_type(const Root *sysfs, const char *vf, uint32_t *ret, char **error)
{
        int r = check_vf(vf, error);
        if (r < 0)
                return r;

        _cleanup_free_ char *rel = NULL, *buf = NULL, *e = NULL;
        size_t size;
        if (type_attr(vf, &rel) < 0)
                return error_set_oom(error);
        r = root_read_file(sysfs, rel, GPU_CURRENT_TYPE_MAX, &buf, &size);
        if (r < 0)
                return error_set(error, r, "read current vGPU type for VF %s: %s", vf,
                                 strerror(-r));
        r = gpu_parse_current_type(buf, size, ret, &e);
        if (r < 0)
                return error_set(error, r, "read current vGPU type for VF %s: %s", vf, e);
        return 0;
}

/*
 * The in-use gate of DEV-4 and DEV-9: 0 when no VFIO node of vf is held open, else the failure
 * with its DEV-9 text. type is the VF's current type, for the report.
 */
static int gate_vf(const DeviceRoots *roots, const VfioScan *scan, VfioScan **fresh, const char *vf,
                   uint32_t type, DeviceFailure *failure, char **error)
{
        const VfioScan *s;
        int r = get_scan(roots, scan, fresh, &s, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, type);

        _cleanup_free_ char *e = NULL;
        r = vfio_probe_vf(s, roots->sysfs, vf, NULL, &e);
        if (r < 0)
                return report(
                    failure,
                    error_set(error, r, "check vendor VFIO vGPU usage for VF %s: %s", vf, e),
                    DEVICE_FAILURE_ERROR, type);
        if (r > 0)
                return report(
                    failure,
                    error_set(error, -EBUSY, "vendor VFIO vGPU on VF %s is still in use", vf),
                    DEVICE_FAILURE_IN_USE, type);
        return 0;
}

/*
 * Writes 0 and reads it back (the teardown half of DEV-4 and DEV-9). A missing attribute on
 * read-back means the VF went away with its vGPU, which is what a release wants.
 */
static int destroy_vf(const Root *sysfs, const char *vf, uint32_t type, DeviceFailure *failure,
                      char **error)
{
        _cleanup_free_ char *rel = NULL, *e = NULL;
        if (type_attr(vf, &rel) < 0)
                return report(failure, error_set_oom(error), DEVICE_FAILURE_ERROR, type);

        int r = device_guard_write(sysfs, rel, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, type);
        r = root_write_attr(sysfs, rel, "0");
        if (r < 0)
                return report(failure,
                              error_set(error, r, "destroy vGPU on VF %s: %s", vf, strerror(-r)),
                              DEVICE_FAILURE_REFUSED, type);

        uint32_t now;
        r = device_vfio_read_type(sysfs, vf, &now, &e);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return report(failure, error_set(error, r, "%s", e), DEVICE_FAILURE_UNVERIFIED,
                              type);
        if (now != 0)
                return report(failure,
                              error_set(error, -EIO,
                                        "verify reset vGPU on VF %s: type is %" PRIu32 ", want 0",
                                        vf, now),
                              DEVICE_FAILURE_UNVERIFIED, type);
        return 0;
}

/* DEV-6's rollback: NULL when it worked, else "; rollback: <err>". */
static char *rollback(const Root *sysfs, const char *vf)
{
        _cleanup_free_ char *rel = NULL, *e = NULL;
        char *suffix = NULL;
        uint32_t now = 0;

        int r = type_attr(vf, &rel) < 0 ? error_set_oom(&e) : device_guard_write(sysfs, rel, &e);
        if (r >= 0 && (r = root_write_attr(sysfs, rel, "0")) < 0)
                (void)error_set(&e, r, "%s", strerror(-r));
        if (r >= 0 && (r = device_vfio_read_type(sysfs, vf, &now, &e)) == -ENOENT)
                r = 0; /* the VF went away with its vGPU */
        if (r < 0)
                (void)error_set(&suffix, r, "; rollback: %s", e);
        else if (now != 0)
                (void)error_set(&suffix, -EIO, "; rollback: type is %" PRIu32 ", want 0", now);
        return suffix;
}

int device_vfio_configure(const DeviceRoots *roots, const VfioScan *scan, const char *vf,
                          const char *type, DeviceFailure *failure, char **error)
{
        uint32_t want, current;
        int r;

        if ((r = check_vf(vf, error)) < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);
        /* DEV-1: a type is a card-local ID, and 0 would be a release in disguise. */
        if (!type || parse_uint32(type, &want) < 0 || want == 0)
                return report(failure,
                              error_set(error, -EINVAL,
                                        "invalid vendor VFIO vGPU profile type \"%s\"",
                                        type ? type : ""),
                              DEVICE_FAILURE_ERROR, 0);

        r = device_vfio_read_type(roots->sysfs, vf, &current, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);
        if (current == want)
                return 0; /* DEV-3: idempotent, nothing written */

        _cleanup_(vfio_scan_freep) VfioScan *fresh = NULL;
        if (current != 0) {
                /* DEV-4: never pull a vGPU from under a VMM. */
                r = gate_vf(roots, scan, &fresh, vf, current, failure, error);
                if (r < 0)
                        return r;
                r = destroy_vf(roots->sysfs, vf, current, failure, error);
                if (r < 0)
                        return r;
        }

        _cleanup_free_ char *rel = NULL, *e = NULL;
        char value[sizeof "4294967295"];
        snprintf(value, sizeof value, "%" PRIu32, want);
        if (type_attr(vf, &rel) < 0)
                return report(failure, error_set_oom(error), DEVICE_FAILURE_ERROR, 0);
        r = device_guard_write(roots->sysfs, rel, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);
        r = root_write_attr(roots->sysfs, rel, value);
        if (r < 0)
                /* DEV-7: whatever the errno, the driver said no to this type on this VF. */
                return report(failure,
                              error_set(error, r,
                                        "driver refused vGPU type %" PRIu32 " on VF %s: %s", want,
                                        vf, strerror(-r)),
                              DEVICE_FAILURE_CAPACITY, 0);

        uint32_t now;
        r = device_vfio_read_type(roots->sysfs, vf, &now, &e);
        if (r >= 0 && now == want)
                return 1;

        /* DEV-6: leave the VF free rather than holding a type nobody asked for. */
        _cleanup_free_ char *undo = rollback(roots->sysfs, vf);
        const char *suffix = undo ?: "";
        if (r < 0)
                return report(failure,
                              error_set(error, r, "verify vGPU on VF %s: %s%s", vf, e, suffix),
                              DEVICE_FAILURE_UNVERIFIED, 0);
        return report(failure,
                      error_set(error, -EIO,
                                "verify vGPU on VF %s: type is %" PRIu32 ", want %" PRIu32 "%s", vf,
                                now, want, suffix),
                      DEVICE_FAILURE_UNVERIFIED, now);
}

int device_vfio_release(const DeviceRoots *roots, const VfioScan *scan, const char *vf,
                        uint32_t *ret_type, DeviceFailure *failure, char **error)
{
        uint32_t current;
        int r;

        if ((r = check_vf(vf, error)) < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);

        /* DEV-8: a VF that is gone (DISC-21) or free has nothing to release. */
        _cleanup_free_ char *e = NULL;
        r = device_vfio_read_type(roots->sysfs, vf, &current, &e);
        if (r == -ENOENT || (r >= 0 && current == 0)) {
                if (ret_type)
                        *ret_type = 0;
                return 0;
        }
        if (r < 0)
                return report(failure, error_set(error, r, "%s", e), DEVICE_FAILURE_ERROR, 0);

        _cleanup_(vfio_scan_freep) VfioScan *fresh = NULL;
        r = gate_vf(roots, scan, &fresh, vf, current, failure, error);
        if (r < 0)
                return r;
        r = destroy_vf(roots->sysfs, vf, current, failure, error);
        if (r < 0)
                return r;
        if (ret_type)
                *ret_type = current;
        return 1;
}

/* ---- mdev ---------------------------------------------------------------------------------- */

/* The type directory on vf whose name is exactly profile (DEV-16); -ENOENT when none is. */
static int find_mdev_type(const Root *sysfs, const char *vf, const char *profile, char **ret,
                          char **error)
{
        _cleanup_free_ char *dir = NULL;
        _cleanup_strv_free_ char **types = NULL;
        if (strprintf(&dir, "class/mdev_bus/%s/mdev_supported_types", vf) < 0)
                return error_set_oom(error);
        int r = root_list_dir(sysfs, dir, &types);
        if (r < 0)
                return error_set(error, r, "list %s: %s", dir, strerror(-r));

        for (char **t = types; *t; t++) {
                _cleanup_free_ char *rel = NULL, *name = NULL;
                if (strprintf(&rel, "%s/%s/name", dir, *t) < 0)
                        return error_set_oom(error);
                r = root_read_attr(sysfs, rel, MDEV_NAME_MAX, &name);
                if (r == -ENOENT)
                        continue; /* a type directory without a name offers nothing by name */
                if (r < 0)
                        return error_set(error, r, "read %s: %s", rel, strerror(-r));
                if (streq(strstrip(name), profile)) {
                        char *found = strdup(*t);
                        if (!found)
                                return error_set_oom(error);
                        *ret = found;
                        return 0;
                }
        }
        return error_set(error, -ENOENT, "no mdev type named \"%s\"", profile);
}

/* The basename of bus/mdev/devices/<uuid>/mdev_type (DISC-9). */
static int read_mdev_type(const Root *sysfs, const char *uuid, char **ret)
{
        _cleanup_free_ char *rel = NULL;
        if (strprintf(&rel, "bus/mdev/devices/%s/mdev_type", uuid) < 0)
                return -ENOMEM;
        return root_readlink_basename(sysfs, rel, ret);
}

/*
 * Writes 1 to the mdev's remove file: 0 once it is gone (ENOENT counts), else -errno with the
 * guard's text or the write's errno text.
 */
static int write_mdev_remove(const Root *sysfs, const char *uuid, char **error)
{
        _cleanup_free_ char *rel = NULL;
        if (strprintf(&rel, "bus/mdev/devices/%s/remove", uuid) < 0)
                return error_set_oom(error);
        int r = device_guard_write(sysfs, rel, error);
        if (r < 0)
                return r;
        r = root_write_attr(sysfs, rel, "1");
        if (r < 0 && r != -ENOENT)
                return error_set(error, r, "%s", strerror(-r));
        return 0;
}

int device_mdev_create(const Root *sysfs, const char *vf, const char *profile, const char *uuid,
                       DeviceFailure *failure, char **error)
{
        int r = check_vf(vf, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);
        if (!device_mdev_uuid_is_valid(uuid))
                return report(
                    failure,
                    error_set(error, -EINVAL, "invalid mdev UUID \"%s\"", uuid ? uuid : ""),
                    DEVICE_FAILURE_ERROR, 0);
        if (!profile || !gpu_profile_name_is_valid(profile))
                return report(failure,
                              error_set(error, -EINVAL, "invalid vGPU profile name \"%s\"",
                                        profile ? profile : ""),
                              DEVICE_FAILURE_ERROR, 0);

        _cleanup_free_ char *type = NULL, *e = NULL;
        r = find_mdev_type(sysfs, vf, profile, &type, &e);
        if (r < 0)
                return report(failure, error_set(error, r, "create mdev on VF %s: %s", vf, e),
                              DEVICE_FAILURE_ERROR, 0);

        _cleanup_free_ char *create = NULL;
        if (strprintf(&create, "class/mdev_bus/%s/mdev_supported_types/%s/create", vf, type) < 0)
                return report(failure, error_set_oom(error), DEVICE_FAILURE_ERROR, 0);
        r = device_guard_write(sysfs, create, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);
        r = root_write_attr(sysfs, create, uuid);
        if (r < 0)
                return report(failure,
                              error_set(error, r, "create mdev on VF %s: %s", vf, strerror(-r)),
                              DEVICE_FAILURE_CAPACITY, 0);

        /* Read-back (DEV-16): an mdev of another type must not stand in for the claim's. */
        _cleanup_free_ char *got = NULL, *problem = NULL;
        r = read_mdev_type(sysfs, uuid, &got);
        if (r >= 0 && streq(got, type))
                return 0;
        if (r < 0)
                (void)error_set(&problem, r, "read type of mdev %s: %s", uuid, strerror(-r));
        else
                r = error_set(&problem, -EIO, "mdev %s has type \"%s\", want \"%s\"", uuid, got,
                              type);

        _cleanup_free_ char *remove_error = NULL, *undo = NULL;
        int k = write_mdev_remove(sysfs, uuid, &remove_error);
        if (k < 0)
                (void)error_set(&undo, k, "; remove: %s", remove_error);
        return report(failure,
                      error_set(error, r, "create mdev on VF %s: %s%s", vf, problem, undo ?: ""),
                      DEVICE_FAILURE_UNVERIFIED, 0);
}

static int mdev_rel(const char *uuid, char **ret)
{
        return strprintf(ret, "bus/mdev/devices/%s", uuid);
}

static int check_uuid(const char *uuid, char **error)
{
        /* Removal takes any mdev sysfs shows, not only our v4 ones: a dirty VF may carry one. */
        if (!uuid_is_lowercase(uuid))
                return error_set(error, -EINVAL, "invalid mdev UUID \"%s\"", uuid ? uuid : "");
        return 0;
}

int device_mdev_exists(const Root *sysfs, const char *uuid, char **error)
{
        _cleanup_free_ char *rel = NULL;
        int r = check_uuid(uuid, error);
        if (r < 0)
                return r;
        if (mdev_rel(uuid, &rel) < 0)
                return error_set_oom(error);
        r = root_exists(sysfs, rel);
        if (r < 0)
                return error_set(error, r, "check mdev %s: %s", uuid, strerror(-r));
        return r;
}

int device_mdev_remove(const DeviceRoots *roots, const VfioScan *scan, const char *uuid,
                       DeviceFailure *failure, char **error)
{
        int r = check_uuid(uuid, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);

        _cleanup_free_ char *rel = NULL;
        if (mdev_rel(uuid, &rel) < 0)
                return report(failure, error_set_oom(error), DEVICE_FAILURE_ERROR, 0);
        r = root_exists(roots->sysfs, rel);
        if (r < 0)
                return report(failure,
                              error_set(error, r, "remove mdev %s: %s", uuid, strerror(-r)),
                              DEVICE_FAILURE_ERROR, 0);
        if (r == 0)
                return 0;

        /* The in-use probe gates remove (DEV-17), as it gates every vendor-VFIO release. */
        _cleanup_(vfio_scan_freep) VfioScan *fresh = NULL;
        const VfioScan *s;
        r = get_scan(roots, scan, &fresh, &s, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);
        _cleanup_free_ char *e = NULL;
        r = vfio_probe_mdev(s, roots->sysfs, uuid, NULL, &e);
        if (r < 0)
                return report(failure, error_set(error, r, "check mdev %s usage: %s", uuid, e),
                              DEVICE_FAILURE_ERROR, 0);
        if (r > 0)
                return report(failure, error_set(error, -EBUSY, "mdev %s is still in use", uuid),
                              DEVICE_FAILURE_IN_USE, 0);

        _cleanup_free_ char *remove_error = NULL;
        r = write_mdev_remove(roots->sysfs, uuid, &remove_error);
        if (r < 0) /* the guard cannot refuse a checked UUID's remove: this is the driver */
                return report(failure,
                              error_set(error, r, "remove mdev %s: %s", uuid, remove_error),
                              DEVICE_FAILURE_REFUSED, 0);
        /* The kernel removes an mdev inside the write: success means it is gone. */
        return 1;
}

/* ---- release by the claim's framework (DISC-22) -------------------------------------------- */

int device_release_claim(const DeviceRoots *roots, const VfioScan *scan, const DeviceClaim *claim,
                         DeviceFailure *failure, char **error)
{
        GpuFramework f;
        int r = gpu_framework_from_string(claim->framework ? claim->framework : "", &f, error);
        if (r < 0)
                return report(failure, r, DEVICE_FAILURE_ERROR, 0);
        if (f == GPU_FRAMEWORK_MDEV)
                return device_mdev_remove(roots, scan, claim->mdev_uuid, failure, error);
        return device_vfio_release(roots, scan, claim->vf, NULL, failure, error);
}

/* ---- shared scans -------------------------------------------------------------------------- */

struct DeviceScan {
        atomic_uint refs; /* a job's data may be freed on a worker thread (worker_pool_free) */
        VfioScan *scan;
};

int device_scan_new(VfioScan *scan, DeviceScan **ret)
{
        if (!scan)
                return -EINVAL;
        DeviceScan *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        atomic_init(&s->refs, 1);
        s->scan = scan;
        *ret = s;
        return 0;
}

DeviceScan *device_scan_ref(DeviceScan *s)
{
        if (s)
                atomic_fetch_add(&s->refs, 1);
        return s;
}

DeviceScan *device_scan_unref(DeviceScan *s)
{
        if (s && atomic_fetch_sub(&s->refs, 1) == 1) {
                vfio_scan_free(s->scan);
                free(s);
        }
        return NULL;
}

const VfioScan *device_scan_get(const DeviceScan *s)
{
        return s ? s->scan : NULL;
}
