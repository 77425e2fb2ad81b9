/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Between the fleet module's files: the HTTP client the sync's worker thread uses, and the
 * readers of the answers it gets. */

#include <jansson.h>

#include "base/json-util.h"
#include "fleet/fleet.h"

/* The largest response body read from Placement or Keystone; a larger one is an error. */
#define FLEET_HTTP_BODY_MAX ((size_t)4 * 1024 * 1024)

typedef struct FleetHttp {
        void *curl;        /* CURL *, one per run (its connection is reused within the run) */
        const char *token; /* X-Auth-Token; NULL sends none */
        long timeout_ms;   /* the whole exchange; the connect step gets a third of it */
        uint64_t requests;
} FleetHttp;

int fleet_http_init(FleetHttp *h, long timeout_ms);
void fleet_http_done(FleetHttp *h);

/*
 * One exchange: method on url with body (NULL: none) as JSON, the placement microversion
 * header, Accept: application/json. On a completed exchange (any status) 0 with *ret_status,
 * *ret_body (NULL for an empty or non-JSON body) and, when ret_subject_token is not NULL, the
 * X-Subject-Token header (NULL when absent). A transport failure (refused, timed out, a body
 * over FLEET_HTTP_BODY_MAX) is -EIO/-ETIMEDOUT/-EFBIG with `<method> <url>: <reason>`.
 */
int fleet_http_request(FleetHttp *h, const char *method, const char *url, const json_t *body,
                       long *ret_status, json_t **ret_body, char **ret_subject_token, char **error);

/* Placement's error code of a failure body ({"errors": [{"code": ...}]}), or NULL. */
const char *fleet_http_error_code(const json_t *body);
/* Its detail text, or NULL. */
const char *fleet_http_error_detail(const json_t *body);

/*
 * What the sync reads out of the answers (fleet-answer.c). Each takes the parsed body, NULL for
 * an empty or non-JSON one, and writes its out-parameters only on success; -ENOMEM aside, a
 * malformed answer is -EPROTO and the caller says which exchange it came from.
 */

/* answer[key] (a provider's "generation", a part's "resource_provider_generation"): a
 * non-negative integer, else -EPROTO. */
int fleet_answer_generation(const json_t *answer, const char *key, int64_t *ret);

/*
 * GET or PUT /resource_providers/<uuid>/inventories: the records sorted by class, each class
 * strdup'ed (free with fleet_inventories_free()), and resource_provider_generation. Figures
 * that are missing, not integers or negative read as 0, and a record whose min_unit, step_size
 * or allocation_ratio is not 1 has max_unit 0 (FLEET-3: no wanted record matches it, so it is
 * rewritten). -EPROTO without an "inventories" object or a valid generation.
 */
int fleet_answer_inventories(const json_t *answer, FleetInventory **ret, size_t *ret_n,
                             int64_t *ret_generation);

/* GET or PUT /resource_providers/<uuid>/traits: the traits sorted (NULL for none) and
 * resource_provider_generation. -EPROTO without a "traits" array of strings or a valid
 * generation. */
int fleet_answer_traits(const json_t *answer, char ***ret, int64_t *ret_generation);

/* GET /resource_providers/<uuid>/allocations (FLEET-6): the consumers, the keys of its
 * "allocations" object, in the answer's order (NULL for none). -EPROTO without that object. */
int fleet_answer_consumers(const json_t *answer, char ***ret);

/* GET /resource_providers?in_tree=<root>: the uuids of the listed providers (NULL for none).
 * An entry without a 36-character uuid is skipped; -EPROTO without a "resource_providers"
 * array. */
int fleet_answer_tree(const json_t *answer, char ***ret);

/* GET / (FLEET-1): the highest "<major>.<minor>" max_version of the root document's
 * "versions", each number plain decimal digits (a version in another form is ignored);
 * -EPROTO when it lists none with a major above 0. */
int fleet_answer_max_version(const json_t *answer, unsigned *ret_major, unsigned *ret_minor);

/* Keystone's POST /v3/auth/tokens: token.expires_at, -EPROTO when missing or not a
 * timestamp. (The token itself is the X-Subject-Token header, not the body.) */
int fleet_answer_token_expiry(const json_t *answer, Timestamp *ret);
