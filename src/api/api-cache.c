/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The bodies of /resources, /gpus and the resource gauges of /metrics, rendered once per change
 * of what they show and then served from memory (PERF-1).
 *
 * Before, each request built the placement snapshot and rendered its JSON (some 1.3 million
 * instructions a /resources request on SIM-20's host). The state behind them changes a few
 * times a minute at most, so each body is kept with the key of the state it was rendered from
 * (ApiViewKey) and rendered again only when a request finds another key. No timer is involved:
 * every source says itself when its state changes, by moving a counter at the change, so a
 * change is visible to the very next request.
 *
 * Every input of the three bodies, and what covers it (a source missing here would be a stale
 * answer, so this list has to follow api-snapshot.c, api-json.c and write_resources()):
 *
 *  api_snapshot_build():
 *   - placement_disabled_reason (api_placement_disabled_reason()): the health store's
 *     unavailable reason, the tracker's DISC-7 error, the reconciler's DEV-14 scan error, the
 *     instance manager's INST-22 reason, the sysfs pool's GEN-4 refusal. Key: the text itself,
 *     computed by the same function on every request (a few pointer reads and one uncontended
 *     lock); nothing to bump, nothing to forget.
 *   - placement_warning (health_store_breaker_warning(): the breaker in the store's memory):
 *     HEALTH.
 *   - the host (gpu_tracker_host(): GPUs, catalogs, VFs, their types, creatable lists, mdevs,
 *     unreadable errors) and has_gpu (the framework, gpu_tracker_error()): TRACKER.
 *   - the overlays (claimer_fill_overlays(), or the store's quarantine without a claim flow):
 *       quarantine: health_store_is_quarantined() through the claim flow's DeviceGuard (the
 *         daemon's guard asks the same store), records and drains in memory, pending requests
 *         included: HEALTH; a drain's VFs by the store's gpu_of(), i.e. the host: TRACKER;
 *       claims: instance_manager_find_claim() (records' claims, a release's cleared claim, the
 *         claim put back after a failed write) and the claimed profile's size: INSTANCES; a
 *         loaded mdev claim matched by the host's mdev UUIDs: TRACKER;
 *       reservations: the Claimer's (made, dropped, reaped): CLAIMER;
 *       uncertain VFs: worker_pool_key_is_uncertain(), which changes when the pool's turn
 *         abandons a call past its deadline (the pool's own timer decides, never a reader's
 *         clock) and when an abandoned call returns, on its worker thread: WORKERS;
 *       NVML: modes, fallbacks and cached placements (nvml_client_get_gpu_mode(),
 *         _get_gpu_fallback(), _get_cached_placements()): NVML, bumped by every answer folded
 *         in (refreshes and the claims' own queries, NVML-15) and by nvml_client_set_gpus().
 *   - collect_profiles(), compute_figures(): the host and the view above only.
 *  api_resources_json(): the snapshot, and DISK-10's storage figures (the key holds them).
 *  api_gpus_json(): the host (TRACKER); per GPU the NVML fallback (NVML) and the drain mark
 *    (HEALTH); per VF the failure count of its health record (HEALTH) and the instance holding
 *    it (INSTANCES); the rest from the snapshot.
 *  write_resources() (the gauges): the snapshot only.
 *  Not cached, written fresh for each scrape (api_metrics_counters_text()): the NVML fallback
 *    counters, the sentinel's, reconciler's and instance manager's counters and instance
 *    figures, the health gauges (quarantined records, unavailable, breaker open), the HTTP
 *    response counters, build info. They move with events that change no cached body (and the
 *    HTTP counters with every request), so keying on them would render each scrape anyway.
 *  Time: none of the three bodies holds a wall-clock-relative figure (drained_at is a date),
 *    and no input above is decided by comparing a deadline with now at read time.
 *
 * A source's identity is part of the key too: a context whose module is set later (or
 * replaced) never matches a body rendered without it.
 *
 * The key is read before rendering. A change made after the read (a worker thread's, the only
 * one that can happen during a render) bumps its counter after it, so the body kept with the
 * older key is rendered again by the next request: stale never, superfluous at worst.
 */
#include "api-internal.h"

/* ---- the key --------------------------------------------------------------------------------- */

int api_view_key_read(const ApiContext *ctx, ApiViewKey *ret)
{
        ApiViewKey k = {
            .source =
                {
                    [API_SOURCE_TRACKER] = ctx->tracker,
                    [API_SOURCE_HEALTH] = ctx->health,
                    [API_SOURCE_NVML] = ctx->nvml,
                    [API_SOURCE_WORKERS] = ctx->workers,
                    [API_SOURCE_CLAIMER] = ctx->claimer,
                    [API_SOURCE_INSTANCES] = ctx->instances,
                },
            .generation =
                {
                    [API_SOURCE_TRACKER] = ctx->tracker ? gpu_tracker_generation(ctx->tracker) : 0,
                    [API_SOURCE_HEALTH] = ctx->health ? health_store_generation(ctx->health) : 0,
                    [API_SOURCE_NVML] = ctx->nvml ? nvml_client_cache_generation(ctx->nvml) : 0,
                    [API_SOURCE_WORKERS] = ctx->workers ? worker_pool_generation(ctx->workers) : 0,
                    [API_SOURCE_CLAIMER] = ctx->claimer ? claimer_generation(ctx->claimer) : 0,
                    [API_SOURCE_INSTANCES] =
                        ctx->instances ? instance_manager_generation(ctx->instances) : 0,
                },
        };
        /* DISK-10: the storage figures are the key themselves (the stage samples them on a
         * worker; the stores change with imports, deletes and creates). */
        const StorageSpace *space = ctx->volumes ? volume_store_space(ctx->volumes) : NULL;
        if (space) {
                const Image *const *images = NULL;
                const Volume *const *volumes = NULL;
                k.storage_known = true;
                k.storage_free = space->known ? space->free_bytes : UINT64_MAX;
                k.storage_instances_bytes = space->instances_disk_bytes;
                k.storage_images = ctx->images ? image_store_list(ctx->images, &images) : 0;
                k.storage_volumes = volume_store_list(ctx->volumes, &volumes);
        }
        /* Before the render, like the counters: a change during it shows in the next key. */
        int r = api_placement_disabled_reason(ctx, &k.disabled_reason);
        if (r < 0)
                return r;
        *ret = k;
        return 0;
}

void api_view_key_done(ApiViewKey *k)
{
        free(k->disabled_reason);
        *k = (ApiViewKey){};
}

bool api_view_key_equal(const ApiViewKey *a, const ApiViewKey *b)
{
        for (size_t i = 0; i < _API_SOURCE_MAX; i++)
                if (a->source[i] != b->source[i] || a->generation[i] != b->generation[i])
                        return false;
        if (a->storage_known != b->storage_known || a->storage_free != b->storage_free ||
            a->storage_images != b->storage_images || a->storage_volumes != b->storage_volumes ||
            a->storage_instances_bytes != b->storage_instances_bytes)
                return false;
        return streq_ptr(a->disabled_reason, b->disabled_reason);
}

/* ---- the slots ------------------------------------------------------------------------------- */

static void slot_clear(ApiCachedBody *s)
{
        api_view_key_done(&s->key);
        free(s->text);
        s->text = NULL;
        s->size = 0;
        s->valid = false;
}

int api_body_cache_get(ApiBodyCache *c, ApiBody b, ApiViewKey *key, ApiRenderFunc render,
                       const ApiContext *ctx, const char **ret, size_t *ret_size)
{
        ApiViewKey k = *key;
        *key = (ApiViewKey){};
        if (b >= _API_BODY_MAX) {
                api_view_key_done(&k);
                return -EINVAL;
        }
        ApiCachedBody *s = &c->body[b];
        if (s->valid && api_view_key_equal(&s->key, &k)) {
                api_view_key_done(&k);
                *ret = s->text;
                *ret_size = s->size;
                return 0;
        }

        char *text = NULL;
        size_t size = 0;
        int r = render(ctx, &text, &size);
        if (r < 0) {
                /* Nothing kept that a later request could take for the state now. */
                api_view_key_done(&k);
                slot_clear(s);
                return r;
        }
        slot_clear(s);
        s->key = k;
        s->text = text;
        s->size = size;
        s->valid = true;
        s->renders++;
        *ret = s->text;
        *ret_size = s->size;
        return 0;
}

void api_body_cache_done(ApiBodyCache *c)
{
        for (size_t b = 0; b < _API_BODY_MAX; b++)
                slot_clear(&c->body[b]);
}

/* ---- the renderers --------------------------------------------------------------------------- */

/* The bytes http_reply_json() would send for body: compact, no trailing newline. */
static int dump_json(json_t *body, char **ret, size_t *ret_size)
{
        json_auto_t *owned = body;
        char *text = json_dumps(owned, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
                return -ENOMEM;
        *ret = text;
        *ret_size = strlen(text);
        return 0;
}

static int render_resources(const ApiContext *ctx, char **ret, size_t *ret_size)
{
        _cleanup_api_snapshot_ ApiSnapshot *snap = NULL;
        json_t *body = NULL;
        int r = api_snapshot_build(ctx, &snap);
        if (r >= 0)
                r = api_resources_json(ctx, snap, &body);
        if (r < 0)
                return r;
        return dump_json(body, ret, ret_size);
}

static int render_gpus(const ApiContext *ctx, char **ret, size_t *ret_size)
{
        _cleanup_api_snapshot_ ApiSnapshot *snap = NULL;
        json_t *body = NULL;
        int r = api_snapshot_build(ctx, &snap);
        if (r >= 0)
                r = api_gpus_json(ctx, snap, &body);
        if (r < 0)
                return r;
        return dump_json(body, ret, ret_size);
}

static int render_gauges(const ApiContext *ctx, char **ret, size_t *ret_size)
{
        _cleanup_api_snapshot_ ApiSnapshot *snap = NULL;
        int r = api_snapshot_build(ctx, &snap);
        if (r < 0)
                return r;
        return api_metrics_gauges_text(snap, ret, ret_size);
}

int api_cached_body(ApiContext *ctx, ApiBody b, const char **ret, size_t *ret_size)
{
        static const ApiRenderFunc renderers[_API_BODY_MAX] = {
            [API_BODY_RESOURCES] = render_resources,
            [API_BODY_GPUS] = render_gpus,
            [API_BODY_GAUGES] = render_gauges,
        };
        if (b >= _API_BODY_MAX)
                return -EINVAL;
        ApiViewKey key;
        int r = api_view_key_read(ctx, &key);
        if (r < 0)
                return r;
        return api_body_cache_get(&ctx->cache, b, &key, renderers[b], ctx, ret, ret_size);
}
