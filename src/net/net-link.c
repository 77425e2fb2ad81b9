/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rtnetlink through libmnl: the handful of link and address changes NET-3 and NET-4 need, each
 * one request answered by an ACK (or a dump), in the network namespace of the calling thread.
 */
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/if_bridge.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/net.h"

/* Large enough for any one message of a link dump (the kernel's own default is 32 KiB). */
#define RECV_BUFFER_SIZE 32768

struct NetLink {
        struct mnl_socket *nl;
        unsigned portid;
        unsigned seq;
};

int net_link_open(NetLink **ret)
{
        NetLink *l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
        if (!l->nl || mnl_socket_bind(l->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
                int r = -errno;
                net_link_free(l);
                return r;
        }
        l->portid = mnl_socket_get_portid(l->nl);
        l->seq = (unsigned)time(NULL);
        *ret = l;
        return 0;
}

NetLink *net_link_free(NetLink *l)
{
        if (l) {
                if (l->nl)
                        mnl_socket_close(l->nl);
                free(l);
        }
        return NULL;
}

/* Sends nlh and reads until the ACK, the error or the end of the dump; cb sees each message. */
static int talk(NetLink *l, struct nlmsghdr *nlh, mnl_cb_t cb, void *data)
{
        nlh->nlmsg_seq = ++l->seq;
        nlh->nlmsg_flags |= NLM_F_ACK;
        if (mnl_socket_sendto(l->nl, nlh, nlh->nlmsg_len) < 0)
                return -errno;
        _cleanup_free_ char *buf = malloc(RECV_BUFFER_SIZE);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t n = mnl_socket_recvfrom(l->nl, buf, RECV_BUFFER_SIZE);
                if (n < 0)
                        return -errno;
                errno = 0;
                int r = mnl_cb_run(buf, (size_t)n, l->seq, l->portid, cb, data);
                if (r < 0)
                        return errno > 0 ? -errno : -EPROTO;
                if (r == MNL_CB_STOP)
                        return 0;
        }
}

static struct nlmsghdr *link_request(char *buf, uint16_t type, uint16_t flags, int family,
                                     int ifindex)
{
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = type;
        nlh->nlmsg_flags = NLM_F_REQUEST | flags;
        struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
        ifi->ifi_family = (unsigned char)family;
        ifi->ifi_index = ifindex;
        return nlh;
}

/* ---- reading a link ------------------------------------------------------------------------ */

typedef struct AttrTable {
        const struct nlattr
            *tb[IFLA_MAX + 1 > IFLA_INFO_MAX + 1 ? IFLA_MAX + 1 : IFLA_INFO_MAX + 1];
        uint16_t max;
} AttrTable;

static int attr_collect(const struct nlattr *attr, void *data)
{
        AttrTable *t = data;
        uint16_t type = mnl_attr_get_type(attr);
        if (type <= t->max)
                t->tb[type] = attr;
        return MNL_CB_OK;
}

static void parse_linkinfo(const struct nlattr *linkinfo, NetLinkInfo *info)
{
        AttrTable li = {.max = IFLA_INFO_MAX};
        mnl_attr_parse_nested(linkinfo, attr_collect, &li);
        if (li.tb[IFLA_INFO_KIND] && mnl_attr_validate(li.tb[IFLA_INFO_KIND], MNL_TYPE_STRING) >= 0)
                snprintf(info->kind, sizeof info->kind, "%s",
                         mnl_attr_get_str(li.tb[IFLA_INFO_KIND]));
        info->bridge = streq(info->kind, "bridge");
        /* A bridge port's flags come as the slave data of kind "bridge" (IFLA_BRPORT_*). */
        if (li.tb[IFLA_INFO_SLAVE_DATA]) {
                const struct nlattr *a;
                mnl_attr_for_each_nested(
                    a,
                    li.tb[IFLA_INFO_SLAVE_DATA]) if (mnl_attr_get_type(a) == IFLA_BRPORT_ISOLATED &&
                                                     mnl_attr_validate(a, MNL_TYPE_U8) >= 0)
                    info->isolated = mnl_attr_get_u8(a) != 0;
        }
}

