/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for src/jwt: minting, checking (API-13, API-14, REL-7), base64url and the secret
 * file. Tokens that no library would mint are forged with fuzz/jwt-forge.h; libjwt is the
 * independent encoder. Token times are fixed, so nothing depends on the clock.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "fuzz/jwt-forge.h"
#include "jwt/jwt.h"
#include "testlib.h"

#define TEST_KEY "0123456789abcdef0123456789abcdef" /* 32 bytes: the smallest allowed */
#define TEST_NOW INT64_C(1900000000)

typedef struct Fixture {
        JwtSecret *secret;
        Timestamp now;  /* TEST_NOW + 0.5 s */
        char *token;    /* valid for an hour from now, sub "alice" */
        TestTree *tree; /* for secret files */
} Fixture;

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        if (!f)
                return -1;
        *state = f;
        f->now = (Timestamp){.sec = TEST_NOW, .nsec = 500000000};
        if (test_tree_new("test-jwt", &f->tree) < 0)
                return -1;
        if (jwt_secret_new(TEST_KEY, strlen(TEST_KEY), &f->secret) < 0 ||
            jwt_mint(f->secret, "alice", f->now, 3600 * NSEC_PER_SEC, &f->token) < 0)
                return -1;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        jwt_secret_free(f->secret);
        free(f->token);
        test_tree_free(f->tree);
        free(f);
        return 0;
}

/* ---- tokens ---------------------------------------------------------------------------------- */

static char *forge(const char *header, const char *payload)
{
        return jwt_forge_str(TEST_KEY, strlen(TEST_KEY), header, payload);
}

#define HS256 "{\"alg\":\"HS256\",\"typ\":\"JWT\"}"

static void assert_token_refused(Fixture *f, const char *token, const char *cause)
{
        _cleanup_free_ char *error = NULL, *subject = (char *)0x1;
        assert_int_equal(jwt_verify(f->secret, token, f->now, &subject, &error), -EACCES);
        assert_string_equal(error, cause);
        assert_ptr_equal(subject, (char *)0x1);
        subject = NULL;
}

static void assert_token_accepted(Fixture *f, const char *token, const char *subject)
{
        _cleanup_free_ char *error = NULL, *sub = NULL;
        assert_int_equal(jwt_verify(f->secret, token, f->now, &sub, &error), 0);
        assert_null(error);
        if (subject)
                assert_string_equal(sub, subject);
        else
                assert_null(sub);
}

