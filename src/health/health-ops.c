/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What each request does to a HealthState (HEALTH-8, HEALTH-9, HEALTH-10, HEALTH-11, HEALTH-12,
 * HEALTH-13, HEALTH-14, HEALTH-15, HEALTH-25, HEALTH-26, HEALTH-27, HEALTH-28, HEALTH-29,
 * HEALTH-30, HEALTH-33). Pure: no I/O, no clock (the request carries its own "now"), so the store
 * can replay requests after a rollback or a reload and get the same records.
 */
#include <jansson.h>

#include "health-internal.h"

static const Timestamp timestamp_zero = {.sec = TIMESTAMP_ZERO_SEC};

const char *health_outcome_to_string(HealthOutcome o)
{
        switch (o) {
        case HEALTH_OUTCOME_RECORDED:
                return "recorded";
        case HEALTH_OUTCOME_QUARANTINED:
                return "quarantined";
        default:
                return "unchanged";
        }
}

/* ---- requests ------------------------------------------------------------------------------ */

HealthOp *health_op_free(HealthOp *op)
{
        if (!op)
                return NULL;
        free(op->vf_address);
        free(op->instance_id);
        free(op->assigned_at);
        free(op->text);
        strv_freep(&op->vfs);
        free(op->gpu);
        free(op);
        return NULL;
}

static int invalid_address(const char *address, char **error)
{
        address = address ?: "";
        _cleanup_free_ char *q = escape_text(address, strlen(address), SIZE_MAX, ESCAPE_QUOTE);
        if (!q)
                return error_set_oom(error);
        return error_set(error, -EINVAL, "invalid VF address %s", q);
}

/* Key parts come from our own records and claims; anything unprintable is a caller bug. */
static bool key_part_is_valid(const char *s)
{
        size_t n = 0;
        for (; s[n]; n++)
                if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] >= 0x7f)
                        return false;
        return n <= HEALTH_REASON_MAX;
}

static int check_key(const char *what, const char *s, char **error)
{
        if (key_part_is_valid(s))
                return 0;
        _cleanup_free_ char *q = escape_text(s, strlen(s), SIZE_MAX, ESCAPE_QUOTE);
        if (!q)
                return error_set_oom(error);
        return error_set(error, -EINVAL, "invalid %s %s", what, q);
}

/* An operator's reason (API-9): 1..256 bytes of UTF-8, which the file format can carry. */
static int check_reason(const char *reason, char **error)
{
        size_t n = reason ? strlen(reason) : 0;
        if (n < 1 || n > HEALTH_REASON_MAX)
                return error_set(error, -EINVAL, "invalid reason length %zu", n);
        json_t *probe = json_string(reason); /* jansson refuses invalid UTF-8 */
        if (!probe)
                return error_set(error, -EINVAL, "invalid reason: not UTF-8");
        json_decref(probe);
        return 0;
}

static int copy_vfs(char *const *vfs, char ***ret, char **error)
{
        /* An empty list is valid: a PF without VFs drains to nothing. */
        _cleanup_strv_free_ char **copy = calloc(1, sizeof(char *));
        if (!copy)
                return error_set_oom(error);
        for (size_t i = 0; vfs && vfs[i]; i++) {
                if (!pci_address_is_valid(vfs[i]))
                        return invalid_address(vfs[i], error);
                if (strv_push(&copy, vfs[i]) < 0)
                        return error_set_oom(error);
        }
        *ret = TAKE_PTR(copy);
        return 0;
}

static int dup_text(const char *s, char **ret, char **error)
{
        char *copy = strdup(s ? s : "");
        if (!copy)
                return error_set_oom(error);
        *ret = copy;
        return 0;
}

