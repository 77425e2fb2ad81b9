/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * REC-8's sysfs conditions for an mdev that no record or reservation names (ctrl.h). The loop
 * decides the claim side; this runs on a worker, since sysfs reads can hang (GEN-4).
 */
#include "ctrl.h"

int orphan_mdev_check(const Root *sysfs, const char *uuid, Timestamp now, char **error)
{
        char dir[sizeof "bus/mdev/devices/" + 36];
        if (!device_mdev_uuid_is_valid(uuid))
                return error_set(error, -EINVAL, "invalid mdev UUID \"%s\"", uuid);
        snprintf(dir, sizeof dir, "bus/mdev/devices/%s", uuid);

        struct stat st;
        int r = root_stat(sysfs, dir, &st);
        if (r == -ENOENT)
                return 0; /* removed meanwhile: nothing left to sweep */
        if (r < 0)
                return error_set(error, r, "check orphaned mdev %s: read mtime: %s", uuid,
                                 strerror(-r));
        /*
         * Young mdevs are left: one may be a create in flight that another manager (or this one,
         * before its record names it) has not finished. A clock that went back reads as young.
         */
        int64_t age_ns = (now.sec - (int64_t)st.st_mtim.tv_sec) * (int64_t)NSEC_PER_SEC +
                         ((int64_t)now.nsec - (int64_t)st.st_mtim.tv_nsec);
        if (age_ns <= (int64_t)ORPHAN_MDEV_MIN_AGE * (int64_t)NSEC_PER_SEC)
                return 0;

        /* Without a group the open-handle probe has no node to look for: fail closed. */
        _cleanup_free_ char *link = NULL, *group = NULL;
        uint32_t id;
        if (strprintf(&link, "%s/iommu_group", dir) < 0)
                return error_set_oom(error);
        r = root_readlink_basename(sysfs, link, &group);
        if (r == -ENOENT && root_exists(sysfs, dir) == 0)
                return 0; /* removed meanwhile */
        if (r == -ENOENT)
                return error_set(error, r, "check orphaned mdev %s: no IOMMU group", uuid);
        if (r < 0)
                return error_set(error, r, "check orphaned mdev %s: read IOMMU group: %s", uuid,
                                 strerror(-r));
        if (parse_uint32(group, &id) < 0)
                return error_set(error, -EBADMSG,
                                 "check orphaned mdev %s: IOMMU group \"%s\" is not a number", uuid,
                                 group);
        return 1;
}
