/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * SEED-2 and SEED-3: the seed's documents, each emitted by libyaml's emitter.
 *
 * Every value that comes from outside (an id, a host name, a key line, an address) is emitted
 * as a double-quoted scalar: YAML 1.1 readers (cloud-init uses PyYAML) resolve a plain `null`,
 * `yes`, `0x1f` or `1e3` to something other than the text, and a double-quoted scalar is the
 * one style in which every string, control characters included, reads back as exactly itself.
 * Only the constants of the formats (`version: 2`, `dhcp4: true`) are plain.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <yaml.h>

#include "seed/seed.h"

void seed_files_done(SeedFiles *f)
{
        if (!f)
                return;
        free(f->meta_data.data);
        free(f->user_data.data);
        free(f->network_config.data);
        free(f->vendor_data.data);
        *f = (SeedFiles){0};
}

/* ---- a thin layer over the emitter ------------------------------------------------------------
 */

typedef struct Emitter {
        yaml_emitter_t emitter;
        char *buf;
        size_t size, allocated;
        bool failed; /* an event could not be made or emitted */
} Emitter;

static int emitter_write(void *data, unsigned char *buffer, size_t size)
{
        Emitter *e = data;
        if (e->size + size + 1 > e->allocated) {
                size_t want = (e->size + size + 1) * 2;
                char *p = realloc(e->buf, want);
                if (!p)
                        return 0;
                e->buf = p;
                e->allocated = want;
        }
        memcpy(e->buf + e->size, buffer, size);
        e->size += size;
        e->buf[e->size] = 0;
        return 1;
}

static void emit(Emitter *e, yaml_event_t *ev, int made)
{
        if (e->failed)
                return;
        if (!made || !yaml_emitter_emit(&e->emitter, ev))
                e->failed = true;
}

/* Starts a stream and a document; prefix (a "#cloud-config" line) goes before it, as is. */
static int emitter_begin(Emitter *e, const char *prefix)
{
        *e = (Emitter){0};
        if (!yaml_emitter_initialize(&e->emitter))
                return -ENOMEM;
        yaml_emitter_set_output(&e->emitter, emitter_write, e);
        yaml_emitter_set_unicode(&e->emitter, 1); /* a comment in UTF-8 stays readable */
        yaml_emitter_set_width(&e->emitter, -1);  /* long key lines stay on one line */
        if (prefix && !emitter_write(e, (unsigned char *)prefix, strlen(prefix))) {
                yaml_emitter_delete(&e->emitter);
                free(e->buf);
                return -ENOMEM;
        }
        yaml_event_t ev;
        emit(e, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
        emit(e, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1));
        return 0;
}

static void emit_mapping_start(Emitter *e)
{
        yaml_event_t ev;
        emit(e, &ev,
             yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE));
}

static void emit_mapping_end(Emitter *e)
{
        yaml_event_t ev;
        emit(e, &ev, yaml_mapping_end_event_initialize(&ev));
}

static void emit_sequence_start(Emitter *e)
{
        yaml_event_t ev;
        emit(e, &ev,
             yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE));
}

static void emit_sequence_end(Emitter *e)
{
        yaml_event_t ev;
        emit(e, &ev, yaml_sequence_end_event_initialize(&ev));
}

static void emit_scalar(Emitter *e, const char *value, yaml_scalar_style_t style)
{
        yaml_event_t ev;
        emit(e, &ev,
             yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)value, (int)strlen(value),
                                          style == YAML_PLAIN_SCALAR_STYLE,
                                          style != YAML_PLAIN_SCALAR_STYLE, style));
}

/* A format's own word (a key, `2`, `true`): plain. */
static void emit_word(Emitter *e, const char *word)
{
        emit_scalar(e, word, YAML_PLAIN_SCALAR_STYLE);
}

/* Text from outside: double-quoted, so it reads back as exactly itself (see the top). */
static void emit_text(Emitter *e, const char *text)
{
        emit_scalar(e, text, YAML_DOUBLE_QUOTED_SCALAR_STYLE);
}

static void emit_key_text(Emitter *e, const char *key, const char *text)
{
        emit_word(e, key);
        emit_text(e, text);
}

/* Ends the document and the stream, and hands the text over. */
static int emitter_end(Emitter *e, const char *what, SeedFile *ret, char **error)
{
        yaml_event_t ev;
        emit(e, &ev, yaml_document_end_event_initialize(&ev, 1));
        emit(e, &ev, yaml_stream_end_event_initialize(&ev));
        if (!e->failed && !yaml_emitter_flush(&e->emitter))
                e->failed = true;
        int r = 0;
        if (e->failed)
                r = error_set(error, e->emitter.error == YAML_MEMORY_ERROR ? -ENOMEM : -EINVAL,
                              "emit %s: %s", what,
                              e->emitter.problem ? e->emitter.problem : "out of memory");
        yaml_emitter_delete(&e->emitter);
        if (r < 0) {
                free(e->buf);
                return r;
        }
        *ret = (SeedFile){.data = e->buf, .size = e->size};
        return 0;
}