static void test_jwt_verify(void **state) /* API-13, API-14, REL-7 */
{
        Fixture *f = *state;
        char payload[128];

        /* Minted by us and by libjwt (an independent encoder). */
        assert_token_accepted(f, f->token, "alice");
        _cleanup_free_ char *lib =
            jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, "{\"exp\":1900000001,\"sub\":\"bob\"}");
        assert_token_accepted(f, lib, "bob");

        /* exp must be after now (now = TEST_NOW + 0.5 s); nbf may equal now. */
        _cleanup_free_ char *exp_next = forge(HS256, "{\"exp\":1900000001}");
        assert_token_accepted(f, exp_next, NULL);
        _cleanup_free_ char *exp_now = forge(HS256, "{\"exp\":1900000000}");
        assert_token_refused(f, exp_now, "token expired");
        /* Issue 10: exp is a whole number of seconds up to the end of 9999, like our own. */
        _cleanup_free_ char *exp_real = forge(HS256, "{\"exp\":1900000000.75}");
        assert_token_refused(f, exp_real, "token exp is not an integer");
        _cleanup_free_ char *exp_real_past = forge(HS256, "{\"exp\":1900000000.25}");
        assert_token_refused(f, exp_real_past, "token exp is not an integer");
        _cleanup_free_ char *exp_huge = forge(HS256, "{\"exp\":1e300}");
        assert_token_refused(f, exp_huge, "token exp is not an integer");
        _cleanup_free_ char *exp_whole_real = forge(HS256, "{\"exp\":1900000100.0}");
        assert_token_refused(f, exp_whole_real, "token exp is not an integer");
        _cleanup_free_ char *exp_9999 = forge(HS256, "{\"exp\":253402300799}");
        assert_token_accepted(f, exp_9999, NULL);
        _cleanup_free_ char *exp_10000 = forge(HS256, "{\"exp\":253402300800}");
        assert_token_refused(f, exp_10000, "token exp is after the year 9999");
        _cleanup_free_ char *exp_max = forge(HS256, "{\"exp\":9223372036854775807}");
        assert_token_refused(f, exp_max, "token exp is after the year 9999");
        _cleanup_free_ char *nbf_now = forge(HS256, "{\"exp\":1900000100,\"nbf\":1900000000.5}");
        assert_token_accepted(f, nbf_now, NULL);
        _cleanup_free_ char *nbf_past = forge(HS256, "{\"exp\":1900000100,\"nbf\":1900000000}");
        assert_token_accepted(f, nbf_past, NULL);
        _cleanup_free_ char *nbf_future = forge(HS256, "{\"exp\":1900000100,\"nbf\":1900000001}");
        assert_token_refused(f, nbf_future, "token not valid yet (nbf)");
        _cleanup_free_ char *lib_nbf =
            jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, "{\"exp\":1900000100,\"nbf\":1900000060}");
        assert_token_refused(f, lib_nbf, "token not valid yet (nbf)");

        /* REL-7: exp-less, expired, alg none, HS512, wrong signature, malformed. */
        _cleanup_free_ char *no_exp = jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, "{\"sub\":\"x\"}");
        assert_token_refused(f, no_exp, "token has no numeric exp");
        snprintf(payload, sizeof payload, "{\"exp\":%" PRId64 "}", TEST_NOW - 3600);
        _cleanup_free_ char *expired = jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, payload);
        assert_token_refused(f, expired, "token expired");
        _cleanup_free_ char *none = jwt_forge_libjwt(JWT_ALG_NONE, NULL, "{\"exp\":1900000100}");
        assert_token_refused(f, none, "token algorithm is not HS256");
        _cleanup_free_ char *hs512 =
            jwt_forge_libjwt(JWT_ALG_HS512, TEST_KEY, "{\"exp\":1900000100}");
        assert_token_refused(f, hs512, "token algorithm is not HS256");
        /* A none-token carrying a valid HS256 signature still names the wrong algorithm. */
        _cleanup_free_ char *none_signed = forge("{\"alg\":\"none\"}", "{\"exp\":1900000100}");
        assert_token_refused(f, none_signed, "token algorithm is not HS256");
        _cleanup_free_ char *hs256_lower = forge("{\"alg\":\"hs256\"}", "{\"exp\":1900000100}");
        assert_token_refused(f, hs256_lower, "token algorithm is not HS256");
        _cleanup_free_ char *no_alg = forge("{\"typ\":\"JWT\"}", "{\"exp\":1900000100}");
        assert_token_refused(f, no_alg, "token algorithm is not HS256");
        _cleanup_free_ char *wrong_key = jwt_forge_libjwt(
            JWT_ALG_HS256, "another key of at least 32 bytes!!", "{\"exp\":1900000100}");
        assert_token_refused(f, wrong_key, "token signature does not match");

        /* Tampering with the payload after signing. */
        _cleanup_free_ char *tampered = strdup(f->token);
        char *dot = strchr(tampered, '.');
        dot[1] = dot[1] == 'e' ? 'f' : 'e';
        assert_token_refused(f, tampered, "token signature does not match");
        /* A truncated signature, and an extra byte's worth. */
        _cleanup_free_ char *short_sig = strndup(f->token, strlen(f->token) - 3);
        assert_token_refused(f, short_sig, "token signature does not match");
        _cleanup_free_ char *long_sig = NULL;
        assert_int_equal(strprintf(&long_sig, "%sAA", f->token), 0);
        assert_token_refused(f, long_sig, "token signature is not base64url");

        assert_token_refused(f, "", "token is not three dot-separated parts");
        assert_token_refused(f, "a.b", "token is not three dot-separated parts");
        assert_token_refused(f, "a.b.c.d", "token is not three dot-separated parts");
        assert_token_refused(f, "!!.e30.sig", "token header is not a base64url JSON object");
        assert_token_refused(f, "e30.e30.s=g", "token algorithm is not HS256");
        assert_token_refused(f, "W10.e30.", "token header is not a base64url JSON object"); /* [] */

        /* Claims behind a valid signature, strictly parsed. */
        _cleanup_free_ char *exp_string = forge(HS256, "{\"exp\":\"1900000100\"}");
        assert_token_refused(f, exp_string, "token has no numeric exp");
        _cleanup_free_ char *exp_bool = forge(HS256, "{\"exp\":true}");
        assert_token_refused(f, exp_bool, "token has no numeric exp");
        _cleanup_free_ char *nbf_string = forge(HS256, "{\"exp\":1900000100,\"nbf\":\"0\"}");
        assert_token_refused(f, nbf_string, "token nbf is not numeric");
        _cleanup_free_ char *sub_number = forge(HS256, "{\"exp\":1900000100,\"sub\":7}");
        assert_token_refused(f, sub_number, "token sub is not a string");
        _cleanup_free_ char *dup = forge(HS256, "{\"exp\":1,\"exp\":1900000100}");
        assert_token_refused(f, dup, "token payload is not a base64url JSON object");
        _cleanup_free_ char *dup_header =
            forge("{\"alg\":\"HS256\",\"alg\":\"HS256\"}", "{\"exp\":1900000100}");
        assert_token_refused(f, dup_header, "token header is not a base64url JSON object");
        _cleanup_free_ char *array = forge(HS256, "[1900000100]");
        assert_token_refused(f, array, "token payload is not a base64url JSON object");
        _cleanup_free_ char *crit =
            forge("{\"alg\":\"HS256\",\"crit\":[\"b64\"],\"b64\":false}", "{\"exp\":1900000100}");
        assert_token_refused(f, crit, "token header has critical extensions");
        char deep[128] = "{\"exp\":1900000100,\"x\":";
        for (int i = 0; i < 16; i++)
                strcat(deep, "[");
        for (int i = 0; i < 16; i++)
                strcat(deep, "]");
        strcat(deep, "}");
        _cleanup_free_ char *too_deep = forge(HS256, deep);
        assert_token_refused(f, too_deep, "token payload is not a base64url JSON object");

        /* Non-canonical base64url: the unused bits of the last character must be zero. */
        static const char alphabet[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        _cleanup_free_ char *canonical = forge(HS256, "{\"exp\":1900000100}");
        dot = strrchr(canonical, '.');
        size_t n = strlen(canonical);
        assert_int_equal(n - (size_t)(dot - canonical) - 1, 43); /* 32 bytes: 2 spare bits */
        int last = (int)(strchr(alphabet, canonical[n - 1]) - alphabet);
        assert_int_equal(last & 3, 0);
        canonical[n - 1] = alphabet[last | 1];
        assert_token_refused(f, canonical, "token signature is not base64url");

        /* A different key of the same length. */
        _cleanup_jwt_secret_ JwtSecret *other = NULL;
        assert_int_equal(jwt_secret_new("fedcba9876543210fedcba9876543210", 32, &other), 0);
        _cleanup_free_ char *error = NULL, *sub = NULL;
        assert_int_equal(jwt_verify(other, f->token, f->now, &sub, &error), -EACCES);
        assert_string_equal(error, "token signature does not match");

        /* Longer than any Authorization header could carry. */
        _cleanup_free_ char *huge = malloc(5000);
        memset(huge, 'a', 4999);
        huge[4999] = 0;
        assert_token_refused(f, huge, "token longer than 4096 bytes");
}

