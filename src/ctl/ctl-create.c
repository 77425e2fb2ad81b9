/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The parts of `instances create`'s body (API-9) beyond name, sizes, boot and profile: the image
 * and its disk size (DISK-5), volumes (DISK-8), the NIC (NET-1) and cloud_init (SEED-1), from
 * flags and files. As for the rest of the body, the daemon judges what the values mean and names
 * the field it refuses (INST-7); here only what it takes to write the body: numbers where it has
 * integers, addresses where it has addresses, UTF-8 text, and files that can be read.
 */
#include <fcntl.h>

#include "ctl.h"

/* More than any body the daemon takes (API-9's size cap): a larger file is surely a mistake. */
#define CTL_CREATE_FILE_MAX (1024 * 1024)

static const char *const network_modes[] = {"nat", "bridge", "none"};

static bool is_text(const char *s, size_t n)
{
        return strlen(s) == n && utf8_is_valid(s, n);
}

/* A file named by an option, whole: UTF-8 text without NUL, at most CTL_CREATE_FILE_MAX. */
static int read_text_file(const char *option, const char *path, char **ret, char **error)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;
        int r = read_file_at(AT_FDCWD, path, CTL_CREATE_FILE_MAX, &buf, &size);
        if (r == -EFBIG)
                return error_set(error, r, "%s %s: larger than %d bytes", option, path,
                                 CTL_CREATE_FILE_MAX);
        if (r < 0)
                return error_set(error, r, "%s %s: %s", option, path, strerror(-r));
        if (!is_text(buf, size))
                return error_set(error, -EINVAL, "%s %s: not UTF-8 text (or holds a NUL byte)",
                                 option, path);
        *ret = TAKE_PTR(buf);
        return 0;
}

static int parse_port_number(const char *s, size_t n, uint16_t *ret)
{
        char buf[8];
        uint64_t v;
        if (n == 0 || n >= sizeof buf)
                return -EINVAL;
        memcpy(buf, s, n);
        buf[n] = 0;
        int r = parse_uint64_range(buf, 1, UINT16_MAX, &v);
        if (r < 0)
                return r;
        *ret = (uint16_t)v;
        return 0;
}

/* "HOST:GUEST[/tcp|/udp]" as NET-1's {"host", "guest", "protocol"}. */
static int port_json(const char *s, json_t **ret, char **error)
{
        const char *colon = strchr(s, ':');
        const char *slash = colon ? strchr(colon, '/') : NULL;
        const char *protocol = slash ? slash + 1 : "tcp";
        uint16_t host, guest;
        if (!colon || parse_port_number(s, (size_t)(colon - s), &host) < 0 ||
            parse_port_number(colon + 1, slash ? (size_t)(slash - colon - 1) : strlen(colon + 1),
                              &guest) < 0 ||
            (!streq(protocol, "tcp") && !streq(protocol, "udp")))
                return error_set(error, -EINVAL,
                                 "--port \"%s\": expected HOST:GUEST[/tcp|/udp], ports 1 to 65535",
                                 s);
        json_t *p = json_pack("{s:i, s:i, s:s}", "host", (int)host, "guest", (int)guest, "protocol",
                              protocol);
        if (!p)
                return error_set_oom(error);
        *ret = p;
        return 0;
}

/* "ID[:ro]" as DISK-8's {"volume", "readonly"}; the daemon takes a volume's id or name. */
static int volume_json(const char *s, json_t **ret, char **error)
{
        const char *colon = strchr(s, ':');
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        if (n == 0 || (colon && !streq(colon, ":ro")) || !is_text(s, strlen(s)))
                return error_set(error, -EINVAL,
                                 "--volume \"%s\": expected a volume id or name, optionally "
                                 "followed by :ro",
                                 s);
        json_t *v = json_pack("{s:s%, s:b}", "volume", s, n, "readonly", colon != NULL);
        if (!v)
                return error_set_oom(error);
        *ret = v;
        return 0;
}

static int ipv4_check(const char *option, const char *s, char **error)
{
        uint32_t a;
        if (s && parse_ipv4(s, &a) < 0)
                return error_set(error, -EINVAL, "%s \"%s\": expected an IPv4 address (a.b.c.d)",
                                 option, s);
        return 0;
}

