/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The JSON bodies of the read routes: /resources (API-4, API-5), /gpus (API-6, API-22) and
 * /gpu/health (API-10). */
#include "api-internal.h"

/* ---- /resources ------------------------------------------------------------------------------ */

/*
 * DISK-10: data_dir's free space and the instances' files as the storage stage last sampled
 * them (null before the first sample), the images and volumes as the stores hold them.
 */
static int storage_json(const ApiContext *ctx, json_t *root)
{
        if (!ctx->volumes)
                return 0;
        const StorageSpace *space = volume_store_space(ctx->volumes);
        const Image *const *images = NULL;
        const Volume *const *volumes = NULL;
        size_t n_images = ctx->images ? image_store_list(ctx->images, &images) : 0;
        size_t n_volumes = volume_store_list(ctx->volumes, &volumes);
        json_t *s = json_object();
        if (json_set(root, "storage", s) < 0 ||
            json_set(s, "data_dir_free_bytes",
                     space->known ? json_u64(space->free_bytes) : json_null()) < 0 ||
            json_set(s, "images", json_u64(n_images)) < 0 ||
            json_set(s, "volumes", json_u64(n_volumes)) < 0 ||
            json_set(s, "instances_disk_bytes",
                     space->known ? json_u64(space->instances_disk_bytes) : json_null()) < 0)
                return -ENOMEM;
        return 0;
}

