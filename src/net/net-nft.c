/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-4's table inet vgpud: rendered as a whole from the records (a pure function, pinned by a
 * golden file) and applied through libnftables in one transaction that deletes the table and
 * adds it again, so the kernel holds either the old table or the new one, never a mixture, and
 * nothing outside table vgpud is touched.
 */
#include <nftables/libnftables.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"

static int forward_compare(const void *a, const void *b)
{
        const NetForward *x = a, *y = b;
        if (x->udp != y->udp)
                return x->udp ? 1 : -1;
        return (int)x->host - (int)y->host;
}

int net_nft_render(const NetNatRules *rules, char **ret)
{
        if (!ifname_is_valid(rules->bridge) || rules->n_forwards > NET_FORWARDS_MAX)
                return -EINVAL;
        char net[IPV4_STRLEN];
        format_ipv4(rules->subnet.network, net);
        /* Sorted, so that one set of records always renders to one text. */
        _cleanup_free_ NetForward *fw = NULL;
        if (rules->n_forwards > 0) {
                fw = calloc(rules->n_forwards, sizeof *fw);
                if (!fw)
                        return -ENOMEM;
                memcpy(fw, rules->forwards, rules->n_forwards * sizeof *fw);
                qsort(fw, rules->n_forwards, sizeof *fw, forward_compare);
        }
        _cleanup_free_ char *dnat = NULL;
        if (strprintf(&dnat, "%s", "") < 0)
                return -ENOMEM;
        for (size_t i = 0; i < rules->n_forwards; i++) {
                char to[IPV4_STRLEN];
                format_ipv4(fw[i].guest_addr, to);
                if (strextend(&dnat, "\t\tfib daddr type local %s dport %u dnat ip to %s:%u\n",
                              fw[i].udp ? "udp" : "tcp", fw[i].host, to, fw[i].guest) < 0)
                        return -ENOMEM;
        }
        const char *b = rules->bridge;
        unsigned p = rules->subnet.prefix;
        _cleanup_free_ char *text = NULL;
        if (strprintf(&text,
                      "table inet vgpud {\n"
                      "\tchain prerouting {\n"
                      "\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
                      "%s"
                      "\t}\n"
                      "\tchain output {\n"
                      "\t\ttype nat hook output priority -100; policy accept;\n"
                      "%s"
                      "\t}\n"
                      "\tchain postrouting {\n"
                      "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
                      "\t\tip saddr %s/%u oifname != \"%s\" masquerade\n"
                      "\t}\n"
                      "\tchain forward {\n"
                      "\t\ttype filter hook forward priority filter; policy accept;\n",
                      dnat, dnat, net, p, b) < 0)
                return -ENOMEM;
        /* Routed traffic from one guest to another never passes; the bridge's isolated ports
         * keep them apart below IP. */
        if (rules->isolate &&
            strextend(&text, "\t\tiifname \"%s\" oifname \"%s\" drop\n", b, b) < 0)
                return -ENOMEM;
        /* Into the guests: replies, and the port forwards; out of them: their own subnet. */
        if (strextend(&text,
                      "\t\toifname \"%s\" ct state established,related accept\n"
                      "\t\toifname \"%s\" ct status dnat accept\n"
                      "\t\toifname \"%s\" drop\n"
                      "\t\tiifname \"%s\" ip saddr %s/%u accept\n"
                      "\t\tiifname \"%s\" drop\n"
                      "\t}\n"
                      "}\n",
                      b, b, b, b, net, p, b) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(text);
        return 0;
}

static int run(const char *commands, char **error)
{
        struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
        if (!nft)
                return error_set(error, -ENOMEM, "nftables: out of memory");
        if (nft_ctx_buffer_output(nft) < 0 || nft_ctx_buffer_error(nft) < 0) {
                nft_ctx_free(nft);
                return error_set(error, -ENOMEM, "nftables: out of memory");
        }
        int r = 0;
        if (nft_run_cmd_from_buffer(nft, commands) != 0) {
                const char *e = nft_ctx_get_error_buffer(nft);
                _cleanup_free_ char *line = strdup(e && *e ? e : "the command was refused");
                if (line)
                        strchomp(line);
                /* The first line says why; the rest repeats the command with a caret. */
                char *nl = line ? strchr(line, '\n') : NULL;
                if (nl)
                        *nl = 0;
                r = error_set(error, -EIO, "%s", line ? line : "the command was refused");
        }
        nft_ctx_free(nft);
        return r;
}

int net_nft_apply(const char *ruleset, char **error)
{
        /* "add table" first, so that the delete never fails on a host without the table. */
        _cleanup_free_ char *commands = NULL;
        if (strprintf(&commands, "add table inet vgpud\ndelete table inet vgpud\n%s", ruleset) < 0)
                return error_set_oom(error);
        int r = run(commands, error);
        if (r < 0)
                return error_prefix(error, r, "network: nftables: replace table vgpud");
        return 0;
}

int net_nft_list(char **ret, char **error)
{
        struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
        if (!nft)
                return error_set_oom(error);
        int r = 0;
        if (nft_ctx_buffer_output(nft) < 0 || nft_ctx_buffer_error(nft) < 0)
                r = error_set_oom(error);
        else if (nft_run_cmd_from_buffer(nft, "list table inet vgpud") != 0)
                r = error_set(error, -ENOENT, "network: nftables: no table vgpud");
        else if (!(*ret = strdup(nft_ctx_get_output_buffer(nft))))
                r = error_set_oom(error);
        nft_ctx_free(nft);
        return r;
}
