/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The record's device fields (INST-2): the root disk (DISK-5), volumes (DISK-8), the NIC
 * (NET-1, NET-2, NET-5) and the cloud-init input (SEED-1): read strictly, kept and written back
 * unchanged. Their shapes are checked here (types, enumerations, lengths, counts; cloud_init by
 * the seed module's own check, the same one a create body passes); rules that tie them to the
 * host (a bridge listed in network.bridges, a free address) are the create path's.
 */
#include <arpa/inet.h>
#include <inttypes.h>

#include "instance-record-internal.h"

#define MAC_STRLEN 18 /* "52:54:00:xx:xx:xx" and the NUL */

static const char *const volume_states[_INSTANCE_VOLUME_STATE_MAX] = {
    [INSTANCE_VOLUME_ATTACHED] = "attached",
    [INSTANCE_VOLUME_ATTACHING] = "attaching",
    [INSTANCE_VOLUME_DETACHING] = "detaching",
};

const char *instance_volume_state_to_string(InstanceVolumeState s)
{
        return s < _INSTANCE_VOLUME_STATE_MAX ? volume_states[s] : NULL;
}

static const char *const network_modes[_INSTANCE_NETWORK_MODE_MAX] = {
    [INSTANCE_NETWORK_NAT] = "nat",
    [INSTANCE_NETWORK_BRIDGE] = "bridge",
    [INSTANCE_NETWORK_NONE] = "none",
};

/* The index of s among the n names (NULL entries skipped), or -EINVAL. */
static int name_index(const char *const *names, size_t n, const char *s)
{
        for (size_t i = 0; i < n; i++)
                if (names[i] && streq(names[i], s))
                        return (int)i;
        return -EINVAL;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

void instance_network_done(InstanceNetwork *n)
{
        free(n->bridge);
        free(n->mac);
        free(n->ip);
        free(n->gateway);
        strv_free(n->dns);
        free(n->ports);
        *n = (InstanceNetwork){0};
}

void instance_devices_done(InstanceRecord *r)
{
        free(r->disk.image);
        r->disk = (InstanceDisk){0};
        free(r->volumes);
        r->volumes = NULL;
        r->n_volumes = 0;
        instance_network_done(&r->network);
        seed_cloud_init_done(&r->cloud_init);
}

static int memdup_array(const void *from, size_t n, size_t size, void **ret)
{
        void *p = NULL;
        if (n > 0) {
                p = calloc(n, size);
                if (!p)
                        return -ENOMEM;
                memcpy(p, from, n * size);
        }
        *ret = p;
        return 0;
}

int instance_network_copy(const InstanceNetwork *n, InstanceNetwork *ret)
{
        InstanceNetwork c = {.mode = n->mode, .prefix = n->prefix, .n_ports = n->n_ports};
        if (strdup_nullable(n->bridge, &c.bridge) < 0 || strdup_nullable(n->mac, &c.mac) < 0 ||
            strdup_nullable(n->ip, &c.ip) < 0 || strdup_nullable(n->gateway, &c.gateway) < 0 ||
            strv_copy(n->dns, &c.dns) < 0 ||
            memdup_array(n->ports, n->n_ports, sizeof *n->ports, (void **)&c.ports) < 0) {
                instance_network_done(&c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

int instance_devices_copy(const InstanceRecord *from, InstanceRecord *to)
{
        to->disk.size_gb = from->disk.size_gb;
        to->n_volumes = from->n_volumes;
        if (strdup_nullable(from->disk.image, &to->disk.image) < 0 ||
            memdup_array(from->volumes, from->n_volumes, sizeof *from->volumes,
                         (void **)&to->volumes) < 0 ||
            instance_network_copy(&from->network, &to->network) < 0 ||
            seed_cloud_init_copy(&from->cloud_init, &to->cloud_init) < 0) {
                instance_devices_done(to);
                return -ENOMEM;
        }
        return 0;
}

bool instance_record_wants_seed(const InstanceRecord *r)
{
        return r->disk.image || !seed_cloud_init_is_empty(&r->cloud_init);
}

/* ---- the tables and each element's check --------------------------------------------------- */

const JsonField instance_disk_fields[] = {
    {"image", JSON_FIELD_STRING, true, JSON_AT(InstanceDiskView, image)},
    {"size_gb", JSON_FIELD_INTEGER, true, JSON_AT(InstanceDiskView, size_gb)},
    {NULL},
};

const JsonField instance_volume_fields[] = {
    {"id", JSON_FIELD_STRING, true, JSON_AT(InstanceVolumeView, id)},
    {"readonly", JSON_FIELD_BOOLEAN, true, JSON_AT(InstanceVolumeView, readonly)},
    {"state", JSON_FIELD_STRING, true, JSON_AT(InstanceVolumeView, state)},
    {NULL},
};

int instance_volume_check(const void *element, const char *path, void *view, int code, char **error)
{
        const InstanceVolumeView *v = element;
        /* DISK-7: a volume's id has INST-3's form. */
        if (!instance_id_is_valid(v->id))
                return error_set(error, code, "%s.id must be %d characters of [a-z0-9]", path,
                                 INSTANCE_ID_LEN);
        if (name_index(volume_states, _INSTANCE_VOLUME_STATE_MAX, v->state) < 0)
                return error_set(error, code, "%s.state must be attached, attaching or detaching",
                                 path);
        return 0;
}

/* The canonical dotted quad only: records are compared as text, one address has one spelling. */
static bool ipv4_is_canonical(const char *s)
{
        struct in_addr a;
        char again[INET_ADDRSTRLEN];
        return inet_pton(AF_INET, s, &a) == 1 && inet_ntop(AF_INET, &a, again, sizeof again) &&
               streq(again, s);
}

static int dns_check(const void *element, const char *path, void *view, int code, char **error)
{
        if (!ipv4_is_canonical(*(const char *const *)element))
                return error_set(error, code, "%s must be an IPv4 address (a.b.c.d)", path);
        return 0;
}

static const JsonField port_fields[] = {
    {"host", JSON_FIELD_INTEGER, true, JSON_AT(InstancePortView, host)},
    {"guest", JSON_FIELD_INTEGER, true, JSON_AT(InstancePortView, guest)},
    {"protocol", JSON_FIELD_STRING, true, JSON_AT(InstancePortView, protocol)},
    {NULL},
};

static int port_check(const void *element, const char *path, void *view, int code, char **error)
{
        const InstancePortView *p = element;
        if (p->host < 1 || p->host > UINT16_MAX)
                return error_set(error, code, "%s.host must be 1..%d", path, UINT16_MAX);
        if (p->guest < 1 || p->guest > UINT16_MAX)
                return error_set(error, code, "%s.guest must be 1..%d", path, UINT16_MAX);
        if (!streq(p->protocol, "tcp") && !streq(p->protocol, "udp"))
                return error_set(error, code, "%s.protocol must be tcp or udp", path);
        return 0;
}

const JsonField instance_network_fields[] = {
    {"mode", JSON_FIELD_STRING, true, JSON_AT(InstanceNetworkView, mode)},
    {"bridge", JSON_FIELD_STRING, false, JSON_AT(InstanceNetworkView, bridge), .max = IFNAME_MAX},
    {"mac", JSON_FIELD_STRING, false, JSON_AT(InstanceNetworkView, mac)},
    {"ip", JSON_FIELD_STRING, false, JSON_AT(InstanceNetworkView, ip)},
    {"prefix", JSON_FIELD_INTEGER, false, JSON_AT(InstanceNetworkView, prefix)},
    {"gateway", JSON_FIELD_STRING, false, JSON_AT(InstanceNetworkView, gateway)},
    {"dns", JSON_FIELD_ARRAY, false, JSON_AT(InstanceNetworkView, dns), .max = INSTANCE_DNS_MAX,
     .element_type = JSON_FIELD_STRING, .each = dns_check},
    {"ports", JSON_FIELD_ARRAY, false, JSON_AT(InstanceNetworkView, ports),
     .max = INSTANCE_PORTS_MAX, .element_type = JSON_FIELD_OBJECT, .element_fields = port_fields,
     .element_size = sizeof(InstancePortView), .each = port_check},
    {NULL},
};

/* NET-1: the create body's "network", the record's fields but the MAC, which vgpud derives. */
const JsonField instance_network_body_fields[] = {
    {"mode", JSON_FIELD_STRING, true, JSON_AT(InstanceNetworkView, mode)},
    {"bridge", JSON_FIELD_STRING, false, JSON_AT(InstanceNetworkView, bridge), .max = IFNAME_MAX},
    {"ip", JSON_FIELD_STRING, false, JSON_AT(InstanceNetworkView, ip)},
    {"prefix", JSON_FIELD_INTEGER, false, JSON_AT(InstanceNetworkView, prefix)},
    {"gateway", JSON_FIELD_STRING, false, JSON_AT(InstanceNetworkView, gateway)},
    {"dns", JSON_FIELD_ARRAY, false, JSON_AT(InstanceNetworkView, dns), .max = INSTANCE_DNS_MAX,
     .element_type = JSON_FIELD_STRING, .each = dns_check},
    {"ports", JSON_FIELD_ARRAY, false, JSON_AT(InstanceNetworkView, ports),
     .max = INSTANCE_PORTS_MAX, .element_type = JSON_FIELD_OBJECT, .element_fields = port_fields,
     .element_size = sizeof(InstancePortView), .each = port_check},
    {NULL},
};

/* ---- from the view into the record --------------------------------------------------------- */

static int disk_from_view(const InstanceDiskView *v, int code, InstanceDisk *ret, char **error)
{
        /* DISK-1: image names follow INST-4. */
        if (!instance_name_is_valid(v->image))
                return error_set(error, code,
                                 "disk.image must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
        if (v->size_gb < 1 || (uint64_t)v->size_gb > INSTANCE_DISK_GB_MAX)
                return error_set(error, code, "disk.size_gb must be 1..%" PRIu64,
                                 INSTANCE_DISK_GB_MAX);
        if (strdup_nullable(v->image, &ret->image) < 0)
                return error_set_oom(error);
        ret->size_gb = (uint64_t)v->size_gb;
        return 0;
}

/* Each element was checked by instance_volume_check() as the table read it. */
static int volumes_from_json(json_t *a, int code, InstanceRecord *r, char **error)
{
        size_t n = json_array_size(a);
        if (n == 0)
                return 0;
        r->volumes = calloc(n, sizeof *r->volumes);
        if (!r->volumes)
                return error_set_oom(error);
        for (size_t i = 0; i < n; i++) {
                json_t *v = json_array_get(a, i);
                const char *id = json_string_value(json_object_get(v, "id"));
                /* One volume is attached once: a second entry would be a second device. */
                for (size_t j = 0; j < i; j++)
                        if (streq(r->volumes[j].id, id))
                                return error_set(error, code,
                                                 "volumes[%zu].id repeats volumes[%zu]", i, j);
                InstanceVolume *out = &r->volumes[r->n_volumes++];
                memcpy(out->id, id, sizeof out->id);
                out->readonly = json_is_true(json_object_get(v, "readonly"));
                out->state =
                    (InstanceVolumeState)name_index(volume_states, _INSTANCE_VOLUME_STATE_MAX,
                                                    json_string_value(json_object_get(v, "state")));
        }
        return 0;
}

static bool mac_is_valid(const char *s)
{
        if (strlen(s) != MAC_STRLEN - 1)
                return false;
        for (size_t i = 0; i < MAC_STRLEN - 1; i++)
                if (i % 3 == 2 ? s[i] != ':' : hex_value_lower(s[i]) < 0)
                        return false;
        return true;
}

static int json_strings(json_t *a, char ***ret)
{
        _cleanup_strv_free_ char **strv = NULL;
        json_t *v;
        size_t i;
        json_array_foreach (a, i, v)
                if (strv_push(&strv, json_string_value(v)) < 0)
                        return -ENOMEM;
        *ret = TAKE_PTR(strv);
        return 0;
}

int instance_network_from_view(const InstanceNetworkView *v, json_t *o, int code,
                               InstanceNetwork *ret, char **error)
{
        int mode = name_index(network_modes, _INSTANCE_NETWORK_MODE_MAX, v->mode);
        if (mode < 0)
                return error_set(error, code, "network.mode must be nat, bridge or none");
        if (v->bridge && !ifname_is_valid(v->bridge))
                return error_set(error, code, "network.bridge must be an interface name");
        if (v->mac && !mac_is_valid(v->mac))
                return error_set(error, code,
                                 "network.mac must be six lowercase hex pairs (xx:xx:xx:xx:xx:xx)");
        if (v->ip && !ipv4_is_canonical(v->ip))
                return error_set(error, code, "network.ip must be an IPv4 address (a.b.c.d)");
        if (v->gateway && !ipv4_is_canonical(v->gateway))
                return error_set(error, code, "network.gateway must be an IPv4 address (a.b.c.d)");
        if (json_object_get(o, "prefix") && (v->prefix < 1 || v->prefix > 32))
                return error_set(error, code, "network.prefix must be 1..32");

        InstanceNetwork n = {.mode = (InstanceNetworkMode)mode, .prefix = (uint32_t)v->prefix};
        size_t n_ports = json_array_size(v->ports);
        if (strdup_nullable(v->bridge, &n.bridge) < 0 || strdup_nullable(v->mac, &n.mac) < 0 ||
            strdup_nullable(v->ip, &n.ip) < 0 || strdup_nullable(v->gateway, &n.gateway) < 0 ||
            json_strings(v->dns, &n.dns) < 0 ||
            (n_ports > 0 && !(n.ports = calloc(n_ports, sizeof *n.ports)))) {
                instance_network_done(&n);
                return error_set_oom(error);
        }
        /* Each port was checked by port_check() as the table read it. */
        for (size_t i = 0; i < n_ports; i++) {
                json_t *p = json_array_get(v->ports, i);
                n.ports[i] = (InstancePort){
                    .host = (uint16_t)json_integer_value(json_object_get(p, "host")),
                    .guest = (uint16_t)json_integer_value(json_object_get(p, "guest")),
                    .udp = streq(json_string_value(json_object_get(p, "protocol")), "udp"),
                };
        }
        n.n_ports = n_ports;
        *ret = n;
        return 0;
}

int instance_devices_from_view(const InstanceDevicesView *v, int code, InstanceRecord *r,
                               char **error)
{
        int k;
        if ((v->disk && (k = disk_from_view(&v->disk_v, code, &r->disk, error)) < 0) ||
            (k = volumes_from_json(v->volumes, code, r, error)) < 0 ||
            (v->network && (k = instance_network_from_view(&v->network_v, v->network, code,
                                                           &r->network, error)) < 0) ||
            (v->cloud_init && (k = seed_cloud_init_from_json(v->cloud_init, "cloud_init", code,
                                                             &r->cloud_init, error)) < 0))
                return k;
        return 0;
}

/* ---- to JSON ------------------------------------------------------------------------------- */

static json_t *strings_to_json(char *const *strv)
{
        json_t *a = json_array();
        for (char *const *s = strv; a && s && *s; s++)
                if (json_push(a, json_string(*s)) < 0) {
                        json_decref(a);
                        return NULL;
                }
        return a;
}

static int volumes_to_json(json_t *root, const InstanceRecord *r)
{
        json_auto_t *a = json_array();
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < r->n_volumes; i++) {
                const InstanceVolume *v = &r->volumes[i];
                const char *state = (unsigned)v->state < _INSTANCE_VOLUME_STATE_MAX
                                        ? volume_states[v->state]
                                        : NULL;
                if (!state)
                        return -EINVAL;
                /* A bad id need not be terminated; the load after the dump refuses it. */
                char id[INSTANCE_ID_LEN + 1];
                snprintf(id, sizeof id, "%.*s", INSTANCE_ID_LEN, v->id);
                json_t *o =
                    json_pack("{s:s, s:b, s:s}", "id", id, "readonly", v->readonly, "state", state);
                int k = json_push(a, o);
                if (k < 0)
                        return o ? k : -EINVAL; /* json_pack refuses text that is not UTF-8 */
        }
        return instance_json_put_child(root, "volumes", TAKE_PTR(a));
}

static int network_to_json(json_t *root, const InstanceNetwork *n)
{
        if (n->mode == INSTANCE_NETWORK_ABSENT)
                return 0;
        if ((unsigned)n->mode >= _INSTANCE_NETWORK_MODE_MAX)
                return -EINVAL;
        json_auto_t *o = json_object(), *ports = json_array();
        if (!o || !ports)
                return -ENOMEM;
        int k;
        for (size_t i = 0; i < n->n_ports; i++) {
                const InstancePort *p = &n->ports[i];
                if ((k = json_push(ports,
                                   json_pack("{s:i, s:i, s:s}", "host", p->host, "guest", p->guest,
                                             "protocol", p->udp ? "udp" : "tcp"))) < 0)
                        return k;
        }
        if ((k = instance_json_put_string(o, "mode", network_modes[n->mode])) < 0 ||
            (k = instance_json_put_string(o, "bridge", n->bridge)) < 0 ||
            (k = instance_json_put_string(o, "mac", n->mac)) < 0 ||
            (k = instance_json_put_string(o, "ip", n->ip)) < 0 ||
            (n->prefix > 0 && (k = json_set(o, "prefix", json_integer(n->prefix))) < 0) ||
            (k = instance_json_put_string(o, "gateway", n->gateway)) < 0 ||
            (k = instance_json_put_child(o, "dns", strings_to_json(n->dns))) < 0 ||
            (k = instance_json_put_child(o, "ports", TAKE_PTR(ports))) < 0)
                return k;
        return json_set(root, "network", TAKE_PTR(o));
}

int instance_devices_to_json(json_t *root, const InstanceRecord *r)
{
        const InstanceCloudInit *c = &r->cloud_init;
        json_auto_t *disk = json_object(), *cloud_init = json_object();
        if (!disk || !cloud_init)
                return -ENOMEM;
        int k;
        if ((k = instance_json_put_string(disk, "image", r->disk.image)) < 0 ||
            (r->disk.image && (k = json_set(disk, "size_gb", json_u64(r->disk.size_gb))) < 0) ||
            (k = instance_json_put_child(root, "disk", TAKE_PTR(disk))) < 0 ||
            (k = volumes_to_json(root, r)) < 0 || (k = network_to_json(root, &r->network)) < 0 ||
            (k = instance_json_put_child(cloud_init, "ssh_authorized_keys",
                                         strings_to_json(c->ssh_authorized_keys))) < 0 ||
            (k = instance_json_put_string(cloud_init, "user_data", c->user_data)) < 0 ||
            (k = instance_json_put_string(cloud_init, "hostname", c->hostname)) < 0 ||
            (k = instance_json_put_child(root, "cloud_init", TAKE_PTR(cloud_init))) < 0)
                return k;
        return 0;
}
