/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Bearer tokens (API-12, API-13, API-14). libjwt only mints. Checking is done here: the signature
 * is compared with CRYPTO_memcmp before anything in the token is trusted, and header and payload go
 * through the same strict JSON rules as every other input (GEN-6), which libjwt does not apply.
 */
#include "jwt.h"

#include <fcntl.h>
#include <jansson.h>
#include <jwt.h> /* libjwt's; "jwt.h" above is this module's */
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>

struct JwtSecret {
        size_t size;
        uint8_t key[];
};

/* ---- secrets ------------------------------------------------------------------------------- */

int jwt_secret_new(const void *key, size_t size, JwtSecret **ret)
{
        if (size < JWT_SECRET_MIN || size > JWT_SECRET_MAX)
                return -EINVAL;
        JwtSecret *s = malloc(sizeof *s + size);
        if (!s)
                return -ENOMEM;
        s->size = size;
        memcpy(s->key, key, size);
        *ret = s;
        return 0;
}

JwtSecret *jwt_secret_free(JwtSecret *s)
{
        if (s) {
                OPENSSL_cleanse(s->key, s->size);
                free(s);
        }
        return NULL;
}

static int secret_file_error(char **error, const char *path, int r)
{
        return error_set(error, r, "jwt_secret_file %s: %s", path, strerror(-r));
}

int jwt_secret_load(const char *path, JwtSecret **ret, char **error)
{
        /* One more byte than allowed, so that an oversize file shows. */
        uint8_t buf[JWT_SECRET_MAX + 1];
        size_t size = 0;

        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return secret_file_error(error, path, negative_errno());

        /* The checks apply to the file actually read, not to whatever the path names later. */
        struct stat st;
        if (fstat(fd, &st) < 0)
                return secret_file_error(error, path, negative_errno());
        if (!S_ISREG(st.st_mode))
                return error_set(error, -EINVAL, "jwt_secret_file %s: not a regular file", path);
        if (st.st_mode & (S_IRWXG | S_IRWXO))
                return error_set(error, -EPERM,
                                 "jwt_secret_file %s: mode %04o gives group or other access", path,
                                 (unsigned)(st.st_mode & 07777));

        while (size < sizeof buf) {
                ssize_t n = read(fd, buf + size, sizeof buf - size);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int r = negative_errno();
                        OPENSSL_cleanse(buf, sizeof buf);
                        return secret_file_error(error, path, r);
                }
                if (n == 0)
                        break;
                size += (size_t)n;
        }

        JwtSecret *s = NULL;
        int r = jwt_secret_new(buf, size, &s);
        OPENSSL_cleanse(buf, sizeof buf);
        if (r == -EINVAL && size > JWT_SECRET_MAX)
                return error_set(error, r, "jwt_secret_file %s: more than %d bytes", path,
                                 JWT_SECRET_MAX);
        if (r == -EINVAL)
                return error_set(error, r, "jwt_secret_file %s: %zu bytes, at least %d needed",
                                 path, size, JWT_SECRET_MIN);
        if (r < 0)
                return secret_file_error(error, path, r);
        *ret = s;
        return 0;
}

/* ---- minting ------------------------------------------------------------------------------- */

DEFINE_TRIVIAL_CLEANUP_FUNC(jwt_t *, jwt_free);

int jwt_mint(const JwtSecret *secret, const char *subject, Timestamp now, nsec_t ttl, char **ret)
{
        _cleanup_(jwt_freep) jwt_t *jwt = NULL;

        if (ttl < NSEC_PER_SEC)
                return -EINVAL;
        uint64_t seconds = ttl / NSEC_PER_SEC + (ttl % NSEC_PER_SEC != 0);
        if (now.sec < 0 || seconds > (uint64_t)(LONG_MAX - now.sec))
                return -ERANGE;

        /* libjwt reports failures as positive errno values. */
        int r = jwt_new(&jwt);
        if (r == 0)
                r = jwt_add_grant_int(jwt, "iat", (long)now.sec);
        if (r == 0)
                r = jwt_add_grant_int(jwt, "exp", (long)(now.sec + (int64_t)seconds));
        if (r == 0 && subject)
                r = jwt_add_grant(jwt, "sub", subject);
        if (r == 0)
                r = jwt_set_alg(jwt, JWT_ALG_HS256, secret->key, (int)secret->size);
        if (r != 0)
                return -abs(r);

        char *token = jwt_encode_str(jwt);
        if (!token)
                return negative_errno();
        *ret = token;
        return 0;
}

/* ---- verification -------------------------------------------------------------------------- */

int jwt_base64url_decode(const char *s, size_t n, uint8_t **ret, size_t *ret_size)
{
        return base64_decode(s, n, BASE64_URL_UNPADDED, ret, ret_size);
}

