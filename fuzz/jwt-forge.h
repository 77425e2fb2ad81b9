/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Test support, shared by tests/unit/test-jwt.c, tests/unit/test-http.c and
 * fuzz/fuzz-auth-header.c: builds HS256 tokens from raw header and payload bytes, so that tests
 * can sign what no JWT library would produce (duplicate keys, string claims, odd headers) and
 * reach the checks behind the signature. Written independently of src/jwt, which decodes
 * tokens itself and mints them with libjwt.
 */

#include <jwt.h> /* libjwt's, an independent encoder */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Appends the unpadded base64url form of n bytes at p to out (which has room). */
static inline char *jwt_forge_base64url(char *out, const uint8_t *p, size_t n)
{
        static const char alphabet[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        size_t i = 0;
        for (; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
                *out++ = alphabet[v >> 18];
                *out++ = alphabet[(v >> 12) & 63];
                *out++ = alphabet[(v >> 6) & 63];
                *out++ = alphabet[v & 63];
        }
        if (n - i == 1) {
                uint32_t v = (uint32_t)p[i] << 16;
                *out++ = alphabet[v >> 18];
                *out++ = alphabet[(v >> 12) & 63];
        } else if (n - i == 2) {
                uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
                *out++ = alphabet[v >> 18];
                *out++ = alphabet[(v >> 12) & 63];
                *out++ = alphabet[(v >> 6) & 63];
        }
        *out = 0;
        return out;
}

/*
 * "<b64url(header)>.<b64url(payload)>.<b64url(HMAC-SHA256(key, first two parts))>", malloc'd;
 * NULL when out of memory.
 */
static inline char *jwt_forge(const void *key, size_t key_size, const void *header,
                              size_t header_size, const void *payload, size_t payload_size)
{
        char *token = malloc((header_size + payload_size + 32) / 3 * 4 + 16);
        if (!token)
                return NULL;
        char *p = jwt_forge_base64url(token, header, header_size);
        *p++ = '.';
        p = jwt_forge_base64url(p, payload, payload_size);

        uint8_t mac[EVP_MAX_MD_SIZE];
        unsigned mac_size = 0;
        if (!HMAC(EVP_sha256(), key, (int)key_size, (const unsigned char *)token,
                  (size_t)(p - token), mac, &mac_size)) {
                free(token);
                return NULL;
        }
        *p++ = '.';
        jwt_forge_base64url(p, mac, mac_size);
        return token;
}

static inline char *jwt_forge_str(const void *key, size_t key_size, const char *header,
                                  const char *payload)
{
        return jwt_forge(key, key_size, header, strlen(header), payload, strlen(payload));
}

/* A token as libjwt mints it from a JSON object of grants, with any algorithm and key. */
static inline char *jwt_forge_libjwt(jwt_alg_t alg, const char *key, const char *grants)
{
        jwt_t *jwt = NULL;
        if (jwt_new(&jwt) != 0)
                return NULL;
        char *token = NULL;
        if (jwt_add_grants_json(jwt, grants) == 0 &&
            jwt_set_alg(jwt, alg, (const unsigned char *)key, key ? (int)strlen(key) : 0) == 0)
                token = jwt_encode_str(jwt);
        jwt_free(jwt);
        return token;
}
