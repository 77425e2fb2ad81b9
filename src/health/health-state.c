/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The health state as data: parse (HEALTH-1, HEALTH-2, HEALTH-3, HEALTH-4, HEALTH-5, HEALTH-6),
 * canonical format (HEALTH-4), and the record helpers the requests are built from. No I/O here
 * except health_state_load_at().
 */
#include <fcntl.h>
#include <jansson.h>

#include "base/json-util.h"
#include "health-internal.h"

static const Timestamp timestamp_zero = {.sec = TIMESTAMP_ZERO_SEC};

const char *health_source_to_string(HealthSource s)
{
        return s == HEALTH_SOURCE_OPERATOR ? "operator" : "auto";
}

/* ---- lifetime ------------------------------------------------------------------------------ */

static void failure_done(HealthFailure *f)
{
        free(f->instance_id);
        free(f->assigned_at);
}

static void record_done(HealthRecord *r)
{
        for (size_t i = 0; i < r->n_failures; i++)
                failure_done(&r->failures[i]);
        free(r->failures);
        free(r->reason);
}

int health_state_new(HealthState **ret)
{
        HealthState *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->breaker_opened_at = timestamp_zero;
        s->driver_changed_at = timestamp_zero;
        s->breaker_floor = timestamp_zero;
        *ret = s;
        return 0;
}

HealthState *health_state_free(HealthState *s)
{
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_records; i++)
                record_done(&s->records[i]);
        free(s->records);
        for (size_t i = 0; i < s->n_drains; i++)
                free(s->drains[i].reason);
        free(s->drains);
        free(s->breaker_reason);
        free(s->driver_version);
        free(s);
        return NULL;
}

int health_set_string(char **p, const char *s)
{
        char *copy = NULL;
        if (s && !(copy = strdup(s)))
                return -ENOMEM;
        free(*p);
        *p = copy;
        return 0;
}

static int record_copy(const HealthRecord *from, HealthRecord *to)
{
        HealthRecord r = *from;
        r.failures = NULL;
        r.n_failures = 0;
        r.reason = NULL;

        if (from->n_failures > 0) {
                r.failures = calloc(from->n_failures, sizeof *r.failures);
                if (!r.failures)
                        return -ENOMEM;
        }
        for (; r.n_failures < from->n_failures; r.n_failures++) {
                const HealthFailure *f = &from->failures[r.n_failures];
                HealthFailure *t = &r.failures[r.n_failures];
                t->reported_at = f->reported_at;
                if (strdup_nullable(f->instance_id, &t->instance_id) < 0 ||
                    strdup_nullable(f->assigned_at, &t->assigned_at) < 0) {
                        failure_done(t);
                        record_done(&r);
                        return -ENOMEM;
                }
        }
        if (strdup_nullable(from->reason, &r.reason) < 0) {
                record_done(&r);
                return -ENOMEM;
        }
        *to = r;
        return 0;
}

