/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * SEED-1's validation of a create body's cloud_init, and SEED-4's view of it (fingerprints).
 */
#include <openssl/evp.h>

#include "base/json-util.h"
#include "seed/seed.h"

void seed_cloud_init_done(SeedCloudInit *c)
{
        if (!c)
                return;
        strv_free(c->ssh_authorized_keys);
        free(c->user_data);
        free(c->hostname);
        *c = (SeedCloudInit){0};
}

int seed_cloud_init_copy(const SeedCloudInit *c, SeedCloudInit *ret)
{
        _cleanup_(seed_cloud_init_done) SeedCloudInit n = {0};
        if (strv_copy(c->ssh_authorized_keys, &n.ssh_authorized_keys) < 0 ||
            strdup_nullable(c->user_data, &n.user_data) < 0 ||
            strdup_nullable(c->hostname, &n.hostname) < 0)
                return -ENOMEM;
        *ret = n;
        n = (SeedCloudInit){0};
        return 0;
}

bool seed_cloud_init_is_empty(const SeedCloudInit *c)
{
        return !c || (!c->ssh_authorized_keys && !c->user_data && !c->hostname);
}

/* ---- OpenSSH public key lines ---------------------------------------------------------------- */

/* SEED-1's key types: what OpenSSH's authorized_keys takes without options. */
static const char *const ssh_key_types[] = {
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
};

/* U+0000..U+001F, U+007F and the C1 controls U+0080..U+009F (0xc2 0x80..0x9f in UTF-8). */
static bool has_control_character(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c < 0x20 || c == 0x7f)
                        return true;
                if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
                    (unsigned char)s[i + 1] <= 0x9f)
                        return true;
        }
        return false;
}

typedef struct SshKey {
        const char *type; /* one of ssh_key_types */
        uint8_t *blob;    /* owned */
        size_t blob_size;
        const char *comment; /* inside the line, or NULL */
} SshKey;

static void ssh_key_done(SshKey *k)
{
        free(k->blob);
}

/* Splits and checks one line; the message names path. */
static int ssh_key_parse(const char *key, const char *path, int code, SshKey *ret, char **error)
{
        size_t n = strlen(key);
        if (n == 0)
                return error_set(error, code, "%s must not be empty", path);
        if (n > SEED_SSH_KEY_MAX)
                return error_set(error, code, "%s must be at most %d bytes", path,
                                 SEED_SSH_KEY_MAX);
        if (!utf8_is_valid(key, n))
                return error_set(error, code, "%s must be UTF-8", path);
        if (has_control_character(key, n))
                return error_set(error, code, "%s must not contain control characters", path);

        const char *type = NULL, *rest = NULL;
        for (size_t i = 0; i < ELEMENTSOF(ssh_key_types) && !rest; i++) {
                const char *after = startswith(key, ssh_key_types[i]);
                if (after && *after == ' ') {
                        type = ssh_key_types[i];
                        rest = after + 1;
                }
        }
        if (!rest)
                return error_set(error, code,
                                 "%s must start with a key type (ssh-ed25519, ssh-rsa, "
                                 "ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, "
                                 "sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com) "
                                 "and one space",
                                 path);
        const char *space = strchr(rest, ' ');
        size_t b64_len = space ? (size_t)(space - rest) : strlen(rest);
        const char *comment = space ? space + 1 : NULL;
        if (comment && !*comment)
                return error_set(error, code, "%s must not end with a space", path);

        _cleanup_free_ uint8_t *blob = NULL;
        size_t blob_size = 0;
        int r = base64_decode(rest, b64_len, BASE64_PADDED, &blob, &blob_size);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, code, "%s: the key after the type must be base64", path);
        /* The blob names its own type (RFC 4253 section 6.6): a key pasted under another type's
         * name is someone's mistake, and sshd would ignore the line. */
        size_t tn = strlen(type);
        if (blob_size < 4 + tn ||
            ((uint32_t)blob[0] << 24 | (uint32_t)blob[1] << 16 | (uint32_t)blob[2] << 8 |
             blob[3]) != tn ||
            memcmp(blob + 4, type, tn) != 0)
                return error_set(error, code, "%s: the key is not a %s key", path, type);

        *ret = (SshKey){
            .type = type, .blob = TAKE_PTR(blob), .blob_size = blob_size, .comment = comment};
        return 0;
}

