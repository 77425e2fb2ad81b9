/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The two lookups every check and every render makes: an instance by id, and the instance whose
 * claim holds a VF. Both were scans of the table; at PERF-5's 1,000 instances and 1,024 VFs a
 * /resources render asked the second one per VF, so both are indexed. The id index is kept in
 * step with the table; the claim index is rebuilt on the first lookup after anything it depends
 * on moved: the manager's generation (instance_manager_generation(), which moves whenever a claim
 * may have changed) and the host's (an mdev claim finds its VF through the host's mdevs).
 */
#include "instances/instance-internal.h"

typedef struct ClaimIndexEntry {
        const char *vf; /* into the instance, or the host's VF table */
        size_t order;   /* the instance's place in the table: the first one answers */
        const InstanceRecord *rec;
} ClaimIndexEntry;

struct ClaimIndex {
        uint64_t generation, host_generation;
        bool valid;
        ClaimIndexEntry *entries; /* sorted by VF, then table order */
        size_t n;
};

/* ---- by id --------------------------------------------------------------------------------- */

static const char *instance_id_of(const void *item)
{
        return ((const Instance *)item)->rec.id;
}

Instance *instance_find(const InstanceManager *m, const char *id)
{
        return sorted_get((void *const *)m->by_id, m->n_instances, id, instance_id_of);
}

/* Called with m->n_instances not yet counting i. */
int instance_index_add(InstanceManager *m, Instance *i)
{
        size_t n = m->n_instances;
        return sorted_insert((void ***)&m->by_id, &n, i, instance_id_of);
}

/* Called with m->n_instances still counting i. */
void instance_index_remove(InstanceManager *m, Instance *i)
{
        size_t n = m->n_instances;
        (void)sorted_remove((void **)m->by_id, &n, i, instance_id_of);
}

/* ---- the VF a claim holds ------------------------------------------------------------------ */

const char *instance_claimed_vf(const InstanceManager *m, const Instance *i)
{
        /*
         * Released, but the record on disk still claims it: a claim written now, then a crash,
         * would leave two records claiming one VF (REL-2).
         */
        if (!instance_record_is_claimed(&i->rec))
                return instance_ops_unrecorded_release(i);
        if (i->vf[0])
                return i->vf;
        /* A claim loaded from disk: vendor VFIO names its VF, an mdev its UUID. */
        if (streq_ptr(i->rec.gpu.framework, "vendor-vfio")) {
                const char *slash = strrchr(i->rec.gpu.device_path, '/');
                return slash ? slash + 1 : NULL;
        }
        const GpuHost *h = m->cfg.claimer.tracker ? gpu_tracker_host(m->cfg.claimer.tracker) : NULL;
        for (size_t k = 0; h && i->rec.gpu.mdev_uuid && k < h->n_vfs; k++)
                for (char **u = h->vfs[k].mdev_uuids; u && *u; u++)
                        if (streq(*u, i->rec.gpu.mdev_uuid))
                                return h->vfs[k].address;
        return NULL;
}

/* ---- by VF --------------------------------------------------------------------------------- */

static int entry_compare(const void *a, const void *b)
{
        const ClaimIndexEntry *x = a, *y = b;
        int c = strcmp(x->vf, y->vf);
        return c != 0 ? c : (x->order > y->order) - (x->order < y->order);
}

static uint64_t host_generation(const InstanceManager *m)
{
        return m->cfg.claimer.tracker ? gpu_tracker_generation(m->cfg.claimer.tracker) : 0;
}

static int rebuild(const InstanceManager *m, ClaimIndex *x)
{
        ClaimIndexEntry *e = reallocarray(NULL, m->n_instances ? m->n_instances : 1, sizeof *e);
        if (!e)
                return -ENOMEM;
        size_t n = 0;
        for (size_t k = 0; k < m->n_instances; k++) {
                const char *vf = instance_claimed_vf(m, m->instances[k]);
                if (vf)
                        e[n++] =
                            (ClaimIndexEntry){.vf = vf, .order = k, .rec = &m->instances[k]->rec};
        }
        qsort(e, n, sizeof *e, entry_compare);
        free(x->entries);
        x->entries = e;
        x->n = n;
        x->generation = m->generation;
        x->host_generation = host_generation(m);
        x->valid = true;
        return 0;
}

/* Without memory for the index, the scan it replaces answers: never a wrong answer. */
static const InstanceRecord *scan(const InstanceManager *m, const char *vf)
{
        for (size_t k = 0; k < m->n_instances; k++)
                if (streq_ptr(instance_claimed_vf(m, m->instances[k]), vf))
                        return &m->instances[k]->rec;
        return NULL;
}

const InstanceRecord *instance_manager_find_claim(const InstanceManager *m, const char *vf)
{
        ClaimIndex *x = m->claims;
        if (!vf)
                return NULL;
        if (!x || !x->valid || x->generation != m->generation ||
            x->host_generation != host_generation(m))
                if (!x || rebuild(m, x) < 0)
                        return scan(m, vf);
        size_t lo = 0, hi = x->n;
        while (lo < hi) { /* the first entry not below vf */
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(x->entries[mid].vf, vf) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < x->n && streq(x->entries[lo].vf, vf) ? x->entries[lo].rec : NULL;
}

int claim_index_new(ClaimIndex **ret)
{
        *ret = calloc(1, sizeof **ret);
        return *ret ? 0 : -ENOMEM;
}

ClaimIndex *claim_index_free(ClaimIndex *x)
{
        if (x)
                free(x->entries);
        free(x);
        return NULL;
}