int health_state_copy(const HealthState *s, HealthState **ret)
{
        _cleanup_health_state_ HealthState *c = NULL;
        int r = health_state_new(&c);
        if (r < 0)
                return r;

        if (s->n_records > 0) {
                c->records = calloc(s->n_records, sizeof *c->records);
                if (!c->records)
                        return -ENOMEM;
        }
        for (; c->n_records < s->n_records; c->n_records++) {
                r = record_copy(&s->records[c->n_records], &c->records[c->n_records]);
                if (r < 0)
                        return r;
        }
        if (s->n_drains > 0) {
                c->drains = calloc(s->n_drains, sizeof *c->drains);
                if (!c->drains)
                        return -ENOMEM;
        }
        for (; c->n_drains < s->n_drains; c->n_drains++) {
                HealthDrain *d = &c->drains[c->n_drains];
                *d = s->drains[c->n_drains];
                d->reason = NULL;
                if (strdup_nullable(s->drains[c->n_drains].reason, &d->reason) < 0)
                        return -ENOMEM;
        }
        c->breaker_open = s->breaker_open;
        c->breaker_opened_at = s->breaker_opened_at;
        c->driver_changed_at = s->driver_changed_at;
        c->breaker_floor = s->breaker_floor;
        if (strdup_nullable(s->breaker_reason, &c->breaker_reason) < 0 ||
            strdup_nullable(s->driver_version, &c->driver_version) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(c);
        return 0;
}

/* ---- records ------------------------------------------------------------------------------- */

/*
 * Records and drains are sorted by their address, an inline PCI address at offset in each
 * element: the index of address, or where it would be inserted, as ~index.
 */
static ssize_t address_search(const void *array, size_t n, size_t size, size_t offset,
                              const char *address)
{
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp((const char *)array + mid * size + offset, address);
                if (c == 0)
                        return (ssize_t)mid;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return ~(ssize_t)lo;
}

static ssize_t record_search(const HealthState *s, const char *vf_address)
{
        return address_search(s->records, s->n_records, sizeof *s->records,
                              offsetof(HealthRecord, vf_address), vf_address);
}

const HealthRecord *health_state_find(const HealthState *s, const char *vf_address)
{
        ssize_t i = record_search(s, vf_address);
        return i >= 0 ? &s->records[i] : NULL;
}

static ssize_t drain_search(const HealthState *s, const char *gpu)
{
        return address_search(s->drains, s->n_drains, sizeof *s->drains, offsetof(HealthDrain, gpu),
                              gpu);
}

const HealthDrain *health_state_find_drain(const HealthState *s, const char *gpu)
{
        ssize_t i = gpu ? drain_search(s, gpu) : -1;
        return i >= 0 ? &s->drains[i] : NULL;
}

int health_state_set_drain(HealthState *s, const char *gpu, const char *reason, Timestamp at)
{
        ssize_t i = drain_search(s, gpu);
        if (!reason) {
                if (i < 0)
                        return 0;
                free(s->drains[i].reason);
                memmove(&s->drains[i], &s->drains[i + 1],
                        (s->n_drains - (size_t)i - 1) * sizeof *s->drains);
                s->n_drains--;
                return 1;
        }
        if (i >= 0) {
                if (streq(s->drains[i].reason, reason))
                        return 0;
                return health_set_string(&s->drains[i].reason, reason) < 0 ? -ENOMEM : 1;
        }
        if (strlen(gpu) >= PCI_ADDRESS_STRLEN)
                return -EINVAL;
        _cleanup_free_ char *copy = strdup(reason);
        if (!copy)
                return -ENOMEM;
        size_t at_index = (size_t)~i;
        HealthDrain *grown = realloc(s->drains, (s->n_drains + 1) * sizeof *grown);
        if (!grown)
                return -ENOMEM;
        s->drains = grown;
        memmove(&grown[at_index + 1], &grown[at_index], (s->n_drains - at_index) * sizeof *grown);
        grown[at_index] = (HealthDrain){.reason = TAKE_PTR(copy), .drained_at = at};
        strcpy(grown[at_index].gpu, gpu);
        s->n_drains++;
        return 1;
}

HealthRecord *health_state_find_mutable(HealthState *s, const char *vf_address)
{
        ssize_t i = record_search(s, vf_address);
        return i >= 0 ? &s->records[i] : NULL;
}

int health_state_ensure_record(HealthState *s, const char *vf_address, HealthRecord **ret)
{
        ssize_t i = record_search(s, vf_address);
        if (i >= 0) {
                *ret = &s->records[i];
                return 0;
        }
        if (strlen(vf_address) >= PCI_ADDRESS_STRLEN)
                return -EINVAL;

        size_t at = (size_t)~i;
        HealthRecord *grown = realloc(s->records, (s->n_records + 1) * sizeof *grown);
        if (!grown)
                return -ENOMEM;
        s->records = grown;
        memmove(&grown[at + 1], &grown[at], (s->n_records - at) * sizeof *grown);
        grown[at] = (HealthRecord){.quarantined_at = timestamp_zero};
        strcpy(grown[at].vf_address, vf_address);
        s->n_records++;
        *ret = &grown[at];
        return 0;
}

void health_state_remove_record(HealthState *s, HealthRecord *r)
{
        size_t at = (size_t)(r - s->records);
        record_done(r);
        memmove(r, r + 1, (s->n_records - at - 1) * sizeof *r);
        s->n_records--;
}

ssize_t health_record_find_failure(const HealthRecord *r, const char *instance_id,
                                   const char *assigned_at)
{
        for (size_t i = 0; i < r->n_failures; i++)
                if (streq(r->failures[i].instance_id, instance_id) &&
                    streq(r->failures[i].assigned_at, assigned_at))
                        return (ssize_t)i;
        return -ENOENT;
}

void health_record_drop_oldest(HealthRecord *r, size_t n)
{
        if (n > r->n_failures)
                n = r->n_failures;
        for (size_t i = 0; i < n; i++)
                failure_done(&r->failures[i]);
        memmove(r->failures, r->failures + n, (r->n_failures - n) * sizeof *r->failures);
        r->n_failures -= n;
}

void health_record_drop_since(HealthRecord *r, Timestamp since)
{
        size_t kept = 0;
        for (size_t i = 0; i < r->n_failures; i++) {
                if (timestamp_compare(r->failures[i].reported_at, since) >= 0)
                        failure_done(&r->failures[i]);
                else
                        r->failures[kept++] = r->failures[i];
        }
        r->n_failures = kept;
}

int health_record_append_failure(HealthRecord *r, const char *instance_id, const char *assigned_at,
                                 Timestamp reported_at)
{
        _cleanup_free_ char *id = strdup(instance_id), *at = strdup(assigned_at);
        if (!id || !at)
                return -ENOMEM;

        if (r->n_failures >= HEALTH_FAILURES_MAX)
                health_record_drop_oldest(r, r->n_failures - HEALTH_FAILURES_MAX + 1);
        HealthFailure *grown = realloc(r->failures, (r->n_failures + 1) * sizeof *grown);
        if (!grown)
                return -ENOMEM;
        r->failures = grown;
        grown[r->n_failures++] = (HealthFailure){
            .instance_id = TAKE_PTR(id),
            .assigned_at = TAKE_PTR(at),
            .reported_at = reported_at,
        };
        return 0;
}

void health_record_unquarantine(HealthRecord *r)
{
        r->quarantined = false;
        r->quarantined_at = timestamp_zero;
        r->source = HEALTH_SOURCE_AUTO;
        r->source_implicit = false;
        free(r->reason);
        r->reason = NULL;
}

/* ---- parse (HEALTH-1, HEALTH-2, HEALTH-3, HEALTH-4, HEALTH-5, HEALTH-6) --------------------- */

#define UNMARSHAL_PREFIX "unmarshal VF health state: "
#define VALIDATE_PREFIX "validate VF health state"

#define unmarshal_error(error, ...) error_set(error, -EINVAL, UNMARSHAL_PREFIX __VA_ARGS__)

/* "unknown key "<k>"" after the given message prefix. */
static int unknown_key_error(char **error, const char *prefix, const char *scope, const char *key)
{
        _cleanup_free_ char *full = NULL;
        if (strprintf(&full, "%s%s", scope, key) < 0)
                return error_set_oom(error);
        _cleanup_free_ char *q = escape_text(full, strlen(full), SIZE_MAX, ESCAPE_QUOTE);
        if (!q)
                return error_set_oom(error);
        return error_set(error, -EINVAL, "%s: unknown key %s", prefix, q);
}

/* JSON nesting beyond max levels (GEN-6), found before jansson builds anything. */

static bool string_or_absent(json_t *o, const char *key)
{
        json_t *v = json_object_get(o, key);
        return !v || json_is_string(v);
}

/* A valid, non-zero timestamp (GEN-9). */
static bool json_timestamp(json_t *v, Timestamp *ret)
{
        Timestamp t;
        if (!json_is_string(v) || parse_timestamp(json_string_value(v), &t) < 0 ||
            timestamp_is_zero(t))
                return false;
        *ret = t;
        return true;
}

static const char *json_string_or_empty(json_t *o, const char *key)
{
        json_t *v = json_object_get(o, key);
        return v ? json_string_value(v) : "";
}

/*
 * Type errors come first, for the whole file, as a decoder would find them; only then is the
 * content validated. Timestamps are not type-checked here: a timestamp that is not a string is
 * simply not a valid timestamp, which HEALTH-5 gives its own error for.
 */
static int check_types(json_t *root, char **error)
{
        json_t *v = json_object_get(root, "version");
        if (v && !json_is_integer(v))
                return unmarshal_error(error, "version: expected an integer");
        v = json_object_get(root, "breaker");
        if (v && !json_is_object(v))
                return unmarshal_error(error, "breaker: expected an object");
        if (v && !string_or_absent(v, "reason"))
                return unmarshal_error(error, "breaker.reason: expected a string");
        if (!string_or_absent(root, "driver_version"))
                return unmarshal_error(error, "driver_version: expected a string");
        v = json_object_get(root, "drains");
        if (v && !json_is_array(v))
                return unmarshal_error(error, "drains: expected an array");
        json_t *d;
        size_t di;
        json_array_foreach (v, di, d) {
                if (!json_is_object(d))
                        return unmarshal_error(error, "drains[%zu]: expected an object", di);
                if (!string_or_absent(d, "gpu"))
                        return unmarshal_error(error, "drains[%zu].gpu: expected a string", di);
                if (!string_or_absent(d, "reason"))
                        return unmarshal_error(error, "drains[%zu].reason: expected a string", di);
        }

        json_t *records = json_object_get(root, "records"), *rec;
        size_t i;
        if (!json_is_array(records))
                return 0; /* a validation error, reported after the version check */
        json_array_foreach (records, i, rec) {
                static const char *const strings[] = {"vf_address", "source", "reason"};
                if (!json_is_object(rec))
                        return unmarshal_error(error, "records[%zu]: expected an object", i);
                for (size_t k = 0; k < ELEMENTSOF(strings); k++)
                        if (!string_or_absent(rec, strings[k]))
                                return unmarshal_error(error, "records[%zu].%s: expected a string",
                                                       i, strings[k]);
                json_t *failures = json_object_get(rec, "failures"), *f;
                size_t j;
                if (!failures)
                        continue;
                if (!json_is_array(failures))
                        return unmarshal_error(error, "records[%zu].failures: expected an array",
                                               i);
                json_array_foreach (failures, j, f) {
                        if (!json_is_object(f))
                                return unmarshal_error(
                                    error, "records[%zu].failures[%zu]: expected an object", i, j);
                        if (!string_or_absent(f, "instance_id"))
                                return unmarshal_error(
                                    error,
                                    "records[%zu].failures[%zu].instance_id: expected a string", i,
                                    j);
                        if (!string_or_absent(f, "assigned_at"))
                                return unmarshal_error(
                                    error,
                                    "records[%zu].failures[%zu].assigned_at: expected a string", i,
                                    j);
                }
        }
        return 0;
}

typedef struct KeyRef {
        const char *a, *b;
        size_t index;
} KeyRef;

static int keyref_compare(const void *x, const void *y)
{
        const KeyRef *p = x, *q = y;
        int c = strcmp(p->a, q->a);
        if (c == 0)
                c = strcmp(p->b, q->b);
        if (c == 0)
                c = p->index < q->index ? -1 : p->index > q->index;
        return c;
}

/*
 * The smallest index whose key already appeared at a smaller index (SIZE_MAX if none), so a
 * sequential check can report the first repeat in file order without quadratic work.
 */
static size_t first_repeat(KeyRef *keys, size_t n)
{
        size_t first = SIZE_MAX;

        qsort(keys, n, sizeof *keys, keyref_compare);
        for (size_t i = 1; i < n; i++)
                if (streq(keys[i - 1].a, keys[i].a) && streq(keys[i - 1].b, keys[i].b) &&
                    keys[i].index < first)
                        first = keys[i].index;
        return first;
}

static int validate_top(json_t *root, HealthState *s, char **error)
{
        static const char *const top_keys[] = {
            "version", "records", "drains", "breaker", "driver_version", "driver_changed_at", NULL};
        static const char *const breaker_keys[] = {"opened_at", "reason", NULL};

        json_t *v = json_object_get(root, "version");
        json_int_t version = v ? json_integer_value(v) : 0;
        if (version != 1)
                return error_set(error, -EINVAL,
                                 VALIDATE_PREFIX ": unsupported version %" JSON_INTEGER_FORMAT,
                                 version);
        if (!json_is_array(json_object_get(root, "records")))
                return error_set(error, -EINVAL, VALIDATE_PREFIX ": expected a records array");
        const char *unknown = json_first_unknown_key(root, top_keys);
        if (unknown)
                return unknown_key_error(error, VALIDATE_PREFIX, "", unknown);

        json_t *breaker = json_object_get(root, "breaker");
        if (breaker) {
                unknown = json_first_unknown_key(breaker, breaker_keys);
                if (unknown)
                        return unknown_key_error(error, VALIDATE_PREFIX, "breaker.", unknown);
                if (!json_timestamp(json_object_get(breaker, "opened_at"), &s->breaker_opened_at))
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX ": missing breaker timestamp");
                const char *reason = json_string_or_empty(breaker, "reason");
                size_t n = strlen(reason);
                if (n < 1 || n > HEALTH_REASON_MAX)
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX ": invalid breaker reason length %zu", n);
                if (health_set_string(&s->breaker_reason, reason) < 0)
                        return error_set_oom(error);
                s->breaker_open = true;
        }

        json_t *version_value = json_object_get(root, "driver_version");
        if (version_value) {
                const char *dv = json_string_value(version_value);
                size_t n = strlen(dv);
                if (n < 1 || n > HEALTH_REASON_MAX)
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX ": invalid driver_version length %zu", n);
                if (health_set_string(&s->driver_version, dv) < 0)
                        return error_set_oom(error);
        }
        json_t *changed = json_object_get(root, "driver_changed_at");
        if (changed) {
                if (!version_value)
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX
                                         ": driver_changed_at without driver_version");
                if (!json_timestamp(changed, &s->driver_changed_at))
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX ": invalid driver_changed_at");
        }
        return 0;
}

