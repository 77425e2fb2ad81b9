/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What admission (INST-10, INST-11) and /resources (API-5) both decide on, written once so that
 * they agree (MET-4): whether placement is disabled and why, and the slot figures of a snapshot.
 */
#include "placement.h"

int placement_disabled_reason(const PlacementDisabledSources *s, char **ret)
{
        const char *const reasons[] = {s->store_unavailable, s->discovery_error, s->scan_error,
                                       s->records_error};
        for (size_t i = 0; i < ELEMENTSOF(reasons); i++)
                if (reasons[i]) {
                        char *copy = strdup(reasons[i]);
                        if (!copy)
                                return -ENOMEM;
                        *ret = copy;
                        return 1;
                }
        if (s->pool) {
                _cleanup_free_ char *pool_error = NULL;
                int r = worker_pool_check_accepting(s->pool, &pool_error);
                if (r < 0) {
                        if (!pool_error &&
                            strprintf(&pool_error, "sysfs worker pool: %s", strerror(-r)) < 0)
                                return -ENOMEM;
                        *ret = TAKE_PTR(pool_error);
                        return 1;
                }
        }
        *ret = NULL;
        return 0;
}

void placement_count_slots(const PlacementSnapshot *ps, bool disabled, PlacementSlots *ret)
{
        PlacementSlots s = {};
        for (size_t i = 0; i < ps->n_vfs; i++) {
                const PlacementVf *pv = &ps->vfs[i];
                if (!pv->readable)
                        continue;
                s.total++;
                if (pv->current_type != 0 || pv->has_mdev || pv->claimed || pv->reserved)
                        s.used++;
                if (pv->quarantined)
                        s.quarantined++;
                if (!disabled && placement_vf_is_allocatable(ps, pv))
                        s.allocatable++;
        }
        *ret = s;
}
