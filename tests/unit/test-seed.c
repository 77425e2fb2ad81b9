/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The seed module (SPEC SEED-1, SEED-2, SEED-3, SEED-4, REL-13): the create body's cloud_init,
 * every seed file for nat, bridge static, bridge DHCP and none parsed back with libyaml's
 * parser, hostile input, fingerprints, and the ISO read back with isoinfo ($ISOINFO).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <yaml.h>

#include <cmocka.h>

#include "base/json-util.h"
#include "seed/seed.h"
#include "testlib.h"
#include "worker/worker.h"

/* Real keys made with ssh-keygen, and what `ssh-keygen -l -E sha256` prints for them. */
#define KEY_ED25519                                                                         \
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+fi " \
        "user@ed25519"
#define FP_ED25519 "SHA256:AaZpMmpGf1Hg3AL0mAWy6Zz0hoAZpvFGHdfodGatXlY"
#define KEY_RSA_BLOB                                                                             \
        "AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCpPCDTZK81hHVFihUWnjNq2KrxmG5K+SFRU/my3FaldjcTGzNbHH0c6" \
        "mgYYKy56f2XRpyLk8PWtgOoy+cVOQdVQoHlP4QQFSiO4STFb3UuBGLmE7YTUNZjfOkcwhDM+CpQ5InIV/RAcY4" \
        "y+ZTleODqc5Ny7bWy6yxlxx4hONQkQ=="
#define KEY_RSA "ssh-rsa " KEY_RSA_BLOB " user@rsab1024"
#define FP_RSA "SHA256:lJo9kZGD21GtculLq1MHWldnTpbGdjQvB2ijXt0AbQQ"
#define KEY_ECDSA256                                                                             \
        "ecdsa-sha2-nistp256 "                                                                   \
        "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBKzOG0Z/8rggixmWlGDFX/9JDnbov6oov/" \
        "xSrVibz6X3hQxlZnQNqw04NXF/yPN3qDaPojRY8Y+DTSxZtYWmw6E="
#define FP_ECDSA256 "SHA256:B6ZjQNUf7c+RxTsmrkPRXDsM9PdkZv4CZSQ3qj7adR0"
#define KEY_ECDSA521                                                                              \
        "ecdsa-sha2-nistp521 "                                                                    \
        "AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBACI6FO4j3PpjXoJsppUBwFdqeJrQCHUC7L" \
        "gyrf0V1qlgMJuzHQk1zzyudT2ipkDTNuBex6X4OmbrNqk7d1zATwylwAgRtOiBN62VU0ylIto6KqLdbPcaEXkbM" \
        "yT17dOM7plYIZcx3mJ03p9nGBydcv65r24inogce+unDf7shDV5RY9dg== user@ecdsab521"
#define FP_ECDSA521 "SHA256:Wfj5EoJI4s/oOyCJykQfnGJFn8UDYm2fWCY0p31g3Kk"
#define ED25519_PART \
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+fi"

#define ID "k3x9q2m8v1c4z7n5b0wd"
#define MAC "52:54:00:12:34:56"

/* ---- a small reader of the emitted YAML (libyaml's parser) ------------------------------------
 */

typedef struct Yaml {
        yaml_document_t doc;
        int documents; /* how many the text held */
} Yaml;

/* Parses text; every document after the first is counted and dropped. */
static void yaml_load(const SeedFile *f, Yaml *y)
{
        yaml_parser_t p;
        assert_true(yaml_parser_initialize(&p));
        yaml_parser_set_input_string(&p, (const unsigned char *)f->data, f->size);
        assert_true(yaml_parser_load(&p, &y->doc));
        assert_non_null(yaml_document_get_root_node(&y->doc));
        y->documents = 1;
        for (;;) {
                yaml_document_t more;
                assert_true(yaml_parser_load(&p, &more));
                bool empty = !yaml_document_get_root_node(&more);
                yaml_document_delete(&more);
                if (empty)
                        break;
                y->documents++;
        }
        yaml_parser_delete(&p);
        assert_int_equal(y->documents, 1);
}

static void yaml_done(Yaml *y)
{
        yaml_document_delete(&y->doc);
}

/*
 * The node at path ("ethernets.eth0.addresses[0]") from the root, or NULL. Keys are plain
 * words here, so a key's text is compared as it is.
 */
static yaml_node_t *yaml_at(Yaml *y, const char *path)
{
        yaml_node_t *n = yaml_document_get_root_node(&y->doc);
        const char *p = path;
        while (n && *p) {
                if (*p == '.')
                        p++;
                if (*p == '[') {
                        char *end;
                        long i = strtol(p + 1, &end, 10);
                        p = end + 1;
                        if (n->type != YAML_SEQUENCE_NODE ||
                            i >= n->data.sequence.items.top - n->data.sequence.items.start)
                                return NULL;
                        n = yaml_document_get_node(&y->doc, n->data.sequence.items.start[i]);
                        continue;
                }
                size_t len = strcspn(p, ".[");
                if (n->type != YAML_MAPPING_NODE)
                        return NULL;
                yaml_node_t *found = NULL;
                for (yaml_node_pair_t *pair = n->data.mapping.pairs.start;
                     pair < n->data.mapping.pairs.top; pair++) {
                        yaml_node_t *k = yaml_document_get_node(&y->doc, pair->key);
                        if (k->type == YAML_SCALAR_NODE && k->data.scalar.length == len &&
                            memcmp(k->data.scalar.value, p, len) == 0)
                                found = yaml_document_get_node(&y->doc, pair->value);
                }
                n = found;
                p += len;
        }
        return n;
}

/* How many entries the mapping or sequence at path has. */
static long yaml_count(Yaml *y, const char *path)
{
        yaml_node_t *n = yaml_at(y, path);
        assert_non_null(n);
        if (n->type == YAML_MAPPING_NODE)
                return n->data.mapping.pairs.top - n->data.mapping.pairs.start;
        assert_int_equal(n->type, YAML_SEQUENCE_NODE);
        return n->data.sequence.items.top - n->data.sequence.items.start;
}

