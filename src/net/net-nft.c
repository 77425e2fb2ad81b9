/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-4's table inet vgpud: rendered as a whole from the records (a pure function, pinned by a
 * golden file) and applied through libnftables in one transaction that deletes the table and
 * adds it again, so the kernel holds either the old table or the new one, never a mixture, and
 * nothing outside table vgpud is touched.
 */
#include <nftables/libnftables.h>
#include <pthread.h>
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

/*
 * libnftables waits for the kernel's answers with select(), and glibc aborts the process when
 * FD_SET is handed a descriptor at or above FD_SETSIZE (1024). The context's netlink socket is
 * opened with the context and kept by it; a context opened while vgpud holds a pidfd for each of
 * a thousand VMs would get a socket above the line. So the daemon opens one context at start-up
 * (net_nft_open_shared()) and every command goes through it, one at a time.
 */
static struct nft_ctx *shared_ctx;
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

static struct nft_ctx *ctx_new(void)
{
        struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
        if (nft && (nft_ctx_buffer_output(nft) < 0 || nft_ctx_buffer_error(nft) < 0)) {
                nft_ctx_free(nft);
                return NULL;
        }
        return nft;
}

int net_nft_open_shared(void)
{
        if (!shared_ctx)
                shared_ctx = ctx_new();
        return shared_ctx ? 0 : -ENOMEM;
}

/*
 * commands through the shared context, or one of their own before there is one: 0 with
 * *ret_output (when asked for), -EIO with *ret_error holding nft's first error line (the rest
 * repeats the command with a caret), or -ENOMEM.
 */
static int command(const char *commands, char **ret_output, char **ret_error)
{
        struct nft_ctx *own = NULL, *nft = shared_ctx;
        if (nft)
                pthread_mutex_lock(&shared_lock);
        else if (!(nft = own = ctx_new()))
                return -ENOMEM;
        int r = nft_run_cmd_from_buffer(nft, commands) == 0 ? 0 : -EIO;
        /* Both buffers are read after every command, which empties them for the next. */
        const char *out = nft_ctx_get_output_buffer(nft);
        const char *err = nft_ctx_get_error_buffer(nft);
        char *text =
            strdup(r == 0 ? (out ? out : "") : (err && *err ? err : "the command was refused"));
        if (own)
                nft_ctx_free(own);
        else
                pthread_mutex_unlock(&shared_lock);
        if (!text)
                return -ENOMEM;
        if (r == 0) {
                if (ret_output)
                        *ret_output = text;
                else
                        free(text);
                return 0;
        }
        strchomp(text);
        char *nl = strchr(text, '\n');
        if (nl)
                *nl = 0;
        *ret_error = text;
        return r;
}

int net_nft_apply(const char *ruleset, char **error)
{
        /* "add table" first, so that the delete never fails on a host without the table. */
        _cleanup_free_ char *commands = NULL, *refused = NULL;
        if (strprintf(&commands, "add table inet vgpud\ndelete table inet vgpud\n%s", ruleset) < 0)
                return error_set_oom(error);
        int r = command(commands, NULL, &refused);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "network: nftables: replace table vgpud: %s", refused);
        return 0;
}

int net_nft_list(char **ret, char **error)
{
        _cleanup_free_ char *refused = NULL;
        int r = command("list table inet vgpud", ret, &refused);
        if (r == -ENOMEM)
                return error_set_oom(error);
        if (r < 0)
                return error_set(error, -ENOENT, "network: nftables: no table vgpud");
        return 0;
}
