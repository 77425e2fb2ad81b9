/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "placement.h"

#include <sys/random.h>

#include "base/base.h"

/* What ranking needs to know about one GPU for one profile (PLACE-13, PLACE-14). */
typedef struct GpuRank {
        const PlacementGpu *gpu;
        const PlacementProfile *profile;
        size_t n_quarantined;
        bool load_known;
        uint64_t load_mib;
        bool holds_same_size_claim;
        uint64_t remaining; /* pack: free placements (NVML) or eligible VFs (sysfs paths) */
        size_t n_clean;
        size_t n_dirty;
} GpuRank;

const PlacementProfile *placement_gpu_find_profile(const PlacementGpu *gpu, const char *name)
{
        if (!gpu || !name)
                return NULL;
        for (size_t i = 0; i < gpu->n_catalog; i++)
                if (streq_ptr(gpu->catalog[i].name, name))
                        return &gpu->catalog[i];
        return NULL;
}

PlacementPath placement_gpu_path(const PlacementGpu *gpu)
{
        if (gpu->framework == PLACEMENT_FRAMEWORK_MDEV)
                return PLACEMENT_PATH_MDEV;
        if (gpu->mode == PLACEMENT_MODE_MIXED && gpu->nvml_usable)
                return PLACEMENT_PATH_NVML;
        return PLACEMENT_PATH_SYSFS;
}

static const PlacementGpu *find_gpu(const PlacementSnapshot *s, const char *address)
{
        if (!address)
                return NULL;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (streq_ptr(s->gpus[i].address, address))
                        return &s->gpus[i];
        return NULL;
}

static bool vf_on_gpu(const PlacementVf *vf, const PlacementGpu *gpu)
{
        return vf->parent && streq_ptr(vf->parent, gpu->address);
}

static bool vf_is_configured(const PlacementVf *vf)
{
        return vf->current_type != 0 || vf->has_mdev;
}

bool placement_vf_is_dirty(const PlacementVf *vf)
{
        return vf_is_configured(vf) && !vf->claimed && !vf->reserved;
}

/* The part of "allocatable" that does not depend on where the parent is. */
static bool vf_is_free(const PlacementVf *vf)
{
        return vf->readable && !vf_is_configured(vf) && !vf->claimed && !vf->reserved &&
               !vf->uncertain && !vf->quarantined;
}

bool placement_vf_is_allocatable(const PlacementSnapshot *snapshot, const PlacementVf *vf)
{
        return vf_is_free(vf) && find_gpu(snapshot, vf->parent);
}

static bool vf_lists_profile(const PlacementVf *vf, const char *name)
{
        for (size_t i = 0; i < vf->n_creatable; i++)
                if (streq_ptr(vf->creatable[i], name))
                        return true;
        return false;
}

static uint32_t vf_mdev_available(const PlacementVf *vf, const char *mdev_type)
{
        for (size_t i = 0; i < vf->n_mdev_types; i++)
                if (streq_ptr(vf->mdev_types[i].mdev_type, mdev_type))
                        return vf->mdev_types[i].available_instances;
        return 0;
}

static const PlacementNvmlCount *gpu_nvml_count(const PlacementGpu *gpu, uint32_t type_id)
{
        for (size_t i = 0; i < gpu->n_nvml_counts; i++)
                if (gpu->nvml_counts[i].type_id == type_id)
                        return &gpu->nvml_counts[i];
        return NULL;
}

/* PLACE-7: the answer's count less the reservations it cannot have seen. */
static uint64_t gpu_fresh_placements(const PlacementGpu *gpu, uint32_t type_id)
{
        const PlacementNvmlCount *c = gpu_nvml_count(gpu, type_id);
        if (!c || c->unreflected >= c->count)
                return 0;
        return c->count - c->unreflected;
}

static size_t gpu_unfinished_reservations(const PlacementSnapshot *s, const PlacementGpu *gpu,
                                          uint32_t type_id)
{
        size_t n = 0;
        for (size_t i = 0; i < s->n_vfs; i++)
                if (vf_on_gpu(&s->vfs[i], gpu) && s->vfs[i].reserved &&
                    s->vfs[i].reserved_type == type_id)
                        n++;
        return n;
}

