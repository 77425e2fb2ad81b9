/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-5's allocator. It keeps no state: the records are the source of truth, and the caller's
 * taken() answers from them, so the allocator is "rebuilt from the records" on every call.
 */
#include "net/net.h"

int net_subnet_parse(const char *s, NetSubnet *ret)
{
        uint32_t network;
        unsigned prefix;
        int r =
            parse_ipv4_network(s, NET_SUBNET_PREFIX_MIN, NET_SUBNET_PREFIX_MAX, &network, &prefix);
        if (r < 0)
                return r == -EADDRNOTAVAIL ? -EINVAL : r;
        *ret = (NetSubnet){.network = network, .prefix = prefix};
        return 0;
}

uint32_t net_subnet_gateway(const NetSubnet *s)
{
        return s->network + 1;
}

uint32_t net_subnet_broadcast(const NetSubnet *s)
{
        return s->network | (UINT32_MAX >> s->prefix);
}

uint32_t net_subnet_guest_count(const NetSubnet *s)
{
        return net_subnet_broadcast(s) - net_subnet_gateway(s) - 1;
}

bool net_subnet_holds_guest(const NetSubnet *s, const char *addr)
{
        uint32_t a;
        if (parse_ipv4(addr, &a) < 0)
                return false;
        return a > net_subnet_gateway(s) && a < net_subnet_broadcast(s);
}

int net_addr_allocate(const NetSubnet *s, NetAddrTakenFunc taken, void *userdata,
                      char ret[static IPV4_STRLEN])
{
        for (uint32_t a = net_subnet_gateway(s) + 1; a < net_subnet_broadcast(s); a++) {
                char text[IPV4_STRLEN];
                format_ipv4(a, text);
                if (!taken || !taken(text, userdata)) {
                        memcpy(ret, text, sizeof text);
                        return 0;
                }
        }
        return -EADDRNOTAVAIL;
}
