/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The /metrics exposition (MET-1..MET-3): every family of MET-2, in its order, each with all of
 * its fixed label values from start-up, so rates and alerts work before the first event. The
 * resource gauges come from the snapshot that /resources uses (MET-4) and are kept with the same
 * key as /resources' body (api-cache.c); the families after them are counters and figures that
 * move with every event and request, written fresh for each scrape.
 */
#include "api-internal.h"

typedef struct Family {
        const char *name;
        MetricType type;
        const char *help;
} Family;

/* The samples of a family that nothing has counted yet. */
static const uint64_t zero[16];

/* A family whose samples carry one label with fixed values. */
static int write_labelled(MetricsWriter *w, const Family *f, const char *label,
                          const char *const *values, const uint64_t *counts, size_t n)
{
        int r = metrics_family(w, f->name, f->type, f->help);
        for (size_t i = 0; i < n && r >= 0; i++)
                r = metrics_sample_u64(w, counts[i], label, values[i], NULL);
        return r;
}

static int write_single(MetricsWriter *w, const Family *f, uint64_t value)
{
        int r = metrics_family(w, f->name, f->type, f->help);
        if (r >= 0)
                r = metrics_sample_u64(w, value, NULL);
        return r;
}

static int write_resources(MetricsWriter *w, const ApiSnapshot *snap)
{
        static const char *const kinds[] = {"total", "used", "allocatable", "quarantined"};
        const uint64_t slots[] = {snap->total_slots, snap->used_slots, snap->allocatable_slots,
                                  snap->quarantined_slots};
        int r = write_labelled(w,
                               &(Family){"vgpud_resources_gpu_slots", METRIC_GAUGE,
                                         "vGPU slots on this host by kind."},
                               "kind", kinds, slots, ELEMENTSOF(kinds));
        if (r < 0)
                return r;

        r = metrics_family(w, "vgpud_resources_gpu_profile_slots", METRIC_GAUGE,
                           "vGPU profiles that could still be placed, by profile (not additive "
                           "across profiles).");
        for (size_t i = 0; i < snap->n_profiles && r >= 0; i++)
                r = metrics_sample_u64(w, snap->profiles[i].available, "profile",
                                       snap->profiles[i].name, "kind", "available", NULL);
        if (r < 0)
                return r;

        /* Each VF counted once: uncertain when flagged (GEN-4), else its API-6 state. */
        static const char *const states[] = {"free",        "reserved",  "claimed",   "dirty",
                                             "quarantined", "uncertain", "unreadable"};
        const uint64_t vfs[] = {
            snap->vfs_by_state[API_VF_FREE],        snap->vfs_by_state[API_VF_RESERVED],
            snap->vfs_by_state[API_VF_CLAIMED],     snap->vfs_by_state[API_VF_DIRTY],
            snap->vfs_by_state[API_VF_QUARANTINED], snap->vfs_uncertain,
            snap->vfs_by_state[API_VF_UNREADABLE],
        };
        r = write_labelled(w,
                           &(Family){"vgpud_resources_gpu_vfs", METRIC_GAUGE,
                                     "vGPU VFs by state, each counted once."},
                           "state", states, vfs, ELEMENTSOF(states));
        if (r < 0)
                return r;

        return write_single(w,
                            &(Family){"vgpud_resources_gpu_placement_disabled", METRIC_GAUGE,
                                      "1 while vGPU placement is disabled for any reason."},
                            snap->placement_disabled_reason ? 1 : 0);
}

static int write_nvml(MetricsWriter *w, const ApiContext *ctx)
{
        static const char *const reasons[] = {"equal_size", "error", "unavailable", "timeout",
                                              "stuck"};
        static const NvmlFallback order[] = {NVML_FALLBACK_EQUAL_SIZE, NVML_FALLBACK_ERROR,
                                             NVML_FALLBACK_UNAVAILABLE, NVML_FALLBACK_TIMEOUT,
                                             NVML_FALLBACK_STUCK};
        const NvmlFallbackCounters *c = ctx->nvml ? nvml_client_get_counters(ctx->nvml) : NULL;
        uint64_t counts[ELEMENTSOF(order)] = {0};
        for (size_t i = 0; c && i < ELEMENTSOF(order); i++)
                counts[i] = c->total[order[i]];
        return write_labelled(w,
                              &(Family){"vgpud_resources_gpu_nvml_fallbacks_total", METRIC_COUNTER,
                                        "NVML placement fallbacks by reason."},
                              "reason", reasons, counts, ELEMENTSOF(reasons));
}

/*
 * The families of the instance, sentinel and reconciler stages: the instance figures are the
 * instance manager's, the stage failures the reconciler's, the checks, init failures and
 * quarantines the sentinel's (MET-3: the families and their label values are there from
 * start-up, at 0 without a sentinel).
 */
