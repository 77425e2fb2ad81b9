/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * RFC 6455's framing (src/http/websocket.c, CONS-3): the RFC's own examples (section 5.7, the
 * handshake of section 1.3), then hostile frames, each refused with its status code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "http/websocket.h"

#define MAX_FRAME (64 * 1024)

static WsDecoder server(void)
{
        return (WsDecoder){.server = true, .max_frame = MAX_FRAME};
}

static WsDecoder client(void)
{
        return (WsDecoder){.server = false, .allow_text = true, .max_frame = MAX_FRAME};
}

/* Decodes one whole frame given as bytes; the frame must take all of them. */
static WsEvent decode_all(WsDecoder *d, uint8_t *buf, size_t size)
{
        WsEvent e;
        size_t n = ws_decode(d, buf, size, &e, NULL);
        if (e.kind != WS_EVENT_ERROR && e.kind != WS_EVENT_NONE)
                assert_int_equal(n, size);
        return e;
}

/* CONS-3: RFC 6455 5.7, a single-frame unmasked text message (as a client reads it) */
static void test_rfc_unmasked_text(void **state)
{
        uint8_t f[] = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
        WsDecoder d = client();
        WsEvent e = decode_all(&d, f, sizeof f);
        assert_int_equal(e.kind, WS_EVENT_DATA);
        assert_true(e.text && e.last);
        assert_int_equal(e.size, 5);
        assert_memory_equal(e.data, "Hello", 5);

        uint8_t built[WS_HEADER_MAX];
        assert_int_equal(ws_header_build(built, true, WS_OPCODE_TEXT, 5, NULL), 2);
        assert_memory_equal(built, f, 2);
}

