/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-3's port and NET-4's bridge, each a short sequence of link changes whose failure names
 * its step (NET-8). Each is idempotent, so that a start and a reconcile pass run the same code.
 */
#include <string.h>

#include "net/net.h"

int net_port_attach(NetLink *l, const char *tap, const char *bridge, bool isolated, char **error)
{
        NetLinkInfo br, port;
        int r = net_link_get(l, bridge, &br);
        if (r == -ENODEV || (r >= 0 && (!br.bridge || !br.up)))
                return error_set(error, -ENETDOWN, "bridge %s is missing or down", bridge);
        if (r < 0)
                return error_set(error, r, "network: read bridge %s: %s", bridge, strerror(-r));
        r = net_link_get(l, tap, &port);
        if (r < 0)
                return error_set(error, r, "network: read TAP %s: %s", tap, strerror(-r));
        /* A port whose MTU is below the bridge's would drop the bridge's largest frames. */
        if (port.mtu != br.mtu && (r = net_link_set_mtu(l, port.ifindex, br.mtu)) < 0)
                return error_set(error, r, "network: set MTU %u of %s: %s", br.mtu, tap,
                                 strerror(-r));
        if (port.master != br.ifindex && (r = net_link_set_master(l, port.ifindex, br.ifindex)) < 0)
                return error_set(error, r, "network: add port %s to bridge %s: %s", tap, bridge,
                                 strerror(-r));
        /* Isolated ports reach the bridge (the host, the uplink) but never each other. */
        if (isolated && (r = net_link_set_isolated(l, port.ifindex, true)) < 0)
                return error_set(error, r, "network: isolate port %s on bridge %s: %s", tap, bridge,
                                 strerror(-r));
        if (!port.up && (r = net_link_set_up(l, port.ifindex)) < 0)
                return error_set(error, r, "network: set %s up: %s", tap, strerror(-r));
        return 0;
}

int net_nat_bridge_ensure(NetLink *l, const char *bridge, const NetSubnet *subnet, char **error)
{
        NetLinkInfo br;
        int r = net_link_get(l, bridge, &br);
        if (r == -ENODEV) {
                r = net_link_add_bridge(l, bridge);
                /* Another step may have made it a moment ago: theirs is as good. */
                if (r == -EEXIST)
                        r = 0;
                if (r < 0)
                        return error_set(error, r, "network: create bridge %s: %s", bridge,
                                         strerror(-r));
                r = net_link_get(l, bridge, &br);
        }
        if (r < 0)
                return error_set(error, r, "network: read bridge %s: %s", bridge, strerror(-r));
        if (!br.bridge)
                return error_set(error, -EEXIST,
                                 "network: bridge %s: an interface of that name is a %s, not a "
                                 "bridge",
                                 bridge, br.kind[0] ? br.kind : "device");
        uint32_t gateway = net_subnet_gateway(subnet);
        bool has = false;
        r = net_link_has_address(l, br.ifindex, gateway, subnet->prefix, &has);
        if (r >= 0 && !has)
                r = net_link_add_address(l, br.ifindex, gateway, subnet->prefix);
        if (r < 0) {
                char a[IPV4_STRLEN];
                return error_set(error, r, "network: address %s/%u on bridge %s: %s",
                                 format_ipv4(gateway, a), subnet->prefix, bridge, strerror(-r));
        }
        if (!br.up && (r = net_link_set_up(l, br.ifindex)) < 0)
                return error_set(error, r, "network: set bridge %s up: %s", bridge, strerror(-r));
        return 0;
}
