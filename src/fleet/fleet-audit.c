/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The orphan audit's decision (FLEET-6), kept pure so that every rule is tested without a
 * Placement: which consumers holding allocations against this host's providers name no local
 * instance, since when, and which of them have waited out placement.orphan_grace.
 */
#include "fleet/fleet.h"

static bool strv_has(char *const *strv, const char *s)
{
        for (; strv && *strv; strv++)
                if (streq(*strv, s))
                        return true;
        return false;
}

static const FleetOrphan *orphans_find(const FleetOrphan *o, size_t n, const char *consumer)
{
        for (size_t i = 0; i < n; i++)
                if (streq(o[i].consumer, consumer))
                        return &o[i];
        return NULL;
}

/* now - then in nanoseconds, 0 when the clock went back (nothing is older than it was). */
static nsec_t elapsed(Timestamp then, Timestamp now)
{
        if (timestamp_compare(now, then) <= 0)
                return 0;
        int64_t sec = now.sec - then.sec;
        int64_t nsec = (int64_t)now.nsec - (int64_t)then.nsec;
        if (nsec < 0) {
                sec--;
                nsec += (int64_t)NSEC_PER_SEC;
        }
        if ((uint64_t)sec >= UINT64_MAX / NSEC_PER_SEC)
                return UINT64_MAX;
        return (nsec_t)sec * NSEC_PER_SEC + (nsec_t)nsec;
}

int fleet_audit_decide(char *const *allocated, char *const *local, const FleetOrphan *seen,
                       size_t n_seen, Timestamp now, nsec_t grace, FleetOrphan **ret_orphans,
                       size_t *ret_n_orphans, char ***ret_delete)
{
        size_t n_allocated = strv_length(allocated), n = 0;
        _cleanup_free_ FleetOrphan *orphans =
            calloc(n_allocated ? n_allocated : 1, sizeof *orphans);
        _cleanup_strv_free_ char **delete = NULL;
        if (!orphans)
                return -ENOMEM;

        for (size_t i = 0; i < n_allocated; i++) {
                const char *c = allocated[i];
                /* Placement's consumers are UUIDs; anything longer is no consumer of ours. */
                if (strlen(c) != FLEET_UUID_STRLEN - 1 || strv_has(local, c) ||
                    orphans_find(orphans, n, c))
                        continue;
                const FleetOrphan *before = orphans_find(seen, n_seen, c);
                FleetOrphan *o = &orphans[n++];
                memcpy(o->consumer, c, FLEET_UUID_STRLEN);
                o->first_seen = before ? before->first_seen : now;
                if (elapsed(o->first_seen, now) >= grace && strv_push(&delete, c) < 0)
                        return -ENOMEM;
        }
        strv_sort(delete);

        *ret_orphans = TAKE_PTR(orphans);
        *ret_n_orphans = n;
        *ret_delete = TAKE_PTR(delete);
        return 0;
}
