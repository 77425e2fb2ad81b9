/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * protocol: the host's requests and the agent's replies (AGENT-14, AGENT-15, AGENT-16, AGENT-17), a
 * QEMU-guest-agent-like line protocol over one byte stream.
 *
 * protocol_answer() turns one request line into its reply line; a Conn holds one connection's
 * buffers: the unfinished request line (at most PROTOCOL_LINE_MAX bytes, the excess discarded
 * up to the next newline with one error reply) and the replies not yet written.
 *
 * Promises:
 *  - one reply line per non-empty request line, in order; blank lines get none;
 *  - the request's "id" is echoed as jansson re-serialises it, compact;
 *  - errors: CommandNotFound `command "<name>" not found` for an unknown command; GenericError
 *    for invalid JSON, a non-object, unknown keys, a missing or non-string "execute", a
 *    non-object "arguments", nesting deeper than JSON_DEPTH_MAX, and for a line longer than
 *    PROTOCOL_LINE_MAX: `request line exceeds 65536 bytes`;
 *  - nothing the host sends changes the agent's state: every command only reads.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "agent/gpu-state.h"
#include "base/base.h"

#define PROTOCOL_LINE_MAX 65536
#define PROTOCOL_WRITE_TIMEOUT (5 * NSEC_PER_SEC)

/*
 * The reply to one request line (n bytes without its newline), as a malloc'd line ending in
 * "\n"; *ret = NULL for a blank line. -ENOMEM.
 */
int protocol_answer(const char *line, size_t n, const GpuState *gpu, char **ret);

/* {"error": {"class": class, "desc": desc}}, the error reply's object; NULL on ENOMEM. fake-qemu
 * builds its QMP errors with the same two, since QEMU's have the agent's form. */
json_t *protocol_error_reply(const char *class, const char *desc);
json_t *protocol_error_replyf(const char *class, const char *fmt, ...) _printf_(2, 3);

/* A reply not built from a request, e.g. for an over-long line; NULL on ENOMEM. */
char *protocol_error_line(const char *class, const char *desc);

/* AGENT-17's reply to a line over PROTOCOL_LINE_MAX bytes; NULL on ENOMEM. */
char *protocol_overlong_line(void);

typedef struct Conn {
        size_t in_len;   /* bytes of an unfinished line in in[] */
        bool discarding; /* skipping an over-long line up to its newline */
        char *out;       /* replies not yet written: out[out_off..out_len) */
        size_t out_len, out_off, out_size;
        nsec_t out_since; /* when the oldest unwritten byte was queued */
        char in[PROTOCOL_LINE_MAX + 1];
} Conn;

void conn_init(Conn *c);
void conn_done(Conn *c);
/* Forgets the unfinished line and the unwritten replies. */
void conn_reset(Conn *c);
/* Forgets the unfinished line only (AGENT-19). */
void conn_drop_partial(Conn *c);

/* Where the next read goes and how much fits (never 0). */
char *conn_read_buffer(Conn *c, size_t *ret_size);
/*
 * n bytes were read into conn_read_buffer(): answers every complete line, queuing the replies
 * at time now. -ENOMEM (the connection should then be reset).
 */
int conn_received(Conn *c, size_t n, const GpuState *gpu, nsec_t now);

static inline bool conn_has_output(const Conn *c)
{
        return c->out_off < c->out_len;
}

/*
 * Writes what it can of the queued replies to fd without blocking. 0 when all was written or the
 * rest must wait for POLLOUT; a write error as -errno.
 */
int conn_flush(Conn *c, int fd);
