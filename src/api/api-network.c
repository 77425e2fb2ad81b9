/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * GET /network (NET-9): the host side of instance networking, from memory: the configured modes
 * and bridges, the NAT network with its addresses in use and free, its port forwards and
 * dnsmasq's state. The records are the source of every address and forward shown.
 */
#include <microhttpd.h>

#include "api-internal.h"
#include "net/net.h"

static json_t *strings_json(char *const *strv)
{
        json_t *a = json_array();
        for (char *const *s = strv; a && s && *s; s++)
                if (json_array_append_new(a, json_string(*s)) < 0) {
                        json_decref(a);
                        return NULL;
                }
        return a;
}

static int nat_json(const ApiContext *ctx, json_t **ret)
{
        const ConfigNat *c = &ctx->config->network.nat;
        InstanceNatStats st = {0};
        if (ctx->instances)
                instance_nat_stats(ctx->instances, &st);
        NetSubnet subnet;
        char gateway[IPV4_STRLEN] = "";
        if (net_subnet_parse(c->subnet, &subnet) >= 0)
                format_ipv4(net_subnet_gateway(&subnet), gateway);
        json_auto_t *in_use = json_array(), *forwards = json_array();
        if (!in_use || !forwards)
                return -ENOMEM;
        const InstanceRecord *const *list = NULL;
        size_t n = ctx->instances ? instance_manager_list(ctx->instances, &list) : 0;
        for (size_t k = 0; k < n; k++) {
                const InstanceNetwork *w = &list[k]->network;
                if (w->mode != INSTANCE_NETWORK_NAT || !w->ip)
                        continue;
                if (json_array_append_new(
                        in_use, json_pack("{s:s, s:s*, s:s, s:s}", "ip", w->ip, "mac", w->mac,
                                          "instance_id", list[k]->id, "name", list[k]->name)) < 0)
                        return -ENOMEM;
                for (size_t i = 0; i < w->n_ports; i++)
                        if (json_array_append_new(forwards,
                                                  json_pack("{s:i, s:s, s:i, s:s, s:s}", "host",
                                                            w->ports[i].host, "protocol",
                                                            w->ports[i].udp ? "udp" : "tcp",
                                                            "guest", w->ports[i].guest, "ip", w->ip,
                                                            "instance_id", list[k]->id)) < 0)
                                return -ENOMEM;
        }
        json_t *o = json_pack(
            "{s:b, s:s, s:s, s:s, s:b, s:s, s:{s:I, s:I}, s:O, s:O, s:{s:b, s:I}, s:s*}", "enabled",
            c->enabled, "bridge", c->bridge, "subnet", c->subnet, "gateway", gateway, "isolate",
            c->isolate, "port_range", c->port_range, "addresses", "allocated",
            (json_int_t)st.addresses_allocated, "free", (json_int_t)st.addresses_free, "in_use",
            in_use, "port_forwards", forwards, "dnsmasq", "up", st.dnsmasq_up, "restarts",
            (json_int_t)st.dnsmasq_restarts, "error", st.error);
        if (!o)
                return -ENOMEM;
        *ret = o;
        return 0;
}

int api_handle_network(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        json_t *nat = NULL;
        int r = nat_json(ctx, &nat);
        if (r < 0)
                return r;
        json_auto_t *o =
            json_pack("{s:s, s:o, s:o}", "default_mode",
                      config_network_mode_to_string(config_network_default_mode(ctx->config)),
                      "bridges", strings_json(ctx->config->network.bridges), "nat", nat);
        if (!o)
                return -ENOMEM;
        return http_reply_json(req, MHD_HTTP_OK, o);
}