static bool is_excluded(const PlacementRequest *req, const char *address)
{
        for (size_t i = 0; i < req->n_exclude; i++)
                if (streq_ptr(req->exclude[i], address))
                        return true;
        return false;
}

/*
 * Whether the GPU as a whole can take P now. On the sysfs path any readable VF's list
 * speaks for the card: the driver lists what it would accept on it. Used for dirty VFs
 * (PLACE-11), whose own lists say nothing useful while they hold a type.
 */
static bool gpu_is_eligible(const PlacementSnapshot *s, const PlacementGpu *gpu,
                            const PlacementProfile *p)
{
        switch (placement_gpu_path(gpu)) {
        case PLACEMENT_PATH_NVML:
                return gpu_fresh_placements(gpu, p->type_id) > 0;
        case PLACEMENT_PATH_SYSFS:
                for (size_t i = 0; i < s->n_vfs; i++)
                        if (vf_on_gpu(&s->vfs[i], gpu) && s->vfs[i].readable &&
                            vf_lists_profile(&s->vfs[i], p->name))
                                return true;
                return false;
        case PLACEMENT_PATH_MDEV:
                break;
        }
        return false;
}

/* PLACE-3, PLACE-4, PLACE-5, PLACE-6. gpu_eligible is gpu_is_eligible(), computed once per GPU by
 * the caller. */
static bool is_clean_candidate(const PlacementRequest *req, const PlacementGpu *gpu,
                               const PlacementProfile *p, bool gpu_eligible, const PlacementVf *vf)
{
        if (!vf_on_gpu(vf, gpu) || !vf_is_free(vf) || is_excluded(req, vf->address))
                return false;
        switch (placement_gpu_path(gpu)) {
        case PLACEMENT_PATH_NVML:
                return gpu_eligible;
        case PLACEMENT_PATH_SYSFS:
                return vf_lists_profile(vf, p->name);
        case PLACEMENT_PATH_MDEV:
                return p->mdev_type && vf_mdev_available(vf, p->mdev_type) >= 1;
        }
        return false;
}

/*
 * PLACE-11. Only vendor VFIO leftovers: a reset there is a type write of 0 (DEV-8, DEV-9); an
 * unowned mdev is removed by the reconciler (DEV-17), never reused by a claim.
 */
static bool is_dirty_candidate(const PlacementRequest *req, const PlacementGpu *gpu,
                               const PlacementProfile *p, bool gpu_eligible, const PlacementVf *vf)
{
        if (gpu->framework != PLACEMENT_FRAMEWORK_VENDOR_VFIO)
                return false;
        if (!vf_on_gpu(vf, gpu) || !vf->readable || !placement_vf_is_dirty(vf) || vf->uncertain ||
            vf->quarantined || is_excluded(req, vf->address))
                return false;
        return vf->current_type == p->type_id || gpu_eligible;
}

static void rank_gpu(const PlacementSnapshot *s, const PlacementRequest *req,
                     const PlacementGpu *gpu, const PlacementProfile *p, GpuRank *ret)
{
        GpuRank r = {.gpu = gpu, .profile = p, .load_known = true};
        bool eligible = gpu_is_eligible(s, gpu, p);

        for (size_t i = 0; i < s->n_vfs; i++) {
                const PlacementVf *vf = &s->vfs[i];
                if (!vf_on_gpu(vf, gpu))
                        continue;
                /* A quarantine is a signal about the card, so claimed VFs count too. */
                if (vf->quarantined)
                        r.n_quarantined++;
                if (vf->claimed || vf->reserved || placement_vf_is_dirty(vf)) {
                        if (vf->framebuffer_mib == 0)
                                r.load_known = false;
                        r.load_mib += vf->framebuffer_mib;
                }
                if (vf->claimed && p->framebuffer_mib != 0 &&
                    vf->framebuffer_mib == p->framebuffer_mib)
                        r.holds_same_size_claim = true;
                if (is_clean_candidate(req, gpu, p, eligible, vf))
                        r.n_clean++;
                else if (is_dirty_candidate(req, gpu, p, eligible, vf))
                        r.n_dirty++;
        }
        if (placement_gpu_path(gpu) == PLACEMENT_PATH_NVML)
                r.remaining = gpu_fresh_placements(gpu, p->type_id);
        else
                r.remaining = r.n_clean > 0 ? r.n_clean : r.n_dirty;
        *ret = r;
}

