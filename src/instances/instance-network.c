/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The instance's NIC (SPEC §20): NET-1's rules on a create body, the create-time plan that
 * gives the record its mode, bridge, MAC (NET-2) and NAT address (NET-5) before the record is
 * first written, and the TAP step of a start (NET-3) whose descriptors go to the spawn. net/
 * does the kernel work; the records stay the one source of truth for who holds which MAC,
 * address and host port, so nothing here keeps a table of its own.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "instances/instance-internal.h"
#include "instances/instance-record-internal.h"
#include "net/net.h"

/* ---- NET-1 within the body ----------------------------------------------------------------- */

int instance_network_body_check(const InstanceNetwork *n, int code, char **error)
{
        bool bridge_mode = n->mode == INSTANCE_NETWORK_BRIDGE;
        if (bridge_mode && !n->bridge)
                return error_set(error, code, "network.bridge is required in bridge mode");
        if (!bridge_mode && n->bridge)
                return error_set(error, code, "network.bridge is for bridge mode only");
        if (!bridge_mode && (n->ip || n->prefix || n->gateway || n->dns))
                return error_set(error, code,
                                 "network.ip, prefix, gateway and dns are for bridge mode only");
        if (!!n->ip != (n->prefix > 0))
                return error_set(error, code, "network.ip and network.prefix go together");
        if (!n->ip && (n->gateway || n->dns))
                return error_set(error, code, "network.gateway and dns need network.ip");
        if (n->mode != INSTANCE_NETWORK_NAT && n->n_ports > 0)
                return error_set(error, code, "network.ports are for nat mode only");
        for (size_t i = 0; i < n->n_ports; i++)
                for (size_t j = 0; j < i; j++)
                        if (n->ports[i].host == n->ports[j].host &&
                            n->ports[i].udp == n->ports[j].udp)
                                return error_set(error, code,
                                                 "network.ports[%zu] repeats host port %u/%s of "
                                                 "network.ports[%zu]",
                                                 i, n->ports[i].host,
                                                 n->ports[i].udp ? "udp" : "tcp", j);
        return 0;
}

/* ---- the create-time plan (NET-1, NET-2, NET-5) -------------------------------------------- */

static InstanceNetworkMode mode_of_config(ConfigNetworkMode m)
{
        switch (m) {
        case CONFIG_NETWORK_MODE_NAT:
                return INSTANCE_NETWORK_NAT;
        case CONFIG_NETWORK_MODE_BRIDGE:
                return INSTANCE_NETWORK_BRIDGE;
        case CONFIG_NETWORK_MODE_NONE:
        default:
                return INSTANCE_NETWORK_NONE;
        }
}

static bool mac_taken(const char *mac, void *userdata)
{
        const InstanceManager *m = userdata;
        for (size_t k = 0; k < m->n_instances; k++)
                if (streq_ptr(m->instances[k]->rec.network.mac, mac))
                        return true;
        return false;
}

static bool nat_address_taken(const char *addr, void *userdata)
{
        const InstanceManager *m = userdata;
        for (size_t k = 0; k < m->n_instances; k++) {
                const InstanceNetwork *n = &m->instances[k]->rec.network;
                if (n->mode == INSTANCE_NETWORK_NAT && streq_ptr(n->ip, addr))
                        return true;
        }
        return false;
}

/* One nat record's address, for finding two records that hold the same one. */
typedef struct HeldAddress {
        uint32_t addr;
        const InstanceRecord *rec;
} HeldAddress;

static int held_address_compare(const void *a, const void *b)
{
        const HeldAddress *x = a, *y = b;
        if (x->addr != y->addr)
                return x->addr < y->addr ? -1 : 1;
        /* Equal addresses in id order, so the reason names the same pair on every call. */
        return strcmp(x->rec->id, y->rec->id);
}

/*
 * NET-5: records are the source of truth, so a record naming an address outside the subnet, or
 * one another record holds, leaves the allocator unsure what is free: NAT creates are refused
 * until it is fixed. Sorted, not pairwise: GET /network and every nat create ask, and a host may
 * hold a thousand records.
 */
