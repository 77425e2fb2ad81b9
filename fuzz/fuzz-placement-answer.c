/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Placement's and Keystone's answers as the sync reads them (REL-5, FLEET-1, FLEET-2, FLEET-3,
 * FLEET-4, FLEET-5, FLEET-6). The bytes are a response body, parsed as fleet-http.c parses one (a
 * body that is not JSON reaches the readers as NULL), and every reader gets it: one input may carry
 * the keys of several answers. Invariants beyond "no crash, no leak": a refusal is -EPROTO, leaves
 * the out-parameters alone and has a reason in the answer; an acceptance gives what the sync then
 * relies on: a non-negative generation, inventories sorted by class with one record per key and
 * FLEET-3's max_unit rule, sorted traits, one consumer per allocation, 36-character tree uuids, and
 * a microversion with a major above 0 that one of the listed versions spells in plain digits.
 */
#include "fleet/fleet-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL_GENERATION INT64_C(-42)
#define SENTINEL_COUNT ((size_t)4242)

static FleetInventory sentinel_inventory;
static char *sentinel_strv[] = {(char *)"sentinel", NULL};

/* What fleet_answer_generation() promises: accepted iff a non-negative integer, and its value. */
static bool generation_valid(const json_t *answer, const char *key)
{
        const json_t *g = json_object_get(answer, key);
        return json_is_integer(g) && json_integer_value(g) >= 0;
}

static void check_generation(const json_t *answer, const char *key)
{
        int64_t gen = SENTINEL_GENERATION;
        int r = fleet_answer_generation(answer, key, &gen);
        if (r < 0) {
                if (r != -EPROTO || gen != SENTINEL_GENERATION || generation_valid(answer, key))
                        abort();
                return;
        }
        if (r != 0 || gen < 0 || gen != json_integer_value(json_object_get(answer, key)))
                abort();
}

static uint64_t clamped(const json_t *record, const char *key)
{
        json_int_t v = json_integer_value(json_object_get(record, key));
        return v > 0 ? (uint64_t)v : 0;
}

static void check_inventories(const json_t *answer)
{
        FleetInventory *inv = &sentinel_inventory;
        size_t n = SENTINEL_COUNT;
        int64_t gen = SENTINEL_GENERATION;
        const json_t *invs = json_object_get(answer, "inventories");

        int r = fleet_answer_inventories(answer, &inv, &n, &gen);
        if (r < 0) {
                if (r != -EPROTO || inv != &sentinel_inventory || n != SENTINEL_COUNT ||
                    gen != SENTINEL_GENERATION)
                        abort();
                if (json_is_object(invs) &&
                    generation_valid(answer, "resource_provider_generation"))
                        abort();
                return;
        }
        if (r != 0 || !inv || inv == &sentinel_inventory || gen < 0 ||
            gen != json_integer_value(json_object_get(answer, "resource_provider_generation")) ||
            n != json_object_size(invs))
                abort();
        for (size_t i = 0; i < n; i++) {
                /* Sorted, and strictly: fleet_inventories_merge() and _equal() walk by class. */
                if (!inv[i].resource_class ||
                    (i > 0 && strcmp(inv[i - 1].resource_class, inv[i].resource_class) >= 0))
                        abort();
                const json_t *record = json_object_get(invs, inv[i].resource_class);
                if (!record || inv[i].total != clamped(record, "total") ||
                    inv[i].reserved != clamped(record, "reserved"))
                        abort();
                /* FLEET-3: a max_unit only for a record with vgpud's fixed fields. */
                if (inv[i].max_unit != 0 &&
                    (inv[i].max_unit != clamped(record, "max_unit") ||
                     !json_is_integer(json_object_get(record, "min_unit")) ||
                     json_integer_value(json_object_get(record, "min_unit")) != 1 ||
                     json_integer_value(json_object_get(record, "step_size")) != 1 ||
                     json_number_value(json_object_get(record, "allocation_ratio")) != 1.0))
                        abort();
        }
        fleet_inventories_free(inv, n);
}

/* Every string of strv is the value of one of the array's elements. */
static bool strv_in_array(char *const *strv, const json_t *array)
{
        for (; strv && *strv; strv++) {
                bool found = false;
                size_t i;
                const json_t *v;
                json_array_foreach (array, i, v)
                        if (streq_ptr(json_string_value(v), *strv)) {
                                found = true;
                                break;
                        }
                if (!found)
                        return false;
        }
        return true;
}

