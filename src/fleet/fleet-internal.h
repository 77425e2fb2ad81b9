/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Between the fleet module's files: the HTTP client the sync's worker thread uses. */

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