static int compare_flag_first(bool a, bool b)
{
        return a == b ? 0 : a ? -1 : 1;
}

static int compare_u64(uint64_t a, uint64_t b)
{
        return a == b ? 0 : a < b ? -1 : 1;
}

/* < 0 when a ranks before b. */
static int compare_rank(const GpuRank *a, const GpuRank *b, PlacementPolicy policy)
{
        int c = compare_u64(a->n_quarantined, b->n_quarantined);
        if (c == 0)
                c = compare_flag_first(a->load_known, b->load_known);
        /* Two unknown loads are not comparable: the known parts may say the opposite. */
        bool loads = a->load_known && b->load_known;
        if (policy == PLACEMENT_POLICY_PACK) {
                if (c == 0)
                        c = compare_flag_first(a->holds_same_size_claim, b->holds_same_size_claim);
                if (c == 0)
                        c = compare_u64(a->remaining, b->remaining);
                if (c == 0 && loads)
                        c = -compare_u64(a->load_mib, b->load_mib);
        } else if (c == 0 && loads)
                c = compare_u64(a->load_mib, b->load_mib);
        if (c == 0)
                c = strcmp(a->gpu->address, b->gpu->address);
        return c;
}

static int compare_vf_address(const void *a, const void *b)
{
        const PlacementVf *const *x = a, *const *y = b;
        return strcmp((*x)->address, (*y)->address);
}

/* PLACE-18, PLACE-19: why no GPU could even be ranked, in the order the SPEC gives. */
static int fail_without_candidate(const PlacementSnapshot *s, const char *profile, char **error)
{
        bool any_catalog = false, any_resolves = false, all_nvml = true;

        for (size_t i = 0; i < s->n_gpus; i++) {
                if (s->gpus[i].n_catalog > 0)
                        any_catalog = true;
                if (placement_gpu_find_profile(&s->gpus[i], profile))
                        any_resolves = true;
                if (!s->gpus[i].catalog_from_nvml)
                        all_nvml = false;
        }
        if (!any_catalog)
                return error_set(error, -ENOSPC,
                                 "no creatable vGPU profiles on any VF (GPUs at capacity or dirty "
                                 "VFs consuming framebuffer): profile \"%s\"",
                                 profile);
        if (!any_resolves && all_nvml)
                return error_set(error, -ENOENT, "unknown vGPU profile \"%s\"", profile);
        /* Shrinking sysfs lists hide a profile once a card is full, so absence proves nothing. */
        if (!any_resolves)
                return error_set(error, -ENOSPC,
                                 "profile \"%s\" is not creatable on any VF (unknown profile or "
                                 "insufficient capacity)",
                                 profile);
        return error_set(error, -ENOSPC, "no available VF for profile \"%s\"", profile);
}

/*
 * FLEET-6: nothing selectable on the one PF the request allows. The messages name the PF, so
 * that the scheduler's log says which allocation the host could not honour; a name that no
 * catalog has (every one from NVML) stays PLACE-18's 400, since no host would take it either.
 */
static int fail_on_gpu(const PlacementSnapshot *s, const PlacementGpu *gpu, const char *profile,
                       char **error)
{
        if (placement_gpu_find_profile(gpu, profile))
                return error_set(error, -ENOSPC, "no available VF for profile \"%s\" on GPU %s",
                                 profile, gpu->address);
        _cleanup_free_ char *why = NULL;
        if (fail_without_candidate(s, profile, &why) == -ENOENT)
                return error_set(error, -ENOENT, "%s", why);
        return error_set(error, -ENOSPC,
                         "profile \"%s\" is not creatable on GPU %s (unknown profile or "
                         "insufficient capacity)",
                         profile, gpu->address);
}