int api_resources_json(const ApiContext *ctx, const ApiSnapshot *snap, json_t **ret)
{
        json_auto_t *root = json_object();
        if (!root)
                return -ENOMEM;
        if (!snap->has_gpu) {
                if (json_set(root, "gpu", json_null()) < 0 || storage_json(ctx, root) < 0)
                        return -ENOMEM;
                *ret = TAKE_PTR(root);
                return 0;
        }

        json_t *gpu = json_object(), *profiles = json_array();
        if (json_set(root, "gpu", gpu) < 0 || !profiles ||
            json_set(gpu, "mode", json_string("vgpu")) < 0 ||
            json_set(gpu, "total_slots", json_u64(snap->total_slots)) < 0 ||
            json_set(gpu, "used_slots", json_u64(snap->used_slots)) < 0 ||
            json_set(gpu, "allocatable_slots", json_u64(snap->allocatable_slots)) < 0 ||
            json_set(gpu, "quarantined_slots", json_u64(snap->quarantined_slots)) < 0 ||
            json_set(gpu, "profiles", profiles) < 0)
                return -ENOMEM;

        for (size_t i = 0; i < snap->n_profiles; i++) {
                const ApiProfileFigure *p = &snap->profiles[i];
                json_t *o = json_object();
                if (json_push(profiles, o) < 0 || json_set(o, "name", json_string(p->name)) < 0 ||
                    json_set(o, "framebuffer_mb", json_u64(p->framebuffer_mib)) < 0 ||
                    json_set(o, "available", json_u64(p->available)) < 0)
                        return -ENOMEM;
        }
        if (snap->placement_disabled_reason &&
            json_set(gpu, "placement_disabled_reason",
                     json_string(snap->placement_disabled_reason)) < 0)
                return -ENOMEM;
        if (snap->placement_warning &&
            json_set(gpu, "placement_warning", json_string(snap->placement_warning)) < 0)
                return -ENOMEM;
        if (storage_json(ctx, root) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(root);
        return 0;
}

/* ---- /gpus ----------------------------------------------------------------------------------- */

static json_t *timestamp_json(Timestamp t)
{
        char buf[TIMESTAMP_STRLEN];
        return json_string(format_timestamp(t, buf));
}

static json_t *vf_json(const ApiContext *ctx, const ApiSnapshot *snap, size_t i)
{
        const GpuVf *vf = &api_host(ctx)->vfs[i];
        const HealthRecord *rec =
            ctx->health ? health_state_find(health_store_state(ctx->health), vf->address) : NULL;
        json_auto_t *o = json_object();

        if (!o || json_set(o, "address", json_string(vf->address)) < 0 ||
            json_set(o, "parent", json_string(vf->parent)) < 0 ||
            json_set(o, "state", json_string(api_vf_state_to_string(snap->vf_states[i]))) < 0)
                return NULL;
        if (gpu_vf_is_readable(vf) && vf->current_profile &&
            json_set(o, "profile", json_string(vf->current_profile)) < 0)
                return NULL;
        const InstanceRecord *owner =
            ctx->instances ? instance_manager_find_claim(ctx->instances, vf->address) : NULL;
        if (owner && json_set(o, "instance_id", json_string(owner->id)) < 0)
                return NULL;
        if (json_set(o, "failures", json_u64(rec ? rec->n_failures : 0)) < 0)
                return NULL;
        if (snap->vf_uncertain[i] && json_set(o, "uncertain", json_true()) < 0)
                return NULL;
        return json_incref(o);
}

int api_gpus_json(const ApiContext *ctx, const ApiSnapshot *snap, json_t **ret)
{
        json_auto_t *root = json_object();
        json_t *gpus = json_array();
        if (!root || json_set(root, "gpus", gpus) < 0)
                return -ENOMEM;

        const GpuHost *h = api_host(ctx);
        for (size_t g = 0; h && g < h->n_gpus; g++) {
                const Gpu *gpu = &h->gpus[g];
                json_t *o = json_object(), *vfs = json_array();
                NvmlFallback fb = nvml_client_get_gpu_fallback(ctx->nvml, gpu->address, NULL);

                if (json_push(gpus, o) < 0 || !vfs ||
                    json_set(o, "address", json_string(gpu->address)) < 0 ||
                    json_set(o, "model", json_string(gpu->model ? gpu->model : "")) < 0 ||
                    json_set(o, "framework", json_string(gpu_framework_to_string(h->framework))) <
                        0 ||
                    /* API-6: the snapshot's mode (equal-size on mdev hosts). */
                    json_set(o, "mode",
                             json_string(placement_mode_to_string(
                                 snap->view->snapshot.gpus[g].mode))) < 0 ||
                    json_set(o, "nvml", json_string(nvml_fallback_to_string(fb))) < 0)
                        return -ENOMEM;
                /* HEALTH-26: a drained GPU says so; its VFs show as quarantined. */
                const HealthDrain *d =
                    ctx->health
                        ? health_state_find_drain(health_store_state(ctx->health), gpu->address)
                        : NULL;
                if (d) {
                        json_t *drained = json_object();
                        if (json_set(o, "drained", drained) < 0 ||
                            json_set(drained, "reason", json_string(d->reason)) < 0 ||
                            json_set(drained, "drained_at", timestamp_json(d->drained_at)) < 0)
                                return -ENOMEM;
                }
                if (json_set(o, "vfs", vfs) < 0)
                        return -ENOMEM;
                for (size_t i = 0; i < h->n_vfs && i < snap->n_vfs; i++)
                        if (streq(h->vfs[i].parent, gpu->address) &&
                            json_push(vfs, vf_json(ctx, snap, i)) < 0)
                                return -ENOMEM;
        }
        *ret = TAKE_PTR(root);
        return 0;
}

/* ---- /gpu/health ----------------------------------------------------------------------------- */

int api_health_record_json(const ApiContext *ctx, const HealthRecord *rec, json_t **ret)
{
        json_auto_t *o = json_object();
        if (!o || json_set(o, "vf_address", json_string(rec->vf_address)) < 0)
                return -ENOMEM;

        /* The keys and their order of HEALTH-1/HEALTH-4, empty parts omitted as there. */
        if (rec->n_failures > 0) {
                json_t *failures = json_array();
                if (json_set(o, "failures", failures) < 0)
                        return -ENOMEM;
                for (size_t i = 0; i < rec->n_failures; i++) {
                        const HealthFailure *f = &rec->failures[i];
                        json_t *fo = json_object();
                        if (json_push(failures, fo) < 0 ||
                            (*f->instance_id &&
                             json_set(fo, "instance_id", json_string(f->instance_id)) < 0) ||
                            (*f->assigned_at &&
                             json_set(fo, "assigned_at", json_string(f->assigned_at)) < 0) ||
                            json_set(fo, "reported_at", timestamp_json(f->reported_at)) < 0)
                                return -ENOMEM;
                }
        }
        if (rec->quarantined) {
                if (json_set(o, "quarantined_at", timestamp_json(rec->quarantined_at)) < 0 ||
                    (rec->reason && json_set(o, "reason", json_string(rec->reason)) < 0) ||
                    json_set(o, "source", json_string(health_source_to_string(rec->source))) < 0)
                        return -ENOMEM;
        }

        const GpuVf *vf = gpu_host_find_vf(api_host(ctx), rec->vf_address);
        if (vf && *vf->parent && json_set(o, "gpu", json_string(vf->parent)) < 0)
                return -ENOMEM;
        if (json_set(o, "present", json_boolean(vf != NULL)) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(o);
        return 0;
}

static int breaker_json(const ApiContext *ctx, json_t **ret)
{
        const HealthState *st = health_store_state(ctx->health);
        const HealthOptions *opt = health_store_options(ctx->health);
        char window[DURATION_STRLEN];
        json_auto_t *b = json_object();

        if (!b || json_set(b, "enabled", json_boolean(opt->breaker_enabled)) < 0 ||
            json_set(b, "open", json_boolean(health_store_breaker_open(ctx->health))) < 0)
                return -ENOMEM;
        if (st->breaker_open) {
                if ((!timestamp_is_zero(st->breaker_opened_at) &&
                     json_set(b, "opened_at", timestamp_json(st->breaker_opened_at)) < 0) ||
                    (st->breaker_reason &&
                     json_set(b, "reason", json_string(st->breaker_reason)) < 0))
                        return -ENOMEM;
        }
        if (json_set(b, "window", json_string(format_duration(opt->breaker_window, window))) < 0 ||
            json_set(b, "max_quarantines", json_u64(opt->breaker_max_quarantines)) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(b);
        return 0;
}

int api_breaker_json(const ApiContext *ctx, json_t **ret)
{
        return breaker_json(ctx, ret);
}

int api_health_json(const ApiContext *ctx, json_t **ret)
{
        const char *unavailable = health_store_unavailable_reason(ctx->health);
        const HealthState *st = health_store_state(ctx->health);
        json_auto_t *root = json_object();
        json_t *breaker = NULL, *records;

        if (!root || json_set(root, "available", json_boolean(!unavailable)) < 0 ||
            (unavailable && json_set(root, "unavailable_reason", json_string(unavailable)) < 0) ||
            json_set(root, "threshold", json_u64(health_store_options(ctx->health)->threshold)) < 0)
                return -ENOMEM;
        int r = breaker_json(ctx, &breaker);
        if (r < 0)
                return r;
        if (json_set(root, "breaker", breaker) < 0 ||
            json_set(root, "records", records = json_array()) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < st->n_records; i++) {
                json_t *o;
                r = api_health_record_json(ctx, &st->records[i], &o);
                if (r < 0)
                        return r;
                if (json_push(records, o) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(root);
        return 0;
}