static int drain_compare(const void *a, const void *b)
{
        return strcmp(((const HealthDrain *)a)->gpu, ((const HealthDrain *)b)->gpu);
}

/* HEALTH-3, HEALTH-26: the optional "drains" list; a file without it has none. */
static int validate_drains(json_t *drains, HealthState *s, char **error)
{
        static const char *const drain_keys[] = {"gpu", "reason", "drained_at", NULL};
        size_t n = json_array_size(drains);
        if (n == 0)
                return 0;
        s->drains = calloc(n, sizeof *s->drains);
        if (!s->drains)
                return error_set_oom(error);

        json_t *d;
        size_t i;
        json_array_foreach (drains, i, d) {
                const char *unknown = json_first_unknown_key(d, drain_keys);
                if (unknown)
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX " drain %zu: unknown key \"%s\"", i,
                                         unknown);
                const char *gpu = json_string_or_empty(d, "gpu");
                if (!pci_address_is_valid(gpu))
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX " drain %zu: invalid GPU address \"%s\"",
                                         i, gpu);
                for (size_t j = 0; j < s->n_drains; j++)
                        if (streq(s->drains[j].gpu, gpu))
                                return error_set(error, -EINVAL,
                                                 VALIDATE_PREFIX
                                                 " drain %zu: duplicate GPU address \"%s\"",
                                                 i, gpu);
                HealthDrain *out = &s->drains[s->n_drains];
                if (!json_timestamp(json_object_get(d, "drained_at"), &out->drained_at))
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX " drain %zu: missing drain timestamp", i);
                const char *reason = json_string_or_empty(d, "reason");
                size_t len = strlen(reason);
                if (len < 1 || len > HEALTH_REASON_MAX)
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX " drain %zu: invalid reason length %zu", i,
                                         len);
                strcpy(out->gpu, gpu);
                out->reason = strdup(reason);
                if (!out->reason)
                        return error_set_oom(error);
                s->n_drains++;
        }
        qsort(s->drains, s->n_drains, sizeof *s->drains, drain_compare);
        return 0;
}

