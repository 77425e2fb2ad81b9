/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Request targets, the route table, and strict JSON bodies. */
#include "http-internal.h"

void http_params_free(HttpParam *params, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(params[i].name);
                free(params[i].value);
        }
        free(params);
}

/* ---- request targets ------------------------------------------------------------------------- */

static bool is_unreserved_or_subdelim(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               (c != 0 && strchr("-._~!$&'()*+,;=:@", c));
}

/*
 * Decodes n bytes of s. Raw bytes must be pchars (RFC 3986), plus "/" and "?" in a query;
 * "%XX" must be two hex digits and must not encode NUL.
 */
static int percent_decode(const char *s, size_t n, bool in_query, char **ret)
{
        _cleanup_free_ char *out = malloc(n + 1);
        if (!out)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] == '%') {
                        if (n - i < 3)
                                return -EINVAL;
                        int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
                        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                                return -EINVAL;
                        out[k++] = (char)(hi << 4 | lo);
                        i += 2;
                } else if (!is_unreserved_or_subdelim(s[i]) &&
                           !(in_query && (s[i] == '/' || s[i] == '?')))
                        return -EINVAL;
                else
                        out[k++] = s[i];
        }
        out[k] = 0;
        *ret = TAKE_PTR(out);
        return 0;
}

static int parse_segments(const char *path, char ***ret, size_t *ret_n, char **error)
{
        _cleanup_strv_free_ char **segments = NULL;

        /* path starts with "/": every segment follows one. */
        for (const char *p = path + 1;; p++) {
                size_t len = strcspn(p, "/");
                _cleanup_free_ char *seg = NULL;
                int r = percent_decode(p, len, false, &seg);
                if (r == -EINVAL)
                        return error_set(error, r, "invalid character or escape in path");
                if (r < 0)
                        return error_set_oom(error);
                if (strchr(seg, '/'))
                        return error_set(error, -EINVAL, "encoded \"/\" in path segment");
                if (streq(seg, ".") || streq(seg, ".."))
                        return error_set(error, -EINVAL, "path segment \"%s\" not allowed", seg);
                if (strv_push(&segments, seg) < 0)
                        return error_set_oom(error);
                if (!p[len])
                        break;
                p += len;
        }
        *ret_n = strv_length(segments);
        *ret = TAKE_PTR(segments);
        return 0;
}

/* Appends (name, value), taking both on success. */
static int params_push(HttpParam **params, size_t *n, char **name, char **value)
{
        HttpParam *grown = realloc(*params, (*n + 1) * sizeof **params);
        if (!grown)
                return -ENOMEM;
        *params = grown;
        grown[(*n)++] = (HttpParam){TAKE_PTR(*name), TAKE_PTR(*value)};
        return 0;
}

/* One "name[=value]" component of a query, len bytes at p. */
static int parse_query_component(const char *p, size_t len, char **ret_name, char **ret_value,
                                 char **error)
{
        _cleanup_free_ char *name = NULL, *value = NULL;
        const char *eq = memchr(p, '=', len);
        size_t name_len = eq ? (size_t)(eq - p) : len;

        int r = name_len == 0 ? -EINVAL : percent_decode(p, name_len, true, &name);
        if (r >= 0)
                r = percent_decode(p + name_len + !!eq, len - name_len - !!eq, true, &value);
        if (r == -EINVAL)
                return error_set(error, r, "invalid query string");
        if (r < 0)
                return error_set_oom(error);
        *ret_name = TAKE_PTR(name);
        *ret_value = TAKE_PTR(value);
        return 0;
}

static int parse_query(const char *query, HttpParam **ret, size_t *ret_n, char **error)
{
        HttpParam *params = NULL;
        size_t n = 0;
        int r;

        for (const char *p = query;; p++) {
                size_t len = strcspn(p, "&");
                _cleanup_free_ char *name = NULL, *value = NULL;
                r = parse_query_component(p, len, &name, &value, error);
                for (size_t i = 0; r >= 0 && i < n; i++)
                        if (streq(params[i].name, name))
                                r = error_set(error, -EINVAL, "query parameter \"%s\" given twice",
                                              name);
                if (r >= 0 && params_push(&params, &n, &name, &value) < 0)
                        r = error_set_oom(error);
                if (r < 0 || !p[len])
                        break;
                p += len;
        }
        if (r < 0) {
                http_params_free(params, n);
                return r;
        }
        *ret = params;
        *ret_n = n;
        return 0;
}