static void test_jwt_mint(void **state) /* API-14 */
{
        Fixture *f = *state;
        _cleanup_free_ char *token = NULL, *error = NULL, *sub = NULL;

        /* ttl rounds up to whole seconds; without a subject there is no "sub". */
        assert_int_equal(jwt_mint(f->secret, NULL, f->now, 1500 * NSEC_PER_MSEC, &token), 0);
        char *dot = strchr(token, '.');
        uint8_t *payload = NULL;
        size_t size;
        assert_int_equal(jwt_base64url_decode(dot + 1, (size_t)(strchr(dot + 1, '.') - dot - 1),
                                              &payload, &size),
                         0);
        json_auto_t *claims = json_loadb((const char *)payload, size, JSON_REJECT_DUPLICATES, NULL);
        free(payload);
        assert_non_null(claims);
        assert_int_equal(json_integer_value(json_object_get(claims, "exp")), TEST_NOW + 2);
        assert_int_equal(json_integer_value(json_object_get(claims, "iat")), TEST_NOW);
        assert_null(json_object_get(claims, "sub"));
        assert_int_equal(jwt_verify(f->secret, token, f->now, &sub, &error), 0);
        assert_null(sub);

        /* Still valid one second later, expired at exp. */
        Timestamp later = {.sec = TEST_NOW + 1, .nsec = 999999999};
        assert_int_equal(jwt_verify(f->secret, token, later, &sub, &error), 0);
        later = (Timestamp){.sec = TEST_NOW + 2};
        assert_int_equal(jwt_verify(f->secret, token, later, &sub, &error), -EACCES);
        assert_string_equal(error, "token expired");

        char *unchanged = (char *)0x1;
        assert_int_equal(jwt_mint(f->secret, "x", f->now, NSEC_PER_SEC - 1, &unchanged), -EINVAL);
        assert_int_equal(jwt_mint(f->secret, "x", f->now, 0, &unchanged), -EINVAL);
        assert_int_equal(jwt_mint(f->secret, "x", (Timestamp){.sec = INT64_MAX - 10},
                                  60 * NSEC_PER_SEC, &unchanged),
                         -ERANGE);
        assert_ptr_equal(unchanged, (char *)0x1);
}

