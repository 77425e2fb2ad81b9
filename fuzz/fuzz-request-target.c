/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes the request-target parser and the router (API-3, REL-5, REL-7): the raw path and
 * query as a client sends them, before anything else looks at them.
 *
 * Properties: an accepted target starts with "/", its path is the input up to the first "?",
 * no decoded segment is "." or ".." or holds a "/" or NUL, query names are non-empty and
 * unique; routing then finds at most the routes whose method and shape fit, and every path
 * parameter it extracts is a non-empty decoded segment. A refusal has a message.
 */
#include "http/http-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int handler(HttpRequest *req, void *userdata)
{
        return 0;
}

/* A table shaped like the daemon's (API-2). */
static const HttpRoute routes[] = {
    {"GET", "/resources", handler},
    {"GET", "/instances", handler},
    {"POST", "/instances", handler},
    {"GET", "/instances/{id}", handler},
    {"DELETE", "/instances/{id}", handler},
    {"POST", "/instances/{id}/start", handler},
    {"GET", "/instances/{id}/console", handler, .query = (const char *const[]){"tail_bytes", NULL}},
    {"POST", "/gpu/vfs/{address}/quarantine", handler},
    {"DELETE", "/gpu/vfs/{address}/quarantine", handler},
    {"GET", "/healthz", handler, .public = true},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const char *const methods[] = {"GET", "POST", "DELETE", "PUT"};
        _cleanup_free_ char *raw = strndup((const char *)data, size);
        _cleanup_free_ char *error = NULL;
        HttpTarget t;

        if (!raw || strlen(raw) != size)
                return 0;
        int r = http_target_parse(raw, &t, &error);
        if (r == -ENOMEM)
                return 0;
        if (r < 0) {
                if (r != -EINVAL || !error)
                        abort();
                return 0;
        }

        size_t path_len = strcspn(raw, "?");
        if (raw[0] != '/' || strlen(t.path) != path_len || strncmp(t.path, raw, path_len) != 0 ||
            t.n_segments < 1 || t.segments[t.n_segments] != NULL)
                abort();
        for (size_t i = 0; i < t.n_segments; i++)
                if (streq(t.segments[i], ".") || streq(t.segments[i], "..") ||
                    strchr(t.segments[i], '/'))
                        abort();
        for (size_t i = 0; i < t.n_query; i++) {
                if (!t.query[i].name[0])
                        abort();
                for (size_t k = 0; k < i; k++)
                        if (streq(t.query[i].name, t.query[k].name))
                                abort();
        }

        for (size_t m = 0; m < ELEMENTSOF(methods); m++) {
                size_t index;
                r = http_route_find(routes, ELEMENTSOF(routes), methods[m], t.segments,
                                    t.n_segments, &index);
                if (r == -EPERM || r == -ENOENT)
                        continue;
                if (r < 0 || !streq(routes[index].method, methods[m]))
                        abort();
                HttpParam *params = NULL;
                size_t n = 0;
                if (http_route_params(&routes[index], t.segments, t.n_segments, &params, &n) < 0)
                        continue;
                for (size_t i = 0; i < n; i++)
                        if (!params[i].value[0])
                                abort();
                http_params_free(params, n);
                (void)http_route_check_query(&routes[index], t.query, t.n_query, NULL);
        }
        http_target_done(&t);
        return 0;
}