void http_target_done(HttpTarget *t)
{
        free(t->path);
        strv_freep(&t->segments);
        http_params_free(t->query, t->n_query);
        *t = (HttpTarget){0};
}

int http_target_parse(const char *raw, HttpTarget *ret, char **error)
{
        _cleanup_(http_target_done) HttpTarget t = {0};

        if (raw[0] != '/')
                return error_set(error, -EINVAL, "request target must be an absolute path");

        const char *q = strchr(raw, '?');
        t.path = q ? strndup(raw, (size_t)(q - raw)) : strdup(raw);
        if (!t.path)
                return error_set_oom(error);
        int r = parse_segments(t.path, &t.segments, &t.n_segments, error);
        if (r < 0)
                return r;
        if (q && q[1]) {
                r = parse_query(q + 1, &t.query, &t.n_query, error);
                if (r < 0)
                        return r;
        }
        *ret = t;
        t = (HttpTarget){0};
        return 0;
}

/* ---- routes ---------------------------------------------------------------------------------- */

static bool segment_is_param(const char *seg, size_t len)
{
        return len >= 2 && seg[0] == '{' && seg[len - 1] == '}';
}

/* Whether the decoded segments match pattern; a parameter matches any non-empty segment. */
static bool pattern_matches(const char *pattern, char *const *segments, size_t n_segments)
{
        size_t i = 0;
        for (const char *p = pattern + 1;; i++) {
                size_t len = strcspn(p, "/");
                if (i >= n_segments)
                        return false;
                if (segment_is_param(p, len)) {
                        if (!segments[i][0])
                                return false;
                } else if (strlen(segments[i]) != len || strncmp(segments[i], p, len) != 0)
                        return false;
                if (!p[len])
                        break;
                p += len + 1;
        }
        return i + 1 == n_segments;
}

int http_route_find(const HttpRoute *routes, size_t n_routes, const char *method,
                    char *const *segments, size_t n_segments, size_t *ret_index)
{
        bool path_known = false;
        for (size_t i = 0; i < n_routes; i++) {
                if (!pattern_matches(routes[i].pattern, segments, n_segments))
                        continue;
                if (streq(routes[i].method, method)) {
                        *ret_index = i;
                        return 0;
                }
                path_known = true;
        }
        return path_known ? -EPERM : -ENOENT;
}

int http_route_allow(const HttpRoute *routes, size_t n_routes, char *const *segments,
                     size_t n_segments, char **ret)
{
        _cleanup_free_ const char **methods = calloc(n_routes + 1, sizeof *methods);
        if (!methods)
                return -ENOMEM;
        size_t n = 0;
        for (size_t i = 0; i < n_routes; i++)
                if (pattern_matches(routes[i].pattern, segments, n_segments))
                        methods[n++] = routes[i].method;
        qsort(methods, n, sizeof *methods, strv_compare);

        _cleanup_free_ char *allow = strdup("");
        if (!allow)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (i > 0 && streq(methods[i], methods[i - 1]))
                        continue;
                int r = strextend(&allow, "%s%s", *allow ? ", " : "", methods[i]);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(allow);
        return 0;
}

int http_route_params(const HttpRoute *route, char *const *segments, size_t n_segments,
                      HttpParam **ret, size_t *ret_n)
{
        HttpParam *params = NULL;
        size_t n = 0;
        int r = 0;

        const char *p = route->pattern + 1;
        for (size_t i = 0; i < n_segments && r >= 0; i++) {
                size_t len = strcspn(p, "/");
                if (segment_is_param(p, len)) {
                        _cleanup_free_ char *name = strndup(p + 1, len - 2);
                        _cleanup_free_ char *value = strdup(segments[i]);
                        r = name && value ? params_push(&params, &n, &name, &value) : -ENOMEM;
                }
                if (!p[len])
                        break;
                p += len + 1;
        }
        if (r < 0) {
                http_params_free(params, n);
                return r;
        }
        *ret = params;
        *ret_n = n;
        return 0;
}

int http_route_check_query(const HttpRoute *route, const HttpParam *query, size_t n_query,
                           char **error)
{
        for (size_t i = 0; i < n_query; i++) {
                bool known = false;
                for (const char *const *q = route->query; q && *q && !known; q++)
                        known = streq(*q, query[i].name);
                if (!known)
                        return error_set(error, -EINVAL, "unknown query parameter \"%s\"",
                                         query[i].name);
        }
        return 0;
}

