/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * websocket: RFC 6455's framing, written once for both ends of the console (CONS-3): the
 * daemon's side (src/http/http-websocket.c) and vgpuctl's (src/ctl). Pure functions: bytes in,
 * frames or bytes out, no I/O and no allocation; a small library of its own, linking base/ and
 * libcrypto only, so that vgpuctl takes it without the HTTP server.
 *
 * Promises: a decoder refuses every frame RFC 6455 does not allow (section 5), with the status
 * code a close frame must carry (section 7.4.1): 1002 for a protocol error (reserved bits, an
 * unknown opcode, a server-side frame without a mask or a client-side one with one, a control
 * frame that is fragmented or longer than 125 bytes, a length not in its shortest form or with
 * its top bit set, a continuation with nothing to continue, a new message inside a fragmented
 * one, a close payload of one byte or with a code no endpoint may send), 1003 for a text frame
 * when only binary ones are taken, 1007 for a close reason that is not UTF-8, 1009 for a frame
 * whose payload is larger than the decoder's limit (decided from the header, before any of
 * the payload is read). Nothing is read past the frame's end.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WS_OPCODE_CONTINUATION 0x0
#define WS_OPCODE_TEXT 0x1
#define WS_OPCODE_BINARY 0x2
#define WS_OPCODE_CLOSE 0x8
#define WS_OPCODE_PING 0x9
#define WS_OPCODE_PONG 0xA

/* Status codes of close frames (RFC 6455 7.4.1). */
#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001
#define WS_CLOSE_PROTOCOL_ERROR 1002
#define WS_CLOSE_UNSUPPORTED_DATA 1003
#define WS_CLOSE_INVALID_PAYLOAD 1007
#define WS_CLOSE_POLICY 1008
#define WS_CLOSE_TOO_BIG 1009
#define WS_CLOSE_INTERNAL 1011

#define WS_HEADER_MAX 14        /* 2 + 8 (length) + 4 (mask) */
#define WS_CONTROL_MAX 125      /* a control frame's payload, at most */
#define WS_KEY_LEN 24           /* Sec-WebSocket-Key: base64 of 16 bytes */
#define WS_ACCEPT_LEN 28        /* Sec-WebSocket-Accept: base64 of 20 bytes */
#define WS_CLOSE_REASON_MAX 123 /* a close frame's reason, after its 2-byte code */

typedef enum WsEventKind {
        WS_EVENT_NONE, /* more bytes are needed for a whole frame */
        WS_EVENT_DATA, /* a data frame (or a piece of a fragmented message) */
        WS_EVENT_PING, /* answer with a pong carrying the same payload */
        WS_EVENT_PONG,
        WS_EVENT_CLOSE, /* code 0 when the frame had none */
        WS_EVENT_ERROR, /* a violation: close with code, then drop the connection */
} WsEventKind;

typedef struct WsEvent {
        WsEventKind kind;
        const uint8_t *data; /* the payload, unmasked, inside the decoded buffer */
        size_t size;
        bool text;       /* DATA: the message is a text one (taken only with allow_text) */
        bool last;       /* DATA: the message's last frame */
        uint16_t code;   /* CLOSE: the peer's status code; ERROR: the code to close with */
        const char *why; /* ERROR: what was wrong, for a log line */
} WsEvent;

typedef struct WsDecoder {
        bool server;      /* frames from a client: they must be masked, else must not be */
        bool allow_text;  /* text frames are data too; else an error 1003 */
        size_t max_frame; /* the largest payload taken (1009 past it) */
        bool in_message;  /* a fragmented message is open */
        bool message_text;
        bool failed; /* after an error, nothing more is decoded */
} WsDecoder;

/*
 * Decodes at most one frame from buf[0..size). Returns the bytes the frame took (0 with
 * WS_EVENT_NONE when the frame is not all there yet; then *ret_needed, when given, says how many
 * bytes in all it needs, as far as the header tells), or 0 with WS_EVENT_ERROR. The payload is
 * unmasked in place, so buf must be writable; the event points into it.
 */
size_t ws_decode(WsDecoder *d, uint8_t *buf, size_t size, WsEvent *ret, size_t *ret_needed);

/*
 * Writes a frame's header for a payload of size bytes into out (WS_HEADER_MAX bytes); mask
 * given (a client's frame) sets the mask bit and appends the key, and the caller masks the
 * payload with ws_mask(). Returns the header's length.
 */
size_t ws_header_build(uint8_t out[static WS_HEADER_MAX], bool fin, uint8_t opcode, uint64_t size,
                       const uint8_t *mask);

/* XORs data with the key, as the frame's payload from offset on (RFC 6455 5.3). */
void ws_mask(uint8_t *data, size_t size, const uint8_t mask[static 4], uint64_t offset);

/*
 * A close frame's payload: code and reason (cut to WS_CLOSE_REASON_MAX bytes). Returns its
 * length (at most WS_CONTROL_MAX).
 */
size_t ws_close_payload(uint8_t out[static WS_CONTROL_MAX], uint16_t code, const char *reason);

/* Whether a close frame may carry code (RFC 6455 7.4.1, 7.4.2). */
bool ws_close_code_is_valid(uint16_t code);

/* Whether key is a Sec-WebSocket-Key: base64 of exactly 16 bytes (RFC 6455 4.1). */
bool ws_key_is_valid(const char *key);

/*
 * Sec-WebSocket-Accept for key (RFC 6455 4.2.2): base64(SHA-1(key + the GUID)), written with its
 * NUL. -EINVAL for a key that is not valid, -EIO when libcrypto fails.
 */
int ws_accept_key(const char *key, char out[static WS_ACCEPT_LEN + 1]);

/*
 * Finds subprotocol in a Sec-WebSocket-Protocol value (tokens separated by commas and white
 * space, RFC 6455 4.1): true when it is there. With bearer_prefix, *ret_bearer (when given) is
 * set to the start of the first token that begins with it, and *ret_bearer_len to its length;
 * NULL when none does.
 */
bool ws_protocols_find(const char *value, const char *subprotocol, const char *bearer_prefix,
                       const char **ret_bearer, size_t *ret_bearer_len);
