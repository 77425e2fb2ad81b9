/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Shared between the files of src/health only; everything else uses health.h. */

#include "health.h"

/* ---- record helpers (health-state.c) ------------------------------------------------------- */

/*
 * health_state_format() with a guess of its size (the file's present size), so the buffer is
 * allocated once when the guess is close. -ENOMEM, or -EILSEQ for a string that is not UTF-8.
 */
int health_state_format_sized(const HealthState *s, size_t size_hint, char **ret, size_t *ret_size);

HealthRecord *health_state_find_mutable(HealthState *s, const char *vf_address);

/* Finds or inserts (in address order) the record of vf_address. Moves other records. */
int health_state_ensure_record(HealthState *s, const char *vf_address, HealthRecord **ret);

/* Deletes a record; pointers into the record array are invalid afterwards. */
void health_state_remove_record(HealthState *s, HealthRecord *r);

/* The index of the failure (instance_id, assigned_at), or -ENOENT. */
ssize_t health_record_find_failure(const HealthRecord *r, const char *instance_id,
                                   const char *assigned_at);

/* Appends a failure, dropping the oldest beyond HEALTH_FAILURES_MAX (HEALTH-4). */
int health_record_append_failure(HealthRecord *r, const char *instance_id, const char *assigned_at,
                                 Timestamp reported_at);

/* Drops the n oldest failures. */
void health_record_drop_oldest(HealthRecord *r, size_t n);

/* Drops every failure reported at or after since. */
void health_record_drop_since(HealthRecord *r, Timestamp since);

/* Sets the drain of gpu (an earlier drained_at is kept) or, with reason NULL, removes it.
 * Returns 1 when it changed s. */
int health_state_set_drain(HealthState *s, const char *gpu, const char *reason, Timestamp at);

/* Lifts the quarantine and forgets its source and reason. */
void health_record_unquarantine(HealthRecord *r);

/* A record with neither failures nor quarantine has no reason to exist (HEALTH-14). */
static inline bool health_record_is_empty(const HealthRecord *r)
{
        return !r->quarantined && r->n_failures == 0;
}

/* Replaces *p with a copy of s (NULL clears it). */
int health_set_string(char **p, const char *s);

/* ---- requests as applied to a state (health-ops.c) ----------------------------------------- */

/* A request with everything it needs to be applied again after a rollback or a reload. */
typedef struct HealthOp {
        HealthRequestKind kind;
        char *vf_address;
        char *instance_id;
        char *assigned_at;
        char *text;
        char **vfs;
        char *gpu;
        Timestamp now; /* when it was submitted: replays give the same timestamps */
} HealthOp;

/*
 * Checks the request and copies it. -EINVAL with the message for an invalid VF address,
 * reason or driver version; -ENOMEM with `out of memory`.
 */
int health_op_new(const HealthRequest *request, Timestamp now, HealthOp **ret, char **error);
HealthOp *health_op_free(HealthOp *op);
DEFINE_TRIVIAL_CLEANUP_FUNC(HealthOp *, health_op_free);

/*
 * What applying op to s would do, when it would change nothing: returns 1 and the result
 * (then the request needs no I/O at all, HEALTH-11/13), or 0 when it would change s.
 */
int health_op_is_noop(const HealthState *s, const HealthOp *op, const HealthOptions *o,
                      HealthResult *ret);

/*
 * Applies op to s and returns 1 when it changed s, 0 when it changed nothing (s untouched), or
 * -ENOMEM. *ret is the result either way.
 */
int health_op_apply(HealthState *s, const HealthOp *op, const HealthOptions *o, HealthResult *ret);