static bool method_is_valid(const char *m)
{
        if (!m || !*m)
                return false;
        for (; *m; m++)
                if (*m < 'A' || *m > 'Z')
                        return false;
        return true;
}

static bool param_name_is_valid(const char *s, size_t len)
{
        if (len == 0)
                return false;
        for (size_t i = 0; i < len; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '_'))
                        return false;
        return true;
}

static bool literal_is_valid(const char *s, size_t len)
{
        if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
                return false;
        for (size_t i = 0; i < len; i++)
                if (!is_unreserved_or_subdelim(s[i]) || s[i] == '{' || s[i] == '}')
                        return false;
        return true;
}

/*
 * A pattern's segments, each either a valid literal or "{name}" with a name used once; the last
 * may be empty, a trailing slash, which the router never strips ("/ui/" is a page, "/ui" not).
 */
static bool pattern_is_valid(const char *pattern)
{
        if (!pattern || pattern[0] != '/')
                return false;
        if (streq(pattern, "/"))
                return true;

        for (const char *p = pattern + 1;;) {
                size_t len = strcspn(p, "/");
                if (segment_is_param(p, len)) {
                        if (!param_name_is_valid(p + 1, len - 2))
                                return false;
                        /* The same "{name}" earlier in the pattern? */
                        for (const char *e = pattern; (e = strstr(e, "{")) && e < p; e++)
                                if (strncmp(e, p, len) == 0)
                                        return false;
                } else if (!literal_is_valid(p, len) && !(len == 0 && !p[len]))
                        return false;
                if (!p[len])
                        return true;
                p += len + 1;
        }
}

/* Whether some path matches both patterns: same length, and no two literals differ. */
static bool patterns_overlap(const char *a, const char *b)
{
        const char *p = a + 1, *q = b + 1;
        for (;;) {
                size_t la = strcspn(p, "/"), lb = strcspn(q, "/");
                bool pp = segment_is_param(p, la), qp = segment_is_param(q, lb);
                if (!pp && !qp && (la != lb || strncmp(p, q, la) != 0))
                        return false;
                /* A parameter never matches the empty segment of a trailing slash. */
                if ((pp && lb == 0) || (qp && la == 0))
                        return false;
                if (!p[la] || !q[lb])
                        return !p[la] && !q[lb];
                p += la + 1;
                q += lb + 1;
        }
}

int http_routes_validate(const HttpRoute *routes, size_t n_routes, char **error)
{
        for (size_t i = 0; i < n_routes; i++) {
                const HttpRoute *r = &routes[i];
                const char *pattern = r->pattern ? r->pattern : "(null)";
                if (!method_is_valid(r->method) || !pattern_is_valid(r->pattern) || !r->handler)
                        return error_set(error, -EINVAL, "route %s %s: invalid",
                                         r->method ? r->method : "(null)", pattern);
                for (const char *const *q = r->query; q && *q; q++)
                        if (!**q)
                                return error_set(error, -EINVAL,
                                                 "route %s %s: empty query parameter name",
                                                 r->method, pattern);
                for (size_t j = 0; j < i; j++)
                        if (streq(routes[j].method, r->method) &&
                            patterns_overlap(routes[j].pattern, r->pattern))
                                return error_set(error, -EINVAL, "route %s %s: overlaps with %s %s",
                                                 r->method, pattern, routes[j].method,
                                                 routes[j].pattern);
        }
        return 0;
}

/* ---- JSON bodies ----------------------------------------------------------------------------- */

int http_json_parse_body(const void *buf, size_t size, json_t **ret, char **error)
{
        if (size == 0)
                return error_set(error, -EINVAL, "invalid JSON body: the body is empty");
        if (json_text_too_deep(buf, size, JSON_DEPTH_MAX))
                return error_set(error, -EINVAL, "invalid JSON body: nested deeper than %d levels",
                                 JSON_DEPTH_MAX);

        json_error_t e;
        json_t *j = json_loadb(buf, size, JSON_REJECT_DUPLICATES, &e);
        if (!j)
                return error_set(error, -EINVAL, "invalid JSON body: %s (line %d, column %d)",
                                 e.text, e.line, e.column);
        if (!json_is_object(j)) {
                json_decref(j);
                return error_set(error, -EINVAL, "invalid JSON body: expected an object");
        }
        *ret = j;
        return 0;
}