int seed_ssh_key_check(const char *key, const char *path, int code, char **error)
{
        SshKey k;
        int r = ssh_key_parse(key, path, code, &k, error);
        if (r < 0)
                return r;
        ssh_key_done(&k);
        return 0;
}

static int fingerprint_of(const SshKey *k, char **ret)
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned md_len = 0;
        if (EVP_Digest(k->blob, k->blob_size, md, &md_len, EVP_sha256(), NULL) != 1)
                return -ENOMEM;
        /* EVP_EncodeBlock() writes 4 characters per 3 bytes and a NUL. */
        char b64[(EVP_MAX_MD_SIZE + 2) / 3 * 4 + 1];
        int n = EVP_EncodeBlock((unsigned char *)b64, md, (int)md_len);
        while (n > 0 && b64[n - 1] == '=')
                n--;
        b64[n] = 0;
        return strprintf(ret, "SHA256:%s", b64);
}

int seed_ssh_key_fingerprint(const char *key, char **ret)
{
        SshKey k;
        int r = ssh_key_parse(key, "key", -EINVAL, &k, NULL);
        if (r < 0)
                return r;
        r = fingerprint_of(&k, ret);
        ssh_key_done(&k);
        return r;
}

/* ---- the whole object ------------------------------------------------------------------------ */

static int user_data_check(const char *text, const char *path, int code, char **error)
{
        size_t n = strlen(text);
        if (n > SEED_USER_DATA_MAX)
                return error_set(error, code, "%s.user_data must be at most %d bytes", path,
                                 SEED_USER_DATA_MAX);
        if (!utf8_is_valid(text, n))
                return error_set(error, code, "%s.user_data must be UTF-8", path);
        /* What cloud-init recognises as user data it acts on; anything else it would ignore
         * silently, and the operator would wonder why. */
        if (!startswith(text, "#cloud-config") && !startswith(text, "#!") &&
            !startswith(text, "Content-Type: multipart/"))
                return error_set(error, code,
                                 "%s.user_data must start with \"#cloud-config\", \"#!\" or "
                                 "\"Content-Type: multipart/\"",
                                 path);
        return 0;
}

int seed_cloud_init_check(const SeedCloudInit *c, const char *path, int code, char **error)
{
        size_t n_keys = strv_length(c->ssh_authorized_keys);
        if (n_keys > SEED_SSH_KEYS_MAX)
                return error_set(error, code, "%s.ssh_authorized_keys must hold at most %d keys",
                                 path, SEED_SSH_KEYS_MAX);
        for (size_t i = 0; i < n_keys; i++) {
                _cleanup_free_ char *at = NULL;
                if (strprintf(&at, "%s.ssh_authorized_keys[%zu]", path, i) < 0)
                        return error_set_oom(error);
                int r = seed_ssh_key_check(c->ssh_authorized_keys[i], at, code, error);
                if (r < 0)
                        return r;
        }
        if (c->user_data) {
                int r = user_data_check(c->user_data, path, code, error);
                if (r < 0)
                        return r;
                /* SEED-1: user data is used verbatim; keys beside it would be silently lost. */
                if (c->ssh_authorized_keys)
                        return error_set(error, code,
                                         "%s.ssh_authorized_keys must not be given with "
                                         "%s.user_data (put the keys in the user data)",
                                         path, path);
        }
        if (c->hostname && !resource_name_is_valid(c->hostname))
                return error_set(error, code,
                                 "%s.hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
                                 path);
        return 0;
}