/* A token part's JSON: decoded, strict, an object. NULL on any failure. */
static json_t *decode_part(const char *s, size_t n)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t size;

        if (jwt_base64url_decode(s, n, &buf, &size) < 0 ||
            json_text_too_deep((const char *)buf, size, JSON_DEPTH_MAX))
                return NULL;
        json_t *j = json_loadb((const char *)buf, size, JSON_REJECT_DUPLICATES, NULL);
        if (j && !json_is_object(j)) {
                json_decref(j);
                return NULL;
        }
        return j;
}

/* A NumericDate as the payload gave it: integer seconds, or a real number. */
typedef struct NumericDate {
        bool integer;
        json_int_t sec;
        double real;
} NumericDate;

static NumericDate numeric_date(const json_t *v)
{
        if (json_is_integer(v))
                return (NumericDate){.integer = true, .sec = json_integer_value(v)};
        return (NumericDate){.real = json_real_value(v)};
}

/* Compares a NumericDate with now: < 0 before it, 0 at it, > 0 after it. */
static int numeric_date_compare(NumericDate v, Timestamp now)
{
        if (v.integer) {
                if (v.sec != now.sec)
                        return v.sec < now.sec ? -1 : 1;
                return now.nsec > 0 ? -1 : 0;
        }
        double n = (double)now.sec + (double)now.nsec / 1e9;
        return v.real < n ? -1 : v.real > n;
}

/* What a verified token says about time and who: what the token cache keeps of it. */
typedef struct Claims {
        NumericDate exp;
        bool has_nbf;
        NumericDate nbf;
        char *subject; /* NULL without "sub" */
} Claims;

/* The checks of API-13 that depend on now; the same text for a fresh and a cached token. */
static int claims_check_time(const Claims *c, Timestamp now, char **error)
{
        if (numeric_date_compare(c->exp, now) <= 0)
                return error_set(error, -EACCES, "token expired");
        if (c->has_nbf && numeric_date_compare(c->nbf, now) > 0)
                return error_set(error, -EACCES, "token not valid yet (nbf)");
        return 0;
}

static int verify(const JwtSecret *secret, const char *token, Timestamp now, Claims *ret,
                  char **error)
{
        size_t len = strnlen(token, JWT_AUTHORIZATION_MAX + 1);
        if (len > JWT_AUTHORIZATION_MAX)
                return error_set(error, -EACCES, "token longer than %d bytes",
                                 JWT_AUTHORIZATION_MAX);

        const char *dot1 = memchr(token, '.', len);
        const char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token)) : NULL;
        if (!dot2 || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)))
                return error_set(error, -EACCES, "token is not three dot-separated parts");
        size_t header_len = (size_t)(dot1 - token), payload_len = (size_t)(dot2 - dot1 - 1),
               signature_len = len - (size_t)(dot2 + 1 - token);

        json_auto_t *header = decode_part(token, header_len);
        if (!header)
                return error_set(error, -EACCES, "token header is not a base64url JSON object");
        /* Anything but HS256 ("none" above all) is refused before the signature is looked at. */
        const char *alg = json_string_value(json_object_get(header, "alg"));
        if (!alg || !streq(alg, "HS256"))
                return error_set(error, -EACCES, "token algorithm is not HS256");
        if (json_object_get(header, "crit"))
                return error_set(error, -EACCES, "token header has critical extensions");

        _cleanup_free_ uint8_t *signature = NULL;
        size_t signature_size;
        uint8_t mac[EVP_MAX_MD_SIZE];
        unsigned mac_size = 0;
        if (jwt_base64url_decode(dot2 + 1, signature_len, &signature, &signature_size) < 0)
                return error_set(error, -EACCES, "token signature is not base64url");
        if (!HMAC(EVP_sha256(), secret->key, (int)secret->size, (const unsigned char *)token,
                  (size_t)(dot2 - token), mac, &mac_size))
                return error_set(error, -EACCES, "HMAC-SHA256 failed");
        if (signature_size != mac_size || CRYPTO_memcmp(signature, mac, mac_size) != 0)
                return error_set(error, -EACCES, "token signature does not match");

        json_auto_t *payload = decode_part(dot1 + 1, payload_len);
        if (!payload)
                return error_set(error, -EACCES, "token payload is not a base64url JSON object");
        json_t *exp = json_object_get(payload, "exp");
        if (!json_is_number(exp))
                return error_set(error, -EACCES, "token has no numeric exp");
        /* What we mint, and nothing a date of ours cannot hold (1e300, say). */
        if (!json_is_integer(exp))
                return error_set(error, -EACCES, "token exp is not an integer");
        if (json_integer_value(exp) > JWT_EXP_MAX)
                return error_set(error, -EACCES, "token exp is after the year 9999");
        Claims c = {.exp = numeric_date(exp)};
        json_t *nbf = json_object_get(payload, "nbf");
        if (nbf && !json_is_number(nbf))
                return error_set(error, -EACCES, "token nbf is not numeric");
        if (nbf) {
                c.has_nbf = true;
                c.nbf = numeric_date(nbf);
        }
        int r = claims_check_time(&c, now, error);
        if (r < 0)
                return r;
        json_t *sub = json_object_get(payload, "sub");
        if (sub && !json_is_string(sub))
                return error_set(error, -EACCES, "token sub is not a string");

        if (sub && !(c.subject = strdup(json_string_value(sub))))
                return error_set_oom(error);
        *ret = c;
        return 0;
}