typedef struct LinkParse {
        NetLinkInfo info;
        char name[IFNAMSIZ];
        bool found;
} LinkParse;

static int link_parse(const struct nlmsghdr *nlh, LinkParse *p)
{
        if (nlh->nlmsg_type != RTM_NEWLINK)
                return -EPROTO;
        const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
        AttrTable t = {.max = IFLA_MAX};
        if (mnl_attr_parse(nlh, sizeof *ifi, attr_collect, &t) < 0)
                return -EPROTO;
        *p = (LinkParse){.found = true};
        p->info.ifindex = ifi->ifi_index;
        p->info.up = ifi->ifi_flags & IFF_UP;
        if (t.tb[IFLA_IFNAME] && mnl_attr_validate(t.tb[IFLA_IFNAME], MNL_TYPE_STRING) >= 0)
                snprintf(p->name, sizeof p->name, "%s", mnl_attr_get_str(t.tb[IFLA_IFNAME]));
        if (t.tb[IFLA_MTU] && mnl_attr_validate(t.tb[IFLA_MTU], MNL_TYPE_U32) >= 0)
                p->info.mtu = mnl_attr_get_u32(t.tb[IFLA_MTU]);
        if (t.tb[IFLA_MASTER] && mnl_attr_validate(t.tb[IFLA_MASTER], MNL_TYPE_U32) >= 0)
                p->info.master = (int)mnl_attr_get_u32(t.tb[IFLA_MASTER]);
        if (t.tb[IFLA_LINKINFO])
                parse_linkinfo(t.tb[IFLA_LINKINFO], &p->info);
        return 0;
}

static int link_one_cb(const struct nlmsghdr *nlh, void *data)
{
        return link_parse(nlh, data) < 0 ? MNL_CB_ERROR : MNL_CB_OK;
}

int net_link_get(NetLink *l, const char *name, NetLinkInfo *ret)
{
        if (!name || !name[0] || strlen(name) >= IFNAMSIZ)
                return -EINVAL;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = link_request(buf, RTM_GETLINK, 0, AF_UNSPEC, 0);
        mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
        /* Counters are not wanted: they are most of a link message's size. */
        mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
        LinkParse p = {0};
        int r = talk(l, nlh, link_one_cb, &p);
        if (r < 0)
                return r;
        if (!p.found)
                return -ENODEV;
        *ret = p.info;
        return 0;
}

typedef struct PortList {
        int master;
        char **names;
        int r;
} PortList;

static int port_list_cb(const struct nlmsghdr *nlh, void *data)
{
        PortList *pl = data;
        LinkParse p;
        if (link_parse(nlh, &p) < 0)
                return MNL_CB_ERROR;
        if (p.info.master == pl->master && p.name[0] && strv_push(&pl->names, p.name) < 0) {
                pl->r = -ENOMEM;
                return MNL_CB_ERROR;
        }
        return MNL_CB_OK;
}

int net_link_list_ports(NetLink *l, int master, char ***ret)
{
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = link_request(buf, RTM_GETLINK, NLM_F_DUMP, AF_UNSPEC, 0);
        PortList pl = {.master = master};
        int r = talk(l, nlh, port_list_cb, &pl);
        if (r < 0 || pl.r < 0) {
                strv_free(pl.names);
                return pl.r < 0 ? pl.r : r;
        }
        if (!pl.names && !(pl.names = calloc(1, sizeof(char *))))
                return -ENOMEM;
        strv_sort(pl.names);
        *ret = pl.names;
        return 0;
}

/* ---- changing links ------------------------------------------------------------------------ */

int net_link_add_bridge(NetLink *l, const char *name)
{
        if (!name || !name[0] || strlen(name) >= IFNAMSIZ)
                return -EINVAL;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh =
            link_request(buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, AF_UNSPEC, 0);
        mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
        struct nlattr *linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
        mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
        mnl_attr_nest_end(nlh, linkinfo);
        return talk(l, nlh, NULL, NULL);
}

int net_link_delete(NetLink *l, const char *name)
{
        if (!name || !name[0] || strlen(name) >= IFNAMSIZ)
                return -EINVAL;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = link_request(buf, RTM_DELLINK, 0, AF_UNSPEC, 0);
        mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
        return talk(l, nlh, NULL, NULL);
}

