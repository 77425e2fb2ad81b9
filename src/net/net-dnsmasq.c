/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-6's files: dnsmasq's configuration, its DHCP hosts file and its hosts file, pure
 * functions of the NAT network and the records, pinned by golden files. dnsmasq reads the two
 * host files again on SIGHUP, so a change of instances never restarts it.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/net.h"

static int host_compare(const void *a, const void *b)
{
        const NetHost *x = a, *y = b;
        uint32_t p = 0, q = 0;
        (void)parse_ipv4(x->ip, &p);
        (void)parse_ipv4(y->ip, &q);
        return p < q ? -1 : p > q;
}

/* Every field checked again here: these lines go into files another program parses. */
static int hosts_sorted(const NetHost *hosts, size_t n, NetHost **ret)
{
        uint32_t a;
        for (size_t i = 0; i < n; i++)
                if (!mac_address_is_valid(hosts[i].mac) || parse_ipv4(hosts[i].ip, &a) < 0 ||
                    !net_dns_name_is_valid(hosts[i].name))
                        return -EINVAL;
        NetHost *copy = NULL;
        if (n > 0) {
                copy = calloc(n, sizeof *copy);
                if (!copy)
                        return -ENOMEM;
                memcpy(copy, hosts, n * sizeof *copy);
                qsort(copy, n, sizeof *copy, host_compare);
        }
        *ret = copy;
        return 0;
}

bool net_dns_name_is_valid(const char *s)
{
        /* INST-4's instance names: one DNS label. */
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
                return false;
        for (const char *c = s; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
                        return false;
        return true;
}

int net_dnsmasq_render_hosts(const NetHost *hosts, size_t n, char **ret_dhcp, char **ret_dns)
{
        _cleanup_free_ NetHost *sorted = NULL;
        int r = hosts_sorted(hosts, n, &sorted);
        if (r < 0)
                return r;
        _cleanup_free_ char *dhcp = strdup(""), *dns = strdup("");
        if (!dhcp || !dns)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (strextend(&dhcp, "%s,%s,%s\n", sorted[i].mac, sorted[i].ip, sorted[i].name) <
                        0 ||
                    strextend(&dns, "%s %s." NET_DNS_DOMAIN " %s\n", sorted[i].ip, sorted[i].name,
                              sorted[i].name) < 0)
                        return -ENOMEM;
        *ret_dhcp = TAKE_PTR(dhcp);
        *ret_dns = TAKE_PTR(dns);
        return 0;
}

int net_dnsmasq_render_conf(const char *bridge, const NetSubnet *subnet, const char *dir,
                            char *const *servers, char **ret)
{
        if (!ifname_is_valid(bridge) || !dir || dir[0] != '/' || strpbrk(dir, "\n\r"))
                return -EINVAL;
        char net[IPV4_STRLEN], gw[IPV4_STRLEN], mask[IPV4_STRLEN];
        format_ipv4(subnet->network, net);
        format_ipv4(net_subnet_gateway(subnet), gw);
        format_ipv4(UINT32_MAX << (32 - subnet->prefix), mask);
        _cleanup_free_ char *text = NULL;
        if (strprintf(&text,
                      "# Written by vgpud for the NAT network (NET-6); rewritten on every change.\n"
                      "interface=%s\n"
                      "bind-interfaces\n"
                      "except-interface=lo\n"
                      "dhcp-range=%s,static,%s,1h\n"
                      "dhcp-option=option:router,%s\n"
                      "dhcp-option=option:dns-server,%s\n"
                      "dhcp-hostsfile=%s/" NET_DNSMASQ_DHCP_HOSTS "\n"
                      "addn-hosts=%s/" NET_DNSMASQ_HOSTS "\n"
                      "dhcp-leasefile=%s/" NET_DNSMASQ_LEASES "\n"
                      "domain=" NET_DNS_DOMAIN "\n"
                      "local=/" NET_DNS_DOMAIN "/\n"
                      "no-hosts\n"
                      "no-resolv\n"
                      "pid-file=%s/" NET_DNSMASQ_PID "\n",
                      bridge, net, mask, gw, gw, dir, dir, dir, dir) < 0)
                return -ENOMEM;
        uint32_t a;
        for (char *const *s = servers; s && *s; s++)
                if (parse_ipv4(*s, &a) >= 0 && strextend(&text, "server=%s\n", *s) < 0)
                        return -ENOMEM;
        *ret = TAKE_PTR(text);
        return 0;
}

int net_dnsmasq_stop_stale(const char *dir, const char *proc_root)
{
        _cleanup_free_ char *pidfile = NULL, *text = NULL, *cmdline_path = NULL, *cmdline = NULL,
                            *want = NULL;
        size_t size = 0;
        if (strprintf(&pidfile, "%s/" NET_DNSMASQ_PID, dir) < 0 ||
            strprintf(&want, "--conf-file=%s/" NET_DNSMASQ_CONF, dir) < 0)
                return -ENOMEM;
        int r = read_file_at(AT_FDCWD, pidfile, 64, &text, NULL);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        uint32_t pid;
        if (parse_uint32(strchomp(text), &pid) < 0 || pid < 2 || pid > INT32_MAX)
                return 0;
        if (strprintf(&cmdline_path, "%s/%u/cmdline", proc_root, pid) < 0)
                return -ENOMEM;
        if (read_file_at(AT_FDCWD, cmdline_path, 65536, &cmdline, &size) < 0)
                return 0; /* gone */
        /* Only the dnsmasq of this configuration: its arguments, NUL-separated, name our file. */
        bool ours = false;
        for (size_t i = 0; i < size; i += strlen(cmdline + i) + 1)
                if (streq(cmdline + i, want))
                        ours = true;
        if (!ours)
                return 0;
        if (kill((pid_t)pid, SIGTERM) < 0)
                return errno == ESRCH ? 0 : -errno;
        for (int i = 0; i < 100; i++) { /* 2 s, bounded */
                if (access(cmdline_path, F_OK) < 0)
                        return 1;
                struct timespec ts = {.tv_nsec = 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
        (void)kill((pid_t)pid, SIGKILL);
        return 1;
}