/*
 * The scalar at path is a string whose text is exactly want: quoted, so that no YAML 1.1
 * resolver reads it as a null, a boolean or a number (REL-13).
 */
static void assert_text(Yaml *y, const char *path, const char *want)
{
        yaml_node_t *n = yaml_at(y, path);
        if (!n)
                fail_msg("no node at %s", path);
        assert_int_equal(n->type, YAML_SCALAR_NODE);
        assert_int_not_equal(n->data.scalar.style, YAML_PLAIN_SCALAR_STYLE);
        assert_int_equal(n->data.scalar.length, strlen(want));
        assert_memory_equal(n->data.scalar.value, want, strlen(want));
}

/* The scalar at path is the plain word want (a format's own `2`, `true`). */
static void assert_word(Yaml *y, const char *path, const char *want)
{
        yaml_node_t *n = yaml_at(y, path);
        if (!n)
                fail_msg("no node at %s", path);
        assert_int_equal(n->type, YAML_SCALAR_NODE);
        assert_int_equal(n->data.scalar.style, YAML_PLAIN_SCALAR_STYLE);
        assert_string_equal((const char *)n->data.scalar.value, want);
}

/* ---- SEED-1: keys ------------------------------------------------------------------------------
 */

/* SEED-1, SEED-4: each type the rule lists passes, and fingerprints are ssh-keygen's. */
static void test_ssh_key_valid_and_fingerprint(void **state)
{
        static const struct {
                const char *key, *fp;
        } cases[] = {
            {KEY_ED25519, FP_ED25519},
            {KEY_RSA, FP_RSA},
            {KEY_ECDSA256, FP_ECDSA256},
            {KEY_ECDSA521, FP_ECDSA521},
            {ED25519_PART, FP_ED25519}, /* no comment */
            {ED25519_PART " a comment with spaces", FP_ED25519},
            {ED25519_PART " caf\xc3\xa9 \xe2\x9c\x93", FP_ED25519}, /* UTF-8 comment */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *error = NULL, *fp = NULL;
                assert_int_equal(seed_ssh_key_check(cases[i].key, "k", -EINVAL, &error), 0);
                assert_null(error);
                assert_int_equal(seed_ssh_key_fingerprint(cases[i].key, &fp), 0);
                assert_string_equal(fp, cases[i].fp);
        }
}

/* A valid blob of the named type built by hand: "sk-..." keys are rare to have at hand. */
static char *key_with_blob_type(const char *line_type, const char *blob_type)
{
        uint8_t blob[64] = {0};
        size_t tn = strlen(blob_type);
        blob[3] = (uint8_t)tn;
        memcpy(blob + 4, blob_type, tn);
        size_t n = 4 + tn + 8;
        static const char tab[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char b64[128];
        size_t m = 0;
        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t)blob[i] << 16 | (i + 1 < n ? blob[i + 1] : 0) << 8 |
                             (i + 2 < n ? blob[i + 2] : 0);
                b64[m++] = tab[v >> 18 & 63];
                b64[m++] = tab[v >> 12 & 63];
                b64[m++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
                b64[m++] = i + 2 < n ? tab[v & 63] : '=';
        }
        b64[m] = 0;
        char *line = NULL;
        assert_int_equal(strprintf(&line, "%s %s", line_type, b64), 0);
        return line;
}

/* SEED-1: the security-key types pass with their own blob; a blob of another type does not. */
static void test_ssh_key_blob_type(void **state)
{
        static const char *const types[] = {"sk-ssh-ed25519@openssh.com",
                                            "sk-ecdsa-sha2-nistp256@openssh.com",
                                            "ecdsa-sha2-nistp384"};
        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                _cleanup_free_ char *line = key_with_blob_type(types[i], types[i]);
                assert_int_equal(seed_ssh_key_check(line, "k", -EINVAL, NULL), 0);
        }
        _cleanup_free_ char *error = NULL;
        _cleanup_free_ char *wrong = key_with_blob_type("ssh-rsa", "ssh-ed25519");
        assert_int_equal(
            seed_ssh_key_check(wrong, "cloud_init.ssh_authorized_keys[0]", -EINVAL, &error),
            -EINVAL);
        assert_string_equal(error,
                            "cloud_init.ssh_authorized_keys[0]: the key is not a ssh-rsa key");
}