static int validate_failures(json_t *failures, size_t i, HealthRecord *out, char **error)
{
        static const char *const failure_keys[] = {"instance_id", "assigned_at", "reported_at",
                                                   NULL};
        size_t n = json_array_size(failures);
        if (n == 0)
                return 0;

        _cleanup_free_ KeyRef *keys = calloc(n, sizeof *keys);
        out->failures = calloc(n, sizeof *out->failures);
        if (!keys || !out->failures)
                return error_set_oom(error);
        for (size_t j = 0; j < n; j++) {
                json_t *f = json_array_get(failures, j);
                keys[j] = (KeyRef){json_string_or_empty(f, "instance_id"),
                                   json_string_or_empty(f, "assigned_at"), j};
        }
        size_t repeat = first_repeat(keys, n);

        for (size_t j = 0; j < n; j++) {
                json_t *f = json_array_get(failures, j);
                _cleanup_free_ char *prefix = NULL;
                if (strprintf(&prefix, VALIDATE_PREFIX " record %zu failure %zu", i, j) < 0)
                        return error_set_oom(error);

                const char *unknown = json_first_unknown_key(f, failure_keys);
                if (unknown)
                        return unknown_key_error(error, prefix, "", unknown);

                HealthFailure *t = &out->failures[j];
                if (!json_timestamp(json_object_get(f, "reported_at"), &t->reported_at))
                        return error_set(error, -EINVAL, "%s: missing report timestamp", prefix);

                const char *id = json_string_or_empty(f, "instance_id");
                const char *at = json_string_or_empty(f, "assigned_at");
                if (j == repeat) {
                        _cleanup_free_ char *qid =
                            escape_text(id, strlen(id), SIZE_MAX, ESCAPE_QUOTE);
                        _cleanup_free_ char *qat =
                            escape_text(at, strlen(at), SIZE_MAX, ESCAPE_QUOTE);
                        if (!qid || !qat)
                                return error_set_oom(error);
                        return error_set(error, -EINVAL,
                                         VALIDATE_PREFIX
                                         " record %zu: duplicate failure for instance %s "
                                         "assigned at %s",
                                         i, qid, qat);
                }
                t->instance_id = strdup(id);
                t->assigned_at = strdup(at);
                out->n_failures = j + 1;
                if (!t->instance_id || !t->assigned_at)
                        return error_set_oom(error);
        }
        return 0;
}