static void check_traits(const json_t *answer)
{
        char **traits = sentinel_strv;
        int64_t gen = SENTINEL_GENERATION;
        const json_t *array = json_object_get(answer, "traits");

        int r = fleet_answer_traits(answer, &traits, &gen);
        if (r < 0) {
                if (r != -EPROTO || traits != sentinel_strv || gen != SENTINEL_GENERATION)
                        abort();
                /* A reason: no array, no generation or an element that is not a string. */
                bool all_strings = json_is_array(array);
                size_t i;
                const json_t *v;
                json_array_foreach (array, i, v)
                        all_strings = all_strings && json_is_string(v);
                if (all_strings && generation_valid(answer, "resource_provider_generation"))
                        abort();
                return;
        }
        if (r != 0 || traits == sentinel_strv || gen < 0 ||
            gen != json_integer_value(json_object_get(answer, "resource_provider_generation")) ||
            strv_length(traits) != json_array_size(array) || (traits && !*traits) ||
            !strv_in_array(traits, array))
                abort();
        /* Sorted, as build_part() and traits_equal() compare them element by element. */
        for (size_t i = 1; traits && traits[i]; i++)
                if (strcmp(traits[i - 1], traits[i]) > 0)
                        abort();
        strv_free(traits);
}

static void check_consumers(const json_t *answer)
{
        char **consumers = sentinel_strv;
        const json_t *allocations = json_object_get(answer, "allocations");

        int r = fleet_answer_consumers(answer, &consumers);
        if (r < 0) {
                if (r != -EPROTO || consumers != sentinel_strv || json_is_object(allocations))
                        abort();
                return;
        }
        if (r != 0 || consumers == sentinel_strv ||
            strv_length(consumers) != json_object_size(allocations) || (consumers && !*consumers))
                abort();
        for (char **c = consumers; c && *c; c++)
                if (!json_object_get(allocations, *c))
                        abort();
        strv_free(consumers);
}

static void check_tree(const json_t *answer)
{
        char **tree = sentinel_strv;
        int r = fleet_answer_tree(answer, &tree);
        const json_t *list = json_object_get(answer, "resource_providers");
        if (r < 0) {
                if (r != -EPROTO || tree != sentinel_strv || json_is_array(list))
                        abort();
                return;
        }
        if (r != 0 || tree == sentinel_strv || !json_is_array(list))
                abort();
        if (strv_length(tree) > json_array_size(list) || (tree && !*tree))
                abort();
        /* find_vanished() copies each into a FleetProvider's uuid[FLEET_UUID_STRLEN]. */
        for (char **t = tree; t && *t; t++)
                if (strlen(*t) != FLEET_UUID_STRLEN - 1)
                        abort();
        strv_free(tree);
}

static void check_max_version(const json_t *answer)
{
        unsigned major = 4242, minor = 4242;
        int r = fleet_answer_max_version(answer, &major, &minor);
        if (r < 0) {
                if (r != -EPROTO || major != 4242 || minor != 4242)
                        abort();
                return;
        }
        if (r != 0 || major == 0)
                abort();
        /* One listed version spells it in digits only: no sign, space or wrapped-around
         * number. */
        const json_t *v;
        size_t i;
        bool found = false;
        json_array_foreach (json_object_get(answer, "versions"), i, v) {
                const char *t = json_string_value(json_object_get(v, "max_version"));
                const char *dot = t ? strchr(t, '.') : NULL;
                if (!dot || dot == t || !dot[1] || strspn(t, "0123456789") != (size_t)(dot - t) ||
                    strspn(dot + 1, "0123456789") != strlen(dot + 1))
                        continue;
                found = found ||
                        (strtoull(t, NULL, 10) == major && strtoull(dot + 1, NULL, 10) == minor);
        }
        if (!found)
                abort();
}

static void check_token_expiry(const json_t *answer)
{
        Timestamp sentinel = {.sec = 42, .nsec = 42}, exp = sentinel;
        int r = fleet_answer_token_expiry(answer, &exp);
        const char *s =
            json_string_value(json_object_get(json_object_get(answer, "token"), "expires_at"));
        if (r < 0) {
                if (r != -EPROTO || exp.sec != sentinel.sec || exp.nsec != sentinel.nsec)
                        abort();
                return;
        }
        Timestamp again;
        if (r != 0 || !s || exp.nsec >= NSEC_PER_SEC || parse_timestamp(s, &again) < 0 ||
            timestamp_compare(exp, again) != 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* fleet_http_request()'s parse of a body; NULL (not JSON) goes to the readers too. */
        json_auto_t *answer = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);

        check_generation(answer, "generation");
        check_generation(answer, "resource_provider_generation");
        check_inventories(answer);
        check_traits(answer);
        check_consumers(answer);
        check_tree(answer);
        check_max_version(answer);
        check_token_expiry(answer);

        /* The error texts unexpected() appends, from a failure body. */
        const char *code = fleet_http_error_code(answer), *detail = fleet_http_error_detail(answer);
        if ((code && strlen(code) > size) || (detail && strlen(detail) > size))
                abort();
        return 0;
}