int net_link_set_mtu(NetLink *l, int ifindex, unsigned mtu)
{
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = link_request(buf, RTM_SETLINK, 0, AF_UNSPEC, ifindex);
        mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
        return talk(l, nlh, NULL, NULL);
}

int net_link_set_master(NetLink *l, int ifindex, int master)
{
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = link_request(buf, RTM_SETLINK, 0, AF_UNSPEC, ifindex);
        mnl_attr_put_u32(nlh, IFLA_MASTER, (uint32_t)master);
        return talk(l, nlh, NULL, NULL);
}

int net_link_set_up(NetLink *l, int ifindex)
{
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = link_request(buf, RTM_SETLINK, 0, AF_UNSPEC, ifindex);
        struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
        ifi->ifi_flags = IFF_UP;
        ifi->ifi_change = IFF_UP;
        return talk(l, nlh, NULL, NULL);
}

int net_link_set_isolated(NetLink *l, int ifindex, bool isolated)
{
        /* As bridge(8) does: the port's protocol info, through the bridge's own family. */
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = link_request(buf, RTM_SETLINK, 0, AF_BRIDGE, ifindex);
        struct nlattr *protinfo = mnl_attr_nest_start(nlh, IFLA_PROTINFO);
        mnl_attr_put_u8(nlh, IFLA_BRPORT_ISOLATED, isolated);
        mnl_attr_nest_end(nlh, protinfo);
        return talk(l, nlh, NULL, NULL);
}

/* ---- addresses ----------------------------------------------------------------------------- */

int net_link_add_address(NetLink *l, int ifindex, uint32_t addr, unsigned prefix)
{
        if (prefix > 32)
                return -EINVAL;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = RTM_NEWADDR;
        /* NLM_F_REPLACE: an address the link already has is set again, not refused. */
        nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE;
        struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof *ifa);
        ifa->ifa_family = AF_INET;
        ifa->ifa_prefixlen = (unsigned char)prefix;
        ifa->ifa_index = (unsigned)ifindex;
        ifa->ifa_scope = RT_SCOPE_UNIVERSE;
        uint32_t host_bits = prefix == 0 ? UINT32_MAX : prefix == 32 ? 0 : UINT32_MAX >> prefix;
        mnl_attr_put_u32(nlh, IFA_LOCAL, htonl(addr));
        mnl_attr_put_u32(nlh, IFA_ADDRESS, htonl(addr));
        if (prefix < 31)
                mnl_attr_put_u32(nlh, IFA_BROADCAST, htonl(addr | host_bits));
        return talk(l, nlh, NULL, NULL);
}

typedef struct AddrFind {
        int ifindex;
        uint32_t addr; /* network order */
        unsigned prefix;
        bool found;
} AddrFind;

static int addr_find_cb(const struct nlmsghdr *nlh, void *data)
{
        AddrFind *f = data;
        if (nlh->nlmsg_type != RTM_NEWADDR)
                return MNL_CB_ERROR;
        const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
        if (ifa->ifa_family != AF_INET || (int)ifa->ifa_index != f->ifindex ||
            ifa->ifa_prefixlen != f->prefix)
                return MNL_CB_OK;
        const struct nlattr *a;
        mnl_attr_for_each(a, nlh, sizeof *ifa) if (mnl_attr_get_type(a) == IFA_LOCAL &&
                                                   mnl_attr_validate(a, MNL_TYPE_U32) >= 0 &&
                                                   mnl_attr_get_u32(a) == f->addr) f->found = true;
        return MNL_CB_OK;
}

int net_link_has_address(NetLink *l, int ifindex, uint32_t addr, unsigned prefix, bool *ret)
{
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = RTM_GETADDR;
        nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
        struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof *ifa);
        ifa->ifa_family = AF_INET;
        AddrFind f = {.ifindex = ifindex, .addr = htonl(addr), .prefix = prefix};
        int r = talk(l, nlh, addr_find_cb, &f);
        if (r < 0)
                return r;
        *ret = f.found;
        return 0;
}