static int write_instances(MetricsWriter *w, const ApiContext *ctx)
{
        const HealthStore *hs = ctx->health;
        InstanceManagerStats st = {0};
        if (ctx->instances)
                instance_manager_get_stats(ctx->instances, &st);
        /* MET-2 lists in_grace "true" first. */
        const uint64_t kills[] = {st.forced_kills[1], st.forced_kills[0]};
        const SentinelStats *ss = ctx->sentinel ? sentinel_get_stats(ctx->sentinel) : NULL;
        int r;

        const char *results[_SENTINEL_RESULT_MAX];
        for (size_t k = 0; k < _SENTINEL_RESULT_MAX; k++)
                results[k] = sentinel_result_to_string(k);
        r = write_labelled(w,
                           &(Family){"vgpud_instances_vgpu_sentinel_checks_total", METRIC_COUNTER,
                                     "Guest GPU init checks by result."},
                           "result", results, ss ? ss->checks : zero, ELEMENTSOF(results));
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_instances_vgpu_sentinel_init_failures_total",
                                           METRIC_COUNTER,
                                           "Newly recorded guest GPU init failures."},
                                 ss ? ss->init_failures : 0);
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_instances_vgpu_sentinel_quarantines_total",
                                           METRIC_COUNTER, "Automatic VF quarantines."},
                                 ss ? ss->quarantines : 0);
        if (r >= 0)
                r = write_single(
                    w,
                    &(Family){"vgpud_instances_vgpu_quarantined_vfs", METRIC_GAUGE,
                              "Quarantined records in the VF health store, VF present or not."},
                    hs ? health_state_count_quarantined(health_store_state(hs)) : 0);
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_instances_vgpu_vf_health_store_unavailable",
                                           METRIC_GAUGE,
                                           "1 while the VF health store is unavailable."},
                                 hs && health_store_unavailable_reason(hs) ? 1 : 0);
        if (r < 0)
                return r;

        const char *stages[_RECONCILE_STAGE_MAX];
        for (size_t k = 0; k < _RECONCILE_STAGE_MAX; k++)
                stages[k] = reconcile_stage_to_string(k);
        const ReconcilerStats *rs = ctx->reconciler ? reconciler_get_stats(ctx->reconciler) : NULL;
        r = write_labelled(w,
                           &(Family){"vgpud_instances_vgpu_reconcile_failures_total",
                                     METRIC_COUNTER, "Reconciler stage failures by stage."},
                           "stage", stages, rs ? rs->stage_failures : zero, ELEMENTSOF(stages));
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_instances_vgpu_stale_release_failures_total",
                                           METRIC_COUNTER,
                                           "Failed releases of claims whose VMM is gone."},
                                 st.stale_release_failures);
        if (r >= 0)
                r = write_single(
                    w,
                    &(Family){"vgpud_instances_vgpu_reconcile_liveness_uncertain_total",
                              METRIC_COUNTER, "Ambiguous VMM liveness verdicts that kept a claim."},
                    st.liveness_uncertain);
        if (r < 0)
                return r;

        static const char *const states[] = {"Creating", "Running", "Stopping",
                                             "Stopped",  "Failed",  "Deleting"};
        r = write_labelled(w, &(Family){"vgpud_instances", METRIC_GAUGE, "Instances by state."},
                           "state", states, st.by_state, ELEMENTSOF(states));
        if (r < 0)
                return r;

        static const char *const grace[] = {"true", "false"};
        r = write_labelled(w,
                           &(Family){"vgpud_instances_vmm_forced_kills_total", METRIC_COUNTER,
                                     "SIGKILLs sent to VMMs with a VFIO device."},
                           "in_grace", grace, kills, ELEMENTSOF(grace));
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_instances_vgpu_quarantine_breaker_open",
                                           METRIC_GAUGE,
                                           "1 while the automatic quarantine breaker is open."},
                                 hs && health_store_breaker_open(hs) ? 1 : 0);
        return r;
}

