/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes the strict JSON body parser every handler uses (GEN-6, API-9, REL-5, REL-7).
 *
 * Properties: an accepted body is a JSON object nested at most 16 levels, which jansson writes
 * back as text that parses again to an equal value; a refused one gets a message for the
 * client that starts with "invalid JSON body: ".
 */
#include <jansson.h>

#include "http/http-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned depth(const json_t *j)
{
        unsigned deepest = 0;
        if (json_is_object(j)) {
                const char *key;
                json_t *v;
                json_object_foreach ((json_t *)j, key, v) {
                        unsigned d = depth(v);
                        deepest = d > deepest ? d : deepest;
                }
                return deepest + 1;
        }
        if (json_is_array(j)) {
                size_t i;
                json_t *v;
                json_array_foreach (j, i, v) {
                        unsigned d = depth(v);
                        deepest = d > deepest ? d : deepest;
                }
                return deepest + 1;
        }
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_t *j = NULL;
        _cleanup_free_ char *error = NULL;

        int r = http_json_parse_body(data, size, &j, &error);
        if (r == -ENOMEM)
                return 0;
        if (r < 0) {
                if (r != -EINVAL || !error || !startswith(error, "invalid JSON body: ") || j)
                        abort();
                return 0;
        }
        if (!json_is_object(j) || depth(j) > JSON_DEPTH_MAX)
                abort();

        _cleanup_free_ char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text) {
                json_t *again = NULL;
                if (http_json_parse_body(text, strlen(text), &again, NULL) < 0 ||
                    !json_equal(j, again))
                        abort();
                json_decref(again);
        }
        json_decref(j);
        return 0;
}