static void test_base64url(void **state)
{
        uint8_t *out = NULL;
        size_t size = 0;

        assert_int_equal(jwt_base64url_decode("", 0, &out, &size), 0);
        assert_int_equal(size, 0);
        free(out);
        assert_int_equal(jwt_base64url_decode("_-8", 3, &out, &size), 0);
        assert_int_equal(size, 2);
        assert_int_equal(out[0], 0xff);
        assert_int_equal(out[1], 0xef);
        free(out);
        assert_int_equal(jwt_base64url_decode("YWJj", 4, &out, &size), 0);
        assert_memory_equal(out, "abc", 3);
        free(out);

        out = (uint8_t *)0x1;
        static const char *const bad[] = {"Y",    "YWJjZ", "YQ==", "YW+j",
                                          "YW/j", "YW j",  "YR",   "YWF"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(jwt_base64url_decode(bad[i], strlen(bad[i]), &out, &size),
                                 -EINVAL);
        assert_ptr_equal(out, (uint8_t *)0x1);
}

/* ---- the secret file --------------------------------------------------------------------------
 */

static char *write_secret(Fixture *f, const char *name, const void *data, size_t size, mode_t mode)
{
        char *path = NULL;
        assert_int_equal(strprintf(&path, "%s/%s", f->tree->dir, name), 0);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write_all(fd, data, size), 0);
        assert_int_equal(fchmod(fd, mode), 0);
        close(fd);
        return path;
}

static void assert_secret_refused(const char *path, int r, const char *reason)
{
        _cleanup_free_ char *error = NULL, *expected = NULL;
        JwtSecret *s = (JwtSecret *)0x1;
        assert_int_equal(jwt_secret_load(path, &s, &error), r);
        assert_int_equal(strprintf(&expected, "jwt_secret_file %s: %s", path, reason), 0);
        assert_string_equal(error, expected);
        assert_ptr_equal(s, (JwtSecret *)0x1);
}

