/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Pieces of the http module shared between its files, and reachable by its tests and fuzzers. */

#include "http.h"

/* ---- request targets (http-route.c) ------------------------------------------------------------
 */

typedef struct HttpParam {
        char *name;
        char *value;
} HttpParam;

void http_params_free(HttpParam *params, size_t n);

typedef struct HttpTarget {
        char *path;      /* raw, as sent, without the query */
        char **segments; /* percent-decoded path segments, NULL-terminated */
        size_t n_segments;
        HttpParam *query; /* decoded, in the order given, names unique */
        size_t n_query;
} HttpTarget;

/*
 * Splits a raw request target ("/a/b%20c?x=1&y") into its path, decoded segments and decoded
 * query parameters. -EINVAL with a client-facing message in *error for a target that is not
 * an absolute path, characters RFC 3986 does not allow there, malformed escapes, segments "."
 * or "..", a decoded "/" or NUL in a segment, an empty query component or name, or a query
 * parameter given twice; -ENOMEM with `out of memory`.
 */
int http_target_parse(const char *raw, HttpTarget *ret, char **error);
void http_target_done(HttpTarget *t);

/* ---- routing (http-route.c) --------------------------------------------------------------------
 */

/*
 * The route for method and the decoded segments: 0 and *ret_index; -ENOENT when no route has
 * this path; -EPERM when routes have it, but none with this method.
 */
int http_route_find(const HttpRoute *routes, size_t n_routes, const char *method,
                    char *const *segments, size_t n_segments, size_t *ret_index);

/* The Allow value for a path: its routes' methods, sorted, ", "-separated. */
int http_route_allow(const HttpRoute *routes, size_t n_routes, char *const *segments,
                     size_t n_segments, char **ret);

/* The values of route's parameters taken from the matching segments. */
int http_route_params(const HttpRoute *route, char *const *segments, size_t n_segments,
                      HttpParam **ret, size_t *ret_n);

/* -EINVAL with *error `unknown query parameter "<name>"` for a name the route does not take. */
int http_route_check_query(const HttpRoute *route, const HttpParam *query, size_t n_query,
                           char **error);

/* ---- listening sockets (http-address.c) -------------------------------------------------------
 */

struct stat;

/* A bound, listening, non-blocking TCP socket, and the address it got (the real port). */
int http_listen_tcp(const HttpAddress *a, int *ret_fd, HttpAddress *ret_bound);

/*
 * A listening Unix socket at path with the given mode. A stale socket file is replaced; a live
 * one is -EADDRINUSE, any other file -EEXIST. ret_st identifies the socket file, so that only
 * this one is removed later.
 */
int http_listen_unix(const char *path, mode_t mode, int *ret_fd, struct stat *ret_st);

/* ---- WebSocket sessions (http-websocket.c) ----------------------------------------------------
 */

/* A session that is not upgraded yet. */
HttpWebSocket *http_websocket_new(sd_event *event, const HttpWebSocketConfig *config);
/*
 * The 101 is out: the session runs on fd from now on, extra (bytes MHD read past the request)
 * first. release(handle) gives the connection back to MHD to close; it is called once.
 */
void http_websocket_upgraded(HttpWebSocket *ws, int fd, const char *extra, size_t extra_size,
                             void (*release)(void *handle), void *handle);
/* The connection is over whatever the session's state (the server goes, or no upgrade came). */
void http_websocket_abort(HttpWebSocket *ws);
