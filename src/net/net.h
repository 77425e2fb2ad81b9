/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * net: the host side of an instance's NIC (SPEC §20): its MAC (NET-2), its NAT address
 * (NET-5), its TAP (NET-3) and the links around it, changed through rtnetlink with libmnl
 * (never an `ip` subprocess).
 *
 * Promises:
 *  - net/ knows nothing of instances: callers hand it ids, names and the addresses and MACs
 *    their records hold, and the records stay the one source of truth (ARCHITECTURE.md).
 *  - the pure parts (MAC, TAP name, subnet, allocation) touch nothing; the rest blocks on the
 *    kernel and runs on a worker, each call with its own netlink socket.
 *  - a TAP is never made persistent: it lives exactly as long as its last descriptor, which
 *    QEMU holds (decision 14), so no crash of vgpud or of a VMM leaves one behind.
 *  - errors are -errno with a message naming the step and the object, in NET-8's form
 *    (`network: add port vgt… to bridge vgpud0: <reason>`).
 */

#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

/* ---- MAC and TAP name (net-mac.c) ---------------------------------------------------------- */

#define NET_MAC_STRLEN 18 /* "52:54:00:xx:xx:xx" and the NUL */
#define NET_MAC_PREFIX "52:54:00"
#define NET_TAP_PREFIX "vgt"
#define NET_TAP_ID_CHARS 12 /* "vgt" + 12 characters of the id: 15 bytes, IFNAMSIZ - 1 */

/* Whether mac is held by another record; the caller's view of its records. */
typedef bool (*NetMacTakenFunc)(const char *mac, void *userdata);

/*
 * NET-2: 52:54:00 followed by the first three bytes of SHA-256(id); on a collision with a MAC
 * taken() reports, the next value (the three bytes as one number plus one, wrapping). -EINVAL
 * for an empty id, -EADDRINUSE when all 2^24 values are taken.
 */
int net_mac_derive(const char *id, NetMacTakenFunc taken, void *userdata,
                   char ret[static NET_MAC_STRLEN]);

/* NET-3: "vgt" and the first 12 characters of the id. -EINVAL for an id shorter than that. */
int net_tap_name(const char *id, char ret[static IFNAMSIZ]);

/* ---- NAT addresses (net-addr.c) ------------------------------------------------------------ */

#define NET_SUBNET_PREFIX_MIN 16 /* CFG-3: network.nat.subnet /16../29 */
#define NET_SUBNET_PREFIX_MAX 29

typedef struct NetSubnet {
        uint32_t network; /* host byte order, host bits clear */
        unsigned prefix;
} NetSubnet;

/* network.nat.subnet (CFG-3): "a.b.c.d/n", n in 16..29, no host bits. -EINVAL, -ERANGE. */
int net_subnet_parse(const char *s, NetSubnet *ret);
/* The gateway, <subnet>.1: the bridge's own address (NET-4). */
uint32_t net_subnet_gateway(const NetSubnet *s);
/* The broadcast address, the subnet's last. */
uint32_t net_subnet_broadcast(const NetSubnet *s);
/* The number of addresses a guest can get: all but network, gateway and broadcast. */
uint32_t net_subnet_guest_count(const NetSubnet *s);
/* Whether addr (dotted quad) is an address a guest can hold in s; false for any other text. */
bool net_subnet_holds_guest(const NetSubnet *s, const char *addr);

/* Whether the address is held by another record. */
typedef bool (*NetAddrTakenFunc)(const char *addr, void *userdata);

/* NET-5: the lowest guest address of s that taken() does not report. -EADDRNOTAVAIL when full. */
int net_addr_allocate(const NetSubnet *s, NetAddrTakenFunc taken, void *userdata,
                      char ret[static IPV4_STRLEN]);

/* ---- TAP and vhost-net (net-tap.c) --------------------------------------------------------- */

/*
 * NET-3: opens <dev_root>/net/tun (beneath dev_dirfd, no link followed) and makes a TAP named
 * name with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR. The descriptor is the TAP: closing it (or the
 * death of the process it was passed to) removes the device. -EEXIST when a device of that name
 * exists (a TAP still held by a live VMM, or another interface).
 */
int net_tap_open(int dev_dirfd, const char *name, int *ret_fd, char **error);

/* The name of the TAP behind fd (TUNGETIFF); -EBADFD when fd is not a TAP. */
int net_tap_get_name(int fd, char ret[static IFNAMSIZ]);

/*
 * <dev_root>/vhost-net, for QEMU's vhostfd (NET-3). -errno when it does not open (ENOENT on a
 * host without the module): the NIC then runs without vhost, which is no failure.
 */