/* NET-10: the NAT network's addresses and dnsmasq, and the network's failures by step. */
static int write_network(MetricsWriter *w, const ApiContext *ctx)
{
        InstanceNatStats st = {0};
        if (ctx->instances)
                instance_nat_stats(ctx->instances, &st);
        static const char *const states[] = {"allocated", "free"};
        const uint64_t addresses[] = {st.addresses_allocated, st.addresses_free};
        static const char *const steps[] = {"tap", "link", "nft", "dnsmasq"};
        _Static_assert(ELEMENTSOF(steps) == ELEMENTSOF(st.errors), "one label per NetStep");
        int r = write_labelled(w,
                               &(Family){"vgpud_network_addresses", METRIC_GAUGE,
                                         "Addresses of the NAT subnet by state."},
                               "state", states, addresses, ELEMENTSOF(states));
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_network_dnsmasq_up", METRIC_GAUGE,
                                           "1 while the NAT network's dnsmasq runs."},
                                 st.dnsmasq_up ? 1 : 0);
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_network_dnsmasq_restarts_total", METRIC_COUNTER,
                                           "Restarts of dnsmasq after it exited or failed to "
                                           "start."},
                                 st.dnsmasq_restarts);
        if (r >= 0)
                r = write_labelled(w,
                                   &(Family){"vgpud_network_errors_total", METRIC_COUNTER,
                                             "Network failures by step."},
                                   "step", steps, st.errors, ELEMENTSOF(steps));
        return r;
}

/* vgpud_http_requests_total, with its fixed statuses even before the listeners exist. */
static int write_http(MetricsWriter *w, const ApiContext *ctx)
{
        if (ctx->http)
                return http_server_write_metrics(ctx->http, w);
        static const char *const codes[] = {"200", "201", "204", "400", "401", "404", "405",
                                            "409", "413", "415", "500", "501", "503"};
        _Static_assert(ELEMENTSOF(codes) <= ELEMENTSOF(zero), "one zero per code");
        return write_labelled(w,
                              &(Family){"vgpud_http_requests_total", METRIC_COUNTER,
                                        "HTTP responses by status code."},
                              "code", codes, zero, ELEMENTSOF(codes));
}

/*
 * FLEET-5's families, with every result from start-up (MET-3), while the sync is configured;
 * without placement.url they are absent like the rest of SPEC §18.
 */
static int write_placement(MetricsWriter *w, const ApiContext *ctx)
{
        const FleetSyncStats *fs = ctx->fleet;
        if (!fs)
                return 0;
        const char *results[_FLEET_RESULT_MAX];
        for (size_t k = 0; k < _FLEET_RESULT_MAX; k++)
                results[k] = fleet_result_to_string(k);
        int r = write_labelled(w,
                               &(Family){"vgpud_placement_sync_total", METRIC_COUNTER,
                                         "Placement sync runs by outcome (ok, error) and "
                                         "generation conflicts met (conflict)."},
                               "result", results, fs->sync_total, ELEMENTSOF(results));
        if (r >= 0)
                r = metrics_family(w, "vgpud_placement_last_sync_timestamp_seconds", METRIC_GAUGE,
                                   "When the last Placement sync that converged ended (0: none "
                                   "yet).");
        if (r >= 0)
                r = metrics_sample_double(w,
                                          timestamp_is_zero(fs->last_ok)
                                              ? 0.0
                                              : (double)fs->last_ok.sec +
                                                    (double)fs->last_ok.nsec / 1e9,
                                          NULL);
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_placement_up", METRIC_GAUGE,
                                           "1 while the last exchange with Placement succeeded."},
                                 fs->up ? 1 : 0);
        /* FLEET-6: an allocation nothing here names, deleted after placement.orphan_grace. */
        if (r >= 0)
                r = write_single(w,
                                 &(Family){"vgpud_placement_orphan_allocations_deleted_total",
                                           METRIC_COUNTER,
                                           "Placement allocations against this host that no "
                                           "local instance named, deleted by the orphan audit."},
                                 fs->orphans_deleted);
        return r;
}

int api_metrics_gauges_text(const ApiSnapshot *snap, char **ret, size_t *ret_size)
{
        _cleanup_metrics_writer_ MetricsWriter *w = NULL;
        int r = metrics_writer_new(&w);
        if (r < 0)
                return r;
        (void)write_resources(w, snap);
        return metrics_writer_finish(w, ret, ret_size);
}

int api_metrics_counters_text(const ApiContext *ctx, char **ret, size_t *ret_size)
{
        _cleanup_metrics_writer_ MetricsWriter *w = NULL;
        int r = metrics_writer_new(&w);
        if (r < 0)
                return r;

        /* Errors are sticky in the writer: one check at the end covers every step. The families
         * differ from the gauges', so the two texts make one exposition. */
        (void)write_nvml(w, ctx);
        (void)write_instances(w, ctx);
        (void)write_network(w, ctx);
        (void)write_http(w, ctx);
        (void)write_placement(w, ctx);
        if (metrics_family(w, "vgpud_build_info", METRIC_GAUGE,
                           "Version and commit of this vgpud; always 1.") >= 0)
                (void)metrics_sample_u64(w, 1, "version", ctx->version ? ctx->version : "",
                                         "commit", ctx->commit ? ctx->commit : "", NULL);
        return metrics_writer_finish(w, ret, ret_size);
}
