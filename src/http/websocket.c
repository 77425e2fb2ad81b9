/* SPDX-License-Identifier: GPL-2.0-or-later */
/* RFC 6455's framing (CONS-3): see websocket.h. */
#include "http/websocket.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <string.h>

#include "base/base.h"

/* RFC 6455 1.3: appended to the client's key before hashing. */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

bool ws_close_code_is_valid(uint16_t code)
{
        /* 1004..1006 and 1015 are never sent; 1012..1014 are registered since RFC 6455. */
        return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
               (code >= 3000 && code <= 4999);
}

static size_t fail(WsDecoder *d, WsEvent *ret, uint16_t code, const char *why)
{
        d->failed = true;
        *ret = (WsEvent){.kind = WS_EVENT_ERROR, .code = code, .why = why};
        return 0;
}

size_t ws_decode(WsDecoder *d, uint8_t *buf, size_t size, WsEvent *ret, size_t *ret_needed)
{
        *ret = (WsEvent){.kind = WS_EVENT_NONE};
        if (d->failed)
                return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "decoder already failed");
        if (ret_needed)
                *ret_needed = 2;
        if (size < 2)
                return 0;

        bool fin = buf[0] & 0x80, masked = buf[1] & 0x80;
        uint8_t opcode = buf[0] & 0x0F;
        if (buf[0] & 0x70)
                return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "reserved bits set");
        bool control = opcode & 0x8;
        if (opcode != WS_OPCODE_CONTINUATION && opcode != WS_OPCODE_TEXT &&
            opcode != WS_OPCODE_BINARY && opcode != WS_OPCODE_CLOSE && opcode != WS_OPCODE_PING &&
            opcode != WS_OPCODE_PONG)
                return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "unknown opcode");
        if (masked != d->server)
                return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR,
                            d->server ? "client frame not masked" : "server frame masked");

        uint64_t length = buf[1] & 0x7F;
        size_t header = 2;
        if (length == 126) {
                if (size < 4) {
                        if (ret_needed)
                                *ret_needed = 4;
                        return 0;
                }
                length = (uint64_t)buf[2] << 8 | buf[3];
                header = 4;
                if (length < 126)
                        return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "length not minimal");
        } else if (length == 127) {
                if (size < 10) {
                        if (ret_needed)
                                *ret_needed = 10;
                        return 0;
                }
                length = 0;
                for (size_t k = 0; k < 8; k++)
                        length = length << 8 | buf[2 + k];
                header = 10;
                if (length >> 63)
                        return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "length has its top bit set");
                if (length <= 0xFFFF)
                        return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "length not minimal");
        }
        if (control && (!fin || length > WS_CONTROL_MAX))
                return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR,
                            !fin ? "fragmented control frame" : "control frame too long");
        if (!control) {
                if (opcode == WS_OPCODE_CONTINUATION && !d->in_message)
                        return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "continuation of nothing");
                if (opcode != WS_OPCODE_CONTINUATION && d->in_message)
                        return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR,
                                    "new message inside a fragmented one");
                if (opcode == WS_OPCODE_TEXT && !d->allow_text)
                        return fail(d, ret, WS_CLOSE_UNSUPPORTED_DATA, "text frames not accepted");
                if (length > d->max_frame)
                        return fail(d, ret, WS_CLOSE_TOO_BIG, "frame too big");
        }

        const uint8_t *mask = NULL;
        if (masked) {
                mask = buf + header;
                header += 4;
        }
        if (size < header || size - header < length) {
                if (ret_needed)
                        *ret_needed = header + (size_t)length;
                return 0;
        }

        uint8_t *payload = buf + header;
        if (mask)
                ws_mask(payload, (size_t)length, mask, 0);
        size_t total = header + (size_t)length;

        switch (opcode) {
        case WS_OPCODE_CLOSE: {
                uint16_t code = 0;
                if (length == 1)
                        return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR, "close payload of one byte");
                if (length >= 2) {
                        code = (uint16_t)(payload[0] << 8 | payload[1]);
                        if (!ws_close_code_is_valid(code))
                                return fail(d, ret, WS_CLOSE_PROTOCOL_ERROR,
                                            "close code not allowed");
                        if (!utf8_is_valid((const char *)payload + 2, (size_t)length - 2))
                                return fail(d, ret, WS_CLOSE_INVALID_PAYLOAD,
                                            "close reason not UTF-8");
                }
                *ret = (WsEvent){.kind = WS_EVENT_CLOSE,
                                 .data = length >= 2 ? payload + 2 : payload,
                                 .size = length >= 2 ? (size_t)length - 2 : 0,
                                 .code = code};
                return total;
        }
        case WS_OPCODE_PING:
        case WS_OPCODE_PONG:
                *ret = (WsEvent){.kind = opcode == WS_OPCODE_PING ? WS_EVENT_PING : WS_EVENT_PONG,
                                 .data = payload,
                                 .size = (size_t)length};
                return total;
        default:
                if (opcode != WS_OPCODE_CONTINUATION)
                        d->message_text = opcode == WS_OPCODE_TEXT;
                d->in_message = !fin;
                *ret = (WsEvent){.kind = WS_EVENT_DATA,
                                 .data = payload,
                                 .size = (size_t)length,
                                 .text = d->message_text,
                                 .last = fin};
                return total;
        }
}