static int network_json(const CtlCreateFlags *f, json_t **ret, char **error)
{
        bool any_detail = f->ports || f->ip || f->prefix || f->gateway || f->dns;
        if (!f->network) {
                if (any_detail)
                        return error_set(error, -EINVAL,
                                         "--port, --ip, --prefix, --gateway and --dns need "
                                         "--network");
                *ret = NULL;
                return 0;
        }
        /* bridge:NAME names one of network.bridges; a plain bridge takes the daemon's choice. */
        _cleanup_free_ char *mode = strdup(f->network);
        if (!mode)
                return error_set_oom(error);
        char *bridge = strchr(mode, ':');
        if (bridge)
                *bridge++ = 0;
        bool known = false;
        for (size_t i = 0; i < ELEMENTSOF(network_modes); i++)
                known = known || streq(mode, network_modes[i]);
        if (!known || (bridge && !streq(mode, "bridge")))
                return error_set(error, -EINVAL,
                                 "--network \"%s\": expected nat, bridge:NAME, bridge or none",
                                 f->network);
        if (bridge && !ifname_is_valid(bridge))
                return error_set(error, -EINVAL,
                                 "--network \"%s\": \"%s\" is not an interface name", f->network,
                                 bridge);
        int r = ipv4_check("--ip", f->ip, error);
        if (r >= 0)
                r = ipv4_check("--gateway", f->gateway, error);
        for (char *const *d = f->dns; r >= 0 && d && *d; d++)
                r = ipv4_check("--dns", *d, error);
        if (r < 0)
                return r;
        uint64_t prefix = 0;
        if (f->prefix && parse_uint64_range(f->prefix, 1, 32, &prefix) < 0)
                return error_set(error, -EINVAL,
                                 "--prefix \"%s\": expected a prefix length 1 to 32", f->prefix);

        json_auto_t *n =
            json_pack("{s:s, s:s*, s:s*}", "mode", mode, "bridge", bridge, "ip", f->ip);
        if (!n || (f->prefix && json_object_set_new(n, "prefix", json_integer((json_int_t)prefix))))
                return error_set_oom(error);
        if (f->gateway && json_object_set_new(n, "gateway", json_string(f->gateway)) < 0)
                return error_set_oom(error);
        if (f->dns) {
                json_t *a = json_array();
                if (!a || json_object_set_new(n, "dns", a) < 0)
                        return error_set_oom(error);
                for (char *const *d = f->dns; *d; d++)
                        if (json_array_append_new(a, json_string(*d)) < 0)
                                return error_set_oom(error);
        }
        if (f->ports) {
                json_t *a = json_array();
                if (!a || json_object_set_new(n, "ports", a) < 0)
                        return error_set_oom(error);
                for (char *const *p = f->ports; *p; p++) {
                        json_t *port = NULL;
                        r = port_json(*p, &port, error);
                        if (r < 0)
                                return r;
                        if (json_array_append_new(a, port) < 0)
                                return error_set_oom(error);
                }
        }
        *ret = TAKE_PTR(n);
        return 0;
}

/* SEED-1's keys: each non-empty line of each file one key, as an authorized_keys file has them. */
static int keys_json(char *const *files, json_t *keys, char **error)
{
        for (char *const *path = files; path && *path; path++) {
                _cleanup_free_ char *text = NULL;
                int r = read_text_file("--ssh-key", *path, &text, error);
                if (r < 0)
                        return r;
                size_t before = json_array_size(keys);
                for (char *line = text, *next; line; line = next) {
                        next = strchr(line, '\n');
                        if (next)
                                *next++ = 0;
                        size_t n = strlen(line);
                        /* A file written on Windows: its CR is not part of the key. */
                        if (n > 0 && line[n - 1] == '\r')
                                line[--n] = 0;
                        if (strspn(line, " \t") == n)
                                continue;
                        if (json_array_append_new(keys, json_string(line)) < 0)
                                return error_set_oom(error);
                }
                if (json_array_size(keys) == before)
                        return error_set(error, -EINVAL, "--ssh-key %s: holds no key", *path);
        }
        return 0;
}

static int cloud_init_json(const CtlCreateFlags *f, json_t **ret, char **error)
{
        if (!f->ssh_key_files && !f->user_data_file && !f->hostname) {
                *ret = NULL;
                return 0;
        }
        json_auto_t *c = json_object();
        if (!c)
                return error_set_oom(error);
        if (f->ssh_key_files) {
                json_t *keys = json_array();
                if (!keys || json_object_set_new(c, "ssh_authorized_keys", keys) < 0)
                        return error_set_oom(error);
                int r = keys_json(f->ssh_key_files, keys, error);
                if (r < 0)
                        return r;
        }
        if (f->user_data_file) {
                _cleanup_free_ char *text = NULL;
                int r = read_text_file("--user-data", f->user_data_file, &text, error);
                if (r < 0)
                        return r;
                if (json_object_set_new(c, "user_data", json_string(text)) < 0)
                        return error_set_oom(error);
        }
        if (f->hostname) {
                if (!is_text(f->hostname, strlen(f->hostname)))
                        return error_set(error, -EINVAL, "--hostname must be UTF-8 text");
                if (json_object_set_new(c, "hostname", json_string(f->hostname)) < 0)
                        return error_set_oom(error);
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int ctl_create_body_add(json_t *body, const CtlCreateFlags *f, char **error)
{
        if (f->image) {
                if (!is_text(f->image, strlen(f->image)))
                        return error_set(error, -EINVAL, "--image must be UTF-8 text");
                if (json_object_set_new(body, "image", json_string(f->image)) < 0)
                        return error_set_oom(error);
        }
        if (f->disk_gb) {
                uint64_t gb;
                if (parse_uint64_range(f->disk_gb, 0, INT64_MAX, &gb) < 0)
                        return error_set(error, -EINVAL,
                                         "--disk-gb \"%s\": expected a whole number of GiB",
                                         f->disk_gb);
                if (json_object_set_new(body, "disk_gb", json_integer((json_int_t)gb)) < 0)
                        return error_set_oom(error);
        }
        if (f->volumes) {
                json_t *a = json_array();
                if (!a || json_object_set_new(body, "volumes", a) < 0)
                        return error_set_oom(error);
                for (char *const *v = f->volumes; *v; v++) {
                        json_t *vol = NULL;
                        int r = volume_json(*v, &vol, error);
                        if (r < 0)
                                return r;
                        if (json_array_append_new(a, vol) < 0)
                                return error_set_oom(error);
                }
        }
        json_t *network = NULL, *cloud_init = NULL;
        int r = network_json(f, &network, error);
        if (r < 0)
                return r;
        if (network && json_object_set_new(body, "network", network) < 0)
                return error_set_oom(error);
        r = cloud_init_json(f, &cloud_init, error);
        if (r < 0)
                return r;
        if (cloud_init && json_object_set_new(body, "cloud_init", cloud_init) < 0)
                return error_set_oom(error);
        return 0;
}