/* SEED-1, REL-13: what is not one plain key line is refused, with the field named. */
static void test_ssh_key_invalid(void **state)
{
        _cleanup_free_ char *huge = malloc(SEED_SSH_KEY_MAX + 2);
        assert_non_null(huge);
        memset(huge, 'a', SEED_SSH_KEY_MAX + 1);
        memcpy(huge, ED25519_PART " ", strlen(ED25519_PART " "));
        huge[SEED_SSH_KEY_MAX + 1] = 0;
        const struct {
                const char *key, *why;
        } cases[] = {
            {"", "must not be empty"},
            {"ssh-dss AAAAB3NzaC1kc3MAAACBAP", "must start with a key type"},
            {"ssh-ed25519", "must start with a key type"},
            {"ssh-ed25519\tAAAAC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+fi",
             "must not contain control characters"},
            {"ssh-ed25519  AAAAC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+fi",
             "the key after the type must be base64"},
            {"command=\"/bin/sh\" " ED25519_PART, "must start with a key type"},
            {" " ED25519_PART, "must start with a key type"},
            {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+f",
             "the key after the type must be base64"}, /* length not a multiple of 4 */
            {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+f!",
             "the key after the type must be base64"},
            {"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCpPCDTZK81hHVFihUWnjNq2Krxm==",
             "the key after the type must be base64"}, /* bits set after the last byte */
            {"ssh-ed25519 AA=AC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+fi",
             "the key after the type must be base64"}, /* padding inside */
            {"ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAAAgQDCpPCDTZK81hHVFihUWnjNq2Krxg==",
             "the key is not a ssh-ed25519 key"},
            {ED25519_PART " ", "must not end with a space"},
            {ED25519_PART " a\nssh-rsa AAAA", "must not contain control characters"},
            {ED25519_PART " a\rb", "must not contain control characters"},
            {ED25519_PART " \x1b[31mred", "must not contain control characters"},
            {ED25519_PART " \x7f", "must not contain control characters"},
            {ED25519_PART " \xc2\x9b", "must not contain control characters"}, /* C1 CSI */
            {ED25519_PART " \xff\xfe", "must be UTF-8"},
            {ED25519_PART " \xc0\xaf", "must be UTF-8"},     /* overlong '/' */
            {ED25519_PART " \xed\xa0\x80", "must be UTF-8"}, /* a surrogate */
            {huge, "must be at most 16384 bytes"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *error = NULL, *fp = NULL;
                assert_int_equal(seed_ssh_key_check(cases[i].key,
                                                    "cloud_init.ssh_authorized_keys[3]", -EINVAL,
                                                    &error),
                                 -EINVAL);
                if (!startswith(error, "cloud_init.ssh_authorized_keys[3]") ||
                    !strstr(error, cases[i].why))
                        fail_msg("case %zu: %s", i, error);
                assert_int_equal(seed_ssh_key_fingerprint(cases[i].key, &fp), -EINVAL);
                assert_null(fp);
        }
}

/* ---- SEED-1: the whole object -------------------------------------------------------------------
 */

static int from_json_text(const char *text, SeedCloudInit *ret, char **error)
{
        json_error_t jerr;
        json_auto_t *o = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
        if (!o)
                fail_msg("bad test JSON %s: %s", text, jerr.text);
        return seed_cloud_init_from_json(o, "cloud_init", -EINVAL, ret, error);
}

/* SEED-1: a valid body is kept as given. */
static void test_from_json_valid(void **state)
{
        _cleanup_(seed_cloud_init_done) SeedCloudInit c = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(from_json_text("{\"ssh_authorized_keys\": [\"" KEY_ED25519 "\", \"" KEY_RSA
                                        "\"], \"hostname\": \"render-01\"}",
                                        &c, &error),
                         0);
        assert_null(error);
        assert_int_equal(strv_length(c.ssh_authorized_keys), 2);
        assert_string_equal(c.ssh_authorized_keys[0], KEY_ED25519);
        assert_string_equal(c.hostname, "render-01");
        assert_null(c.user_data);

        _cleanup_(seed_cloud_init_done) SeedCloudInit u = {0};
        assert_int_equal(from_json_text("{\"user_data\": \"#!/bin/sh\\necho hi\\n\"}", &u, &error),
                         0);
        assert_string_equal(u.user_data, "#!/bin/sh\necho hi\n");
        assert_null(u.ssh_authorized_keys);

        _cleanup_(seed_cloud_init_done) SeedCloudInit e = {0};
        assert_int_equal(from_json_text("{}", &e, &error), 0);
        assert_null(e.ssh_authorized_keys);
}

/* A string of n bytes: prefix, then 'x' up to n. */
static char *text_of_size(const char *prefix, size_t n)
{
        char *s = malloc(n + 1);
        assert_non_null(s);
        memset(s, 'x', n);
        memcpy(s, prefix, strlen(prefix));
        s[n] = 0;
        return s;
}

/* SEED-1, REL-13: user data at 64 KiB passes, one byte over does not. */
static void test_from_json_user_data_limit(void **state)
{
        _cleanup_free_ char *at = text_of_size("#cloud-config\n#", SEED_USER_DATA_MAX);
        _cleanup_free_ char *over = text_of_size("#cloud-config\n#", SEED_USER_DATA_MAX + 1);
        json_auto_t *ok = json_pack("{s:s}", "user_data", at);
        json_auto_t *big = json_pack("{s:s}", "user_data", over);
        _cleanup_(seed_cloud_init_done) SeedCloudInit c = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(seed_cloud_init_from_json(ok, "cloud_init", -EINVAL, &c, &error), 0);
        assert_int_equal(strlen(c.user_data), SEED_USER_DATA_MAX);
        SeedCloudInit d = {0};
        assert_int_equal(seed_cloud_init_from_json(big, "cloud_init", -EINVAL, &d, &error),
                         -EINVAL);
        assert_string_equal(error, "cloud_init.user_data must be at most 65536 bytes");
        assert_null(d.user_data);
        /* The same rule on values that did not come through the JSON table. */
        free(error);
        error = NULL;
        SeedCloudInit v = {.user_data = over};
        assert_int_equal(seed_cloud_init_check(&v, "cloud_init", -EINVAL, &error), -EINVAL);
        assert_string_equal(error, "cloud_init.user_data must be at most 65536 bytes");
}

/* SEED-1, REL-13: 64 keys pass, 65 do not. */
static void test_from_json_key_count(void **state)
{
        for (int n = SEED_SSH_KEYS_MAX; n <= SEED_SSH_KEYS_MAX + 1; n++) {
                json_auto_t *keys = json_array();
                for (int i = 0; i < n; i++)
                        assert_int_equal(json_push(keys, json_string(KEY_ED25519)), 0);
                json_auto_t *o = json_pack("{s:O}", "ssh_authorized_keys", keys);
                _cleanup_(seed_cloud_init_done) SeedCloudInit c = {0};
                _cleanup_free_ char *error = NULL;
                int r = seed_cloud_init_from_json(o, "cloud_init", -EINVAL, &c, &error);
                if (n == SEED_SSH_KEYS_MAX) {
                        assert_int_equal(r, 0);
                        assert_int_equal(strv_length(c.ssh_authorized_keys), n);
                } else {
                        assert_int_equal(r, -EINVAL);
                        assert_string_equal(error, "cloud_init.ssh_authorized_keys must hold at "
                                                   "most 64 entries");
                }
        }
}

/* SEED-1, REL-13, INST-7: each refusal names its field. */
static void test_from_json_invalid(void **state)
{
        static const struct {
                const char *body, *error;
        } cases[] = {
            {"{\"user_data\": \"#cloud-config\\n\", \"ssh_authorized_keys\": [\"" KEY_ED25519
             "\"]}",
             "cloud_init.ssh_authorized_keys must not be given with cloud_init.user_data (put "
             "the keys in the user data)"},
            {"{\"user_data\": \"hello\"}",
             "cloud_init.user_data must start with \"#cloud-config\", \"#!\" or \"Content-Type: "
             "multipart/\""},
            {"{\"user_data\": \" #cloud-config\"}",
             "cloud_init.user_data must start with \"#cloud-config\", \"#!\" or \"Content-Type: "
             "multipart/\""},
            {"{\"user_data\": \"#cloud-config\\n\\u0000more\"}",
             "cloud_init.user_data must not contain NUL"},
            {"{\"hostname\": \"a\\u0000b\"}", "cloud_init.hostname must not contain NUL"},
            {"{\"ssh_authorized_keys\": [\"" ED25519_PART " a\\u0000b\"]}",
             "cloud_init.ssh_authorized_keys[0] must not contain NUL"},
            {"{\"hostname\": \"../etc/passwd\"}",
             "cloud_init.hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"{\"hostname\": \"a/b\"}",
             "cloud_init.hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"{\"hostname\": \"Render\"}",
             "cloud_init.hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"{\"hostname\": \"a: b\\n\"}",
             "cloud_init.hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"{\"hostname\": \"\"}",
             "cloud_init.hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"{\"hostname\": 7}", "cloud_init.hostname must be a string"},
            {"{\"ssh_authorized_keys\": \"" KEY_ED25519 "\"}",
             "cloud_init.ssh_authorized_keys must be an array"},
            {"{\"ssh_authorized_keys\": [7]}",
             "cloud_init.ssh_authorized_keys[0] must be a string"},
            {"{\"ssh_authorized_keys\": [\"" KEY_ED25519 "\", \"x\"]}",
             "cloud_init.ssh_authorized_keys[1] must start with a key type (ssh-ed25519, "
             "ssh-rsa, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, "
             "sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com) and one space"},
            {"{\"vendor_data\": \"x\"}", "unknown key \"cloud_init.vendor_data\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                SeedCloudInit c = {0};
                _cleanup_free_ char *error = NULL;
                assert_int_equal(from_json_text(cases[i].body, &c, &error), -EINVAL);
                if (!streq(error, cases[i].error))
                        fail_msg("case %zu: got %s", i, error);
                assert_null(c.hostname);
        }
        json_auto_t *s = json_string("x");
        SeedCloudInit c = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(seed_cloud_init_from_json(s, "cloud_init", -EINVAL, &c, &error), -EINVAL);
        assert_string_equal(error, "cloud_init must be an object");
}

/* SEED-1: user data that is not UTF-8 (possible in a record or a caller's string). */
static void test_check_user_data_utf8(void **state)
{
        SeedCloudInit c = {.user_data = (char *)"#cloud-config\n# \xff\n"};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(seed_cloud_init_check(&c, "cloud_init", -EINVAL, &error), -EINVAL);
        assert_string_equal(error, "cloud_init.user_data must be UTF-8");
}

/* ---- SEED-4 ------------------------------------------------------------------------------------
 */

/* SEED-4: fingerprints and a user_data flag, never the user data. */
static void test_to_json(void **state)
{
        char *keys[] = {(char *)KEY_ED25519, (char *)ED25519_PART, NULL};
        SeedCloudInit c = {.ssh_authorized_keys = keys, .hostname = (char *)"render-01"};
        json_auto_t *o = seed_cloud_init_to_json(&c);
        assert_non_null(o);
        _cleanup_free_ char *text = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(text, "{\"hostname\":\"render-01\",\"ssh_authorized_keys\":[{"
                                  "\"comment\":\"user@ed25519\",\"fingerprint\":\"" FP_ED25519
                                  "\",\"type\":\"ssh-ed25519\"},{\"fingerprint\":\"" FP_ED25519
                                  "\",\"type\":\"ssh-ed25519\"}],\"user_data\":false}");

        SeedCloudInit u = {.user_data = (char *)"#cloud-config\npassword: hunter2\n"};
        json_auto_t *ou = seed_cloud_init_to_json(&u);
        _cleanup_free_ char *tu = json_dumps(ou, JSON_SORT_KEYS | JSON_COMPACT);
        assert_string_equal(tu, "{\"user_data\":true}");
        assert_null(strstr(tu, "hunter2"));

        json_auto_t *none = seed_cloud_init_to_json(NULL);
        _cleanup_free_ char *tn = json_dumps(none, JSON_COMPACT);
        assert_string_equal(tn, "{\"user_data\":false}");
}

/* ---- SEED-2: meta-data and user-data -----------------------------------------------------------
 */

/* SEED-2: meta-data names the instance and its host name. */
static void test_meta_data(void **state)
{
        SeedFile f = {0};
        assert_int_equal(seed_render_meta_data(ID, "render-01", &f, NULL), 0);
        Yaml y;
        yaml_load(&f, &y);
        assert_int_equal(yaml_count(&y, ""), 2);
        assert_text(&y, "instance-id", ID);
        assert_text(&y, "local-hostname", "render-01");
        yaml_done(&y);
        free(f.data);

        _cleanup_free_ char *error = NULL;
        assert_int_equal(seed_render_meta_data(ID, "a/b", &f, &error), -EINVAL);
        assert_string_equal(error, "hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
}

/*
 * SEED-2, REL-13: host names that a YAML 1.1 reader would take for null, a boolean or a
 * number, and key comments with YAML's structure characters, read back as exactly the input.
 */
static void test_user_data_hostile_text(void **state)
{
        static const char *const hostnames[] = {"null", "true", "yes", "no",   "on",
                                                "123",  "0x1f", "1e3", "0o17", "007"};
        static const char *const comments[] = {
            "a: b",
            "# not a comment",
            "{x: 1}",
            "[1, 2]",
            "\"quoted\"",
            "'single'",
            "&anchor",
            "*alias",
            "!!python/object:os.system",
            "--- x",
            "...",
            "- item",
            "key: value # c",
            "| block",
            "> folded",
            "%TAG ! x",
            "@at `tick`",
            "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x94\x91",
            "\\x0a",
            "a  two  spaces",
        };
        for (size_t i = 0; i < ELEMENTSOF(hostnames); i++) {
                SeedFile f = {0};
                assert_int_equal(seed_render_user_data(NULL, hostnames[i], &f, NULL), 0);
                assert_true(startswith(f.data, "#cloud-config\n"));
                Yaml y;
                yaml_load(&f, &y);
                assert_int_equal(yaml_count(&y, ""), 1);
                assert_text(&y, "hostname", hostnames[i]);
                yaml_done(&y);
                free(f.data);

                SeedFile m = {0};
                assert_int_equal(seed_render_meta_data(hostnames[i], hostnames[i], &m, NULL), 0);
                yaml_load(&m, &y);
                assert_text(&y, "instance-id", hostnames[i]);
                assert_text(&y, "local-hostname", hostnames[i]);
                yaml_done(&y);
                free(m.data);
        }
        _cleanup_strv_free_ char **keys = NULL;
        for (size_t i = 0; i < ELEMENTSOF(comments); i++) {
                _cleanup_free_ char *line = NULL;
                assert_int_equal(strprintf(&line, "%s %s", ED25519_PART, comments[i]), 0);
                assert_int_equal(seed_ssh_key_check(line, "k", -EINVAL, NULL), 0);
                assert_int_equal(strv_push(&keys, line), 0);
        }
        SeedCloudInit c = {.ssh_authorized_keys = keys};
        SeedFile f = {0};
        assert_int_equal(seed_render_user_data(&c, "render-01", &f, NULL), 0);
        Yaml y;
        yaml_load(&f, &y);
        assert_int_equal(yaml_count(&y, ""), 2);
        assert_text(&y, "hostname", "render-01");
        assert_int_equal(yaml_count(&y, "ssh_authorized_keys"), ELEMENTSOF(comments));
        for (size_t i = 0; i < ELEMENTSOF(comments); i++) {
                char path[64];
                snprintf(path, sizeof path, "ssh_authorized_keys[%zu]", i);
                assert_text(&y, path, keys[i]);
        }
        yaml_done(&y);
        free(f.data);
}

/* SEED-2: a #cloud-config document with the keys; verbatim user data when given. */
static void test_user_data(void **state)
{
        char *keys[] = {(char *)KEY_ED25519, (char *)KEY_RSA, NULL};
        SeedCloudInit c = {.ssh_authorized_keys = keys};
        SeedFile f = {0};
        assert_int_equal(seed_render_user_data(&c, "render-01", &f, NULL), 0);
        assert_true(startswith(f.data, "#cloud-config\n"));
        assert_int_equal(f.size, strlen(f.data));
        Yaml y;
        yaml_load(&f, &y);
        assert_text(&y, "ssh_authorized_keys[0]", KEY_ED25519);
        assert_text(&y, "ssh_authorized_keys[1]", KEY_RSA);
        yaml_done(&y);
        free(f.data);

        /* Without keys, the host name alone. */
        assert_int_equal(seed_render_user_data(NULL, "render-01", &f, NULL), 0);
        yaml_load(&f, &y);
        assert_int_equal(yaml_count(&y, ""), 1);
        assert_null(yaml_at(&y, "ssh_authorized_keys"));
        yaml_done(&y);
        free(f.data);

        const char *text = "#!/bin/sh\necho 'hostname: x' > /tmp/y\n";
        SeedCloudInit u = {.user_data = (char *)text};
        assert_int_equal(seed_render_user_data(&u, "render-01", &f, NULL), 0);
        assert_string_equal(f.data, text);
        assert_int_equal(f.size, strlen(text));
        free(f.data);

        /* A render never trusts its input: keys beside user data are refused here too. */
        SeedCloudInit both = {.user_data = (char *)text, .ssh_authorized_keys = keys};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(seed_render_user_data(&both, "render-01", &f, &error), -EINVAL);
        assert_true(startswith(error, "cloud_init.ssh_authorized_keys must not be given"));
}

/* ---- SEED-3: network-config ---------------------------------------------------------------------
 */

static void load_network(const SeedNetwork *n, Yaml *y)
{
        SeedFile f = {0};
        _cleanup_free_ char *error = NULL;
        if (seed_render_network_config(n, &f, &error) < 0)
                fail_msg("render: %s", error);
        yaml_load(&f, y);
        free(f.data);
        assert_word(y, "version", "2");
        assert_int_equal(yaml_count(y, ""), 2);
}

/*
 * SEED-3: nat is static: the address, the default route (gateway4) and DNS via the gateway,
 * vgpud.internal.
 */
static void test_network_nat(void **state)
{
        SeedNetwork n = {.mode = SEED_NETWORK_NAT,
                         .mac = MAC,
                         .ip = "10.88.0.12",
                         .prefix = 24,
                         .gateway = "10.88.0.1"};
        Yaml y;
        load_network(&n, &y);
        assert_int_equal(yaml_count(&y, "ethernets"), 1);
        assert_int_equal(yaml_count(&y, "ethernets.eth0"), 5);
        assert_int_equal(yaml_count(&y, "ethernets.eth0.match"), 1);
        assert_text(&y, "ethernets.eth0.match.macaddress", MAC);
        assert_text(&y, "ethernets.eth0.set-name", "eth0");
        assert_int_equal(yaml_count(&y, "ethernets.eth0.addresses"), 1);
        assert_text(&y, "ethernets.eth0.addresses[0]", "10.88.0.12/24");
        assert_text(&y, "ethernets.eth0.gateway4", "10.88.0.1");
        assert_null(yaml_at(&y, "ethernets.eth0.routes"));
        assert_int_equal(yaml_count(&y, "ethernets.eth0.nameservers.addresses"), 1);
        assert_text(&y, "ethernets.eth0.nameservers.addresses[0]", "10.88.0.1");
        assert_int_equal(yaml_count(&y, "ethernets.eth0.nameservers.search"), 1);
        assert_text(&y, "ethernets.eth0.nameservers.search[0]", "vgpud.internal");
        assert_null(yaml_at(&y, "ethernets.eth0.dhcp4"));
        yaml_done(&y);
}

/* SEED-3: bridge with NET-1's static values: those, and the operator's name servers. */
static void test_network_bridge_static(void **state)
{
        char *dns[] = {(char *)"192.0.2.53", (char *)"192.0.2.54", NULL};
        SeedNetwork n = {.mode = SEED_NETWORK_BRIDGE,
                         .mac = MAC,
                         .ip = "192.0.2.10",
                         .prefix = 26,
                         .gateway = "192.0.2.1",
                         .dns = dns};
        Yaml y;
        load_network(&n, &y);
        assert_text(&y, "ethernets.eth0.match.macaddress", MAC);
        assert_text(&y, "ethernets.eth0.set-name", "eth0");
        assert_text(&y, "ethernets.eth0.addresses[0]", "192.0.2.10/26");
        assert_text(&y, "ethernets.eth0.gateway4", "192.0.2.1");
        assert_int_equal(yaml_count(&y, "ethernets.eth0.nameservers"), 1);
        assert_int_equal(yaml_count(&y, "ethernets.eth0.nameservers.addresses"), 2);
        assert_text(&y, "ethernets.eth0.nameservers.addresses[0]", "192.0.2.53");
        assert_text(&y, "ethernets.eth0.nameservers.addresses[1]", "192.0.2.54");
        assert_null(yaml_at(&y, "ethernets.eth0.dhcp4"));
        yaml_done(&y);

        /* An address without gateway or name servers: just the address. */
        SeedNetwork bare = {
            .mode = SEED_NETWORK_BRIDGE, .mac = MAC, .ip = "192.0.2.10", .prefix = 24};
        load_network(&bare, &y);
        assert_int_equal(yaml_count(&y, "ethernets.eth0"), 3);
        assert_null(yaml_at(&y, "ethernets.eth0.gateway4"));
        assert_null(yaml_at(&y, "ethernets.eth0.nameservers"));
        yaml_done(&y);
}

/* SEED-3: bridge without static values: DHCP. */
static void test_network_bridge_dhcp(void **state)
{
        SeedNetwork n = {.mode = SEED_NETWORK_BRIDGE, .mac = MAC};
        Yaml y;
        load_network(&n, &y);
        assert_int_equal(yaml_count(&y, "ethernets.eth0"), 3);
        assert_text(&y, "ethernets.eth0.match.macaddress", MAC);
        assert_word(&y, "ethernets.eth0.dhcp4", "true");
        assert_null(yaml_at(&y, "ethernets.eth0.addresses"));
        yaml_done(&y);
}

/* SEED-3: none writes no NIC. */
static void test_network_none(void **state)
{
        SeedNetwork n = {.mode = SEED_NETWORK_NONE};
        Yaml y;
        load_network(&n, &y);
        assert_int_equal(yaml_count(&y, "ethernets"), 0);
        yaml_done(&y);
}

/* SEED-3: facts that would make a broken configuration are refused, not rendered. */
static void test_network_invalid(void **state)
{
        char *bad_dns[] = {(char *)"192.0.2.53", (char *)"ns1\n", NULL};
        static const char *const none[] = {NULL};
        const struct {
                SeedNetwork n;
                const char *error;
        } cases[] = {
            {{.mode = SEED_NETWORK_NAT,
              .mac = "52:54:00:12:34:5G",
              .ip = "10.0.0.2",
              .prefix = 24,
              .gateway = "10.0.0.1"},
             "network.mac must be six lowercase hex pairs"},
            {{.mode = SEED_NETWORK_NAT, .mac = MAC, .ip = "10.0.0.2", .prefix = 24},
             "nat mode needs network.ip and network.gateway"},
            {{.mode = SEED_NETWORK_NAT,
              .mac = MAC,
              .ip = "10.0.0.2",
              .prefix = 33,
              .gateway = "10.0.0.1"},
             "network.prefix must be 1..32"},
            {{.mode = SEED_NETWORK_BRIDGE, .mac = MAC, .ip = "10.0.0.2\n- x", .prefix = 24},
             "network.ip must be an IPv4 address (a.b.c.d)"},
            {{.mode = SEED_NETWORK_BRIDGE,
              .mac = MAC,
              .ip = "10.0.0.2",
              .prefix = 24,
              .gateway = "gw"},
             "network.gateway must be an IPv4 address (a.b.c.d)"},
            {{.mode = SEED_NETWORK_BRIDGE,
              .mac = MAC,
              .ip = "10.0.0.2",
              .prefix = 24,
              .dns = bad_dns},
             "network.dns[1] must be an IPv4 address (a.b.c.d)"},
            {{.mode = SEED_NETWORK_BRIDGE, .mac = MAC, .gateway = "10.0.0.1"},
             "network.gateway and network.dns need network.ip"},
            {{.mode = SEED_NETWORK_BRIDGE, .mac = MAC, .dns = (char *const *)none},
             "network.gateway and network.dns need network.ip"},
            {{.mode = SEED_NETWORK_BRIDGE}, "network.mac must be six lowercase hex pairs"},
            {{.mode = (SeedNetworkMode)7, .mac = MAC}, "network.mode is not nat, bridge or none"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                SeedFile f = {0};
                _cleanup_free_ char *error = NULL;
                assert_int_equal(seed_render_network_config(&cases[i].n, &f, &error), -EINVAL);
                if (!streq(error, cases[i].error))
                        fail_msg("case %zu: %s", i, error);
                assert_null(f.data);
        }
}

/* ---- SEED-2: the whole seed and its ISO --------------------------------------------------------
 */

/* Runs isoinfo with args; its output. */
static char *isoinfo(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
                     const char *a6)
{
        const char *bin = getenv("ISOINFO");
        if (!bin || !*bin)
                fail_msg("ISOINFO is not set: isoinfo (package genisoimage) was not found at "
                         "meson setup; scripts/deps.sh installs it");
        char *argv[] = {(char *)bin, (char *)a1, (char *)a2, (char *)a3,
                        (char *)a4,  (char *)a5, (char *)a6, NULL};
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.argv = argv;
        char *out = NULL, *error = NULL;
        int status = 0;
        if (spawn_run_helper(&req, test_now() + 30 * NSEC_PER_SEC, 1 << 20, &out, &status, &error) <
            0)
                fail_msg("isoinfo: %s", error);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("isoinfo %s %s failed: %s", a1, a2, out);
        return out;
}

/* The ISO's file name, as each of its three namings reads it, holds exactly f. */
static void assert_iso_file(const char *iso, const char *name, const SeedFile *f)
{
        static const char *const views[] = {"-R", "-J"};
        for (size_t i = 0; i < ELEMENTSOF(views); i++) {
                _cleanup_free_ char *path = NULL;
                assert_int_equal(strprintf(&path, "/%s", name), 0);
                _cleanup_free_ char *got = isoinfo(views[i], "-i", iso, "-x", path, NULL);
                if (strlen(got) != f->size || memcmp(got, f->data, f->size) != 0)
                        fail_msg("%s %s reads back as:\n%s\nnot:\n%s", views[i], name, got,
                                 f->data);
        }
}

static void check_seed_iso(const SeedInput *in)
{
        _cleanup_test_tree_ TestTree *t = NULL;
        assert_int_equal(test_tree_new("seed", &t), 0);
        _cleanup_(seed_files_done) SeedFiles files = {0};
        _cleanup_free_ char *error = NULL;
        if (seed_render(in, &files, &error) < 0)
                fail_msg("render: %s", error);
        if (seed_iso_write_at(t->fd, "seed.iso", &files, &error) < 0)
                fail_msg("write: %s", error);
        _cleanup_free_ char *iso = test_tree_path(t, "seed.iso");

        struct stat st;
        assert_int_equal(fstatat(t->fd, "seed.iso", &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_int_equal(fstatat(t->fd, "seed.iso.tmp", &st, 0), -1);

        _cleanup_free_ char *info = isoinfo("-d", "-i", iso, NULL, NULL, NULL);
        if (!strstr(info, "Volume id: cidata\n") || !strstr(info, "Joliet with UCS level") ||
            !strstr(info, "Rock Ridge signatures version"))
                fail_msg("isoinfo -d:\n%s", info);
        _cleanup_free_ char *list = isoinfo("-R", "-l", "-i", iso, NULL, NULL);
        bool vendor = files.vendor_data.data;
        assert_non_null(strstr(list, " meta-data"));
        assert_non_null(strstr(list, " user-data"));
        assert_non_null(strstr(list, " network-config"));
        assert_int_equal(!!strstr(list, " vendor-data"), vendor);
        assert_non_null(strstr(list, "-r--r--r--"));

        assert_iso_file(iso, "meta-data", &files.meta_data);
        assert_iso_file(iso, "user-data", &files.user_data);
        assert_iso_file(iso, "network-config", &files.network_config);
        if (vendor)
                assert_iso_file(iso, "vendor-data", &files.vendor_data);

        /* What the ISO holds is what parses back (the documents' own tests say what). */
        Yaml y;
        yaml_load(&files.meta_data, &y);
        assert_text(&y, "instance-id", in->instance_id);
        assert_text(&y, "local-hostname", in->hostname);
        yaml_done(&y);
        yaml_load(&files.network_config, &y);
        assert_word(&y, "version", "2");
        assert_int_equal(yaml_count(&y, "ethernets"), in->network.mode != SEED_NETWORK_NONE);
        if (in->network.mode != SEED_NETWORK_NONE)
                assert_text(&y, "ethernets.eth0.match.macaddress", in->network.mac);
        yaml_done(&y);
        if (!in->cloud_init || !in->cloud_init->user_data) {
                yaml_load(&files.user_data, &y);
                assert_text(&y, "hostname", in->hostname);
                yaml_done(&y);
        }
}

/* SEED-2, SEED-3: the ISO for nat (with keys and vendor data), read back file by file. */
static void test_iso_nat(void **state)
{
        char *keys[] = {(char *)KEY_ED25519, (char *)KEY_ECDSA256, NULL};
        SeedCloudInit c = {.ssh_authorized_keys = keys};
        SeedInput in = {
            .instance_id = ID,
            .hostname = "render-01",
            .cloud_init = &c,
            .network = {.mode = SEED_NETWORK_NAT,
                        .mac = MAC,
                        .ip = "10.88.0.12",
                        .prefix = 24,
                        .gateway = "10.88.0.1"},
            .vendor_data = "#cloud-config\nwrite_files:\n- path: /etc/nvidia/ClientConfigToken/"
                           "client_configuration_token.tok\n  content: abc\n",
        };
        check_seed_iso(&in);
}

/* SEED-2, SEED-3: bridge with static values, and the operator's verbatim user data. */
static void test_iso_bridge_static(void **state)
{
        char *dns[] = {(char *)"192.0.2.53", NULL};
        SeedCloudInit c = {.user_data = (char *)"#cloud-config\npackages: [htop]\n",
                           .hostname = (char *)"web-1"};
        SeedInput in = {
            .instance_id = ID,
            .hostname = "web-1",
            .cloud_init = &c,
            .network = {.mode = SEED_NETWORK_BRIDGE,
                        .mac = MAC,
                        .ip = "192.0.2.10",
                        .prefix = 24,
                        .gateway = "192.0.2.1",
                        .dns = dns},
        };
        check_seed_iso(&in);
}

/* SEED-2, SEED-3: bridge with DHCP, and no cloud_init at all (an image alone gets a seed). */
static void test_iso_bridge_dhcp(void **state)
{
        SeedInput in = {
            .instance_id = ID,
            .hostname = "dhcp-vm",
            .network = {.mode = SEED_NETWORK_BRIDGE, .mac = MAC},
        };
        check_seed_iso(&in);
}

/* SEED-2, SEED-3: no NIC. */
static void test_iso_none(void **state)
{
        SeedInput in = {
            .instance_id = ID, .hostname = "offline", .network = {.mode = SEED_NETWORK_NONE}};
        check_seed_iso(&in);
}

/* SEED-2: a rebuild replaces the seed; a failed one leaves the old seed whole. */
static void test_iso_rewrite(void **state)
{
        _cleanup_test_tree_ TestTree *t = NULL;
        assert_int_equal(test_tree_new("seed", &t), 0);
        SeedInput in = {
            .instance_id = ID, .hostname = "first", .network = {.mode = SEED_NETWORK_NONE}};
        _cleanup_(seed_files_done) SeedFiles a = {0}, b = {0};
        assert_int_equal(seed_render(&in, &a, NULL), 0);
        assert_int_equal(seed_iso_write_at(t->fd, "seed.iso", &a, NULL), 0);
        _cleanup_free_ char *iso = test_tree_path(t, "seed.iso");
        assert_iso_file(iso, "meta-data", &a.meta_data);

        in.hostname = "second";
        assert_int_equal(seed_render(&in, &b, NULL), 0);
        assert_int_equal(seed_iso_write_at(t->fd, "seed.iso", &b, NULL), 0);
        assert_iso_file(iso, "meta-data", &b.meta_data);

        /* The temporary name is taken by a directory: the write fails at its first step. */
        assert_int_equal(mkdirat(t->fd, "seed.iso.tmp", 0700), 0);
        _cleanup_free_ char *error = NULL;
        assert_int_equal(seed_iso_write_at(t->fd, "seed.iso", &a, &error), -EISDIR);
        assert_true(startswith(error, "write seed.iso (create): "));
        assert_iso_file(iso, "meta-data", &b.meta_data);
}

/* SEED-2: vendor data from the operator's file: read as is, bounded, without NUL. */
static void test_vendor_data(void **state)
{
        _cleanup_test_tree_ TestTree *t = NULL;
        assert_int_equal(test_tree_new("seed", &t), 0);
        const char *text = "#cloud-config\nruncmd: [[nvidia-smi]]\n";
        assert_int_equal(test_tree_put(t, text, "vendor.yaml"), 0);
        _cleanup_free_ char *path = test_tree_path(t, "vendor.yaml");
        _cleanup_free_ char *got = NULL, *error = NULL;
        assert_int_equal(seed_read_vendor_data(path, &got, &error), 0);
        assert_string_equal(got, text);

        _cleanup_free_ char *big = text_of_size("#", SEED_VENDOR_DATA_MAX + 1);
        assert_int_equal(test_tree_put(t, big, "big.yaml"), 0);
        _cleanup_free_ char *big_path = test_tree_path(t, "big.yaml");
        char *none = NULL;
        assert_int_equal(seed_read_vendor_data(big_path, &none, &error), -EFBIG);
        assert_null(none);
        assert_true(strstr(error, "is larger than 65536 bytes"));

        int fd = openat(t->fd, "nul.yaml", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "a\0b", 3), 3);
        close(fd);
        _cleanup_free_ char *nul_path = test_tree_path(t, "nul.yaml");
        free(error);
        error = NULL;
        assert_int_equal(seed_read_vendor_data(nul_path, &none, &error), -EINVAL);
        assert_true(strstr(error, "vendor data contains a NUL byte"));

        _cleanup_free_ char *missing = test_tree_path(t, "missing.yaml");
        free(error);
        error = NULL;
        assert_int_equal(seed_read_vendor_data(missing, &none, &error), -ENOENT);
        assert_true(startswith(error, "read vendor data "));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_ssh_key_valid_and_fingerprint),
            cmocka_unit_test(test_ssh_key_blob_type),
            cmocka_unit_test(test_ssh_key_invalid),
            cmocka_unit_test(test_from_json_valid),
            cmocka_unit_test(test_from_json_user_data_limit),
            cmocka_unit_test(test_from_json_key_count),
            cmocka_unit_test(test_from_json_invalid),
            cmocka_unit_test(test_check_user_data_utf8),
            cmocka_unit_test(test_to_json),
            cmocka_unit_test(test_meta_data),
            cmocka_unit_test(test_user_data_hostile_text),
            cmocka_unit_test(test_user_data),
            cmocka_unit_test(test_network_nat),
            cmocka_unit_test(test_network_bridge_static),
            cmocka_unit_test(test_network_bridge_dhcp),
            cmocka_unit_test(test_network_none),
            cmocka_unit_test(test_network_invalid),
            cmocka_unit_test(test_iso_nat),
            cmocka_unit_test(test_iso_bridge_static),
            cmocka_unit_test(test_iso_bridge_dhcp),
            cmocka_unit_test(test_iso_none),
            cmocka_unit_test(test_iso_rewrite),
            cmocka_unit_test(test_vendor_data),
        };
        return cmocka_run_group_tests_name("seed", tests, NULL, NULL);
}