size_t ws_header_build(uint8_t out[static WS_HEADER_MAX], bool fin, uint8_t opcode, uint64_t size,
                       const uint8_t *mask)
{
        size_t n = 2;
        out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0F));
        uint8_t m = mask ? 0x80 : 0;
        if (size < 126)
                out[1] = (uint8_t)(m | size);
        else if (size <= 0xFFFF) {
                out[1] = m | 126;
                out[2] = (uint8_t)(size >> 8);
                out[3] = (uint8_t)size;
                n = 4;
        } else {
                out[1] = m | 127;
                for (size_t k = 0; k < 8; k++)
                        out[2 + k] = (uint8_t)(size >> (56 - 8 * k));
                n = 10;
        }
        if (mask) {
                memcpy(out + n, mask, 4);
                n += 4;
        }
        return n;
}

void ws_mask(uint8_t *data, size_t size, const uint8_t mask[static 4], uint64_t offset)
{
        for (size_t i = 0; i < size; i++)
                data[i] ^= mask[(offset + i) & 3];
}

size_t ws_close_payload(uint8_t out[static WS_CONTROL_MAX], uint16_t code, const char *reason)
{
        out[0] = (uint8_t)(code >> 8);
        out[1] = (uint8_t)code;
        size_t n = reason ? strlen(reason) : 0;
        if (n > WS_CLOSE_REASON_MAX)
                n = WS_CLOSE_REASON_MAX;
        if (n > 0)
                memcpy(out + 2, reason, n);
        return 2 + n;
}

bool ws_key_is_valid(const char *key)
{
        if (!key || strlen(key) != WS_KEY_LEN || !streq(key + 22, "=="))
                return false;
        static const char alphabet[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (size_t i = 0; i < 22; i++)
                if (!key[i] || !strchr(alphabet, key[i]))
                        return false;
        /* 16 bytes leave 4 bits of the last character unused: they must be zero. */
        size_t last = (size_t)(strchr(alphabet, key[21]) - alphabet);
        return (last & 0x0F) == 0;
}

int ws_accept_key(const char *key, char out[static WS_ACCEPT_LEN + 1])
{
        if (!ws_key_is_valid(key))
                return -EINVAL;
        char joined[WS_KEY_LEN + sizeof WS_GUID];
        memcpy(joined, key, WS_KEY_LEN);
        memcpy(joined + WS_KEY_LEN, WS_GUID, sizeof WS_GUID);
        uint8_t digest[SHA_DIGEST_LENGTH];
        if (!SHA1((const unsigned char *)joined, WS_KEY_LEN + sizeof WS_GUID - 1, digest))
                return -EIO;
        if (EVP_EncodeBlock((unsigned char *)out, digest, sizeof digest) != WS_ACCEPT_LEN)
                return -EIO;
        return 0;
}

static bool is_space(char c)
{
        return c == ' ' || c == '\t';
}

bool ws_protocols_find(const char *value, const char *subprotocol, const char *bearer_prefix,
                       const char **ret_bearer, size_t *ret_bearer_len)
{
        bool found = false;
        if (ret_bearer) {
                *ret_bearer = NULL;
                *ret_bearer_len = 0;
        }
        for (const char *p = value; p && *p;) {
                while (is_space(*p) || *p == ',')
                        p++;
                size_t n = strcspn(p, ", \t");
                if (n == 0)
                        break;
                if (n == strlen(subprotocol) && strncmp(p, subprotocol, n) == 0)
                        found = true;
                else if (bearer_prefix && ret_bearer && !*ret_bearer && n > strlen(bearer_prefix) &&
                         strncmp(p, bearer_prefix, strlen(bearer_prefix)) == 0) {
                        *ret_bearer = p;
                        *ret_bearer_len = n;
                }
                p += n;
        }
        return found;
}