int instance_network_records_problem(const InstanceManager *m, const NetSubnet *subnet, char **ret)
{
        _cleanup_free_ HeldAddress *held =
            calloc(m->n_instances ? m->n_instances : 1, sizeof *held);
        if (!held)
                return -ENOMEM;
        size_t n = 0;
        for (size_t k = 0; k < m->n_instances; k++) {
                const InstanceRecord *a = &m->instances[k]->rec;
                if (a->network.mode != INSTANCE_NETWORK_NAT || !a->network.ip)
                        continue;
                if (!net_subnet_holds_guest(subnet, a->network.ip))
                        return strprintf(ret,
                                         "instance %s holds address %s outside network.nat.subnet",
                                         a->id, a->network.ip) < 0
                                   ? -ENOMEM
                                   : 1;
                /* Held in the subnet: it parses (records keep the canonical dotted quad). */
                held[n].rec = a;
                (void)parse_ipv4(a->network.ip, &held[n++].addr);
        }
        qsort(held, n, sizeof *held, held_address_compare);
        for (size_t k = 1; k < n; k++)
                if (held[k].addr == held[k - 1].addr)
                        return strprintf(ret, "instances %s and %s both hold address %s",
                                         held[k - 1].rec->id, held[k].rec->id,
                                         held[k].rec->network.ip) < 0
                                   ? -ENOMEM
                                   : 1;
        *ret = NULL;
        return 0;
}

/* NET-1: a host port is forwarded to one guest. The holder of port p, or NULL. */
static const InstanceRecord *port_holder(const InstanceManager *m, const InstancePort *p)
{
        for (size_t k = 0; k < m->n_instances; k++) {
                const InstanceNetwork *n = &m->instances[k]->rec.network;
                for (size_t i = 0; n->mode == INSTANCE_NETWORK_NAT && i < n->n_ports; i++)
                        if (n->ports[i].host == p->host && n->ports[i].udp == p->udp)
                                return &m->instances[k]->rec;
        }
        return NULL;
}

static int plan_nat(InstanceManager *m, InstanceNetwork *n, InstanceFailure *ret_failure,
                    char **ret_error)
{
        const ConfigNat *nat = &m->config->network.nat;
        if (!nat->enabled) {
                instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                "network: nat mode is disabled on this host "
                                "(network.nat.enabled is false)");
                return -EOPNOTSUPP;
        }
        NetSubnet subnet;
        uint16_t lo, hi;
        if (net_subnet_parse(nat->subnet, &subnet) < 0 ||
            parse_port_range(nat->port_range, &lo, &hi) < 0) {
                /* config_check_paths() refused both at start-up: only a hand-made Config gets
                 * here. */
                instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error,
                                "network: invalid network.nat configuration");
                return -EINVAL;
        }
        for (size_t i = 0; i < n->n_ports; i++) {
                const InstancePort *p = &n->ports[i];
                if (p->host < lo || p->host > hi) {
                        instance_refuse(INSTANCE_FAILURE_INVALID_REQUEST, ret_failure, ret_error,
                                        "network.ports[%zu].host must be within "
                                        "network.nat.port_range %s",
                                        i, nat->port_range);
                        return -EINVAL;
                }
                const InstanceRecord *holder = port_holder(m, p);
                if (holder) {
                        instance_refuse(INSTANCE_FAILURE_ALREADY_EXISTS, ret_failure, ret_error,
                                        "network.ports[%zu]: host port %u/%s is forwarded to "
                                        "instance %s (%s)",
                                        i, p->host, p->udp ? "udp" : "tcp", holder->name,
                                        holder->id);
                        return -EEXIST;
                }
        }
        /* NET-8: while the host side cannot be made, a nat instance would have no network. */
        const char *down = instance_nat_error(m);
        if (down) {
                instance_refuse(INSTANCE_FAILURE_PLACEMENT_DISABLED, ret_failure, ret_error,
                                "network unavailable: %s", down);
                return -EAGAIN;
        }
        /* NET-5: checked again now, so a record deleted a moment ago no longer refuses. */
        const char *problem = instance_nat_records_recheck(m);
        if (problem) {
                instance_refuse(INSTANCE_FAILURE_PLACEMENT_DISABLED, ret_failure, ret_error,
                                "network unavailable: %s", problem);
                return -EAGAIN;
        }
        char ip[IPV4_STRLEN], gateway[IPV4_STRLEN];
        if (net_addr_allocate(&subnet, nat_address_taken, m, ip) < 0) {
                instance_refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                                "network: no free address in network.nat.subnet %s (%u in use)",
                                nat->subnet, net_subnet_guest_count(&subnet));
                return -ENOSPC;
        }
        format_ipv4(net_subnet_gateway(&subnet), gateway);
        if (!(n->bridge = strdup(nat->bridge)) || !(n->ip = strdup(ip)) ||
            !(n->gateway = strdup(gateway))) {
                instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return -ENOMEM;
        }
        n->prefix = subnet.prefix;
        return 0;
}