static void test_secret_file(void **state) /* API-14 */
{
        Fixture *f = *state;
        char big[4097];
        memset(big, 's', sizeof big);

        /* Exact bytes, untrimmed: the trailing newline is part of the key. */
        _cleanup_free_ char *path = write_secret(f, "ok", TEST_KEY "\n", 33, 0600);
        _cleanup_jwt_secret_ JwtSecret *s = NULL;
        _cleanup_free_ char *error = NULL, *sub = NULL;
        assert_int_equal(jwt_secret_load(path, &s, &error), 0);
        _cleanup_free_ char *with_newline =
            jwt_forge_str(TEST_KEY "\n", 33, HS256, "{\"exp\":1900000100}");
        assert_int_equal(jwt_verify(s, with_newline, f->now, &sub, &error), 0);
        _cleanup_free_ char *trimmed = forge(HS256, "{\"exp\":1900000100}");
        assert_int_equal(jwt_verify(s, trimmed, f->now, &sub, &error), -EACCES);
        jwt_secret_free(TAKE_PTR(s));

        /* NUL bytes are key bytes too; 4096 bytes and mode 0400 are fine. */
        _cleanup_free_ char *binary = write_secret(f, "bin", "\0\1\2\3" TEST_KEY, 36, 0400);
        assert_int_equal(jwt_secret_load(binary, &s, &error), 0);
        jwt_secret_free(TAKE_PTR(s));
        _cleanup_free_ char *max = write_secret(f, "max", big, 4096, 0600);
        assert_int_equal(jwt_secret_load(max, &s, &error), 0);
        jwt_secret_free(TAKE_PTR(s));

        _cleanup_free_ char *too_big = write_secret(f, "big", big, 4097, 0600);
        assert_secret_refused(too_big, -EINVAL, "more than 4096 bytes");
        _cleanup_free_ char *too_small = write_secret(f, "small", TEST_KEY, 31, 0600);
        assert_secret_refused(too_small, -EINVAL, "31 bytes, at least 32 needed");
        _cleanup_free_ char *empty = write_secret(f, "empty", "", 0, 0600);
        assert_secret_refused(empty, -EINVAL, "0 bytes, at least 32 needed");
        _cleanup_free_ char *group = write_secret(f, "group", TEST_KEY, 32, 0640);
        assert_secret_refused(group, -EPERM, "mode 0640 gives group or other access");
        _cleanup_free_ char *other = write_secret(f, "other", TEST_KEY, 32, 0604);
        assert_secret_refused(other, -EPERM, "mode 0604 gives group or other access");
        _cleanup_free_ char *gx = write_secret(f, "gx", TEST_KEY, 32, 0610);
        assert_secret_refused(gx, -EPERM, "mode 0610 gives group or other access");
        _cleanup_free_ char *missing = NULL;
        assert_int_equal(strprintf(&missing, "%s/missing", f->tree->dir), 0);
        assert_secret_refused(missing, -ENOENT, "No such file or directory");
        assert_secret_refused(f->tree->dir, -EINVAL, "not a regular file");

        /* The in-memory constructor has the same size rule. */
        assert_int_equal(jwt_secret_new(TEST_KEY, 31, &s), -EINVAL);
        assert_int_equal(jwt_secret_new(big, 4097, &s), -EINVAL);
        assert_null(s);
}

/* ---- the verified-token cache (PERF-1) --------------------------------------------------------
 */

/* jwt_verify_cached() at a time; 0 or -EACCES, the subject and error checked against want. */
static int cached(JwtTokenCache *c, const JwtSecret *secret, const char *token, Timestamp at,
                  const char *want_subject, const char *want_error)
{
        _cleanup_free_ char *error = NULL, *sub = NULL;
        int r = jwt_verify_cached(c, secret, token, at, &sub, &error);
        if (r >= 0) {
                assert_null(error);
                if (want_subject)
                        assert_string_equal(sub, want_subject);
                else
                        assert_null(sub);
        } else {
                assert_int_equal(r, -EACCES);
                assert_null(sub);
                if (want_error)
                        assert_string_equal(error, want_error);
        }
        return r;
}