static int validate_record(json_t *rec, size_t i, size_t repeated_address, HealthRecord *out,
                           char **error)
{
        static const char *const record_keys[] = {"vf_address", "failures", "quarantined_at",
                                                  "reason",     "source",   NULL};
        _cleanup_free_ char *prefix = NULL;
        if (strprintf(&prefix, VALIDATE_PREFIX " record %zu", i) < 0)
                return error_set_oom(error);

        const char *unknown = json_first_unknown_key(rec, record_keys);
        if (unknown)
                return unknown_key_error(error, prefix, "", unknown);

        const char *address = json_string_or_empty(rec, "vf_address");
        if (!pci_address_is_valid(address)) {
                _cleanup_free_ char *q =
                    escape_text(address, strlen(address), SIZE_MAX, ESCAPE_QUOTE);
                if (!q)
                        return error_set_oom(error);
                return error_set(error, -EINVAL, "%s: invalid VF address %s", prefix, q);
        }
        if (i == repeated_address)
                return error_set(error, -EINVAL, "%s: duplicate VF address \"%s\"", prefix,
                                 address);
        strcpy(out->vf_address, address);

        json_t *quarantined_at = json_object_get(rec, "quarantined_at");
        if (quarantined_at) {
                if (!json_timestamp(quarantined_at, &out->quarantined_at))
                        return error_set(error, -EINVAL, "%s: missing quarantine timestamp",
                                         prefix);
                out->quarantined = true;
        }

        json_t *source = json_object_get(rec, "source");
        if (source) {
                const char *v = json_string_value(source);
                if (streq(v, "auto"))
                        out->source = HEALTH_SOURCE_AUTO;
                else if (streq(v, "operator"))
                        out->source = HEALTH_SOURCE_OPERATOR;
                else {
                        _cleanup_free_ char *q = escape_text(v, strlen(v), SIZE_MAX, ESCAPE_QUOTE);
                        if (!q)
                                return error_set_oom(error);
                        return error_set(error, -EINVAL, "%s: invalid source %s", prefix, q);
                }
                if (!out->quarantined)
                        return error_set(error, -EINVAL, "%s: source without quarantine", prefix);
        }

        json_t *reason = json_object_get(rec, "reason");
        if (reason) {
                size_t n = json_string_length(reason);
                if (!out->quarantined)
                        return error_set(error, -EINVAL, "%s: reason without quarantine", prefix);
                if (n < 1 || n > HEALTH_REASON_MAX)
                        return error_set(error, -EINVAL, "%s: invalid reason length %zu", prefix,
                                         n);
                out->reason = strdup(json_string_value(reason));
                if (!out->reason)
                        return error_set_oom(error);
        }

        json_t *failures = json_object_get(rec, "failures");
        if (failures) {
                int r = validate_failures(failures, i, out, error);
                if (r < 0)
                        return r;
        }

        if (!out->quarantined && out->n_failures == 0)
                return error_set(error, -EINVAL,
                                 "%s: neither quarantined nor any recorded failures", prefix);

        if (out->quarantined && !source) {
                /* HEALTH-3: derived, and remembered as derived so it is not written back. */
                out->source = out->n_failures > 0 ? HEALTH_SOURCE_AUTO : HEALTH_SOURCE_OPERATOR;
                out->source_implicit = true;
        }
        /* HEALTH-4: a hand-written file may hold more; the newest are the ones that matter. */
        if (out->n_failures > HEALTH_FAILURES_MAX)
                health_record_drop_oldest(out, out->n_failures - HEALTH_FAILURES_MAX);
        return 0;
}

static int record_compare(const void *x, const void *y)
{
        const HealthRecord *p = x, *q = y;
        return strcmp(p->vf_address, q->vf_address);
}

static int validate_records(json_t *records, HealthState *s, char **error)
{
        size_t n = json_array_size(records);
        if (n == 0)
                return 0;

        _cleanup_free_ KeyRef *keys = calloc(n, sizeof *keys);
        s->records = calloc(n, sizeof *s->records);
        if (!keys || !s->records)
                return error_set_oom(error);
        for (size_t i = 0; i < n; i++)
                keys[i] =
                    (KeyRef){json_string_or_empty(json_array_get(records, i), "vf_address"), "", i};
        size_t repeat = first_repeat(keys, n);

        for (size_t i = 0; i < n; i++) {
                HealthRecord *out = &s->records[i];
                *out = (HealthRecord){.quarantined_at = timestamp_zero};
                /* Counted before validation, so a half-built record is freed with the state. */
                s->n_records = i + 1;
                int r = validate_record(json_array_get(records, i), i, repeat, out, error);
                if (r < 0)
                        return r;
        }
        qsort(s->records, n, sizeof *s->records, record_compare);
        return 0;
}