int placement_select_vf(const PlacementSnapshot *snapshot, const PlacementRequest *request,
                        const PlacementPicker *picker, PlacementChoice *ret, char **error)
{
        if (!snapshot || !request || !request->profile || !picker || !picker->pick)
                return error_set(error, -EINVAL, "select vGPU VF: missing argument");

        const PlacementGpu *only = NULL;
        if (request->gpu) {
                only = find_gpu(snapshot, request->gpu);
                if (!only)
                        return error_set(error, -ENODEV, "GPU %s is not on this host",
                                         request->gpu);
        }

        bool found = false;
        GpuRank best = {};
        for (size_t i = 0; i < snapshot->n_gpus; i++) {
                const PlacementGpu *gpu = &snapshot->gpus[i];
                if (only && gpu != only)
                        continue;
                const PlacementProfile *p = placement_gpu_find_profile(gpu, request->profile);
                if (!p)
                        continue;
                GpuRank r;
                rank_gpu(snapshot, request, gpu, p, &r);
                if (r.n_clean == 0 && r.n_dirty == 0)
                        continue;
                if (!found || compare_rank(&r, &best, request->policy) < 0)
                        best = r;
                found = true;
        }
        if (!found)
                return only ? fail_on_gpu(snapshot, only, request->profile, error)
                            : fail_without_candidate(snapshot, request->profile, error);

        /* PLACE-11 leaves a GPU either clean or dirty candidates, so the first group of
         * PLACE-15 is whichever it has. */
        bool dirty = best.n_clean == 0;
        bool eligible = gpu_is_eligible(snapshot, best.gpu, best.profile);
        _cleanup_free_ const PlacementVf **group =
            calloc(dirty ? best.n_dirty : best.n_clean, sizeof *group);
        if (!group)
                return error_set_oom(error);
        size_t n = 0;
        for (size_t i = 0; i < snapshot->n_vfs; i++) {
                const PlacementVf *vf = &snapshot->vfs[i];
                bool in_group =
                    dirty ? is_dirty_candidate(request, best.gpu, best.profile, eligible, vf)
                          : is_clean_candidate(request, best.gpu, best.profile, eligible, vf);
                if (in_group)
                        group[n++] = vf;
        }
        /* Sorted, so a scripted picker names the same VF whatever order discovery used. */
        qsort(group, n, sizeof *group, compare_vf_address);

        size_t k = picker->pick(n, picker->userdata);
        if (k >= n)
                return error_set(error, -EINVAL, "select vGPU VF: picker returned %zu of %zu", k,
                                 n);

        *ret = (PlacementChoice){
            .gpu = best.gpu,
            .vf = group[k],
            .profile = best.profile,
            .dirty = dirty,
        };
        return 0;
}

bool placement_nvml_answer_is_stale(const PlacementSnapshot *snapshot, const PlacementGpu *gpu,
                                    const char *profile)
{
        const PlacementProfile *p = placement_gpu_find_profile(gpu, profile);
        if (!p)
                return false;
        for (size_t i = 0; i < snapshot->n_vfs; i++) {
                const PlacementVf *vf = &snapshot->vfs[i];
                if (vf_on_gpu(vf, gpu) && vf->reserved && vf->reserved_type != p->type_id)
                        return true;
        }
        return false;
}

bool placement_gpu_must_wait(const PlacementSnapshot *snapshot, const PlacementGpu *gpu)
{
        if (placement_gpu_path(gpu) == PLACEMENT_PATH_NVML)
                return false;
        for (size_t i = 0; i < snapshot->n_vfs; i++)
                if (vf_on_gpu(&snapshot->vfs[i], gpu) && snapshot->vfs[i].reserved)
                        return true;
        return false;
}

/* For bsearch/qsort over an array of indices into a name array. */
typedef struct NameIndex {
        const char *name;
        size_t index;
} NameIndex;

static int name_index_compare(const void *a, const void *b)
{
        return strcmp(((const NameIndex *)a)->name, ((const NameIndex *)b)->name);
}

/* Adds one GPU's availability of every profile to counts (PLACE-21). One pass over the VFs:
 * /resources asks for every profile on every request, so a pass per profile would cost
 * profiles x VFs x list entries name comparisons. */