/*
 * API-13, API-14 through the cache: an accepted token is served from it with its subject; one
 * that differs from it in a single byte (anywhere: header, payload, signature), a prefix of it
 * or it with a byte more is checked in full and refused, and never kept; nothing refused is
 * kept; another secret empties it.
 */
static void test_token_cache(void **state)
{
        Fixture *f = *state;
        _cleanup_(jwt_token_cache_freep) JwtTokenCache *c = NULL;
        assert_int_equal(jwt_token_cache_new(&c), 0);
        const JwtTokenCacheStats *st = jwt_token_cache_get_stats(c);

        assert_int_equal(cached(c, f->secret, f->token, f->now, "alice", NULL), 0);
        assert_int_equal(st->misses, 1);
        for (int i = 0; i < 3; i++)
                assert_int_equal(cached(c, f->secret, f->token, f->now, "alice", NULL), 0);
        assert_int_equal(st->hits, 3);
        assert_int_equal(st->misses, 1);

        /* One byte off, at each position: a miss, the full check, a refusal. */
        size_t len = strlen(f->token);
        _cleanup_free_ char *bad = strdup(f->token);
        assert_non_null(bad);
        for (size_t k = 0; k < len; k++) {
                if (bad[k] == '.')
                        continue;
                char was = bad[k];
                bad[k] = was == 'A' ? 'B' : 'A';
                uint64_t misses = st->misses;
                assert_int_equal(cached(c, f->secret, bad, f->now, NULL, NULL), -EACCES);
                assert_int_equal(st->misses, misses + 1);
                bad[k] = was;
        }
        assert_int_equal(st->hits, 3);
        /* The signature's last byte, kept valid base64url: "does not match", not a decode error. */
        bad[len - 1] = bad[len - 1] == 'A' ? 'Q' : 'A';
        assert_int_equal(cached(c, f->secret, bad, f->now, NULL, "token signature does not match"),
                         -EACCES);
        assert_int_equal(cached(c, f->secret, bad, f->now, NULL, "token signature does not match"),
                         -EACCES);
        bad[len - 1] = f->token[len - 1];

        /* A prefix and an extension of the cached token. */
        bad[len - 1] = 0;
        assert_int_equal(cached(c, f->secret, bad, f->now, NULL, NULL), -EACCES);
        _cleanup_free_ char *longer = NULL;
        assert_true(asprintf(&longer, "%sA", f->token) > 0);
        assert_int_equal(cached(c, f->secret, longer, f->now, NULL, NULL), -EACCES);

        /* The cached token itself still is served, with its subject. */
        uint64_t hits = st->hits;
        assert_int_equal(cached(c, f->secret, f->token, f->now, "alice", NULL), 0);
        assert_int_equal(st->hits, hits + 1);

        /* "alg": "none" is refused every time, never served. */
        _cleanup_free_ char *none =
            jwt_forge_str(NULL, 0, "{\"alg\":\"none\"}", "{\"exp\":2000000000}");
        assert_non_null(none);
        for (int i = 0; i < 2; i++)
                assert_int_equal(
                    cached(c, f->secret, none, f->now, NULL, "token algorithm is not HS256"),
                    -EACCES);

        /* Another secret: the entries are dropped, the token is checked under the new one. */
        _cleanup_(jwt_secret_freep) JwtSecret *other = NULL;
        assert_int_equal(jwt_secret_new("fedcba9876543210fedcba9876543210", 32, &other), 0);
        hits = st->hits;
        assert_int_equal(cached(c, other, f->token, f->now, NULL, "token signature does not match"),
                         -EACCES);
        assert_int_equal(cached(c, f->secret, f->token, f->now, "alice", NULL), 0);
        assert_int_equal(st->hits, hits); /* checked afresh, then kept again */
        assert_int_equal(cached(c, f->secret, f->token, f->now, "alice", NULL), 0);
        assert_int_equal(st->hits, hits + 1);

        /* Without a cache: jwt_verify() itself. */
        assert_int_equal(cached(NULL, f->secret, f->token, f->now, "alice", NULL), 0);
        assert_int_equal(
            cached(NULL, f->secret, none, f->now, NULL, "token algorithm is not HS256"), -EACCES);
}

