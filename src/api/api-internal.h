/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Pieces shared between the api module's files. */

#include <jansson.h>

#include "api.h"
#include "base/json-util.h"

/* One health record as API-10 shows it: the HEALTH-1 keys, then "gpu" (when known) and
 * "present". */
int api_health_record_json(const ApiContext *ctx, const HealthRecord *rec, json_t **ret);

/* The "breaker" object of API-10, also the answer of DELETE /gpu/health/breaker. */
int api_breaker_json(const ApiContext *ctx, json_t **ret);
