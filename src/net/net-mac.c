/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * NET-2's MAC and NET-3's TAP name: pure functions of the instance id, so that a record's NIC
 * looks the same on every start and after every restart of vgpud.
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "net/net.h"

#define MAC_SPACE (UINT32_C(1) << 24)

int net_mac_derive(const char *id, NetMacTakenFunc taken, void *userdata,
                   char ret[static NET_MAC_STRLEN])
{
        if (!id || !id[0])
                return -EINVAL;
        unsigned char digest[EVP_MAX_MD_SIZE];
        unsigned int size = 0;
        if (!EVP_Digest(id, strlen(id), digest, &size, EVP_sha256(), NULL) || size < 3)
                return -ENOMEM; /* OpenSSL fails only for want of memory here */
        uint32_t v = (uint32_t)digest[0] << 16 | (uint32_t)digest[1] << 8 | digest[2];
        for (uint32_t tries = 0; tries < MAC_SPACE; tries++, v = (v + 1) % MAC_SPACE) {
                char mac[NET_MAC_STRLEN];
                snprintf(mac, sizeof mac, NET_MAC_PREFIX ":%02x:%02x:%02x", v >> 16,
                         (v >> 8) & 0xff, v & 0xff);
                if (!taken || !taken(mac, userdata)) {
                        memcpy(ret, mac, sizeof mac);
                        return 0;
                }
        }
        return -EADDRINUSE;
}

int net_tap_name(const char *id, char ret[static IFNAMSIZ])
{
        if (!id || strnlen(id, NET_TAP_ID_CHARS) < NET_TAP_ID_CHARS)
                return -EINVAL;
        snprintf(ret, IFNAMSIZ, NET_TAP_PREFIX "%.*s", NET_TAP_ID_CHARS, id);
        return 0;
}
