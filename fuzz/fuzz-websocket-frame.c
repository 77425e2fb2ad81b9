/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes RFC 6455's frame decoder (src/http/websocket.c, CONS-3, REL-5) on a stream of frames.
 *
 * The first input byte picks the decoder: bit 0 a server's (client frames, masked) or a
 * client's, bit 1 whether text frames are data, bit 2 a 64-byte frame limit instead of 64 KiB
 * (so that small inputs reach the 1009 refusal). The rest is decoded frame after frame until
 * the decoder needs more or refuses; then, as a second check, the same bytes are offered as a
 * Sec-WebSocket-Key and a Sec-WebSocket-Protocol value.
 *
 * Properties: a frame is taken only whole and never past the input; its payload lies inside it;
 * a data frame is no larger than the limit, a control frame no larger than 125 bytes; a close
 * code is 0 or one RFC 6455 lets an endpoint send; a refusal carries 1002, 1003, 1007 or 1009
 * and nothing more is decoded after it; every frame taken is canonical: its header rebuilt
 * from what the decoder reported (ws_header_build) is byte for byte the one received, and the
 * payload re-masked with its key is the bytes received. A key is accepted exactly when it is
 * 24 characters of base64 for 16 bytes, and then gives 28 characters of base64.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "http/websocket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_frame(const WsDecoder *d, const uint8_t *orig, const uint8_t *buf, size_t n,
                        const WsEvent *e)
{
        uint8_t opcode = orig[0] & 0x0F;
        bool fin = orig[0] & 0x80;
        size_t payload = e->size;
        if (e->kind == WS_EVENT_CLOSE && e->code != 0)
                payload += 2;
        if (e->data < buf || e->data + e->size > buf + n)
                abort();
        if (e->kind == WS_EVENT_DATA && e->size > d->max_frame)
                abort();
        if (e->kind != WS_EVENT_DATA && e->size > WS_CONTROL_MAX)
                abort();
        if (e->kind == WS_EVENT_CLOSE && e->code != 0 && !ws_close_code_is_valid(e->code))
                abort();
        if (e->kind == WS_EVENT_DATA && e->text && !d->allow_text)
                abort();

        uint8_t header[WS_HEADER_MAX];
        const uint8_t *mask = NULL;
        size_t h = 2 + (payload >= 126 ? (payload > 0xFFFF ? 8 : 2) : 0);
        if (d->server)
                mask = orig + h;
        size_t built = ws_header_build(header, fin, opcode, payload, mask);
        if (built + payload != n || memcmp(header, orig, built) != 0)
                abort();
        /* The payload, masked again with its key, is what came in. */
        const uint8_t *start = e->kind == WS_EVENT_CLOSE && e->code != 0 ? e->data - 2 : e->data;
        _cleanup_free_ uint8_t *again = malloc(payload ? payload : 1);
        if (!again)
                return;
        memcpy(again, start, payload);
        if (mask)
                ws_mask(again, payload, mask, 0);
        if (memcmp(again, orig + built, payload) != 0)
                abort();
}

static void check_handshake_values(const uint8_t *data, size_t size)
{
        if (memchr(data, 0, size))
                return;
        _cleanup_free_ char *s = strndup((const char *)data, size);
        if (!s)
                return;
        char accept[WS_ACCEPT_LEN + 1];
        int r = ws_accept_key(s, accept);
        if ((r == 0) != ws_key_is_valid(s))
                abort();
        if (r == 0 && strlen(accept) != WS_ACCEPT_LEN)
                abort();
        const char *bearer;
        size_t n;
        (void)ws_protocols_find(s, "vgpud.console.v1", "bearer.", &bearer, &n);
        if (bearer && (bearer < s || bearer + n > s + size || strncmp(bearer, "bearer.", 7) != 0))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        WsDecoder d = {.server = data[0] & 1,
                       .allow_text = data[0] & 2,
                       .max_frame = data[0] & 4 ? 64 : 64 * 1024};
        _cleanup_free_ uint8_t *buf = malloc(size);
        if (!buf)
                return 0;
        memcpy(buf, data + 1, size - 1);
        size_t len = size - 1, pos = 0;

        for (;;) {
                WsEvent e;
                size_t needed = 0;
                size_t n = ws_decode(&d, buf + pos, len - pos, &e, &needed);
                if (e.kind == WS_EVENT_NONE) {
                        if (n != 0 || needed <= len - pos)
                                abort();
                        break;
                }
                if (e.kind == WS_EVENT_ERROR) {
                        if (n != 0 || !d.failed ||
                            (e.code != WS_CLOSE_PROTOCOL_ERROR &&
                             e.code != WS_CLOSE_UNSUPPORTED_DATA &&
                             e.code != WS_CLOSE_INVALID_PAYLOAD && e.code != WS_CLOSE_TOO_BIG))
                                abort();
                        ws_decode(&d, buf + pos, len - pos, &e, NULL);
                        if (e.kind != WS_EVENT_ERROR)
                                abort();
                        break;
                }
                if (n == 0 || n > len - pos)
                        abort();
                check_frame(&d, data + 1 + pos, buf + pos, n, &e);
                pos += n;
        }
        check_handshake_values(data + 1, size - 1);
        return 0;
}
