/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Manager's Placement side (SPEC §18): the FleetSync, fed from the one snapshot that
 * /resources shows (api_snapshot_build(), MET-4), so that Placement is told what a local claim
 * would see. Off unless placement.url is set.
 */
#include <unistd.h>

#include "manager.h"

/* FNV-1a over the state key's parts: any move of a source's generation moves the hash. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++) {
                h ^= b[i];
                h *= 0x100000001b3ULL;
        }
        return h;
}

/* What every figure of FLEET-3/4 is read from: the API's view key (the tracker's, health
 * store's, NVML cache's, pool's, Claimer's and instances' generations and the
 * placement_disabled_reason); drains move the health store's generation; and the ready images
 * (DISK-12). */
static uint64_t fleet_state_key(void *userdata)
{
        Manager *m = userdata;
        ApiViewKey k;
        uint64_t h = 0xcbf29ce484222325ULL;
        if (api_view_key_read(&m->api, &k) < 0)
                return h ^ (uint64_t)manager_now(); /* cannot tell: recompute */
        h = fnv(h, k.source, sizeof k.source);
        h = fnv(h, k.generation, sizeof k.generation);
        if (k.disabled_reason)
                h = fnv(h, k.disabled_reason, strlen(k.disabled_reason));
        api_view_key_done(&k);
        /* DISK-12: the ready images' names, each with its end. */
        const Image *const *images = NULL;
        size_t n = m->images ? image_store_list(m->images, &images) : 0;
        for (size_t i = 0; i < n; i++)
                if (images[i]->state == IMAGE_STATE_READY)
                        h = fnv(h, images[i]->name, strlen(images[i]->name) + 1);
        return h;
}

/* FLEET-3: a VF claimed for an instance with a Placement consumer is in Placement's usage
 * already, so it is not reserved as well. */
static bool fleet_has_consumer(void *userdata, const char *vf)
{
        Manager *m = userdata;
        const InstanceRecord *r =
            m->instances ? instance_manager_find_claim(m->instances, vf) : NULL;
        return r && r->placement.consumer;
}

/* FLEET-6: every consumer a local record names, in any state; the audit never deletes them. */
static int fleet_consumers(void *userdata, char ***ret)
{
        Manager *m = userdata;
        const InstanceRecord *const *list = NULL;
        size_t n = m->instances ? instance_manager_list(m->instances, &list) : 0;
        _cleanup_strv_free_ char **out = NULL;
        for (size_t i = 0; i < n; i++)
                if (list[i]->placement.consumer && strv_push(&out, list[i]->placement.consumer) < 0)
                        return -ENOMEM;
        *ret = TAKE_PTR(out);
        return 0;
}

void manager_fleet_consumer_released(void *userdata, const char *consumer)
{
        Manager *m = userdata;
        if (!m->fleet)
                return; /* not in a fleet: the create key is refused there anyway */
        int r = fleet_sync_delete_consumer(m->fleet, consumer);
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r,
                         "cannot queue the deletion of a placement allocation", "consumer",
                         consumer, "fallback", "the orphan audit", NULL);
}

static int fleet_compute(void *userdata, bool stopping, FleetWanted **ret)
{
        Manager *m = userdata;
        _cleanup_api_snapshot_ ApiSnapshot *snap = NULL;
        _cleanup_fleet_host_snapshot_ FleetHostSnapshot *in = NULL;

        int r = api_snapshot_build(&m->api, &snap);
        if (r < 0)
                return r;
        FleetHostSources src = {
            .host_name = m->fleet_host_name,
            .host = snap->view ? api_host(&m->api) : NULL,
            .snapshot = snap->view ? &snap->view->snapshot : NULL,
            .health = m->health,
            .nvml = m->nvml,
            .placement_disabled = snap->placement_disabled_reason != NULL,
            .stopping = stopping,
            .has_consumer = fleet_has_consumer,
            .userdata = m,
        };
        r = fleet_host_snapshot_build(&src, &in);
        if (r < 0)
                return r;
        /* DISK-12: the ready images, whose names the store keeps while this runs. */
        const Image *const *images = NULL;
        size_t n = m->images ? image_store_list(m->images, &images) : 0;
        _cleanup_free_ const char **names = calloc(n ? n : 1, sizeof *names);
        if (!names)
                return -ENOMEM;
        size_t n_ready = 0;
        for (size_t k = 0; k < n; k++)
                if (images[k]->state == IMAGE_STATE_READY)
                        names[n_ready++] = images[k]->name;
        in->input.images = names;
        in->input.n_images = n_ready;
        return fleet_wanted_compute(&in->input, ret);
}

static void fleet_stopped(void *userdata)
{
        manager_maybe_finish_stop(userdata);
}

int manager_fleet_setup(Manager *m, char **error)
{
        const ConfigPlacement *pc = &m->config.placement;
        _cleanup_free_ char *secret = NULL;
        int r;

        if (!*pc->url)
                return 0;

        if (*pc->host_name)
                m->fleet_host_name = strdup(pc->host_name);
        else {
                char name[FLEET_HOST_NAME_MAX + 2] = "";
                if (gethostname(name, sizeof name - 1) < 0) {
                        r = negative_errno();
                        return error_set(error, r, "placement.host_name: read the host name: %s",
                                         strerror(-r));
                }
                m->fleet_host_name = strdup(name);
        }
        if (!m->fleet_host_name)
                return error_set_oom(error);
        if (!fleet_host_name_is_valid(m->fleet_host_name))
                return error_set(error, -EINVAL,
                                 "placement.host_name: the kernel host name \"%s\" is no valid "
                                 "provider name; set placement.host_name",
                                 m->fleet_host_name);

        if (pc->auth == CONFIG_PLACEMENT_AUTH_KEYSTONE) {
                r = fleet_read_secret_file(pc->keystone.application_credential_secret_file, &secret,
                                           error);
                if (r < 0)
                        return r;
        }

        FleetSyncConfig fc = {
            .url = pc->url,
            .auth = pc->auth == CONFIG_PLACEMENT_AUTH_KEYSTONE ? FLEET_AUTH_KEYSTONE
                                                               : FLEET_AUTH_NOAUTH,
            .keystone_url = pc->keystone.auth_url,
            .credential_id = pc->keystone.application_credential_id,
            .credential_secret = secret,
            .interval = pc->sync_interval,
            .state_key = fleet_state_key,
            .compute = fleet_compute,
            .consumers = fleet_consumers,
            .orphan_grace = pc->orphan_grace,
            .stopped = fleet_stopped,
            .userdata = m,
        };
        r = fleet_sync_new(&fc, &m->fleet);
        if (secret)
                explicit_bzero(secret, strlen(secret));
        if (r < 0)
                return error_set(error, r, "set up the placement sync: %s", strerror(-r));
        m->api.fleet = fleet_sync_get_stats(m->fleet);
        return 0;
}

void manager_fleet_start(Manager *m)
{
        if (!m->fleet)
                return;
        int r = fleet_sync_attach_event(m->fleet, m->event);
        if (r < 0)
                log_error_errno(r, "start the placement sync: %m");
        else
                log_line(LOG_LEVEL_INFO, 0, "placement sync started", "url",
                         m->config.placement.url, "host_name", m->fleet_host_name, NULL);
}

void manager_fleet_free(Manager *m)
{
        m->api.fleet = NULL;
        m->fleet = fleet_sync_free(m->fleet);
        free(m->fleet_host_name);
        m->fleet_host_name = NULL;
}