static void gpu_count_available(const PlacementSnapshot *s, const PlacementGpu *gpu,
                                const char *const *profiles, const NameIndex *sorted, size_t n,
                                const PlacementProfile **resolved, uint64_t *listed,
                                size_t *seen_vf, uint64_t *counts)
{
        PlacementPath path = placement_gpu_path(gpu);
        uint64_t free_vfs = 0;

        /* What selection could never place is not available either (DISC-19). */
        for (size_t i = 0; i < n; i++) {
                resolved[i] = placement_gpu_find_profile(gpu, profiles[i]);
                listed[i] = 0;
                seen_vf[i] = SIZE_MAX;
        }

        for (size_t v = 0; v < s->n_vfs; v++) {
                const PlacementVf *vf = &s->vfs[v];
                if (!vf_on_gpu(vf, gpu) || !vf_is_free(vf))
                        continue;
                free_vfs++;
                if (path == PLACEMENT_PATH_SYSFS)
                        for (size_t c = 0; c < vf->n_creatable; c++) {
                                if (!vf->creatable[c])
                                        continue;
                                NameIndex key = {.name = vf->creatable[c]};
                                const NameIndex *hit =
                                    bsearch(&key, sorted, n, sizeof *sorted, name_index_compare);
                                /* A name listed twice still counts its VF once. */
                                if (hit && seen_vf[hit->index] != v) {
                                        seen_vf[hit->index] = v;
                                        listed[hit->index]++;
                                }
                        }
                else if (path == PLACEMENT_PATH_MDEV)
                        for (size_t i = 0; i < n; i++)
                                if (resolved[i] && resolved[i]->mdev_type)
                                        listed[i] += vf_mdev_available(vf, resolved[i]->mdev_type);
        }

        for (size_t i = 0; i < n; i++) {
                const PlacementProfile *p = resolved[i];
                if (!p)
                        continue;
                if (path != PLACEMENT_PATH_NVML) {
                        counts[i] += listed[i];
                        continue;
                }
                const PlacementNvmlCount *c = gpu_nvml_count(gpu, p->type_id);
                uint64_t cached = c ? c->count : 0;
                uint64_t pending = gpu_unfinished_reservations(s, gpu, p->type_id);
                uint64_t placements = cached > pending ? cached - pending : 0;
                counts[i] += placements < free_vfs ? placements : free_vfs;
        }
}

int placement_count_available_many(const PlacementSnapshot *snapshot, const char *const *profiles,
                                   size_t n, uint64_t *ret_counts)
{
        if (!snapshot || (n > 0 && (!profiles || !ret_counts)))
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (!profiles[i])
                        return -EINVAL;

        _cleanup_free_ NameIndex *sorted = calloc(n ? n : 1, sizeof *sorted);
        _cleanup_free_ const PlacementProfile **resolved = calloc(n ? n : 1, sizeof *resolved);
        _cleanup_free_ uint64_t *listed = calloc(n ? n : 1, sizeof *listed);
        _cleanup_free_ uint64_t *counts = calloc(n ? n : 1, sizeof *counts);
        _cleanup_free_ size_t *seen_vf = calloc(n ? n : 1, sizeof *seen_vf);
        if (!sorted || !resolved || !listed || !counts || !seen_vf)
                return -ENOMEM;

        for (size_t i = 0; i < n; i++)
                sorted[i] = (NameIndex){.name = profiles[i], .index = i};
        qsort(sorted, n, sizeof *sorted, name_index_compare);

        for (size_t g = 0; g < snapshot->n_gpus; g++)
                gpu_count_available(snapshot, &snapshot->gpus[g], profiles, sorted, n, resolved,
                                    listed, seen_vf, counts);
        if (n > 0) /* memcpy to NULL is undefined even for 0 bytes */
                memcpy(ret_counts, counts, n * sizeof *counts);
        return 0;
}

uint64_t placement_count_available(const PlacementSnapshot *snapshot, const char *profile)
{
        uint64_t n;
        if (!profile || placement_count_available_many(snapshot, &profile, 1, &n) < 0)
                return 0; /* nothing is available that cannot be counted */
        return n;
}

int placement_random_init(PlacementRandom *ret)
{
        uint64_t seed;
        ssize_t k;

        do
                k = getrandom(&seed, sizeof seed, 0);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return negative_errno();
        if ((size_t)k != sizeof seed)
                return -EIO;
        *ret = (PlacementRandom){.state = seed};
        return 0;
}

static uint64_t splitmix64_next(uint64_t *state)
{
        uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

size_t placement_random_pick(size_t n, void *userdata)
{
        PlacementRandom *r = userdata;
        if (n <= 1)
                return 0;
        /* Values below 2^64 mod n would make the low indices likelier; draw again. */
        uint64_t bound = n, threshold = -bound % bound;
        for (;;) {
                uint64_t x = splitmix64_next(&r->state);
                if (x >= threshold)
                        return (size_t)(x % bound);
        }
}
