/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes the Authorization header check (API-12, API-13, API-14, REL-5, REL-7) with a fixed key and
 * clock.
 *
 * The first input byte picks what the rest is:
 *  - even: the header value exactly as a client sends it. Random bytes never carry a valid
 *    signature, so this mostly exercises the scheme, the splitting and base64url;
 *  - odd: "<header JSON>\n<payload JSON>", which the harness signs with the key (fuzz/jwt-forge.h),
 *    so that the input gets past the signature to the JSON and claim checks.
 *
 * Properties: a refusal is -EACCES with a cause that never contains the token's signature; an
 * acceptance means the token really is three base64url parts whose header is a strict JSON
 * object with "alg" exactly "HS256" and no "crit", whose payload has an integer "exp" after now
 * and not after JWT_EXP_MAX and no "nbf" after now, and the returned subject is the payload's
 * "sub".
 */
#include <jansson.h>

#include "fuzz/jwt-forge.h"
#include "http/http.h"

#define FUZZ_KEY "fuzz-key-0123456789abcdef-0123456"
#define FUZZ_NOW_SEC INT64_C(1900000000)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *part_json(const char *s, size_t n)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        if (jwt_base64url_decode(s, n, &buf, &len) < 0)
                abort();
        json_t *j = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(j))
                abort();
        return j;
}

static double numeric(const json_t *v)
{
        return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
}

static void check_accepted(const char *value, const char *subject)
{
        const char *token = value + strlen("Bearer ");
        token += strspn(token, " ");
        const char *dot1 = strchr(token, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
        if (!dot2 || strchr(dot2 + 1, '.'))
                abort();

        json_t *header = part_json(token, (size_t)(dot1 - token));
        json_t *payload = part_json(dot1 + 1, (size_t)(dot2 - dot1 - 1));
        const char *alg = json_string_value(json_object_get(header, "alg"));
        if (!alg || !streq(alg, "HS256") || json_object_get(header, "crit"))
                abort();

        double now = (double)FUZZ_NOW_SEC + 0.5;
        json_t *exp = json_object_get(payload, "exp"), *nbf = json_object_get(payload, "nbf");
        if (!json_is_integer(exp) || numeric(exp) <= now || json_integer_value(exp) > JWT_EXP_MAX)
                abort();
        if (nbf && (!json_is_number(nbf) || numeric(nbf) > now))
                abort();
        json_t *sub = json_object_get(payload, "sub");
        if (!streq_ptr(subject, json_string_value(sub)) || (sub && !json_is_string(sub)))
                abort();
        json_decref(header);
        json_decref(payload);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static JwtSecret *secret;
        if (!secret && jwt_secret_new(FUZZ_KEY, strlen(FUZZ_KEY), &secret) < 0)
                abort();
        if (size < 1 || memchr(data + 1, 0, size - 1))
                return 0;

        _cleanup_free_ char *value = NULL;
        if (data[0] % 2 == 0) {
                value = strndup((const char *)data + 1, size - 1);
        } else {
                const uint8_t *nl = memchr(data + 1, '\n', size - 1);
                if (!nl)
                        return 0;
                _cleanup_free_ char *token =
                    jwt_forge(FUZZ_KEY, strlen(FUZZ_KEY), data + 1, (size_t)(nl - data - 1), nl + 1,
                              size - (size_t)(nl + 1 - data));
                if (token && strprintf(&value, "Bearer %s", token) < 0)
                        value = NULL;
        }
        if (!value)
                return 0;

        _cleanup_free_ char *subject = NULL, *error = NULL;
        Timestamp now = {.sec = FUZZ_NOW_SEC, .nsec = 500000000};
        int r = http_auth_check(secret, value, now, &subject, &error);
        if (r == 0) {
                check_accepted(value, subject);
                return 0;
        }
        if (r == -ENOMEM)
                return 0;
        if (r != -EACCES || !error)
                abort();
        const char *sig = strrchr(value, '.');
        if (sig && strlen(sig) > 8 && strstr(error, sig + 1))
                abort();
        return 0;
}
