/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * API-19: the router and api/openapi.yaml list the same (method, path) pairs, and the served
 * document is the repository's file byte for byte. Also the route table's own rules: it
 * validates, public routes are exactly /healthz, /readyz, /openapi.yaml and /ui (API-12), every
 * instance route of API-2 is there, and only the console route takes a query parameter. And
 * API-21's code and status for each claim failure kind.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <yaml.h>

#include "api/api.h"

static const char *openapi_path;

static int compare_strings(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static yaml_node_t *mapping_get(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
        if (!map || map->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
             p++) {
                yaml_node_t *k = yaml_document_get_node(doc, p->key);
                if (k && k->type == YAML_SCALAR_NODE && streq((char *)k->data.scalar.value, key))
                        return yaml_document_get_node(doc, p->value);
        }
        return NULL;
}

/* "GET /resources" for every operation under paths:, sorted. */
static char **document_routes(void)
{
        static const char *const methods[] = {"get",   "put",  "post",    "delete",
                                              "patch", "head", "options", "trace"};
        FILE *f = fopen(openapi_path, "re");
        assert_non_null(f);
        yaml_parser_t parser;
        yaml_document_t doc;
        assert_true(yaml_parser_initialize(&parser));
        yaml_parser_set_input_file(&parser, f);
        assert_true(yaml_parser_load(&parser, &doc));

        yaml_node_t *paths = mapping_get(&doc, yaml_document_get_root_node(&doc), "paths");
        assert_non_null(paths);
        assert_int_equal(paths->type, YAML_MAPPING_NODE);

        char **v = NULL;
        for (yaml_node_pair_t *p = paths->data.mapping.pairs.start;
             p < paths->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(&doc, p->key);
                yaml_node_t *ops = yaml_document_get_node(&doc, p->value);
                assert_int_equal(ops->type, YAML_MAPPING_NODE);
                for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                        if (!mapping_get(&doc, ops, methods[i]))
                                continue;
                        char upper[16];
                        size_t n = strlen(methods[i]);
                        for (size_t c = 0; c <= n; c++)
                                upper[c] = (char)(methods[i][c] >= 'a' && methods[i][c] <= 'z'
                                                      ? methods[i][c] - 'a' + 'A'
                                                      : methods[i][c]);
                        char *route = NULL;
                        assert_true(
                            strprintf(&route, "%s %s", upper, (char *)k->data.scalar.value) >= 0);
                        assert_true(strv_push(&v, route) >= 0);
                        free(route);
                }
        }
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        fclose(f);
        qsort(v, strv_length(v), sizeof *v, compare_strings);
        return v;
}

static char **router_routes(void)
{
        size_t n;
        const HttpRoute *routes = api_routes(&n);
        char **v = NULL;
        for (size_t i = 0; i < n; i++) {
                char *route = NULL;
                assert_true(strprintf(&route, "%s %s", routes[i].method, routes[i].pattern) >= 0);
                assert_true(strv_push(&v, route) >= 0);
                free(route);
        }
        qsort(v, strv_length(v), sizeof *v, compare_strings);
        return v;
}

/* API-19 */
static void test_router_and_document_agree(void **state)
{
        _cleanup_strv_free_ char **doc = document_routes();
        _cleanup_strv_free_ char **router = router_routes();
        size_t n = strv_length(router), n_doc = strv_length(doc);

        for (size_t i = 0; i < n || i < n_doc; i++)
                if (i >= n || i >= n_doc || !streq(router[i], doc[i]))
                        fail_msg("router has %s where the document has %s",
                                 i < n ? router[i] : "nothing", i < n_doc ? doc[i] : "nothing");
}

/* API-19 */
static void test_embedded_document_is_the_file(void **state)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;
        assert_int_equal(read_file_at(AT_FDCWD, openapi_path, 1 << 20, &buf, &size), 0);
        assert_int_equal(size, api_openapi_yaml_size);
        assert_memory_equal(buf, api_openapi_yaml, size);
        assert_int_equal(api_openapi_yaml[size], 0);
}

/* API-2, API-12, CONS-2, CONS-3 */
static void test_route_table(void **state)
{
        size_t n;
        const HttpRoute *routes = api_routes(&n);
        _cleanup_free_ char *error = NULL;
        assert_int_equal(http_routes_validate(routes, n, &error), 0);

        for (size_t i = 0; i < n; i++) {
                bool public_path =
                    streq(routes[i].pattern, "/healthz") || streq(routes[i].pattern, "/readyz") ||
                    streq(routes[i].pattern, "/openapi.yaml") ||
                    /* the web VF map's static files, no host data in them */
                    streq(routes[i].pattern, "/ui") || startswith(routes[i].pattern, "/ui/");
                assert_int_equal(routes[i].public, public_path);
                /* CONS-3: only the console's attach takes its token as a subprotocol too. */
                assert_int_equal(routes[i].websocket,
                                 streq(routes[i].pattern, "/instances/{id}/console/attach"));
                if (streq(routes[i].pattern, "/instances/{id}/console")) {
                        assert_non_null(routes[i].query);
                        assert_string_equal(routes[i].query[0], "tail_bytes");
                        assert_string_equal(routes[i].query[1], "follow");
                        assert_null(routes[i].query[2]);
                } else
                        assert_null(routes[i].query);
        }

        /* API-2's instance routes, INST-24's refused ones included. */
        static const char *const instance_routes[][2] = {
            {"GET", "/instances"},
            {"POST", "/instances"},
            {"GET", "/instances/{id}"},
            {"DELETE", "/instances/{id}"},
            {"POST", "/instances/{id}/start"},
            {"POST", "/instances/{id}/stop"},
            {"POST", "/instances/{id}/standby"},
            {"POST", "/instances/{id}/snapshot"},
            {"POST", "/instances/{id}/fork"},
            {"GET", "/instances/{id}/console"},
            {"GET", "/instances/{id}/console/attach"},
        };
        for (size_t k = 0; k < ELEMENTSOF(instance_routes); k++) {
                bool found = false;
                for (size_t i = 0; i < n; i++)
                        found = found || (streq(routes[i].method, instance_routes[k][0]) &&
                                          streq(routes[i].pattern, instance_routes[k][1]));
                if (!found)
                        fail_msg("route %s %s missing", instance_routes[k][0],
                                 instance_routes[k][1]);
        }
}

static void test_claim_failure_mapping(void **state) /* API-21 */
{
        static const struct {
                ClaimFailure failure;
                const char *code;
                int status;
        } table[] = {
            {CLAIM_FAILURE_UNKNOWN_PROFILE, "unknown_profile", 400},
            {CLAIM_FAILURE_INSUFFICIENT_RESOURCES, "insufficient_resources", 409},
            {CLAIM_FAILURE_PLACEMENT_DISABLED, "placement_disabled", 503},
            {CLAIM_FAILURE_INTERNAL, "internal", 500},
            /* A failure without a kind is an internal one, never a success. */
            {CLAIM_FAILURE_NONE, "internal", 500},
        };
        for (size_t i = 0; i < ELEMENTSOF(table); i++) {
                assert_string_equal(api_claim_failure_code(table[i].failure), table[i].code);
                assert_int_equal(api_claim_failure_status(table[i].failure), table[i].status);
        }
}

int main(int argc, char **argv)
{
        if (argc != 2) {
                fprintf(stderr, "usage: %s OPENAPI_YAML\n", argv[0]);
                return 2;
        }
        openapi_path = argv[1];
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_router_and_document_agree),
            cmocka_unit_test(test_embedded_document_is_the_file),
            cmocka_unit_test(test_route_table),
            cmocka_unit_test(test_claim_failure_mapping),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
