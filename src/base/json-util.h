/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The jansson part of base: the small builders that every module writing JSON with jansson uses
 * (the API's bodies, `vgpud inventory --json`), and the strict reader of objects in our own
 * formats (json-schema.c, linked as base_json_dep). Apart from base.h, so that base itself needs
 * no JSON library; include it where jansson is a dependency already.
 *
 * Promises: a NULL value is an allocation that failed and gives -ENOMEM, so a chain of builder
 * calls needs no checks of its own; the value is taken over, also when the call fails.
 */

#include <jansson.h>
#include <stddef.h>
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

/* ---- strict objects by table (STYLE.md rule 9) --------------------------------------------- */

/*
 * A format of ours is read by a table of its keys, and the same table drives both halves of a
 * strict read: no key outside it, and each key present as its type says. A message names the
 * field by its path from the document's root, so that an operator finds it in the file:
 * `unknown key "boot.kernal"`, `hypervisor.pid must be an integer`, `volumes[2].id is required`.
 */
typedef enum JsonFieldType {
        JSON_FIELD_STRING,  /* stored as const char * */
        JSON_FIELD_INTEGER, /* stored as json_int_t */
        JSON_FIELD_BOOLEAN, /* stored as bool */
        JSON_FIELD_OBJECT,  /* stored as json_t * */
        JSON_FIELD_ARRAY,   /* stored as json_t * */
} JsonFieldType;

/*
 * Called for each element of an array field, in order, after the element's shape was checked:
 * element is its view (element_size bytes that element_fields filled, or for a scalar element
 * the value as a field of its type stores it), path names it ("volumes[2]"), view is the view
 * of the object that holds the array. Returns >= 0, or sets *error and returns its code.
 */
typedef int (*JsonElementFn)(const void *element, const char *path, void *view, int code,
                             char **error);

typedef struct JsonField JsonField;
struct JsonField {
        const char *key; /* NULL ends a table */
        JsonFieldType type;
        bool required;
        size_t offset; /* where the value goes in the caller's view; absent leaves it as it was */
        size_t max;    /* a string's bytes or an array's elements at most; 0: no bound here */
        /* An object: its own table, read into a view nested in this one at nested_offset. */
        const JsonField *fields;
        size_t nested_offset;
        /* An array: each element's type and bound (as type and max above) ... */
        JsonFieldType element_type;
        size_t element_max;
        /* ... for objects, the table they are read by into element_size bytes ... */
        const JsonField *element_fields;
        size_t element_size;
        /* ... and what takes each element (may be NULL: checked, not kept). */
        JsonElementFn each;
};

/* The offset of member in the view type: JSON_AT(BootView, kernel). */
#define JSON_AT(type, member) offsetof(type, member)

/*
 * Reads object o by fields into view: first any key that fields does not name (in o's order),
 * then each field in the table's order: missing when required, of another type, over its bound,
 * then its sub-table or elements. path is o's own path ("" or NULL at the root, "boot" inside).
 * Failures: code, with one of the messages above in *error (-ENOMEM for memory).
 */
int json_schema_read(json_t *o, const char *path, const JsonField *fields, void *view, int code,
                     char **error);

/*
 * The first key of o (in o's order) that table does not name, or NULL. table is an array of
 * entries that each begin with the key as a const char *, stride bytes apart, ended by a NULL
 * key: a JsonField table, or a plain list of names (json_first_unknown_key()).
 */
const char *json_first_unknown_key_in(json_t *o, const void *table, size_t stride);
#define json_first_unknown_key(o, names) json_first_unknown_key_in(o, names, sizeof *(names))