/*
 * API-13: a cached token is refused from its exp on, exactly as jwt_verify() refuses it, and is
 * dropped then; an nbf in the future keeps a token out until it passes.
 */
static void test_token_cache_expiry(void **state)
{
        Fixture *f = *state;
        _cleanup_(jwt_token_cache_freep) JwtTokenCache *c = NULL;
        assert_int_equal(jwt_token_cache_new(&c), 0);
        const JwtTokenCacheStats *st = jwt_token_cache_get_stats(c);

        /* f->token: exp = TEST_NOW + 3600. */
        assert_int_equal(cached(c, f->secret, f->token, f->now, "alice", NULL), 0);
        Timestamp last = {.sec = TEST_NOW + 3599, .nsec = 999999999};
        assert_int_equal(cached(c, f->secret, f->token, last, "alice", NULL), 0);
        assert_int_equal(st->hits, 1);
        Timestamp at_exp = {.sec = TEST_NOW + 3600};
        assert_int_equal(cached(c, f->secret, f->token, at_exp, NULL, "token expired"), -EACCES);
        assert_int_equal(st->hits, 1);
        /* Dropped: a later check is a full one, and refused the same way. */
        uint64_t misses = st->misses;
        assert_int_equal(cached(c, f->secret, f->token, at_exp, NULL, "token expired"), -EACCES);
        assert_int_equal(st->misses, misses + 1);
        /* And with the clock set back it is accepted (and kept) again, as jwt_verify() would. */
        assert_int_equal(cached(c, f->secret, f->token, f->now, "alice", NULL), 0);

        /* A real exp is refused, every time (never kept). */
        _cleanup_free_ char *real = forge(HS256, "{\"exp\":1900000010.5}");
        for (int i = 0; i < 2; i++)
                assert_int_equal(
                    cached(c, f->secret, real, f->now, NULL, "token exp is not an integer"),
                    -EACCES);

        /* nbf in the future: refused and not kept; once it has passed, accepted and kept. */
        _cleanup_free_ char *later =
            forge(HS256, "{\"exp\":1900000100,\"nbf\":1900000005,\"sub\":\"bob\"}");
        misses = st->misses;
        assert_int_equal(cached(c, f->secret, later, f->now, NULL, "token not valid yet (nbf)"),
                         -EACCES);
        assert_int_equal(cached(c, f->secret, later, f->now, NULL, "token not valid yet (nbf)"),
                         -EACCES);
        assert_int_equal(st->misses, misses + 2);
        Timestamp after = {.sec = TEST_NOW + 5};
        uint64_t hits = st->hits;
        assert_int_equal(cached(c, f->secret, later, after, "bob", NULL), 0);
        assert_int_equal(cached(c, f->secret, later, after, "bob", NULL), 0);
        assert_int_equal(st->hits, hits + 1);
        /* A clock set back before nbf: refused again, from the cache's own check. */
        assert_int_equal(cached(c, f->secret, later, f->now, NULL, "token not valid yet (nbf)"),
                         -EACCES);
        assert_int_equal(cached(c, f->secret, later, after, "bob", NULL), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_base64url),
            cmocka_unit_test_setup_teardown(test_jwt_verify, setup, teardown),
            cmocka_unit_test_setup_teardown(test_jwt_mint, setup, teardown),
            cmocka_unit_test_setup_teardown(test_token_cache, setup, teardown),
            cmocka_unit_test_setup_teardown(test_token_cache_expiry, setup, teardown),
            cmocka_unit_test_setup_teardown(test_secret_file, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
