/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Create bodies (REL-5, API-9, INST-4, INST-5, INST-6, INST-7). Invariants beyond "no crash": a
 * refused body gets a one-line message; an accepted one satisfies INST-4, INST-5, INST-6's form,
 * checked here apart from the parser; and a record made of it encodes, so that whatever a create
 * accepts can be stored.
 */
#include "instances/instances.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* INST-4's ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$, spelled out. */
static bool name_ok(const char *s)
{
        static const char alnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
        size_t n = strlen(s);
        return n >= 1 && n <= 63 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n &&
               strchr(alnum, s[0]) && strchr(alnum, s[n - 1]);
}

/* INST-6's form: absolute, at most 4096 bytes, no "." or ".." component. */
static bool path_ok(const char *p)
{
        if (!p)
                return true;
        if (p[0] != '/' || strlen(p) > 4096)
                return false;
        _cleanup_free_ char *copy = strdup(p);
        if (!copy)
                abort();
        char *save = NULL;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save))
                if (strcmp(c, ".") == 0 || strcmp(c, "..") == 0)
                        return false;
        return true;
}

static bool spec_ok(const InstanceSpec *s)
{
        const InstanceBoot *b = &s->boot;
        if (!s->name || !name_ok(s->name))
                return false;
        if (s->vcpus < 1 || s->vcpus > 256 || s->memory_mb < 128 || s->memory_mb > 1048576)
                return false;
        if (!path_ok(b->kernel) || !path_ok(b->initrd) || !path_ok(b->disk))
                return false;
        if (b->cmdline && (strlen(b->cmdline) > 4096 || strchr(b->cmdline, '\n')))
                return false;
        if (!b->kernel && !b->disk)
                return false;
        if (s->profile) {
                size_t n = strlen(s->profile);
                if (n < 1 || n > 256)
                        return false;
                for (size_t i = 0; i < n; i++)
                        if ((unsigned char)s->profile[i] < 0x20 ||
                            (unsigned char)s->profile[i] > 0x7e)
                                return false;
        }
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_(instance_spec_done) InstanceSpec spec = {0};
        _cleanup_free_ char *error = NULL, *out = NULL;

        if (instance_spec_from_json((const char *)data, size, &spec, &error) < 0) {
                if (!error || strchr(error, '\n'))
                        abort();
                return 0;
        }
        if (!spec_ok(&spec))
                abort();

        /* The record a create writes first (INST-12), borrowing the spec's strings. */
        InstanceRecord rec = {
            .id = "k3x9q2m8v1c4z7n5b0wd",
            .name = spec.name,
            .state = INSTANCE_CREATING,
            .created_at = {.sec = 1788379683},
            .boot = spec.boot,
            .vcpus = spec.vcpus,
            .memory_mb = spec.memory_mb,
            .gpu = {.profile = spec.profile, .claimed_at = {.sec = TIMESTAMP_ZERO_SEC}},
        };
        size_t n;
        if (instance_record_to_json(&rec, &out, &n) < 0)
                abort();
        return 0;
}
