/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-4 and NET-6, the host side of the NAT network, as one idempotent pass: the bridge with
 * its address, net.ipv4.ip_forward, table inet vgpud, and dnsmasq's files. A start-up, a change
 * of instances and every reconcile pass run the same pass, so what the host holds follows the
 * records whatever removed or changed it meanwhile (REL-14).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/net.h"

#define RESOLV_CONF_MAX 65536
#define IP_FORWARD_MAX 16

static const char *const step_names[_NET_STEP_MAX] = {
    [NET_STEP_TAP] = "tap",
    [NET_STEP_LINK] = "link",
    [NET_STEP_NFT] = "nft",
    [NET_STEP_DNSMASQ] = "dnsmasq",
};

const char *net_step_to_string(NetStep s)
{
        return (unsigned)s < _NET_STEP_MAX ? step_names[s] : NULL;
}

int net_resolv_servers(const char *path, char ***ret)
{
        _cleanup_free_ char *text = NULL;
        _cleanup_strv_free_ char **servers = NULL;
        int r = read_file_at(AT_FDCWD, path, RESOLV_CONF_MAX, &text, NULL);
        if (r == -ENOENT) {
                *ret = calloc(1, sizeof(char *));
                return *ret ? 0 : -ENOMEM;
        }
        if (r < 0)
                return r;
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char addr[IPV4_STRLEN + 1];
                uint32_t a;
                /* IPv4 only, and never a loopback: that would be dnsmasq asking itself. */
                if (sscanf(line, "nameserver %16s", addr) == 1 && parse_ipv4(addr, &a) >= 0 &&
                    (a >> 24) != 127 && strv_push(&servers, addr) < 0)
                        return -ENOMEM;
        }
        if (!servers && !(servers = calloc(1, sizeof(char *))))
                return -ENOMEM;
        *ret = TAKE_PTR(servers);
        return 0;
}

/* NET-4: forwarding on, once; *ret_set says this call turned it on. */
static int ip_forward_on(const char *proc_root, bool *ret_set, char **error)
{
        _cleanup_free_ char *path = NULL, *value = NULL;
        if (strprintf(&path, "%s/sys/net/ipv4/ip_forward", proc_root) < 0)
                return error_set_oom(error);
        int r = read_file_at(AT_FDCWD, path, IP_FORWARD_MAX, &value, NULL);
        if (r < 0)
                return error_set(error, r, "network: read %s: %s", path, strerror(-r));
        *ret_set = false;
        if (streq(strchomp(value), "1"))
                return 0;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 || write_all(fd, "1\n", 2) < 0)
                return error_set(error, -errno, "network: set %s to 1: %m", path);
        *ret_set = true;
        return 0;
}

/* Writes dir/name crash-safely when its content differs; *changed says it did. */
static int write_if_changed(int dirfd, const char *dir, const char *name, const char *content,
                            bool *changed, char **error)
{
        _cleanup_free_ char *old = NULL;
        int r = read_file_at(dirfd, name, 1 << 24, &old, NULL);
        if (r >= 0 && streq(old, content))
                return 0;
        WriteStep step;
        r = write_file_atomic_at(dirfd, name, content, strlen(content), 0644, &step);
        if (r < 0)
                return error_set(error, r, "network: write %s/%s: %s", dir, name, strerror(-r));
        *changed = true;
        return 0;
}

static int write_dnsmasq_files(const NetNatHost *h, NetNatOutcome *o, char **error)
{
        if (mkdir(h->dir, 0755) < 0 && errno != EEXIST)
                return error_set(error, -errno, "network: create %s: %m", h->dir);
        _cleanup_close_ int dirfd = open(h->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (dirfd < 0)
                return error_set(error, -errno, "network: open %s: %m", h->dir);
        _cleanup_free_ char *conf = NULL, *dhcp = NULL, *dns = NULL;
        int r = net_dnsmasq_render_conf(h->bridge, &h->subnet, h->dir, h->servers, &conf);
        if (r >= 0)
                r = net_dnsmasq_render_hosts(h->hosts, h->n_hosts, &dhcp, &dns);
        if (r < 0)
                return error_set(error, r, "network: dnsmasq files: %s", strerror(-r));
        r = write_if_changed(dirfd, h->dir, NET_DNSMASQ_CONF, conf, &o->conf_changed, error);
        if (r >= 0)
                r = write_if_changed(dirfd, h->dir, NET_DNSMASQ_DHCP_HOSTS, dhcp, &o->hosts_changed,
                                     error);
        if (r >= 0)
                r = write_if_changed(dirfd, h->dir, NET_DNSMASQ_HOSTS, dns, &o->hosts_changed,
                                     error);
        return r;
}

int net_nat_sync(const NetNatHost *h, NetNatOutcome *ret, char **error)
{
        NetNatOutcome o = {.failed = _NET_STEP_MAX};
        _cleanup_(net_link_freep) NetLink *l = NULL;
        int r = net_link_open(&l);
        if (r < 0)
                r = error_set(error, r, "network: open rtnetlink: %s", strerror(-r));
        if (r >= 0)
                r = net_nat_bridge_ensure(l, h->bridge, &h->subnet, error);
        /* A TAP that is gone went with its VMM; one that is here belongs on the bridge. */
        for (char *const *t = h->taps; r >= 0 && t && *t; t++) {
                NetLinkInfo info;
                if (net_link_get(l, *t, &info) >= 0)
                        r = net_port_attach(l, *t, h->bridge, h->isolate, error);
        }
        if (r >= 0)
                r = ip_forward_on(h->proc_root, &o.ip_forward_set, error);
        if (r < 0) {
                o.failed = NET_STEP_LINK;
                *ret = o;
                return r;
        }
        _cleanup_free_ char *ruleset = NULL;
        r = net_nft_render(&(NetNatRules){.bridge = h->bridge,
                                          .subnet = h->subnet,
                                          .isolate = h->isolate,
                                          .forwards = h->forwards,
                                          .n_forwards = h->n_forwards},
                           &ruleset);
        if (r < 0)
                r = error_set(error, r, "network: nftables: render table vgpud: %s", strerror(-r));
        else
                r = net_nft_apply(ruleset, error);
        if (r < 0) {
                o.failed = NET_STEP_NFT;
                *ret = o;
                return r;
        }
        r = write_dnsmasq_files(h, &o, error);
        if (r < 0)
                o.failed = NET_STEP_DNSMASQ;
        *ret = o;
        return r;
}