static int plan_bridge(InstanceManager *m, const InstanceNetwork *n, InstanceFailure *ret_failure,
                       char **ret_error)
{
        /* NET-1: an API client never chooses an arbitrary host interface. */
        for (char *const *b = m->config->network.bridges; b && *b; b++)
                if (streq(*b, n->bridge))
                        return 0;
        instance_refuse(INSTANCE_FAILURE_INVALID_REQUEST, ret_failure, ret_error,
                        "network.bridge %s is not listed in network.bridges", n->bridge);
        return -EPERM;
}

int instance_network_plan(InstanceManager *m, const InstanceNetwork *want, InstanceRecord *rec,
                          InstanceFailure *ret_failure, char **ret_error)
{
        InstanceNetwork n;
        if (instance_network_copy(want, &n) < 0) {
                instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return -ENOMEM;
        }
        instance_network_done(&rec->network);
        if (n.mode == INSTANCE_NETWORK_ABSENT) {
                n.mode = mode_of_config(config_network_default_mode(m->config));
                /* A body without "network" names no bridge: bridge as the default takes none. */
                if (n.mode == INSTANCE_NETWORK_BRIDGE) {
                        rec->network = n;
                        instance_refuse(INSTANCE_FAILURE_INVALID_REQUEST, ret_failure, ret_error,
                                        "network is required: network.default_mode is bridge");
                        return -EINVAL;
                }
        }
        int r = 0;
        if (n.mode == INSTANCE_NETWORK_NAT)
                r = plan_nat(m, &n, ret_failure, ret_error);
        else if (n.mode == INSTANCE_NETWORK_BRIDGE)
                r = plan_bridge(m, &n, ret_failure, ret_error);
        if (r >= 0 && n.mode != INSTANCE_NETWORK_NONE) {
                char mac[NET_MAC_STRLEN];
                r = net_mac_derive(rec->id, mac_taken, m, mac);
                if (r >= 0 && !(n.mac = strdup(mac)))
                        r = -ENOMEM;
                if (r < 0)
                        instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error,
                                        "network: derive MAC: %s", strerror(-r));
        }
        rec->network = n;
        return r;
}

/* ---- the TAP step of a start (NET-3, NET-4, NET-7, NET-8) ---------------------------------- */

void instance_nic_files_close(InstanceNicFiles *f)
{
        if (f->tap >= 0)
                close(f->tap);
        if (f->vhost >= 0)
                close(f->vhost);
        *f = INSTANCE_NIC_FILES_NONE;
}

typedef struct TapJob {
        char id[INSTANCE_ID_LEN + 1];
        char bridge[IFNAMSIZ];
        char *dev_root;
        bool nat, isolate;
        NetSubnet subnet;
        InstanceNicFiles nic;
        bool bridge_down; /* NET-7's refusal rather than a failure */
} TapJob;

