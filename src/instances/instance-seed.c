/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * SEED-2's step of create and start: the instance's cloud-init seed, rendered from the record
 * (cloud_init as given, the host name, the NIC's facts) and written to <id>/seed.iso on the
 * disk pool, before every spawn, since the address or the keys may have changed since the last
 * one. The spawn opens the file by descriptor (instance-create.c).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "instances/instance-internal.h"

/* What the worker renders from: copies, since the loop goes on meanwhile. */
typedef struct SeedJob {
        int instances_dirfd;
        char id[INSTANCE_ID_LEN + 1];
        char *hostname;
        SeedCloudInit cloud_init;
        InstanceNetwork network;
        char *vendor_data_file; /* NULL: none configured */
} SeedJob;

static void seed_job_free(void *data)
{
        SeedJob *j = data;
        free(j->hostname);
        seed_cloud_init_done(&j->cloud_init);
        instance_network_done(&j->network);
        free(j->vendor_data_file);
        free(j);
}

/* SEED-3's view of the record's NIC; a record without one (or of an earlier shape) has none. */
static SeedNetwork seed_network(const InstanceNetwork *n)
{
        SeedNetwork s = {.mode = SEED_NETWORK_NONE};
        if (n->mode != INSTANCE_NETWORK_NAT && n->mode != INSTANCE_NETWORK_BRIDGE)
                return s;
        s.mode = n->mode == INSTANCE_NETWORK_NAT ? SEED_NETWORK_NAT : SEED_NETWORK_BRIDGE;
        s.mac = n->mac;
        s.ip = n->ip;
        s.prefix = n->prefix;
        s.gateway = n->gateway;
        s.dns = n->dns;
        return s;
}

static int seed_job_run(void *data, char **error)
{
        SeedJob *j = data;
        _cleanup_free_ char *vendor_data = NULL;
        /* Read at every seed, so that an operator's new licence token reaches the next start. */
        if (j->vendor_data_file) {
                int r = seed_read_vendor_data(j->vendor_data_file, &vendor_data, error);
                if (r < 0)
                        return error_prefix(error, r, "cloud_init.vendor_data_file");
        }
        const SeedInput in = {
            .instance_id = j->id,
            .hostname = j->hostname,
            .cloud_init = &j->cloud_init,
            .network = seed_network(&j->network),
            .vendor_data = vendor_data,
        };
        _cleanup_(seed_files_done) SeedFiles files = {0};
        int r = seed_render(&in, &files, error);
        if (r < 0)
                return r;
        _cleanup_close_ int dfd =
            openat(j->instances_dirfd, j->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return error_set(error, -errno, "open instance directory %s: %m", j->id);
        return seed_iso_write_at(dfd, INSTANCE_SEED_FILE, &files, error);
}

static void seed_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "write cloud-init seed");
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void seed_run(Op *op)
{
        const InstanceRecord *rec = &op->i->rec;
        if (!instance_record_wants_seed(rec)) {
                step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
                return;
        }
        const char *vendor = op->m->config->cloud_init.vendor_data_file;
        SeedJob *j = calloc(1, sizeof *j);
        if (!j) {
                step_done(op, -ENOMEM, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        j->instances_dirfd = op->m->cfg.instances_dirfd;
        snprintf(j->id, sizeof j->id, "%s", rec->id);
        /* SEED-1: the host name defaults to the instance name. */
        const char *hostname = rec->cloud_init.hostname ? rec->cloud_init.hostname : rec->name;
        if (!(j->hostname = strdup(hostname)) ||
            seed_cloud_init_copy(&rec->cloud_init, &j->cloud_init) < 0 ||
            instance_network_copy(&rec->network, &j->network) < 0 ||
            (vendor && *vendor && !(j->vendor_data_file = strdup(vendor)))) {
                seed_job_free(j);
                step_done(op, -ENOMEM, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        op_job_then(op, seed_job_run, j, seed_job_free, seed_written);
}

/*
 * No undo: a failed create removes the instance's directory with the seed in it (the Creating
 * record's undo), and a failed start leaves a whole seed that the next start writes again.
 */
const Step instance_step_seed = {.name = "seed", .run = seed_run};
