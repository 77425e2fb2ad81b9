/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Pieces shared between the api module's files. */

#include <jansson.h>

#include "api.h"

/* Adds value under key, taking it over; a NULL value is an allocation that failed. */
static inline int api_json_set(json_t *o, const char *key, json_t *value)
{
        if (!value)
                return -ENOMEM;
        return json_object_set_new(o, key, value) < 0 ? -ENOMEM : 0;
}

static inline int api_json_push(json_t *a, json_t *value)
{
        if (!value)
                return -ENOMEM;
        return json_array_append_new(a, value) < 0 ? -ENOMEM : 0;
}

static inline json_t *api_json_u64(uint64_t v)
{
        return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/* One health record as API-10 shows it: the HEALTH-1 keys, then "gpu" (when known) and
 * "present". */
int api_health_record_json(const ApiContext *ctx, const HealthRecord *rec, json_t **ret);

/* The "breaker" object of API-10, also the answer of DELETE /gpu/health/breaker. */
int api_breaker_json(const ApiContext *ctx, json_t **ret);