static void tap_job_free(void *data)
{
        TapJob *j = data;
        instance_nic_files_close(&j->nic);
        free(j->dev_root);
        free(j);
}

/* On a worker: rtnetlink and the tun device block on the kernel. */
static int tap_job_run(void *data, char **error)
{
        TapJob *j = data;
        _cleanup_close_ int dev = open(j->dev_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dev < 0)
                return error_set(error, -errno, "network: open dev_root %s: %m", j->dev_root);
        char tap[IFNAMSIZ];
        int r = net_tap_name(j->id, tap);
        if (r < 0)
                return error_set(error, r, "network: TAP name of %s: %s", j->id, strerror(-r));
        _cleanup_(net_link_freep) NetLink *l = NULL;
        r = net_link_open(&l);
        if (r < 0)
                return error_set(error, r, "network: open rtnetlink: %s", strerror(-r));
        /* NET-4: the NAT bridge is made again here if something removed it (REL-14). */
        if (j->nat && (r = net_nat_bridge_ensure(l, j->bridge, &j->subnet, error)) < 0)
                return r;
        r = net_tap_open(dev, tap, &j->nic.tap, error);
        if (r < 0)
                return r;
        r = net_port_attach(l, tap, j->bridge, j->nat && j->isolate, error);
        if (r < 0) {
                j->bridge_down = r == -ENETDOWN;
                return r;
        }
        /* vhost-net is an accelerator: without it the NIC still works (NET-3). */
        if (net_vhost_open(dev, &j->nic.vhost) < 0)
                j->nic.vhost = -1;
        return 0;
}

static void tap_opened(Op *op, int r, const char *error)
{
        TapJob *j = op->job_data;
        if (r < 0) {
                instance_nat_count_error(op->m, NET_STEP_TAP);
                /* NET-7: a missing or down bridge is the host's state, not vgpud's failure. */
                step_done(op, r,
                          j && j->bridge_down ? INSTANCE_FAILURE_INVALID_STATE
                                              : INSTANCE_FAILURE_INTERNAL,
                          error);
                return;
        }
        instance_nic_files_close(&op->nic);
        op->nic = j->nic;
        j->nic = INSTANCE_NIC_FILES_NONE;
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void tap_run(Op *op)
{
        const InstanceNetwork *n = &op->i->rec.network;
        if (n->mode != INSTANCE_NETWORK_NAT && n->mode != INSTANCE_NETWORK_BRIDGE) {
                step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
                return;
        }
        const Config *c = op->m->config;
        TapJob *j = calloc(1, sizeof *j);
        if (!j || !(j->dev_root = strdup(op->m->cfg.dev_root))) {
                free(j);
                step_done(op, -ENOMEM, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        j->nic = INSTANCE_NIC_FILES_NONE;
        snprintf(j->id, sizeof j->id, "%s", op->i->rec.id);
        j->nat = n->mode == INSTANCE_NETWORK_NAT;
        j->isolate = c->network.nat.isolate;
        /* nat: the configured bridge now, which is the one the rules and dnsmasq serve. */
        const char *bridge = j->nat ? c->network.nat.bridge : n->bridge;
        if (!bridge || (j->nat && net_subnet_parse(c->network.nat.subnet, &j->subnet) < 0)) {
                tap_job_free(j);
                step_done(op, -EINVAL, INSTANCE_FAILURE_INTERNAL,
                          "network: the record or network.nat names no usable bridge or subnet");
                return;
        }
        snprintf(j->bridge, sizeof j->bridge, "%s", bridge);
        /* NET-4, NET-6: the instance's forwards and names reach the table and dnsmasq. */
        if (j->nat)
                instance_nat_sync(op->m);
        op_job_then(op, tap_job_run, j, tap_job_free, tap_opened);
}

/* Closing vgpud's descriptors removes the TAP: nothing else holds it before the spawn. */
static void tap_undo(Op *op)
{
        instance_nic_files_close(&op->nic);
        step_undone(op);
}

const Step instance_step_tap = {.name = "tap", .run = tap_run, .undo = tap_undo};
