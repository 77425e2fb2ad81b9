/* SPDX-License-Identifier: GPL-2.0-or-later */
/* One request to vgpud with libcurl, over TCP or the daemon's Unix socket. */
#include <curl/curl.h>

#include "config.h"
#include "ctl.h"

typedef struct Sink {
        CURL *curl;
        FILE *stream; /* a 2xx body goes here as it arrives (CtlRequest.stream) */
        bool streamed;
        bool stream_failed;
        char *data;
        size_t size;
        size_t capacity;
        bool too_large;
        bool no_memory;
} Sink;

void ctl_response_done(CtlResponse *r)
{
        free(r->body);
        *r = (CtlResponse){};
}

static void curl_easy_cleanupp(CURL **c)
{
        if (*c)
                curl_easy_cleanup(*c);
}

static void curl_slist_free_allp(struct curl_slist **l)
{
        if (*l)
                curl_slist_free_all(*l);
}

/* libcurl's write callback: any return other than n aborts the transfer. */
static size_t sink_write(char *p, size_t size, size_t nmemb, void *userdata)
{
        Sink *s = userdata;
        size_t n = size * nmemb;

        long status = 0;
        if (s->stream && curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
            status >= 200 && status <= 299) {
                /* CONS-2: the console as it comes, each piece out at once. */
                s->streamed = true;
                if (fwrite(p, 1, n, s->stream) != n || fflush(s->stream) != 0) {
                        s->stream_failed = true;
                        return 0;
                }
                return n;
        }
        if (n > CTL_RESPONSE_MAX - s->size) {
                s->too_large = true;
                return 0;
        }
        if (s->size + n + 1 > s->capacity) {
                size_t capacity = s->capacity ? s->capacity : 16384;
                while (capacity < s->size + n + 1)
                        capacity *= 2;
                char *grown = realloc(s->data, capacity);
                if (!grown) {
                        s->no_memory = true;
                        return 0;
                }
                s->data = grown;
                s->capacity = capacity;
        }
        memcpy(s->data + s->size, p, n);
        s->size += n;
        s->data[s->size] = 0;
        return n;
}

static int header_append(struct curl_slist **l, const char *h)
{
        struct curl_slist *n = curl_slist_append(*l, h);
        if (!n)
                return -ENOMEM;
        *l = n;
        return 0;
}

int ctl_http_request(const CtlArgs *args, const CtlEnv *env, const CtlRequest *req,
                     CtlResponse *ret, char **error)
{
        _cleanup_(curl_easy_cleanupp) CURL *curl = curl_easy_init();
        _cleanup_(curl_slist_free_allp) struct curl_slist *headers = NULL;
        _cleanup_free_ char *url = NULL, *where = NULL, *authorization = NULL, *accept = NULL;
        _cleanup_free_ char *sink_data = NULL;
        char curl_error[CURL_ERROR_SIZE] = "";
        Sink sink = {.curl = curl, .stream = req->stream};
        int r;

        if (!curl)
                return error_set_oom(error);

        /* On the Unix socket the host part only fills the Host header. */
        if (strprintf(&url, "%s%s", args->unix_socket ? "http://localhost" : args->url, req->path) <
                0 ||
            strprintf(&where, "%s%s", args->unix_socket ? "unix:" : "",
                      args->unix_socket ? args->unix_socket : args->url) < 0)
                return error_set_oom(error);

        r = strprintf(&accept, "Accept: %s", req->accept);
        if (r >= 0)
                r = header_append(&headers, accept);
        /* A body is tiny; waiting for "100 Continue" would only add a round trip. */
        if (r >= 0)
                r = header_append(&headers, "Expect:");
        if (r >= 0 && req->json_body)
                r = header_append(&headers, "Content-Type: application/json");
        for (const char *const *h = req->headers; r >= 0 && h && *h; h++)
                r = header_append(&headers, *h);
        if (r >= 0 && args->token) {
                r = strprintf(&authorization, "Authorization: Bearer %s", args->token);
                if (r >= 0)
                        r = header_append(&headers, authorization);
        }
        if (r < 0)
                return error_set_oom(error);

        CURLcode c = curl_easy_setopt(curl, CURLOPT_URL, url);
        if (c == CURLE_OK && args->unix_socket)
                c = curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, args->unix_socket);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, env->connect_timeout_ms);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, req->timeout_ms);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)CTL_RESPONSE_MAX);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_USERAGENT, "vgpuctl/" VGPUD_VERSION);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, sink_write);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
        if (c == CURLE_OK && req->json_body) {
                c = curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                                     (curl_off_t)strlen(req->json_body));
                if (c == CURLE_OK)
                        c = curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req->json_body);
        }
        /* After POSTFIELDS, which would otherwise turn every request into a POST. */
        if (c == CURLE_OK)
                c = curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req->method);
        if (c != CURLE_OK)
                return error_set(error, -EINVAL, "set up request to %s: %s", where,
                                 curl_easy_strerror(c));

        c = curl_easy_perform(curl);
        sink_data = sink.data;

        if (sink.too_large || c == CURLE_FILESIZE_EXCEEDED)
                return error_set(error, -EMSGSIZE, "response from %s is larger than %d bytes",
                                 where, CTL_RESPONSE_MAX);
        if (sink.no_memory || c == CURLE_OUT_OF_MEMORY)
                return error_set_oom(error);
        if (sink.stream_failed)
                return error_set(error, -EPIPE, "write output: %m");
        if (c != CURLE_OK) {
                /*
                 * The system's reason ("Connection refused", "No such file or directory") says
                 * more than libcurl's text, which on a Unix socket even names port 80.
                 */
                long os_errno = 0;
                if (c != CURLE_COULDNT_CONNECT ||
                    curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK)
                        os_errno = 0;
                const char *why = os_errno > 0    ? strerror((int)os_errno)
                                  : curl_error[0] ? curl_error
                                                  : curl_easy_strerror(c);
                return error_set(error, c == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECOMM,
                                 "cannot reach %s at %s: %s", req->peer ? req->peer : "vgpud",
                                 where, why);
        }

        long status = 0;
        c = curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (c != CURLE_OK)
                return error_set(error, -ECOMM, "read response status from %s: %s", where,
                                 curl_easy_strerror(c));

        if (!sink_data) {
                sink_data = strdup("");
                if (!sink_data)
                        return error_set_oom(error);
        }
        *ret = (CtlResponse){.status = status, .body = TAKE_PTR(sink_data), .size = sink.size};
        return 0;
}
