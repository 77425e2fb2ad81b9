/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Strict reads of our own JSON formats by a table of fields (json-util.h). One walk does the
 * unknown-key check and the typed unpacking, so a table and an unpack format can never disagree
 * about which keys exist.
 */
#include "json-util.h"

/* A key from outside is shown escaped and cut: it may be long, or hold anything. */
#define SHOWN_KEY_MAX 128

static const char *const type_text[] = {
    [JSON_FIELD_STRING] = "a string",   [JSON_FIELD_INTEGER] = "an integer",
    [JSON_FIELD_BOOLEAN] = "a boolean", [JSON_FIELD_OBJECT] = "an object",
    [JSON_FIELD_ARRAY] = "an array",
};

const char *json_first_unknown_key_in(json_t *o, const void *table, size_t stride)
{
        const char *key;
        json_t *value;

        json_object_foreach (o, key, value) {
                const char *const *name = table;
                while (*name && !streq(*name, key))
                        name = (const char *const *)((const char *)name + stride);
                if (!*name)
                        return key;
        }
        return NULL;
}

/* "<path>.<key>", or key alone at the root; "<path>[<index>]" for key NULL. */
static char *child_path(const char *path, const char *key, size_t index)
{
        char *p = NULL;
        bool root = !path || !path[0];
        int r = key ? strprintf(&p, "%s%s%s", root ? "" : path, root ? "" : ".", key)
                    : strprintf(&p, "%s[%zu]", root ? "" : path, index);
        return r < 0 ? NULL : p;
}

static bool has_type(json_t *v, JsonFieldType type)
{
        switch (type) {
        case JSON_FIELD_STRING:
                return json_is_string(v);
        case JSON_FIELD_INTEGER:
                return json_is_integer(v);
        case JSON_FIELD_BOOLEAN:
                return json_is_boolean(v);
        case JSON_FIELD_OBJECT:
                return json_is_object(v);
        case JSON_FIELD_ARRAY:
                return json_is_array(v);
        }
        return false;
}

/* v, already of type, where a field of that type stores it. */
static void store(json_t *v, JsonFieldType type, void *at)
{
        switch (type) {
        case JSON_FIELD_STRING:
                *(const char **)at = json_string_value(v);
                break;
        case JSON_FIELD_INTEGER:
                *(json_int_t *)at = json_integer_value(v);
                break;
        case JSON_FIELD_BOOLEAN:
                *(bool *)at = json_is_true(v);
                break;
        case JSON_FIELD_OBJECT:
        case JSON_FIELD_ARRAY:
                *(json_t **)at = v;
                break;
        }
}

/* The type and bound every value is held to, whether a field or an array's element. */
static int check_value(json_t *v, JsonFieldType type, size_t max, const char *path, int code,
                       char **error)
{
        if (!has_type(v, type))
                return error_set(error, code, "%s must be %s", path, type_text[type]);
        if (type == JSON_FIELD_STRING && max > 0 && json_string_length(v) > max)
                return error_set(error, code, "%s must be at most %zu bytes", path, max);
        return 0;
}

static int read_elements(json_t *a, const char *path, const JsonField *f, void *view, int code,
                         char **error)
{
        if (f->max > 0 && json_array_size(a) > f->max)
                return error_set(error, code, "%s must hold at most %zu entries", path, f->max);

        /* Scalars are viewed as a field of their type stores them; objects by their table. */
        size_t size = f->element_fields ? f->element_size : sizeof(json_int_t);
        _cleanup_free_ void *element = malloc(size > 0 ? size : 1);
        if (!element)
                return error_set_oom(error);

        json_t *v;
        size_t i;
        json_array_foreach (a, i, v) {
                _cleanup_free_ char *at = child_path(path, NULL, i);
                if (!at)
                        return error_set_oom(error);
                int r = check_value(v, f->element_type, f->element_max, at, code, error);
                if (r < 0)
                        return r;
                memset(element, 0, size);
                if (f->element_fields)
                        r = json_schema_read(v, at, f->element_fields, element, code, error);
                else
                        store(v, f->element_type, element);
                if (r < 0)
                        return r;
                if (f->each && (r = f->each(element, at, view, code, error)) < 0)
                        return r;
        }
        return 0;
}

int json_schema_read(json_t *o, const char *path, const JsonField *fields, void *view, int code,
                     char **error)
{
        const char *unknown = json_first_unknown_key_in(o, fields, sizeof *fields);
        if (unknown) {
                _cleanup_free_ char *full = child_path(path, unknown, 0), *shown = NULL;
                if (full)
                        shown = escape_text(full, strlen(full), SHOWN_KEY_MAX, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, code, "unknown key %s", shown);
        }

        for (const JsonField *f = fields; f->key; f++) {
                json_t *v = json_object_get(o, f->key);
                if (!v && !f->required)
                        continue;
                _cleanup_free_ char *at = child_path(path, f->key, 0);
                if (!at)
                        return error_set_oom(error);
                if (!v)
                        return error_set(error, code, "%s is required", at);
                int r = check_value(v, f->type, f->type == JSON_FIELD_STRING ? f->max : 0, at, code,
                                    error);
                if (r < 0)
                        return r;
                store(v, f->type, (char *)view + f->offset);
                if (f->type == JSON_FIELD_OBJECT && f->fields)
                        r = json_schema_read(v, at, f->fields, (char *)view + f->nested_offset,
                                             code, error);
                else if (f->type == JSON_FIELD_ARRAY)
                        r = read_elements(v, at, f, view, code, error);
                if (r < 0)
                        return r;
        }
        return 0;
}