int net_vhost_open(int dev_dirfd, int *ret_fd);

/* ---- links over rtnetlink (net-link.c) ----------------------------------------------------- */

typedef struct NetLink NetLink;

/* A NETLINK_ROUTE socket of the calling thread's network namespace. */
int net_link_open(NetLink **ret);
NetLink *net_link_free(NetLink *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(NetLink *, net_link_free);

typedef struct NetLinkInfo {
        int ifindex;
        unsigned mtu;
        bool up;       /* IFF_UP */
        bool bridge;   /* IFLA_INFO_KIND "bridge" */
        int master;    /* ifindex of its bridge, 0 when none */
        bool isolated; /* a bridge port with IFLA_BRPORT_ISOLATED */
        char kind[16]; /* IFLA_INFO_KIND, "" when the link has none */
} NetLinkInfo;

/* The link named name; -ENODEV when there is none. */
int net_link_get(NetLink *l, const char *name, NetLinkInfo *ret);
/* RTM_NEWLINK of kind bridge; -EEXIST when name exists. */
int net_link_add_bridge(NetLink *l, const char *name);
/* RTM_DELLINK; -ENODEV when there is none. */
int net_link_delete(NetLink *l, const char *name);
int net_link_set_mtu(NetLink *l, int ifindex, unsigned mtu);
/* Makes ifindex a port of bridge master (0: no longer a port). */
int net_link_set_master(NetLink *l, int ifindex, int master);
int net_link_set_up(NetLink *l, int ifindex);
/* The bridge port flag `isolated` (IFLA_BRPORT_ISOLATED, through AF_BRIDGE). */
int net_link_set_isolated(NetLink *l, int ifindex, bool isolated);
/* Adds addr/prefix (host order) to ifindex; an address it already has is no error. */
int net_link_add_address(NetLink *l, int ifindex, uint32_t addr, unsigned prefix);
/* Whether ifindex has addr/prefix. */
int net_link_has_address(NetLink *l, int ifindex, uint32_t addr, unsigned prefix, bool *ret);
/* The names of the ports of bridge master, NULL-terminated (strv_free() them). */
int net_link_list_ports(NetLink *l, int master, char ***ret);

/* ---- table inet vgpud (net-nft.c) --------------------------------------------------------- */

#define NET_FORWARDS_MAX 65536 /* more than any port range holds */

/* NET-1's port forward: host port -> guest_addr:guest. */
typedef struct NetForward {
        uint16_t host, guest;
        bool udp;
        uint32_t guest_addr; /* host byte order */
} NetForward;

typedef struct NetNatRules {
        const char *bridge;
        NetSubnet subnet;
        bool isolate;
        const NetForward *forwards;
        size_t n_forwards;
} NetNatRules;

/*
 * NET-4: the whole table, as nft(8) reads it: masquerade for the subnet leaving through any
 * other interface; forward rules (replies and port forwards in, the subnet out, with isolate
 * nothing between guests); one DNAT per forward, to any local address (fib daddr type local),
 * in prerouting and in output. Forwards are sorted (tcp, then udp, by host port), so equal
 * records render equal text. -EINVAL, -ENOMEM.
 */
int net_nft_render(const NetNatRules *rules, char **ret);

/*
 * Opens the one libnftables context that net_nft_apply() and net_nft_list() use from then on,
 * one command at a time. Call it at start-up, before descriptors are many: libnftables waits
 * with select(), which aborts the process on a socket numbered FD_SETSIZE (1024) or more, and a
 * context keeps the socket it was opened with. Before it, each call opens a context of its own.
 */
int net_nft_open_shared(void);

/*
 * Replaces table inet vgpud by ruleset in one libnftables transaction (add, delete, then the
 * table): atomic, and nothing outside the table is touched. -EIO with `network: nftables:
 * replace table vgpud: <nft's first error line>`.
 */
int net_nft_apply(const char *ruleset, char **error);

/* The table as `nft list table inet vgpud` prints it; -ENOENT without one. */
int net_nft_list(char **ret, char **error);

/* ---- dnsmasq's files (net-dnsmasq.c) ------------------------------------------------------- */

#define NET_DNS_DOMAIN "vgpud.internal"
#define NET_DNSMASQ_CONF "dnsmasq.conf"
#define NET_DNSMASQ_DHCP_HOSTS "dhcp-hosts"
#define NET_DNSMASQ_HOSTS "hosts"
#define NET_DNSMASQ_LEASES "leases"
#define NET_DNSMASQ_PID "dnsmasq.pid"

/* One NAT instance as dnsmasq knows it. */
typedef struct NetHost {
        const char *name; /* INST-4's name: one DNS label */
        const char *mac;
        const char *ip;
} NetHost;

/* One DNS label of [a-z0-9-], not starting or ending with '-'. */
bool net_dns_name_is_valid(const char *s);

/*
 * NET-6: the DHCP hosts file (`<mac>,<ip>,<name>` per host) and the hosts file (`<ip>
 * <name>.vgpud.internal <name>`), sorted by address. -EINVAL for a host whose fields would not
 * parse back.
 */
int net_dnsmasq_render_hosts(const NetHost *hosts, size_t n, char **ret_dhcp, char **ret_dns);

/*
 * NET-6: dnsmasq.conf for the NAT bridge: bound to the bridge only, static DHCP leases from the
 * hosts file in dir, the gateway as router and name server, names under vgpud.internal, the
 * host's resolvers (IPv4 only; others skipped) as upstream servers and nothing else.
 */
int net_dnsmasq_render_conf(const char *bridge, const NetSubnet *subnet, const char *dir,
                            char *const *servers, char **ret);

/*
 * A dnsmasq that a vgpud killed with SIGKILL left running (it runs in a session of its own):
 * the process of dir's pid file, if its arguments name dir's dnsmasq.conf, gets SIGTERM and, after
 * 2 s, SIGKILL. 1 when one was stopped, 0 when there was none. Blocking.
 */
int net_dnsmasq_stop_stale(const char *dir, const char *proc_root);

/* ---- the NAT network's host side (net-nat.c) ----------------------------------------------- */

/* NET-10's steps, for vgpud_network_errors_total{step}. */
typedef enum NetStep {
        NET_STEP_TAP,
        NET_STEP_LINK,
        NET_STEP_NFT,
        NET_STEP_DNSMASQ,
        _NET_STEP_MAX,
} NetStep;

const char *net_step_to_string(NetStep s);

typedef struct NetNatHost {
        const char *bridge;
        NetSubnet subnet;
        bool isolate;
        const NetForward *forwards;
        size_t n_forwards;
        const NetHost *hosts; /* every nat instance with an address */
        size_t n_hosts;
        const char *proc_root; /* <proc_root>/sys/net/ipv4/ip_forward */
        const char *dir;       /* <runtime_dir>/network: dnsmasq's files, made when missing */
        char *const *servers;  /* upstream name servers, NULL-terminated */
        char *const *taps;     /* the TAPs of running nat instances, NULL-terminated */
} NetNatHost;

typedef struct NetNatOutcome {
        bool ip_forward_set; /* this pass turned net.ipv4.ip_forward on (logged once) */
        bool conf_changed;   /* dnsmasq.conf was rewritten: dnsmasq must restart */
        bool hosts_changed;  /* a hosts file was rewritten: dnsmasq must get SIGHUP */
        NetStep failed;      /* _NET_STEP_MAX unless the pass failed */
} NetNatOutcome;

/*
 * One idempotent pass over NET-4 and NET-6, blocking: the bridge with the gateway address and up,
 * every TAP of taps that exists back on it (REL-14: a bridge made again has no ports),
 * net.ipv4.ip_forward = 1, table inet vgpud replaced as a whole, dnsmasq's files rewritten
 * crash-safely where they changed. Stops at the first failure, its step in ret->failed and its
 * message in *error (`network: ...`).
 */
int net_nat_sync(const NetNatHost *h, NetNatOutcome *ret, char **error);

/* The IPv4, non-loopback `nameserver` lines of a resolv.conf (a missing file has none). */
int net_resolv_servers(const char *path, char ***ret);

/* ---- NET-3 and NET-4 as steps (net-port.c) ------------------------------------------------- */

/*
 * NET-3: the TAP named tap joins bridge: MTU set to the bridge's, master, `isolated` when asked,
 * up. The bridge must exist and be up (NET-7: -ENETDOWN, `bridge <name> is missing or down`).
 * Errors name the step: `network: add port <tap> to bridge <bridge>: <reason>`.
 */
int net_port_attach(NetLink *l, const char *tap, const char *bridge, bool isolated, char **error);

/*
 * NET-4's bridge: bridge exists (created when missing), holds the gateway address of subnet and
 * is up. Idempotent: a pass over a bridge that is right changes nothing. -errno with
 * `network: <step> bridge <name>: <reason>`; -EEXIST when name is a link of another kind.
 */
int net_nat_bridge_ensure(NetLink *l, const char *bridge, const NetSubnet *subnet, char **error);
