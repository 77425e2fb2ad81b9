/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * jwt: the REST API's bearer tokens (API-12, API-13, API-14), minted by `vgpuctl token mint` and
 * checked by the daemon's HTTP layer, so that both judge the secret and the token the same way.
 *
 * Promises:
 *  - the HMAC key is the secret file's exact bytes (JWT_SECRET_MIN..MAX of them), cleared from
 *    memory when freed;
 *  - tokens are HS256 only: minting always passes the key and JWT_ALG_HS256 to libjwt;
 *    checking refuses every other "alg" ("none" above all) before it looks at the signature,
 *    compares the HMAC in constant time before trusting any claim, and checks "exp" and "nbf"
 *    itself (libjwt checks neither);
 *  - header and payload are strict JSON (duplicate keys refused, nesting <= JSON_DEPTH_MAX);
 *  - a refusal is -EACCES with a reason that never contains the token.
 */

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define JWT_SECRET_MIN 32   /* API-14 */
#define JWT_SECRET_MAX 4096 /* API-14 */
/* API-12: the "Bearer <token>" header value, in bytes; so no token is longer either. */
#define JWT_AUTHORIZATION_MAX 4096
/* The latest "exp" taken: 9999-12-31T23:59:59Z. */
#define JWT_EXP_MAX INT64_C(253402300799)

/* ---- the secret ------------------------------------------------------------------------------ */

typedef struct JwtSecret JwtSecret;

/*
 * Reads a jwt_secret_file: a regular file of JWT_SECRET_MIN..MAX bytes without group or other
 * permission bits, taken byte for byte (no trimming). On failure *error reads
 * "jwt_secret_file <path>: <reason>".
 */
int jwt_secret_load(const char *path, JwtSecret **ret, char **error);
/* A secret from memory, with the same size rule (-EINVAL). */
int jwt_secret_new(const void *key, size_t size, JwtSecret **ret);
JwtSecret *jwt_secret_free(JwtSecret *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(JwtSecret *, jwt_secret_free);
#define _cleanup_jwt_secret_ _cleanup_(jwt_secret_freep)

/* ---- tokens ---------------------------------------------------------------------------------- */

/*
 * Mints an HS256 token with "exp" = now + ttl (rounded up to whole seconds, ttl >= 1 s, else
 * -EINVAL; -ERANGE beyond the clock), "iat" = now and, when subject is non-NULL, "sub".
 */
int jwt_mint(const JwtSecret *secret, const char *subject, Timestamp now, nsec_t ttl, char **ret);

/*
 * Checks a token (API-13, API-14): at most JWT_AUTHORIZATION_MAX bytes, three base64url parts,
 * a header whose "alg" is exactly "HS256" and that has no "crit", an HMAC-SHA256 signature that
 * matches, and a payload object with an integer "exp" after now and at most JWT_EXP_MAX and,
 * if present, a numeric "nbf" not after now and a string "sub", copied to *ret_subject (NULL when
 * absent). On failure *error says why, for a debug log: -EACCES for a token refused, -ENOMEM.
 */
int jwt_verify(const JwtSecret *secret, const char *token, Timestamp now, char **ret_subject,
               char **error);

/*
 * A memory of the tokens jwt_verify() accepted (PERF-1): each kept by its full bytes with its
 * "exp" (and "nbf", "sub"), in at most JWT_TOKEN_CACHE_SLOTS entries (a new token takes the
 * slot its keyed hash picks). A token is taken from it only when every byte equals a kept one
 * (compared in constant time), and only while exp and nbf still allow it, with jwt_verify()'s
 * texts otherwise; anything else goes through jwt_verify() and, when accepted, is kept. Refused
 * tokens are never kept. The entries are dropped when another secret is passed. For the owner's
 * thread only.
 */
#define JWT_TOKEN_CACHE_SLOTS 64

typedef struct JwtTokenCache JwtTokenCache;

typedef struct JwtTokenCacheStats {
        uint64_t hits, misses;
} JwtTokenCacheStats;

int jwt_token_cache_new(JwtTokenCache **ret);
JwtTokenCache *jwt_token_cache_free(JwtTokenCache *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(JwtTokenCache *, jwt_token_cache_free);
const JwtTokenCacheStats *jwt_token_cache_get_stats(const JwtTokenCache *c);

/* jwt_verify() through c (NULL: jwt_verify() itself); the same results and texts. */
int jwt_verify_cached(JwtTokenCache *c, const JwtSecret *secret, const char *token, Timestamp now,
                      char **ret_subject, char **error);

/*
 * Strict base64url without padding (RFC 7515), the encoding of a token's parts: only
 * [A-Za-z0-9_-], a length that is not 1 mod 4, and zero bits in the unused tail. -EINVAL
 * otherwise.
 */
int jwt_base64url_decode(const char *s, size_t n, uint8_t **ret, size_t *ret_size);