int health_op_new(const HealthRequest *req, Timestamp now, HealthOp **ret, char **error)
{
        _cleanup_(health_op_freep) HealthOp *op = calloc(1, sizeof *op);
        int r = 0;

        if (!op)
                return error_set_oom(error);
        op->kind = req->kind;
        op->now = now;

        switch (req->kind) {
        case HEALTH_REQUEST_FAILURE:
        case HEALTH_REQUEST_SUCCESS:
                if (!pci_address_is_valid(req->vf_address))
                        return invalid_address(req->vf_address, error);
                r = dup_text(req->vf_address, &op->vf_address, error);
                if (r >= 0)
                        r = dup_text(req->instance_id, &op->instance_id, error);
                if (r >= 0)
                        r = dup_text(req->assigned_at, &op->assigned_at, error);
                if (r >= 0)
                        r = check_key("instance id", op->instance_id, error);
                if (r >= 0)
                        r = check_key("assignment timestamp", op->assigned_at, error);
                /* Sanitised once here, so every replay stores the same reason. */
                if (r >= 0 && req->kind == HEALTH_REQUEST_FAILURE &&
                    health_sanitize_reason(req->text ? req->text : "", &op->text) < 0)
                        r = error_set_oom(error);
                break;
        case HEALTH_REQUEST_QUARANTINE:
                r = check_reason(req->text, error);
                /* HEALTH-12's rule for the guest's text holds for the operator's too: a reason
                 * is outside text, shown and logged, so control bytes never reach the file. */
                if (r >= 0 && health_sanitize_reason(req->text, &op->text) < 0)
                        r = error_set_oom(error);
                if (r >= 0)
                        r = copy_vfs(req->vfs, &op->vfs, error);
                break;
        case HEALTH_REQUEST_DRAIN:
        case HEALTH_REQUEST_UNDRAIN:
                if (!req->gpu || !pci_address_is_valid(req->gpu)) {
                        const char *gpu = req->gpu ?: "";
                        _cleanup_free_ char *q =
                            escape_text(gpu, strlen(gpu), SIZE_MAX, ESCAPE_QUOTE);
                        if (!q)
                                return error_set_oom(error);
                        return error_set(error, -EINVAL, "invalid GPU address %s", q);
                }
                r = dup_text(req->gpu, &op->gpu, error);
                if (r >= 0 && req->kind == HEALTH_REQUEST_DRAIN) {
                        r = check_reason(req->text, error);
                        if (r >= 0 && health_sanitize_reason(req->text, &op->text) < 0)
                                r = error_set_oom(error);
                }
                break;
        case HEALTH_REQUEST_CLEAR:
                r = copy_vfs(req->vfs, &op->vfs, error);
                break;
        case HEALTH_REQUEST_DRIVER_VERSION:
                if (!req->text || !*req->text || !key_part_is_valid(req->text)) {
                        const char *text = req->text ?: "";
                        _cleanup_free_ char *q =
                            escape_text(text, strlen(text), SIZE_MAX, ESCAPE_QUOTE);
                        if (!q)
                                return error_set_oom(error);
                        return error_set(error, -EINVAL, "invalid driver version %s", q);
                }
                r = dup_text(req->text, &op->text, error);
                break;
        case HEALTH_REQUEST_BREAKER_RESET:
        case HEALTH_REQUEST_REPAIR:
        case HEALTH_REQUEST_REEVALUATE:
                break;
        default:
                return error_set(error, -EINVAL, "unknown VF health request %d", (int)req->kind);
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(op);
        return 0;
}

/* ---- the breaker (HEALTH-27, HEALTH-33) ---------------------------------------------------- */

static bool breaker_effectively_open(const HealthState *s, const HealthOptions *o)
{
        return o->breaker_enabled && s->breaker_open;
}

static Timestamp timestamp_minus(Timestamp t, nsec_t d)
{
        int64_t sec = t.sec - (int64_t)(d / NSEC_PER_SEC);
        int64_t nsec = (int64_t)t.nsec - (int64_t)(d % NSEC_PER_SEC);
        if (nsec < 0) {
                nsec += (int64_t)NSEC_PER_SEC;
                sec--;
        }
        return (Timestamp){.sec = sec, .nsec = (uint32_t)nsec};
}

/*
 * An automatic quarantine the breaker counts: not one made by load-time re-evaluation, which
 * only restates old failures (HEALTH-9).
 */
static bool counts_for_breaker(const HealthRecord *r, Timestamp since)
{
        return r->quarantined && r->source == HEALTH_SOURCE_AUTO &&
               !(r->reason && startswith(r->reason, HEALTH_REEVALUATED_PREFIX)) &&
               timestamp_compare(r->quarantined_at, since) > 0;
}

static int push_model(char ***models, const char *model)
{
        if (!model || !*model)
                return 0;
        for (size_t i = 0; *models && (*models)[i]; i++)
                if (streq((*models)[i], model))
                        return 0;
        return strv_push(models, model);
}

/*
 * Whether an automatic quarantine of vf at now would trip the breaker. Returns 1 and the trip
 * reason, or 0. The trips are checked in the order (a), (b), (c); the first one names it.
 */
static int breaker_trip(const HealthState *s, const char *vf, Timestamp now, const HealthOptions *o,
                        char **ret)
{
        char window[DURATION_STRLEN];
        format_duration(o->breaker_window, window);

        Timestamp since = timestamp_minus(now, o->breaker_window);
        if (timestamp_compare(s->breaker_floor, since) > 0)
                since = s->breaker_floor;

        _cleanup_strv_free_ char **models = NULL;
        unsigned count = 1; /* the quarantine being decided */
        if (o->model_of && push_model(&models, o->model_of(vf, o->userdata)) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_records; i++) {
                const HealthRecord *r = &s->records[i];
                if (!counts_for_breaker(r, since))
                        continue;
                count++;
                if (o->model_of && push_model(&models, o->model_of(r->vf_address, o->userdata)) < 0)
                        return -ENOMEM;
        }

        _cleanup_free_ char *reason = NULL;
        int r = 0;
        size_t n_models = strv_length(models);
        if (count > o->breaker_max_quarantines)
                r = strprintf(&reason, "%u automatic quarantines within %s", count, window);
        else if (n_models > 1) {
                qsort(models, n_models, sizeof *models, strv_compare);
                r = strprintf(
                    &reason, "automatic quarantines on more than one GPU model within %s:", window);
                for (size_t i = 0; r >= 0 && i < n_models; i++)
                        r = strextend(&reason, "%s %s", i > 0 ? "," : "", models[i]);
        } else if (s->driver_version && !timestamp_is_zero(s->driver_changed_at) &&
                   timestamp_compare(s->driver_changed_at, since) > 0)
                r = strprintf(&reason, "host driver changed to %s less than %s ago",
                              s->driver_version, window);
        else
                return 0;
        if (r < 0)
                return r;

        /* Model names come from the hardware: keep the persisted reason within the bounds. */
        r = health_sanitize_reason(reason, ret);
        return r < 0 ? r : 1;
}

/* ---- noop checks --------------------------------------------------------------------------- */

static bool failure_is_noop(const HealthState *s, const HealthOp *op, const HealthOptions *o,
                            HealthResult *ret)
{
        const HealthRecord *r = health_state_find(s, op->vf_address);
        if (!r || (!r->quarantined &&
                   health_record_find_failure(r, op->instance_id, op->assigned_at) < 0))
                return false;
        *ret = (HealthResult){
            .outcome = HEALTH_OUTCOME_UNCHANGED,
            .failures = (unsigned)r->n_failures,
            .threshold = o->threshold,
        };
        return true;
}

static bool success_is_noop(const HealthState *s, const HealthOp *op, HealthResult *ret)
{
        const HealthRecord *r = health_state_find(s, op->vf_address);
        if (r && health_record_find_failure(r, op->instance_id, op->assigned_at) >= 0)
                return false;
        *ret = (HealthResult){0};
        return true;
}

/* HEALTH-25: an automatic quarantine is never overwritten, so it is a no-op for it too. */
static bool quarantine_keeps(const HealthRecord *r, const HealthOp *op)
{
        return r && r->quarantined &&
               (r->source == HEALTH_SOURCE_AUTO || streq_ptr(r->reason, op->text));
}

static bool quarantine_is_noop(const HealthState *s, const HealthOp *op, HealthResult *ret)
{
        for (size_t i = 0; op->vfs[i]; i++)
                if (!quarantine_keeps(health_state_find(s, op->vfs[i]), op))
                        return false;
        *ret = (HealthResult){0};
        return true;
}

static bool clear_is_noop(const HealthState *s, const HealthOp *op, HealthResult *ret)
{
        for (size_t i = 0; op->vfs[i]; i++)
                if (health_state_find(s, op->vfs[i]))
                        return false;
        *ret = (HealthResult){0};
        return true;
}

static bool reevaluate_is_noop(const HealthState *s, const HealthOptions *o)
{
        if (breaker_effectively_open(s, o))
                return true; /* HEALTH-9 */
        for (size_t i = 0; i < s->n_records; i++)
                if (!s->records[i].quarantined && s->records[i].n_failures >= o->threshold)
                        return false;
        return true;
}

int health_op_is_noop(const HealthState *s, const HealthOp *op, const HealthOptions *o,
                      HealthResult *ret)
{
        bool noop;

        *ret = (HealthResult){0};
        switch (op->kind) {
        case HEALTH_REQUEST_FAILURE:
                noop = failure_is_noop(s, op, o, ret);
                break;
        case HEALTH_REQUEST_SUCCESS:
                noop = success_is_noop(s, op, ret);
                break;
        case HEALTH_REQUEST_QUARANTINE:
                noop = quarantine_is_noop(s, op, ret);
                break;
        case HEALTH_REQUEST_CLEAR:
                noop = clear_is_noop(s, op, ret);
                break;
        case HEALTH_REQUEST_DRAIN: {
                const HealthDrain *d = health_state_find_drain(s, op->gpu);
                noop = d && streq(d->reason, op->text);
                break;
        }
        case HEALTH_REQUEST_UNDRAIN:
                noop = !health_state_find_drain(s, op->gpu);
                break;
        case HEALTH_REQUEST_BREAKER_RESET:
                noop = !s->breaker_open;
                break;
        case HEALTH_REQUEST_DRIVER_VERSION:
                noop = streq_ptr(s->driver_version, op->text);
                break;
        case HEALTH_REQUEST_REEVALUATE:
                noop = reevaluate_is_noop(s, o);
                break;
        default:
                noop = true; /* REPAIR changes no record; the store decides about its write */
                break;
        }
        return noop;
}

/* ---- apply --------------------------------------------------------------------------------- */

static int quarantine_auto(HealthState *s, HealthRecord *rec, const HealthOp *op,
                           const HealthOptions *o, HealthResult *res)
{
        if (o->breaker_enabled && !s->breaker_open) {
                _cleanup_free_ char *trip = NULL;
                int r = breaker_trip(s, rec->vf_address, op->now, o, &trip);
                if (r < 0)
                        return r;
                if (r > 0) {
                        free(s->breaker_reason);
                        s->breaker_reason = TAKE_PTR(trip);
                        s->breaker_open = true;
                        s->breaker_opened_at = op->now;
                        res->breaker_tripped = true;
                        return 0;
                }
        }
        if (breaker_effectively_open(s, o))
                return 0; /* HEALTH-28: counted, never quarantined */

        char *reason = NULL;
        if (op->text && !(reason = strdup(op->text)))
                return -ENOMEM;
        free(rec->reason);
        rec->reason = reason;
        rec->quarantined = true;
        rec->quarantined_at = op->now;
        rec->source = HEALTH_SOURCE_AUTO;
        rec->source_implicit = false;
        res->outcome = HEALTH_OUTCOME_QUARANTINED;
        return 0;
}

static int apply_failure(HealthState *s, const HealthOp *op, const HealthOptions *o,
                         HealthResult *res)
{
        HealthRecord *rec;
        int r = health_state_ensure_record(s, op->vf_address, &rec);
        if (r < 0)
                return r;
        r = health_record_append_failure(rec, op->instance_id, op->assigned_at, op->now);
        if (r < 0) {
                if (health_record_is_empty(rec))
                        health_state_remove_record(s, rec);
                return r;
        }

        /* HEALTH-12: every recorded failure counts, there is no time window. */
        *res = (HealthResult){
            .changed = true,
            .outcome = HEALTH_OUTCOME_RECORDED,
            .failures = (unsigned)rec->n_failures,
            .threshold = o->threshold,
        };
        if (rec->n_failures < o->threshold)
                return 0;
        return quarantine_auto(s, rec, op, o, res);
}

static int apply_success(HealthState *s, const HealthOp *op, HealthResult *res)
{
        HealthRecord *rec = health_state_find_mutable(s, op->vf_address);
        ssize_t i = health_record_find_failure(rec, op->instance_id, op->assigned_at);
        bool newest = (size_t)i + 1 == rec->n_failures;

        /* HEALTH-13: the match and every older failure go. */
        health_record_drop_oldest(rec, (size_t)i + 1);
        *res = (HealthResult){.changed = true, .cleared = (unsigned)i + 1};

        /*
         * HEALTH-14/15: only the success of the assignment whose failure came last (the one
         * that crossed the threshold) lifts an automatic quarantine.
         */
        if (newest && rec->quarantined && rec->source == HEALTH_SOURCE_AUTO) {
                health_record_unquarantine(rec);
                res->rescinded = true;
        }
        if (health_record_is_empty(rec))
                health_state_remove_record(s, rec);
        return 0;
}

static int apply_quarantine(HealthState *s, const HealthOp *op, HealthResult *res)
{
        *res = (HealthResult){.changed = true};
        for (size_t i = 0; op->vfs[i]; i++) {
                _cleanup_free_ char *reason = strdup(op->text);
                HealthRecord *rec;
                if (!reason)
                        return -ENOMEM;
                if (quarantine_keeps(health_state_find(s, op->vfs[i]), op))
                        continue;
                int r = health_state_ensure_record(s, op->vfs[i], &rec);
                if (r < 0)
                        return r;
                if (!rec->quarantined)
                        rec->quarantined_at = op->now; /* HEALTH-25: an earlier one is kept */
                rec->quarantined = true;
                rec->source = HEALTH_SOURCE_OPERATOR;
                rec->source_implicit = false;
                free(rec->reason);
                rec->reason = TAKE_PTR(reason);
                res->records++;
        }
        return 0;
}

static int apply_clear(HealthState *s, const HealthOp *op, HealthResult *res)
{
        *res = (HealthResult){.changed = true};
        for (size_t i = 0; op->vfs[i]; i++) {
                HealthRecord *rec = health_state_find_mutable(s, op->vfs[i]);
                if (rec) {
                        health_state_remove_record(s, rec);
                        res->records++;
                }
        }
        return 0;
}

static int apply_breaker_reset(HealthState *s, const HealthOp *op, HealthResult *res)
{
        /* HEALTH-29: failures reported while it was open go; the window restarts empty. */
        for (size_t i = s->n_records; i > 0; i--) {
                HealthRecord *rec = &s->records[i - 1];
                health_record_drop_since(rec, s->breaker_opened_at);
                if (health_record_is_empty(rec))
                        health_state_remove_record(s, rec);
        }
        s->breaker_open = false;
        s->breaker_opened_at = timestamp_zero;
        free(s->breaker_reason);
        s->breaker_reason = NULL;
        s->breaker_floor = op->now;
        *res = (HealthResult){.changed = true};
        return 0;
}

static int apply_driver_version(HealthState *s, const HealthOp *op, HealthResult *res)
{
        /*
         * HEALTH-30: the first version seen is no change; stamping it would make trip (c)
         * fire for a whole window after every fresh install.
         */
        bool first = !s->driver_version;
        int r = health_set_string(&s->driver_version, op->text);
        if (r < 0)
                return r;
        s->driver_changed_at = first ? timestamp_zero : op->now;
        *res = (HealthResult){.changed = true};
        return 0;
}

int health_op_apply(HealthState *s, const HealthOp *op, const HealthOptions *o, HealthResult *ret)
{
        HealthResult res;
        int r;

        if (health_op_is_noop(s, op, o, &res)) {
                *ret = res;
                return 0;
        }
        switch (op->kind) {
        case HEALTH_REQUEST_FAILURE:
                r = apply_failure(s, op, o, &res);
                break;
        case HEALTH_REQUEST_SUCCESS:
                r = apply_success(s, op, &res);
                break;
        case HEALTH_REQUEST_QUARANTINE:
                r = apply_quarantine(s, op, &res);
                break;
        case HEALTH_REQUEST_CLEAR:
                r = apply_clear(s, op, &res);
                break;
        case HEALTH_REQUEST_DRAIN:
        case HEALTH_REQUEST_UNDRAIN:
                /* HEALTH-26: the PF's mark only; its VF records are not touched. */
                r = health_state_set_drain(s, op->gpu, op->text, op->now);
                res = (HealthResult){.changed = r > 0, .drained = r > 0};
                break;
        case HEALTH_REQUEST_BREAKER_RESET:
                r = apply_breaker_reset(s, op, &res);
                break;
        case HEALTH_REQUEST_DRIVER_VERSION:
                r = apply_driver_version(s, op, &res);
                break;
        case HEALTH_REQUEST_REEVALUATE:
                r = health_state_reevaluate(s, o->threshold, op->now);
                res = (HealthResult){.changed = true};
                break;
        default:
                r = -EINVAL;
                break;
        }
        if (r < 0)
                return r;
        *ret = res;
        return 1;
}
