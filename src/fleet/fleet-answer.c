/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the sync reads out of Placement's and Keystone's answers (FLEET-1, FLEET-2, FLEET-3,
 * FLEET-4, FLEET-5, FLEET-6), apart from the exchanges that fetch them, so that one fuzz target
 * (REL-5) reaches every one of them. Each takes the parsed body (NULL for an empty or non-JSON one)
 * and writes its out-parameters only on success.
 */
#include "fleet-internal.h"

int fleet_answer_generation(const json_t *answer, const char *key, int64_t *ret)
{
        const json_t *g = json_object_get(answer, key);
        if (!json_is_integer(g) || json_integer_value(g) < 0)
                return -EPROTO;
        *ret = json_integer_value(g);
        return 0;
}

int fleet_answer_inventories(const json_t *answer, FleetInventory **ret, size_t *ret_n,
                             int64_t *ret_generation)
{
        const json_t *invs = json_object_get(answer, "inventories"), *v;
        const char *rc;
        int64_t gen;
        if (!json_is_object(invs) ||
            fleet_answer_generation(answer, "resource_provider_generation", &gen) < 0)
                return -EPROTO;
        size_t n = json_object_size(invs), k = 0;
        FleetInventory *out = calloc(n ? n : 1, sizeof *out);
        if (!out)
                return -ENOMEM;
        json_object_foreach ((json_t *)invs, rc, v) {
                json_int_t total = json_integer_value(json_object_get(v, "total"));
                json_int_t reserved = json_integer_value(json_object_get(v, "reserved"));
                json_int_t max_unit = json_integer_value(json_object_get(v, "max_unit"));
                /* Fields vgpud always sends as 1 (FLEET-3): another value, set behind vgpud's
                 * back, reads as max_unit 0, which no wanted record has, so it is rewritten. */
                bool ours = json_integer_value(json_object_get(v, "min_unit")) == 1 &&
                            json_integer_value(json_object_get(v, "step_size")) == 1 &&
                            json_number_value(json_object_get(v, "allocation_ratio")) == 1.0;
                out[k] = (FleetInventory){
                    .resource_class = strdup(rc),
                    .total = total > 0 ? (uint64_t)total : 0,
                    .reserved = reserved > 0 ? (uint64_t)reserved : 0,
                    .max_unit = ours && max_unit > 0 ? (uint64_t)max_unit : 0,
                };
                if (!out[k++].resource_class) {
                        fleet_inventories_free(out, k);
                        return -ENOMEM;
                }
        }
        /* Sorted by class as every FleetInventory list is: an insertion sort of a handful. */
        for (size_t a = 1; a < k; a++)
                for (size_t b = a;
                     b > 0 && strcmp(out[b - 1].resource_class, out[b].resource_class) > 0; b--) {
                        FleetInventory t = out[b];
                        out[b] = out[b - 1];
                        out[b - 1] = t;
                }
        *ret = out;
        *ret_n = k;
        *ret_generation = gen;
        return 0;
}

int fleet_answer_traits(const json_t *answer, char ***ret, int64_t *ret_generation)
{
        const json_t *traits = json_object_get(answer, "traits"), *v;
        int64_t gen;
        size_t i;
        if (!json_is_array(traits) ||
            fleet_answer_generation(answer, "resource_provider_generation", &gen) < 0)
                return -EPROTO;
        _cleanup_strv_free_ char **out = NULL;
        json_array_foreach (traits, i, v) {
                if (!json_is_string(v))
                        return -EPROTO;
                if (strv_push(&out, json_string_value(v)) < 0)
                        return -ENOMEM;
        }
        strv_sort(out);
        *ret = TAKE_PTR(out);
        *ret_generation = gen;
        return 0;
}

int fleet_answer_consumers(const json_t *answer, char ***ret)
{
        const json_t *allocations = json_object_get(answer, "allocations");
        if (!json_is_object(allocations))
                return -EPROTO;
        _cleanup_strv_free_ char **out = NULL;
        const char *consumer;
        json_t *v;
        json_object_foreach ((json_t *)allocations, consumer, v)
                if (strv_push(&out, consumer) < 0)
                        return -ENOMEM;
        *ret = TAKE_PTR(out);
        return 0;
}

int fleet_answer_tree(const json_t *answer, char ***ret)
{
        const json_t *list = json_object_get(answer, "resource_providers"), *p;
        /* Without the list, the tree is unknown, not empty: reading it as empty would leave a
         * vanished PF's provider in Placement, unreserved, until a later full job. */
        if (!json_is_array(list))
                return -EPROTO;
        _cleanup_strv_free_ char **out = NULL;
        size_t i;
        json_array_foreach (list, i, p) {
                const char *uuid = json_string_value(json_object_get(p, "uuid"));
                if (!uuid || strlen(uuid) != FLEET_UUID_STRLEN - 1)
                        continue;
                if (strv_push(&out, uuid) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(out);
        return 0;
}

/* "<major>.<minor>", both plain decimal digits: no sign, no space, no overflow. */
static int parse_microversion(const char *s, uint32_t *ret_major, uint32_t *ret_minor)
{
        const char *dot = strchr(s, '.');
        char major_text[11];
        uint32_t major, minor;
        if (!dot || (size_t)(dot - s) >= sizeof major_text)
                return -EINVAL;
        memcpy(major_text, s, (size_t)(dot - s));
        major_text[dot - s] = '\0';
        if (parse_uint32(major_text, &major) < 0 || parse_uint32(dot + 1, &minor) < 0)
                return -EINVAL;
        *ret_major = major;
        *ret_minor = minor;
        return 0;
}

int fleet_answer_max_version(const json_t *answer, unsigned *ret_major, unsigned *ret_minor)
{
        const json_t *versions = json_object_get(answer, "versions"), *v;
        size_t i;
        unsigned best_major = 0, best_minor = 0;
        json_array_foreach (versions, i, v) {
                const char *max = json_string_value(json_object_get(v, "max_version"));
                uint32_t major, minor;
                if (max && parse_microversion(max, &major, &minor) >= 0 &&
                    (major > best_major || (major == best_major && minor > best_minor))) {
                        best_major = major;
                        best_minor = minor;
                }
        }
        if (best_major == 0)
                return -EPROTO;
        *ret_major = best_major;
        *ret_minor = best_minor;
        return 0;
}

int fleet_answer_token_expiry(const json_t *answer, Timestamp *ret)
{
        const char *expires =
            json_string_value(json_object_get(json_object_get(answer, "token"), "expires_at"));
        Timestamp exp;
        if (!expires || parse_timestamp(expires, &exp) < 0)
                return -EPROTO;
        *ret = exp;
        return 0;
}
