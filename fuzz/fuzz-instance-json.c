/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * instance.json (REL-5, INST-2). Invariants beyond "no crash": a refused record gets a one-line
 * message; an accepted record keeps INST-3, INST-4, INST-5 and a whole claim (checked here apart
 * from the parser); it encodes, its encoding parses again and encodes to the same bytes, and a copy
 * of it encodes to those bytes too.
 */
#include "instances/instances.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool holds_invariants(const InstanceRecord *r)
{
        const InstanceGpu *g = &r->gpu;
        const InstanceHypervisor *h = &r->hypervisor;
        bool claimed = g->device_path != NULL;
        bool mdev = g->framework && strcmp(g->framework, "mdev") == 0;

        if (strlen(r->id) != INSTANCE_ID_LEN ||
            strspn(r->id, "abcdefghijklmnopqrstuvwxyz0123456789") != INSTANCE_ID_LEN)
                return false;
        if (!r->name || !instance_name_is_valid(r->name) || !instance_state_to_string(r->state))
                return false;
        if (r->vcpus < INSTANCE_VCPUS_MIN || r->vcpus > INSTANCE_VCPUS_MAX ||
            r->memory_mb < INSTANCE_MEMORY_MB_MIN || r->memory_mb > INSTANCE_MEMORY_MB_MAX)
                return false;
        if (!r->boot.kernel && !r->boot.disk)
                return false;
        if (r->boot.cmdline &&
            (strlen(r->boot.cmdline) > INSTANCE_CMDLINE_MAX || strchr(r->boot.cmdline, '\n')))
                return false;
        if (timestamp_is_zero(r->created_at) || (r->error && !r->error[0]))
                return false;
        /* A claim is whole or absent, and belongs to a profile. */
        if (claimed != !!g->framework || claimed == timestamp_is_zero(g->claimed_at) ||
            (claimed && !g->profile) || mdev != !!g->mdev_uuid)
                return false;
        if ((h->pid != 0) != !!h->boot_id || h->pid < 0)
                return false;
        /* The device fields stay within their bounds (INST-2, DISK-8, NET-1, SEED-1). */
        if (r->n_volumes > INSTANCE_VOLUMES_MAX || r->network.n_ports > INSTANCE_PORTS_MAX ||
            strv_length(r->network.dns) > INSTANCE_DNS_MAX ||
            strv_length(r->cloud_init.ssh_authorized_keys) > SEED_SSH_KEYS_MAX)
                return false;
        if (r->disk.image && (r->disk.size_gb < 1 || r->disk.size_gb > INSTANCE_DISK_GB_MAX))
                return false;
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0}, again = {0}, copy = {0};
        _cleanup_free_ char *error = NULL, *out = NULL, *out2 = NULL, *out3 = NULL;
        size_t n, n2, n3;

        if (instance_record_from_json((const char *)data, size, &rec, &error) < 0) {
                if (!error || strchr(error, '\n'))
                        abort();
                return 0;
        }
        if (!holds_invariants(&rec))
                abort();
        if (instance_record_to_json(&rec, &out, &n) < 0)
                abort();
        if (instance_record_from_json(out, n, &again, NULL) < 0)
                abort();
        if (instance_record_to_json(&again, &out2, &n2) < 0 || n2 != n || memcmp(out, out2, n) != 0)
                abort();
        if (instance_record_copy(&again, &copy) < 0 ||
            instance_record_to_json(&copy, &out3, &n3) < 0 || n3 != n || memcmp(out, out3, n) != 0)
                abort();
        return 0;
}