/* ---- meta-data ----------------------------------------------------------------------------------
 */

int seed_render_meta_data(const char *instance_id, const char *hostname, SeedFile *ret,
                          char **error)
{
        if (!instance_id || !*instance_id)
                return error_set(error, -EINVAL, "meta-data needs an instance id");
        if (!resource_name_is_valid(hostname))
                return error_set(error, -EINVAL,
                                 "hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
        Emitter e;
        if (emitter_begin(&e, NULL) < 0)
                return error_set_oom(error);
        emit_mapping_start(&e);
        emit_key_text(&e, "instance-id", instance_id);
        emit_key_text(&e, "local-hostname", hostname);
        emit_mapping_end(&e);
        return emitter_end(&e, "meta-data", ret, error);
}

/* ---- user-data ----------------------------------------------------------------------------------
 */

int seed_render_user_data(const SeedCloudInit *c, const char *hostname, SeedFile *ret, char **error)
{
        static const SeedCloudInit none = {0};
        if (!c)
                c = &none;
        int r = seed_cloud_init_check(c, "cloud_init", -EINVAL, error);
        if (r < 0)
                return r;
        if (c->user_data) {
                /* SEED-1: the operator's own user data, verbatim. */
                SeedFile f = {.data = strdup(c->user_data), .size = strlen(c->user_data)};
                if (!f.data)
                        return error_set_oom(error);
                *ret = f;
                return 0;
        }
        if (!resource_name_is_valid(hostname))
                return error_set(error, -EINVAL,
                                 "hostname must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");

        /* The first line is how cloud-init tells a cloud-config document from a script. */
        Emitter e;
        if (emitter_begin(&e, "#cloud-config\n") < 0)
                return error_set_oom(error);
        emit_mapping_start(&e);
        emit_key_text(&e, "hostname", hostname);
        if (c->ssh_authorized_keys) {
                emit_word(&e, "ssh_authorized_keys");
                emit_sequence_start(&e);
                for (char **k = c->ssh_authorized_keys; *k; k++)
                        emit_text(&e, *k);
                emit_sequence_end(&e);
        }
        emit_mapping_end(&e);
        return emitter_end(&e, "user-data", ret, error);
}

/* ---- network-config (SEED-3) ------------------------------------------------------------------
 */

static bool ipv4_is_valid(const char *s)
{
        struct in_addr a;
        return s && inet_pton(AF_INET, s, &a) == 1;
}

static int network_check(const SeedNetwork *n, char **error)
{
        if (n->mode == SEED_NETWORK_NONE)
                return 0;
        if (n->mode != SEED_NETWORK_NAT && n->mode != SEED_NETWORK_BRIDGE)
                return error_set(error, -EINVAL, "network.mode is not nat, bridge or none");
        if (!mac_address_is_valid(n->mac))
                return error_set(error, -EINVAL, "network.mac must be six lowercase hex pairs");
        if (n->mode == SEED_NETWORK_NAT && (!n->ip || !n->gateway))
                return error_set(error, -EINVAL, "nat mode needs network.ip and network.gateway");
        if (n->ip && !ipv4_is_valid(n->ip))
                return error_set(error, -EINVAL, "network.ip must be an IPv4 address (a.b.c.d)");
        if (n->ip && (n->prefix < 1 || n->prefix > 32))
                return error_set(error, -EINVAL, "network.prefix must be 1..32");
        if (!n->ip && (n->gateway || n->dns))
                return error_set(error, -EINVAL, "network.gateway and network.dns need network.ip");
        if (n->gateway && !ipv4_is_valid(n->gateway))
                return error_set(error, -EINVAL,
                                 "network.gateway must be an IPv4 address (a.b.c.d)");
        size_t i = 0;
        for (char *const *d = n->dns; d && *d; d++, i++)
                if (!ipv4_is_valid(*d))
                        return error_set(error, -EINVAL,
                                         "network.dns[%zu] must be an IPv4 address (a.b.c.d)", i);
        return 0;
}

/* addresses, the default route and the name servers of a static configuration. */
static int emit_static(Emitter *e, const SeedNetwork *n, char **error)
{
        _cleanup_free_ char *cidr = NULL;
        if (strprintf(&cidr, "%s/%u", n->ip, n->prefix) < 0)
                return error_set_oom(error);
        emit_word(e, "addresses");
        emit_sequence_start(e);
        emit_text(e, cidr);
        emit_sequence_end(e);
        if (n->gateway) {
                /*
                 * The default route as `gateway4`, not as `routes: [{to: 0.0.0.0/0}]`: cloud-init
                 * turns a route into `post-up route add ...` for ifupdown (Debian 12's
                 * renderer), which needs net-tools that cloud images lack, and the route is
                 * silently missing; gateway4 becomes ifupdown's own `gateway` line, netplan's
                 * and networkd's gateway.
                 */
                emit_key_text(e, "gateway4", n->gateway);
        }
        bool nat = n->mode == SEED_NETWORK_NAT;
        if (nat || n->dns) {
                emit_word(e, "nameservers");
                emit_mapping_start(e);
                emit_word(e, "addresses");
                emit_sequence_start(e);
                if (nat)
                        /* SEED-3: vgpud's dnsmasq on the gateway answers for vgpud.internal. */
                        emit_text(e, n->gateway);
                else
                        for (char *const *d = n->dns; *d; d++)
                                emit_text(e, *d);
                emit_sequence_end(e);
                if (nat) {
                        emit_word(e, "search");
                        emit_sequence_start(e);
                        emit_text(e, SEED_SEARCH_DOMAIN);
                        emit_sequence_end(e);
                }
                emit_mapping_end(e);
        }
        return 0;
}

int seed_render_network_config(const SeedNetwork *n, SeedFile *ret, char **error)
{
        int r = network_check(n, error);
        if (r < 0)
                return r;
        Emitter e;
        if (emitter_begin(&e, NULL) < 0)
                return error_set_oom(error);
        emit_mapping_start(&e);
        emit_word(&e, "version");
        emit_word(&e, "2");
        emit_word(&e, "ethernets");
        emit_mapping_start(&e);
        if (n->mode != SEED_NETWORK_NONE) {
                /* Matched by the MAC vgpud gave QEMU, whatever name the guest's kernel picks. */
                emit_word(&e, "eth0");
                emit_mapping_start(&e);
                emit_word(&e, "match");
                emit_mapping_start(&e);
                emit_key_text(&e, "macaddress", n->mac);
                emit_mapping_end(&e);
                emit_key_text(&e, "set-name", "eth0");
                if (n->ip) {
                        r = emit_static(&e, n, error);
                        if (r < 0) {
                                yaml_emitter_delete(&e.emitter);
                                free(e.buf);
                                return r;
                        }
                } else {
                        emit_word(&e, "dhcp4");
                        emit_word(&e, "true");
                }
                emit_mapping_end(&e);
        }
        emit_mapping_end(&e);
        emit_mapping_end(&e);
        return emitter_end(&e, "network-config", ret, error);
}

/* ---- the whole seed ---------------------------------------------------------------------------
 */

static int vendor_data_check(const char *text, size_t n, char **error)
{
        if (n > SEED_VENDOR_DATA_MAX)
                return error_set(error, -EFBIG, "vendor data is larger than %d bytes",
                                 SEED_VENDOR_DATA_MAX);
        if (memchr(text, 0, n))
                return error_set(error, -EINVAL, "vendor data contains a NUL byte");
        return 0;
}

int seed_render(const SeedInput *input, SeedFiles *ret, char **error)
{
        _cleanup_(seed_files_done) SeedFiles f = {0};
        int r;
        if ((r = seed_render_meta_data(input->instance_id, input->hostname, &f.meta_data, error)) <
                0 ||
            (r = seed_render_user_data(input->cloud_init, input->hostname, &f.user_data, error)) <
                0 ||
            (r = seed_render_network_config(&input->network, &f.network_config, error)) < 0)
                return r;
        if (input->vendor_data) {
                size_t n = strlen(input->vendor_data);
                if ((r = vendor_data_check(input->vendor_data, n, error)) < 0)
                        return r;
                f.vendor_data = (SeedFile){.data = strdup(input->vendor_data), .size = n};
                if (!f.vendor_data.data)
                        return error_set_oom(error);
        }
        *ret = f;
        f = (SeedFiles){0};
        return 0;
}

int seed_read_vendor_data(const char *path, char **ret, char **error)
{
        _cleanup_free_ char *text = NULL;
        size_t n = 0;
        int r = read_file_at(AT_FDCWD, path, SEED_VENDOR_DATA_MAX, &text, &n);
        if (r == -EFBIG)
                return error_set(error, r, "vendor data %s is larger than %d bytes", path,
                                 SEED_VENDOR_DATA_MAX);
        if (r < 0)
                return error_set(error, r, "read vendor data %s: %s", path, file_strerror(r));
        r = vendor_data_check(text, n, error);
        if (r < 0)
                return error_prefix(error, r, "%s", path);
        *ret = TAKE_PTR(text);
        return 0;
}