/* CONS-3: RFC 6455 5.7, a single-frame masked text message (as a server reads it) */
static void test_rfc_masked_text(void **state)
{
        uint8_t f[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
        WsDecoder d = server();
        d.allow_text = true;
        WsEvent e = decode_all(&d, f, sizeof f);
        assert_int_equal(e.kind, WS_EVENT_DATA);
        assert_memory_equal(e.data, "Hello", 5);

        /* And the other way: a client's frame, built and masked. */
        uint8_t out[WS_HEADER_MAX + 5];
        const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
        size_t n = ws_header_build(out, true, WS_OPCODE_TEXT, 5, key);
        assert_int_equal(n, 6);
        memcpy(out + n, "Hello", 5);
        ws_mask(out + n, 5, key, 0);
        uint8_t want[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
        assert_memory_equal(out, want, sizeof want);
}

/* CONS-3: RFC 6455 5.7, a fragmented unmasked text message */
static void test_rfc_fragmented(void **state)
{
        uint8_t f[] = {0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f};
        WsDecoder d = client();
        WsEvent e;
        assert_int_equal(ws_decode(&d, f, sizeof f, &e, NULL), 5);
        assert_int_equal(e.kind, WS_EVENT_DATA);
        assert_false(e.last);
        assert_memory_equal(e.data, "Hel", 3);
        assert_int_equal(ws_decode(&d, f + 5, sizeof f - 5, &e, NULL), 4);
        assert_int_equal(e.kind, WS_EVENT_DATA);
        assert_true(e.last && e.text);
        assert_memory_equal(e.data, "lo", 2);
}

/* CONS-3: RFC 6455 5.7, an unmasked ping and a masked pong, both "Hello" */
static void test_rfc_ping_pong(void **state)
{
        uint8_t ping[] = {0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
        WsDecoder c = client();
        WsEvent e = decode_all(&c, ping, sizeof ping);
        assert_int_equal(e.kind, WS_EVENT_PING);
        assert_memory_equal(e.data, "Hello", 5);

        uint8_t pong[] = {0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
        WsDecoder s = server();
        e = decode_all(&s, pong, sizeof pong);
        assert_int_equal(e.kind, WS_EVENT_PONG);
        assert_memory_equal(e.data, "Hello", 5);
}

/* CONS-3: RFC 6455 5.7, 256 bytes and 64 KiB in one unmasked binary frame each */
static void test_rfc_lengths(void **state)
{
        _cleanup_free_ uint8_t *f = calloc(1, 10 + 65536);
        assert_non_null(f);
        uint8_t h256[] = {0x82, 0x7E, 0x01, 0x00};
        memcpy(f, h256, 4);
        WsDecoder d = client();
        WsEvent e = decode_all(&d, f, 4 + 256);
        assert_int_equal(e.kind, WS_EVENT_DATA);
        assert_false(e.text);
        assert_int_equal(e.size, 256);

        uint8_t h64k[] = {0x82, 0x7F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00};
        memcpy(f, h64k, 10);
        e = decode_all(&d, f, 10 + 65536);
        assert_int_equal(e.kind, WS_EVENT_DATA);
        assert_int_equal(e.size, 65536);

        uint8_t built[WS_HEADER_MAX];
        assert_int_equal(ws_header_build(built, true, WS_OPCODE_BINARY, 256, NULL), 4);
        assert_memory_equal(built, h256, 4);
        assert_int_equal(ws_header_build(built, true, WS_OPCODE_BINARY, 65536, NULL), 10);
        assert_memory_equal(built, h64k, 10);
}

/* CONS-3: RFC 6455 1.3's handshake example, and keys that are not 16 bytes of base64 */
static void test_accept_key(void **state)
{
        char out[WS_ACCEPT_LEN + 1];
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
        assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ=", out), -EINVAL);
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZR==", out), -EINVAL); /* bits */
        assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub2*jZQ==", out), -EINVAL);
        assert_int_equal(ws_accept_key("", out), -EINVAL);
}

/* CONS-3: the subprotocol list, and a bearer token offered in it (API-12) */
static void test_protocols(void **state)
{
        const char *bearer;
        size_t n;
        assert_true(ws_protocols_find("vgpud.console.v1", "vgpud.console.v1", NULL, NULL, NULL));
        assert_true(ws_protocols_find("x, vgpud.console.v1 ,bearer.a.b.c", "vgpud.console.v1",
                                      "bearer.", &bearer, &n));
        assert_int_equal(n, strlen("bearer.a.b.c"));
        assert_memory_equal(bearer, "bearer.a.b.c", n);
        assert_false(ws_protocols_find("vgpud.console.v10, vgpud.console", "vgpud.console.v1",
                                       "bearer.", &bearer, &n));
        assert_null(bearer);
        assert_false(ws_protocols_find("", "vgpud.console.v1", NULL, NULL, NULL));
        /* "bearer." alone carries no token. */
        assert_false(ws_protocols_find("bearer.", "vgpud.console.v1", "bearer.", &bearer, &n));
        assert_null(bearer);
}

/* CONS-3: a frame arrives in pieces; the decoder says how much it still needs */
static void test_partial(void **state)
{
        uint8_t f[] = {0x82, 0x83, 1, 2, 3, 4, 'a' ^ 1, 'b' ^ 2, 'c' ^ 3};
        WsDecoder d = server();
        WsEvent e;
        size_t needed;
        for (size_t k = 0; k < sizeof f; k++) {
                assert_int_equal(ws_decode(&d, f, k, &e, &needed), 0);
                assert_int_equal(e.kind, WS_EVENT_NONE);
                assert_true(needed > k && needed <= sizeof f);
        }
        assert_int_equal(ws_decode(&d, f, sizeof f, &e, &needed), sizeof f);
        assert_memory_equal(e.data, "abc", 3);
}

typedef struct Hostile {
        const char *what;
        uint8_t bytes[16];
        size_t size;
        uint16_t code;
} Hostile;

/* CONS-3: every violation is refused with RFC 6455's status code, from the header alone */
static void test_hostile(void **state)
{
        static const Hostile cases[] = {
            {"unmasked client frame", {0x82, 0x01, 'x'}, 3, WS_CLOSE_PROTOCOL_ERROR},
            {"text frame", {0x81, 0x81, 0, 0, 0, 0, 'x'}, 7, WS_CLOSE_UNSUPPORTED_DATA},
            {"opcode 3", {0x83, 0x80, 0, 0, 0, 0}, 6, WS_CLOSE_PROTOCOL_ERROR},
            {"opcode 0xB", {0x8B, 0x80, 0, 0, 0, 0}, 6, WS_CLOSE_PROTOCOL_ERROR},
            {"RSV1", {0xC2, 0x80, 0, 0, 0, 0}, 6, WS_CLOSE_PROTOCOL_ERROR},
            {"RSV3", {0x92, 0x80, 0, 0, 0, 0}, 6, WS_CLOSE_PROTOCOL_ERROR},
            /* 64 KiB + 1: refused from the header, before the payload arrives. */
            {"frame over 64 KiB", {0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 1}, 10, WS_CLOSE_TOO_BIG},
            {"length 2^63", {0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0}, 10, WS_CLOSE_PROTOCOL_ERROR},
            {"16-bit length under 126", {0x82, 0xFE, 0, 5}, 4, WS_CLOSE_PROTOCOL_ERROR},
            {"64-bit length under 65536",
             {0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0, 200},
             10,
             WS_CLOSE_PROTOCOL_ERROR},
            {"fragmented ping", {0x09, 0x80, 0, 0, 0, 0}, 6, WS_CLOSE_PROTOCOL_ERROR},
            {"ping of 126 bytes", {0x89, 0xFE, 0, 126}, 4, WS_CLOSE_PROTOCOL_ERROR},
            {"continuation first", {0x80, 0x80, 0, 0, 0, 0}, 6, WS_CLOSE_PROTOCOL_ERROR},
            {"close of one byte", {0x88, 0x81, 0, 0, 0, 0, 3}, 7, WS_CLOSE_PROTOCOL_ERROR},
            {"close code 1005", {0x88, 0x82, 0, 0, 0, 0, 0x03, 0xED}, 8, WS_CLOSE_PROTOCOL_ERROR},
            {"close code 999", {0x88, 0x82, 0, 0, 0, 0, 0x03, 0xE7}, 8, WS_CLOSE_PROTOCOL_ERROR},
            {"close reason not UTF-8",
             {0x88, 0x83, 0, 0, 0, 0, 0x03, 0xE8, 0xC0},
             9,
             WS_CLOSE_INVALID_PAYLOAD},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint8_t buf[16];
                memcpy(buf, cases[i].bytes, cases[i].size);
                WsDecoder d = server();
                WsEvent e;
                size_t n = ws_decode(&d, buf, cases[i].size, &e, NULL);
                if (e.kind != WS_EVENT_ERROR || e.code != cases[i].code)
                        fail_msg("%s: kind %d code %u (%s)", cases[i].what, e.kind, e.code,
                                 e.why ? e.why : "-");
                assert_int_equal(n, 0);
                /* Once failed, it stays failed. */
                uint8_t ok[] = {0x82, 0x80, 0, 0, 0, 0};
                ws_decode(&d, ok, sizeof ok, &e, NULL);
                assert_int_equal(e.kind, WS_EVENT_ERROR);
        }

        /* A server frame with a mask, as a client reads it. */
        uint8_t masked[] = {0x82, 0x80, 0, 0, 0, 0};
        WsDecoder c = client();
        WsEvent e;
        ws_decode(&c, masked, sizeof masked, &e, NULL);
        assert_int_equal(e.kind, WS_EVENT_ERROR);
        assert_int_equal(e.code, WS_CLOSE_PROTOCOL_ERROR);

        /* A new message while a fragmented one is open. */
        uint8_t two[] = {0x02, 0x80, 0, 0, 0, 0, 0x82, 0x80, 0, 0, 0, 0};
        WsDecoder s = server();
        assert_int_equal(ws_decode(&s, two, sizeof two, &e, NULL), 6);
        assert_int_equal(e.kind, WS_EVENT_DATA);
        assert_int_equal(ws_decode(&s, two + 6, 6, &e, NULL), 0);
        assert_int_equal(e.kind, WS_EVENT_ERROR);
        assert_int_equal(e.code, WS_CLOSE_PROTOCOL_ERROR);
}

/* CONS-3: close frames: a code and a reason, none, or the reason cut to fit a control frame */
static void test_close(void **state)
{
        uint8_t p[WS_CONTROL_MAX];
        size_t n = ws_close_payload(p, WS_CLOSE_TOO_BIG, "frame too big");
        assert_int_equal(n, 2 + strlen("frame too big"));
        assert_int_equal(p[0] << 8 | p[1], 1009);

        char long_reason[200];
        memset(long_reason, 'r', sizeof long_reason - 1);
        long_reason[sizeof long_reason - 1] = 0;
        assert_int_equal(ws_close_payload(p, 1000, long_reason), WS_CONTROL_MAX);

        uint8_t f[] = {0x88, 0x80, 0, 0, 0, 0};
        WsDecoder d = server();
        WsEvent e = decode_all(&d, f, sizeof f);
        assert_int_equal(e.kind, WS_EVENT_CLOSE);
        assert_int_equal(e.code, 0);

        uint8_t g[] = {0x88, 0x84, 0, 0, 0, 0, 0x0F, 0xA0, 'o', 'k'};
        d = server();
        e = decode_all(&d, g, sizeof g);
        assert_int_equal(e.kind, WS_EVENT_CLOSE);
        assert_int_equal(e.code, 4000);
        assert_int_equal(e.size, 2);
        assert_memory_equal(e.data, "ok", 2);
        assert_true(ws_close_code_is_valid(1000) && ws_close_code_is_valid(4999));
        assert_false(ws_close_code_is_valid(1006) || ws_close_code_is_valid(5000));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_rfc_unmasked_text), cmocka_unit_test(test_rfc_masked_text),
            cmocka_unit_test(test_rfc_fragmented),    cmocka_unit_test(test_rfc_ping_pong),
            cmocka_unit_test(test_rfc_lengths),       cmocka_unit_test(test_accept_key),
            cmocka_unit_test(test_protocols),         cmocka_unit_test(test_partial),
            cmocka_unit_test(test_hostile),           cmocka_unit_test(test_close),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
