/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Requests to vgpu-agent (REL-5, AGENT-14, AGENT-15, AGENT-16, AGENT-17). The first byte picks the
 * GPU state and the size of the reads; the rest is the byte stream from the host, fed to one
 * connection's buffers in reads of that size. Invariants beyond "no crash": every reply is one line
 * of a JSON object with exactly "return" or "error" (and "id" only beside them), errors are of the
 * two classes, and the stream gets one reply per non-blank line, plus one per line over the limit,
 * in order, whatever the read size.
 */
#include <jansson.h>

#include "agent/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_reply(const char *line, size_t n)
{
        json_error_t err;
        json_t *v = json_loadb(line, n, JSON_REJECT_DUPLICATES, &err);
        if (!json_is_object(v))
                abort();
        json_t *ret = json_object_get(v, "return"), *error = json_object_get(v, "error");
        if (!ret == !error)
                abort();
        size_t keys = json_object_size(v);
        if (keys != 1 + (json_object_get(v, "id") != NULL))
                abort();
        if (error) {
                const char *class = NULL, *desc = NULL;
                if (json_unpack(error, "{s:s,s:s!}", "class", &class, "desc", &desc) < 0)
                        abort();
                if (!streq(class, "GenericError") && !streq(class, "CommandNotFound"))
                        abort();
        }
        json_decref(v);
}

/* What the reply count must be: per line (split at '\n'), blank ones excepted, plus one for
 * each line that exceeds the limit (its error) instead of its own reply. */
static size_t expected_replies(const char *s, size_t n)
{
        size_t count = 0, start = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] != '\n')
                        continue;
                size_t len = i - start;
                bool blank = true;
                for (size_t j = start; j < i && blank; j++)
                        blank = s[j] == ' ' || s[j] == '\t' || s[j] == '\r';
                if (len > PROTOCOL_LINE_MAX || !blank)
                        count++;
                start = i + 1;
        }
        if (n - start > PROTOCOL_LINE_MAX)
                count++; /* answered before its newline comes */
        return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        GpuState g = GPU_STATE_INIT;
        if (data[0] & 1)
                g.state = GPU_INIT_OK;
        else if (data[0] & 2) {
                g.state = GPU_INIT_FAILED;
                g.failure_message = strdup("NVRM: RmInitAdapter failed!");
        }
        size_t chunk = 1 + (data[0] >> 2) * 97;
        const char *s = (const char *)data + 1;
        size_t n = size - 1;

        /* one line, answered directly */
        char *reply = NULL;
        if (n <= PROTOCOL_LINE_MAX && !memchr(s, '\n', n) &&
            protocol_answer(s, n, &g, &reply) == 0 && reply) {
                size_t len = strlen(reply);
                if (len == 0 || reply[len - 1] != '\n' || memchr(reply, '\n', len - 1))
                        abort();
                check_reply(reply, len - 1);
                free(reply);
        }

        /* the stream, through a connection */
        Conn *c = malloc(sizeof *c);
        if (!c) {
                gpu_state_done(&g);
                return 0;
        }
        conn_init(c);
        bool oom = false;
        for (size_t off = 0; off < n && !oom;) {
                size_t room;
                char *buf = conn_read_buffer(c, &room);
                if (room == 0)
                        abort();
                size_t k = n - off < chunk ? n - off : chunk;
                if (k > room)
                        k = room;
                memcpy(buf, s + off, k);
                off += k;
                oom = conn_received(c, k, &g, 0) < 0;
        }
        if (!oom) {
                size_t replies = 0, start = c->out_off;
                for (size_t i = c->out_off; i < c->out_len; i++)
                        if (c->out[i] == '\n') {
                                check_reply(c->out + start, i - start);
                                replies++;
                                start = i + 1;
                        }
                if (start != c->out_len || replies != expected_replies(s, n))
                        abort();
        }
        conn_done(c);
        free(c);
        gpu_state_done(&g);
        return 0;
}