int jwt_verify(const JwtSecret *secret, const char *token, Timestamp now, char **ret_subject,
               char **error)
{
        Claims c;
        int r = verify(secret, token, now, &c, error);
        if (r < 0)
                return r;
        *ret_subject = c.subject;
        return 0;
}

/* ---- the verified-token cache -------------------------------------------------------------- */

/*
 * A token accepted once is accepted again, until its exp, without the HMAC and the JSON (PERF-1:
 * after the kept bodies they were half of a /resources request). Slots are found by a keyed
 * hash of the token's bytes and the entry is trusted only if all its bytes are equal, compared
 * in constant time, so a hash collision or a token one byte off is a miss and goes through
 * jwt_verify(); the key is random per cache, so nobody outside can aim tokens at one slot.
 * Only accepted tokens are kept, so a refused one is checked in full every time.
 */
typedef struct CachedToken {
        char *token; /* NULL: empty slot */
        size_t len;
        Claims claims;
} CachedToken;

struct JwtTokenCache {
        const JwtSecret *secret; /* the secret the entries were verified under */
        uint64_t key;
        CachedToken slots[JWT_TOKEN_CACHE_SLOTS];
        JwtTokenCacheStats stats;
};

static void slot_clear(CachedToken *t)
{
        if (t->token) {
                OPENSSL_cleanse(t->token, t->len);
                free(t->token);
        }
        free(t->claims.subject);
        *t = (CachedToken){};
}

static void cache_flush(JwtTokenCache *c)
{
        for (size_t i = 0; i < JWT_TOKEN_CACHE_SLOTS; i++)
                slot_clear(&c->slots[i]);
}

int jwt_token_cache_new(JwtTokenCache **ret)
{
        JwtTokenCache *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        if (getrandom(&c->key, sizeof c->key, 0) != sizeof c->key) {
                free(c);
                return -EIO;
        }
        *ret = c;
        return 0;
}

JwtTokenCache *jwt_token_cache_free(JwtTokenCache *c)
{
        if (c) {
                cache_flush(c);
                free(c);
        }
        return NULL;
}

const JwtTokenCacheStats *jwt_token_cache_get_stats(const JwtTokenCache *c)
{
        return &c->stats;
}

/* FNV-1a over the key and the bytes: only spreads tokens over slots, trusted for nothing. */
static size_t slot_of(const JwtTokenCache *c, const char *token, size_t len)
{
        uint64_t h = UINT64_C(14695981039346656037) ^ c->key;
        for (size_t i = 0; i < len; i++) {
                h ^= (uint8_t)token[i];
                h *= UINT64_C(1099511628211);
        }
        h ^= h >> 29;
        return (size_t)(h % JWT_TOKEN_CACHE_SLOTS);
}

int jwt_verify_cached(JwtTokenCache *c, const JwtSecret *secret, const char *token, Timestamp now,
                      char **ret_subject, char **error)
{
        if (!c)
                return jwt_verify(secret, token, now, ret_subject, error);
        size_t len = strnlen(token, JWT_AUTHORIZATION_MAX + 1);
        if (len > JWT_AUTHORIZATION_MAX)
                return jwt_verify(secret, token, now, ret_subject, error);
        /* Entries speak for the secret they were checked under only. */
        if (c->secret != secret) {
                cache_flush(c);
                c->secret = secret;
        }

        CachedToken *t = &c->slots[slot_of(c, token, len)];
        if (t->token && t->len == len && CRYPTO_memcmp(t->token, token, len) == 0) {
                int r = claims_check_time(&t->claims, now, error);
                if (r < 0) {
                        /* Past exp it never comes back; a token not valid yet may. */
                        if (numeric_date_compare(t->claims.exp, now) <= 0)
                                slot_clear(t);
                        return r;
                }
                char *subject = NULL;
                if (t->claims.subject && !(subject = strdup(t->claims.subject)))
                        return error_set_oom(error);
                c->stats.hits++;
                *ret_subject = subject;
                return 0;
        }

        c->stats.misses++;
        Claims claims;
        int r = verify(secret, token, now, &claims, error);
        if (r < 0)
                return r;
        char *subject = NULL, *copy = malloc(len + 1);
        if (!copy || (claims.subject && !(subject = strdup(claims.subject)))) {
                free(copy);
                free(claims.subject);
                return error_set_oom(error);
        }
        memcpy(copy, token, len + 1);
        slot_clear(t);
        *t = (CachedToken){.token = copy, .len = len, .claims = claims};
        *ret_subject = subject;
        return 0;
}
