/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The HTTP exchanges of the sync, with libcurl's easy interface on the sync's worker thread.
 * Every exchange has a connect and a total timeout, so an absent or hung Placement costs the
 * worker a bounded wait and the loop nothing.
 */
#include <curl/curl.h>
#include <strings.h>
#include <sys/param.h>

#include "fleet-internal.h"

typedef struct Buffer {
        char *data;
        size_t size;
        bool too_big;
} Buffer;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
        Buffer *b = userdata;
        size_t n = size * nmemb;
        if (b->size + n > FLEET_HTTP_BODY_MAX) {
                b->too_big = true;
                return 0; /* curl stops with CURLE_WRITE_ERROR */
        }
        char *d = realloc(b->data, b->size + n + 1);
        if (!d)
                return 0;
        memcpy(d + b->size, ptr, n);
        b->data = d;
        b->size += n;
        d[b->size] = 0;
        return n;
}

typedef struct Headers {
        char *subject_token;
} Headers;

static size_t on_header(char *buffer, size_t size, size_t nitems, void *userdata)
{
        Headers *h = userdata;
        size_t n = size * nitems;
        static const char name[] = "x-subject-token:";
        if (n > sizeof name - 1 && strncasecmp(buffer, name, sizeof name - 1) == 0 &&
            !h->subject_token) {
                const char *v = buffer + sizeof name - 1;
                size_t len = n - (sizeof name - 1);
                while (len > 0 && (*v == ' ' || *v == '\t'))
                        v++, len--;
                while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
                        len--;
                h->subject_token = strndup(v, len);
        }
        return n;
}

int fleet_http_init(FleetHttp *h, long timeout_ms)
{
        CURL *c = curl_easy_init();
        if (!c)
                return -ENOMEM;
        *h = (FleetHttp){.curl = c, .timeout_ms = timeout_ms};
        return 0;
}

void fleet_http_done(FleetHttp *h)
{
        if (h->curl)
                curl_easy_cleanup(h->curl);
        h->curl = NULL;
}

int fleet_http_request(FleetHttp *h, const char *method, const char *url, const json_t *body,
                       long *ret_status, json_t **ret_body, char **ret_subject_token, char **error)
{
        CURL *c = h->curl;
        _cleanup_free_ char *text = NULL, *auth = NULL;
        struct curl_slist *headers = NULL;
        Buffer resp = {};
        Headers hdr = {};
        int r = 0;

        if (body && !(text = json_dumps(body, JSON_COMPACT)))
                return error_set_oom(error);
        if (h->token && strprintf(&auth, "X-Auth-Token: %s", h->token) < 0)
                return error_set_oom(error);

        curl_easy_reset(c);
        const char *lines[] = {"Accept: application/json",
                               "OpenStack-API-Version: placement " FLEET_MICROVERSION,
                               text ? "Content-Type: application/json" : NULL, auth};
        for (size_t i = 0; i < ELEMENTSOF(lines); i++) {
                if (!lines[i])
                        continue;
                struct curl_slist *n = curl_slist_append(headers, lines[i]);
                if (!n) {
                        curl_slist_free_all(headers);
                        return error_set_oom(error);
                }
                headers = n;
        }

        (void)curl_easy_setopt(c, CURLOPT_URL, url);
        (void)curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        (void)curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* a worker thread: no SIGALRM */
        (void)curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->timeout_ms);
        (void)curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, MAX(h->timeout_ms / 3, 100L));
        (void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        (void)curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        if (text) {
                (void)curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
                (void)curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
        } else if (streq(method, "GET"))
                (void)curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        (void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        (void)curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp);
        (void)curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        (void)curl_easy_setopt(c, CURLOPT_HEADERDATA, &hdr);

        h->requests++;
        CURLcode cc = curl_easy_perform(c);
        curl_slist_free_all(headers);
        if (cc != CURLE_OK) {
                if (resp.too_big)
                        r = error_set(error, -EFBIG, "%s %s: response larger than %zu bytes",
                                      method, url, FLEET_HTTP_BODY_MAX);
                else
                        r = error_set(error, cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO,
                                      "%s %s: %s", method, url, curl_easy_strerror(cc));
                free(resp.data);
                free(hdr.subject_token);
                return r;
        }

        long status = 0;
        (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        json_t *j = NULL;
        if (resp.data && resp.size > 0 && !json_text_too_deep(resp.data, resp.size, 32))
                j = json_loadb(resp.data, resp.size, JSON_REJECT_DUPLICATES, NULL);
        free(resp.data);

        *ret_status = status;
        *ret_body = j;
        if (ret_subject_token)
                *ret_subject_token = hdr.subject_token;
        else
                free(hdr.subject_token);
        return 0;
}

static const json_t *first_error(const json_t *body)
{
        const json_t *errors = json_object_get(body, "errors");
        return json_is_array(errors) ? json_array_get(errors, 0) : NULL;
}

const char *fleet_http_error_code(const json_t *body)
{
        return json_string_value(json_object_get(first_error(body), "code"));
}

const char *fleet_http_error_detail(const json_t *body)
{
        return json_string_value(json_object_get(first_error(body), "detail"));
}