int health_state_parse(const char *buf, size_t size, HealthState **ret, char **error)
{
        if (size > HEALTH_FILE_MAX)
                return error_set(error, -EFBIG, UNMARSHAL_PREFIX "file larger than %zu bytes",
                                 HEALTH_FILE_MAX);
        if (json_text_too_deep(buf, size, JSON_DEPTH_MAX))
                return unmarshal_error(error, "nesting deeper than %d levels", JSON_DEPTH_MAX);

        json_error_t jerr;
        json_auto_t *root = json_loadb(buf, size, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                /* jansson quotes the input near the error: keep the message one printable line. */
                for (char *p = jerr.text; *p; p++)
                        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                                *p = '?';
                return unmarshal_error(error, "%s (line %d, column %d)", jerr.text, jerr.line,
                                       jerr.column);
        }
        if (!json_is_object(root))
                return unmarshal_error(error, "expected an object");

        int r = check_types(root, error);
        if (r < 0)
                return r;

        _cleanup_health_state_ HealthState *s = NULL;
        r = health_state_new(&s);
        if (r < 0)
                return error_set_oom(error);
        r = validate_top(root, s, error);
        if (r < 0)
                return r;
        r = validate_records(json_object_get(root, "records"), s, error);
        if (r < 0)
                return r;
        r = validate_drains(json_object_get(root, "drains"), s, error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int health_state_load_at(int dirfd, const char *path, bool own, HealthState **ret, char **error)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;

        int r = own ? read_own_file_at(dirfd, path, HEALTH_FILE_MAX, &buf, &size)
                    : read_file_at(dirfd, path, HEALTH_FILE_MAX, &buf, &size);
        if (r == -EFBIG)
                return error_set(error, r, UNMARSHAL_PREFIX "file larger than %zu bytes",
                                 HEALTH_FILE_MAX);
        if (r < 0)
                return error_set(error, r, "read VF health state: %s", file_strerror(r));
        return health_state_parse(buf, size, ret, error);
}

/* ---- format (HEALTH-4) ---------------------------------------------------------------------
 *
 * Written by hand into one buffer, not built as a jansson tree and dumped: at PERF-3's 200
 * records and 1,000 failures the tree and json_dumps() took about 2 ms per write, more than
 * the write's syncs, renaming and all. The bytes are the ones json_dumps(JSON_INDENT(2)) gave
 * (which are also Go's MarshalIndent with two spaces, so an upstream file round-trips):
 * test-health checks that jansson's own load and dump of the output reproduce it exactly.
 */

typedef struct Emitter {
        char *buf;
        size_t len, cap;
        int r; /* the first failure; every append after it does nothing */
        /* The date of the last timestamp written, "YYYY-MM-DDT" (see emit_timestamp()). */
        bool date_known;
        int64_t date_day;
        size_t date_len;
        char date[TIMESTAMP_STRLEN];
} Emitter;

static bool emit_reserve(Emitter *e, size_t n)
{
        if (e->r < 0)
                return false;
        if (e->cap - e->len >= n)
                return true;
        size_t cap = e->cap ? e->cap : 4096;
        while (cap - e->len < n) {
                if (cap > SIZE_MAX / 2) {
                        e->r = -ENOMEM;
                        return false;
                }
                cap *= 2;
        }
        char *grown = realloc(e->buf, cap);
        if (!grown) {
                e->r = -ENOMEM;
                return false;
        }
        e->buf = grown;
        e->cap = cap;
        return true;
}

static void emit_bytes(Emitter *e, const char *s, size_t n)
{
        if (!emit_reserve(e, n))
                return;
        memcpy(e->buf + e->len, s, n);
        e->len += n;
}

#define emit_literal(e, s) emit_bytes(e, s, sizeof(s) - 1)

/* A line break and depth levels of two-space indentation. */
static void emit_newline(Emitter *e, unsigned depth)
{
        if (!emit_reserve(e, 1 + 2 * (size_t)depth))
                return;
        e->buf[e->len++] = '\n';
        memset(e->buf + e->len, ' ', 2 * (size_t)depth);
        e->len += 2 * (size_t)depth;
}

/*
 * The length of the UTF-8 character at s (n bytes left), or 0 when it is not one by jansson's
 * rules (no overlong forms, no surrogates, nothing above U+10FFFF).
 */
static size_t utf8_char_length(const unsigned char *s, size_t n)
{
        size_t len;
        uint32_t cp, min;

        if (s[0] >= 0xc2 && s[0] <= 0xdf)
                len = 2, cp = s[0] & 0x1f, min = 0x80;
        else if (s[0] >= 0xe0 && s[0] <= 0xef)
                len = 3, cp = s[0] & 0x0f, min = 0x800;
        else if (s[0] >= 0xf0 && s[0] <= 0xf4)
                len = 4, cp = s[0] & 0x07, min = 0x10000;
        else
                return 0;
        if (n < len)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

/*
 * s as a JSON string with jansson's escapes: '"' and '\', and control bytes as \b \f \n \r \t
 * or \u00XX; everything else, UTF-8 included, as it is. Strings come from a parsed file or
 * from checked requests, so they are UTF-8; one that is not fails with -EILSEQ rather than
 * give a file the loader would refuse.
 */
static void emit_string(Emitter *e, const char *s)
{
        static const char hex[] = "0123456789ABCDEF";
        if (!s) {
                /* Not a string jansson could have held either. */
                if (e->r >= 0)
                        e->r = -EINVAL;
                return;
        }
        const unsigned char *p = (const unsigned char *)s;
        size_t n = strlen(s);

        /* The worst case, every byte a \u00XX, so the loop needs no checks. */
        if (n > (SIZE_MAX - 2) / 6 || !emit_reserve(e, 6 * n + 2))
                return;
        char *out = e->buf + e->len;
        *out++ = '"';
        for (size_t i = 0; i < n;) {
                unsigned char c = p[i];
                if (c >= 0x80) {
                        size_t len = utf8_char_length(p + i, n - i);
                        if (len == 0) {
                                e->r = -EILSEQ;
                                return;
                        }
                        memcpy(out, p + i, len);
                        out += len;
                        i += len;
                        continue;
                }
                i++;
                if (c >= 0x20 && c != '"' && c != '\\') {
                        *out++ = (char)c;
                        continue;
                }
                *out++ = '\\';
                switch (c) {
                case '"':
                case '\\':
                        *out++ = (char)c;
                        break;
                case '\b':
                        *out++ = 'b';
                        break;
                case '\f':
                        *out++ = 'f';
                        break;
                case '\n':
                        *out++ = 'n';
                        break;
                case '\r':
                        *out++ = 'r';
                        break;
                case '\t':
                        *out++ = 't';
                        break;
                default:
                        memcpy(out, "u00", 3);
                        out[3] = hex[c >> 4];
                        out[4] = hex[c & 0xf];
                        out += 5;
                }
        }
        *out++ = '"';
        e->len = (size_t)(out - e->buf);
}

/*
 * format_timestamp()'s text, quoted. That is three snprintf()s, and a file holds one timestamp
 * per failure: they were half of the formatting. The timestamps of one day share their date,
 * so the date comes from format_timestamp() once per day and the rest is written here in the
 * same form: hh:mm:ss, the fraction without its trailing zeros, "Z" (test-health compares
 * the two).
 */
static void emit_timestamp(Emitter *e, Timestamp t)
{
        int64_t day = t.sec / 86400, rem = t.sec % 86400;
        if (rem < 0) {
                rem += 86400;
                day--;
        }
        if (!e->date_known || e->date_day != day) {
                char buf[TIMESTAMP_STRLEN];
                const char *sep =
                    strchr(format_timestamp((Timestamp){.sec = t.sec - rem}, buf), 'T');
                if (!sep) {
                        e->r = -EINVAL;
                        return;
                }
                e->date_len = (size_t)(sep - buf) + 1;
                memcpy(e->date, buf, e->date_len);
                e->date_day = day;
                e->date_known = true;
        }

        /* The quotes, the date, "hh:mm:ss", '.' and nine digits at most, 'Z'. */
        if (!emit_reserve(e, e->date_len + 21))
                return;
        char *out = e->buf + e->len;
        *out++ = '"';
        memcpy(out, e->date, e->date_len);
        out += e->date_len;
        const unsigned hms[] = {(unsigned)(rem / 3600), (unsigned)(rem / 60 % 60),
                                (unsigned)(rem % 60)};
        for (size_t i = 0; i < ELEMENTSOF(hms); i++) {
                if (i > 0)
                        *out++ = ':';
                *out++ = (char)('0' + hms[i] / 10);
                *out++ = (char)('0' + hms[i] % 10);
        }
        if (t.nsec > 0) {
                uint32_t frac = (uint32_t)(t.nsec % NSEC_PER_SEC);
                char digits[9];
                size_t n = sizeof digits;
                for (size_t i = n; i > 0; i--, frac /= 10)
                        digits[i - 1] = (char)('0' + frac % 10);
                while (n > 0 && digits[n - 1] == '0')
                        n--;
                *out++ = '.';
                memcpy(out, digits, n);
                out += n;
        }
        *out++ = 'Z';
        *out++ = '"';
        e->len = (size_t)(out - e->buf);
}

/* An object or array being written, at depth: its members go one a line, one level deeper. */
typedef struct Container {
        unsigned depth;
        bool any;
} Container;

static Container emit_open(Emitter *e, const char *open, unsigned depth)
{
        emit_bytes(e, open, 1);
        return (Container){.depth = depth};
}

/* Before each element of an array. */
static void emit_next(Emitter *e, Container *c)
{
        if (c->any)
                emit_literal(e, ",");
        emit_newline(e, c->depth + 1);
        c->any = true;
}

/* Before each value of an object. The keys are ours, plain ASCII: nothing to escape. */
static void emit_key(Emitter *e, Container *c, const char *key)
{
        emit_next(e, c);
        emit_literal(e, "\"");
        emit_bytes(e, key, strlen(key));
        emit_literal(e, "\": ");
}

/* An empty one stays on its line: "[]". */
static void emit_close(Emitter *e, Container *c, const char *close)
{
        if (c->any)
                emit_newline(e, c->depth);
        emit_bytes(e, close, 1);
}

static void emit_failure(Emitter *e, Container *failures, const HealthFailure *f)
{
        emit_next(e, failures);
        Container o = emit_open(e, "{", failures->depth + 1);
        /* HEALTH-2: empty key parts are left out, as upstream's writer does. */
        if (*f->instance_id) {
                emit_key(e, &o, "instance_id");
                emit_string(e, f->instance_id);
        }
        if (*f->assigned_at) {
                emit_key(e, &o, "assigned_at");
                emit_string(e, f->assigned_at);
        }
        emit_key(e, &o, "reported_at");
        emit_timestamp(e, f->reported_at);
        emit_close(e, &o, "}");
}

static void emit_record(Emitter *e, Container *records, const HealthRecord *r)
{
        emit_next(e, records);
        Container o = emit_open(e, "{", records->depth + 1);
        emit_key(e, &o, "vf_address");
        emit_string(e, r->vf_address);
        if (r->n_failures > 0) {
                emit_key(e, &o, "failures");
                Container failures = emit_open(e, "[", o.depth + 1);
                for (size_t i = 0; i < r->n_failures; i++)
                        emit_failure(e, &failures, &r->failures[i]);
                emit_close(e, &failures, "]");
        }
        if (r->quarantined) {
                emit_key(e, &o, "quarantined_at");
                emit_timestamp(e, r->quarantined_at);
                if (r->reason) {
                        emit_key(e, &o, "reason");
                        emit_string(e, r->reason);
                }
                if (!r->source_implicit) {
                        emit_key(e, &o, "source");
                        emit_string(e, health_source_to_string(r->source));
                }
        }
        emit_close(e, &o, "}");
}

int health_state_format_sized(const HealthState *s, size_t size_hint, char **ret, size_t *ret_size)
{
        Emitter e = {0};
        /* Room for the hint and a few more failures: one allocation in the usual case. */
        if (!emit_reserve(&e, size_hint + 4096))
                return e.r;

        Container root = emit_open(&e, "{", 0);
        emit_key(&e, &root, "version");
        emit_literal(&e, "1");
        emit_key(&e, &root, "records");
        Container records = emit_open(&e, "[", 1);
        for (size_t i = 0; i < s->n_records; i++)
                emit_record(&e, &records, &s->records[i]);
        emit_close(&e, &records, "]");
        if (s->n_drains > 0) {
                /* Only when a PF is drained, so a file of the older release round-trips. */
                emit_key(&e, &root, "drains");
                Container drains = emit_open(&e, "[", 1);
                for (size_t i = 0; i < s->n_drains; i++) {
                        const HealthDrain *d = &s->drains[i];
                        emit_next(&e, &drains);
                        Container o = emit_open(&e, "{", 2);
                        emit_key(&e, &o, "gpu");
                        emit_string(&e, d->gpu);
                        emit_key(&e, &o, "reason");
                        emit_string(&e, d->reason);
                        emit_key(&e, &o, "drained_at");
                        emit_timestamp(&e, d->drained_at);
                        emit_close(&e, &o, "}");
                }
                emit_close(&e, &drains, "]");
        }
        if (s->breaker_open) {
                emit_key(&e, &root, "breaker");
                Container o = emit_open(&e, "{", 1);
                emit_key(&e, &o, "opened_at");
                emit_timestamp(&e, s->breaker_opened_at);
                emit_key(&e, &o, "reason");
                emit_string(&e, s->breaker_reason);
                emit_close(&e, &o, "}");
        }
        if (s->driver_version) {
                emit_key(&e, &root, "driver_version");
                emit_string(&e, s->driver_version);
        }
        if (!timestamp_is_zero(s->driver_changed_at)) {
                emit_key(&e, &root, "driver_changed_at");
                emit_timestamp(&e, s->driver_changed_at);
        }
        emit_close(&e, &root, "}");
        /* One trailing newline, and a NUL that is not part of the file. */
        emit_bytes(&e, "\n", 2);
        if (e.r < 0) {
                free(e.buf);
                return e.r;
        }
        *ret = e.buf;
        if (ret_size)
                *ret_size = e.len - 1;
        return 0;
}

int health_state_format(const HealthState *s, char **ret, size_t *ret_size)
{
        return health_state_format_sized(s, 0, ret, ret_size);
}

/* ---- queries and load-time rules ----------------------------------------------------------- */

size_t health_state_count_quarantined(const HealthState *s)
{
        size_t n = 0;
        for (size_t i = 0; i < s->n_records; i++)
                n += s->records[i].quarantined;
        return n;
}

int health_state_reevaluate(HealthState *s, unsigned threshold, Timestamp now)
{
        int n = 0;

        for (size_t i = 0; i < s->n_records; i++) {
                HealthRecord *r = &s->records[i];
                if (r->quarantined || r->n_failures < threshold)
                        continue;
                char *reason;
                if (strprintf(&reason, HEALTH_REEVALUATED_PREFIX "%zu failures, threshold %u",
                              r->n_failures, threshold) < 0)
                        return -ENOMEM;
                free(r->reason);
                r->reason = reason;
                r->quarantined = true;
                r->quarantined_at = now;
                r->source = HEALTH_SOURCE_AUTO;
                r->source_implicit = false;
                n++;
        }
        return n;
}

int health_sanitize_reason(const char *message, char **ret)
{
        size_t n = strlen(message);
        if (n == 0) {
                *ret = NULL;
                return 0;
        }

        bool cut = n > HEALTH_REASON_MAX;
        size_t keep = cut ? HEALTH_REASON_MAX - 3 : n;
        char *s = malloc(keep + 4);
        if (!s)
                return -ENOMEM;
        for (size_t i = 0; i < keep; i++) {
                unsigned char c = (unsigned char)message[i];
                s[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
        }
        strcpy(s + keep, cut ? "..." : "");
        *ret = s;
        return 0;
}
