/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The jansson part of base: the small builders that every module writing JSON with jansson uses
 * (the API's bodies, `vgpud inventory --json`). Header-only and apart from base.h, so that base
 * itself needs no JSON library; include it where jansson is a dependency already.
 *
 * Promises: a NULL value is an allocation that failed and gives -ENOMEM, so a chain of builder
 * calls needs no checks of its own; the value is taken over, also when the call fails.
 */

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* Adds value under key, taking it over. */
static inline int json_set(json_t *o, const char *key, json_t *value)
{
        if (!value)
                return -ENOMEM;
        return json_object_set_new(o, key, value) < 0 ? -ENOMEM : 0;
}

/* Appends value, taking it over. */
static inline int json_push(json_t *a, json_t *value)
{
        if (!value)
                return -ENOMEM;
        return json_array_append_new(a, value) < 0 ? -ENOMEM : 0;
}

/* A count or size as a JSON integer, which is int64 (json_int_t): capped at INT64_MAX. */
static inline json_t *json_u64(uint64_t v)
{
        return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/*
 * v as text (json_dumps flags) with one trailing newline, as the state files end: *ret is
 * malloc'd, *ret_size (may be NULL) its length. -ENOMEM.
 */
static inline int json_dump_file_text(const json_t *v, size_t flags, char **ret, size_t *ret_size)
{
        char *text = json_dumps(v, flags);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        char *out = realloc(text, n + 2);
        if (!out) {
                free(text);
                return -ENOMEM;
        }
        out[n] = '\n';
        out[n + 1] = 0;
        *ret = out;
        if (ret_size)
                *ret_size = n + 1;
        return 0;
}