typedef struct CloudInitView {
        json_t *ssh_authorized_keys;
        const char *user_data, *hostname;
} CloudInitView;

static const JsonField cloud_init_fields[] = {
    {"ssh_authorized_keys", JSON_FIELD_ARRAY, false, JSON_AT(CloudInitView, ssh_authorized_keys),
     .max = SEED_SSH_KEYS_MAX, .element_type = JSON_FIELD_STRING, .element_max = SEED_SSH_KEY_MAX},
    {"user_data", JSON_FIELD_STRING, false, JSON_AT(CloudInitView, user_data),
     .max = SEED_USER_DATA_MAX},
    {"hostname", JSON_FIELD_STRING, false, JSON_AT(CloudInitView, hostname)},
    {NULL},
};

/* A JSON string may hold "\u0000", which a C string would silently cut. */
static int no_nul(json_t *s, const char *path, const char *field, int code, char **error)
{
        if (s && json_string_length(s) != strlen(json_string_value(s)))
                return error_set(error, code, "%s.%s must not contain NUL", path, field);
        return 0;
}

int seed_cloud_init_from_json(json_t *o, const char *path, int code, SeedCloudInit *ret,
                              char **error)
{
        if (!json_is_object(o))
                return error_set(error, code, "%s must be an object", path);
        CloudInitView v = {0};
        int r = json_schema_read(o, path, cloud_init_fields, &v, code, error);
        if (r < 0)
                return r;
        if ((r = no_nul(json_object_get(o, "user_data"), path, "user_data", code, error)) < 0 ||
            (r = no_nul(json_object_get(o, "hostname"), path, "hostname", code, error)) < 0)
                return r;

        _cleanup_(seed_cloud_init_done) SeedCloudInit c = {0};
        size_t i;
        json_t *k;
        json_array_foreach (v.ssh_authorized_keys, i, k) {
                if (json_string_length(k) != strlen(json_string_value(k)))
                        return error_set(error, code,
                                         "%s.ssh_authorized_keys[%zu] must not contain NUL", path,
                                         i);
                if (strv_push(&c.ssh_authorized_keys, json_string_value(k)) < 0)
                        return error_set_oom(error);
        }
        /* An empty list is the same as none: user data beside it takes nothing away. */
        if (strdup_nullable(v.user_data, &c.user_data) < 0 ||
            strdup_nullable(v.hostname, &c.hostname) < 0)
                return error_set_oom(error);
        r = seed_cloud_init_check(&c, path, code, error);
        if (r < 0)
                return r;
        *ret = c;
        c = (SeedCloudInit){0};
        return 0;
}

/* ---- SEED-4 ------------------------------------------------------------------------------------
 */

json_t *seed_cloud_init_to_json(const SeedCloudInit *c)
{
        json_auto_t *o = json_object();
        if (!o)
                return NULL;
        if (c && c->hostname && json_set(o, "hostname", json_string(c->hostname)) < 0)
                return NULL;
        if (c && c->ssh_authorized_keys) {
                json_t *keys = json_array();
                if (json_set(o, "ssh_authorized_keys", keys) < 0)
                        return NULL;
                for (char **s = c->ssh_authorized_keys; *s; s++) {
                        SshKey k;
                        if (ssh_key_parse(*s, "key", -EINVAL, &k, NULL) < 0)
                                return NULL;
                        _cleanup_free_ char *fp = NULL;
                        int r = fingerprint_of(&k, &fp);
                        json_t *e = r < 0 ? NULL
                                          : json_pack("{s:s, s:s, s:s*}", "type", k.type,
                                                      "fingerprint", fp, "comment", k.comment);
                        ssh_key_done(&k);
                        if (json_push(keys, e) < 0)
                                return NULL;
                }
        }
        if (json_set(o, "user_data", json_boolean(c && c->user_data)) < 0)
                return NULL;
        return TAKE_PTR(o);
}
