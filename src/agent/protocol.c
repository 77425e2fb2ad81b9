/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "agent/protocol.h"

#include <jansson.h>

#include "base/json-util.h"
#include "config.h"

_Static_assert(PROTOCOL_LINE_MAX == 65536, "AGENT-17's text names the limit");

static const char *const agent_commands[] = {"guest-ping", "guest-info", "guest-gpu-init-status"};

static bool line_is_blank(const char *line, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
                        return false;
        return true;
}

json_t *protocol_error_reply(const char *class, const char *desc)
{
        return json_pack("{s:{s:s,s:s}}", "error", "class", class, "desc", desc);
}

json_t *protocol_error_replyf(const char *class, const char *fmt, ...)
{
        _cleanup_free_ char *desc = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&desc, fmt, ap);
        va_end(ap);
        if (r < 0) {
                desc = NULL;
                return NULL;
        }
        return protocol_error_reply(class, desc);
}

/* Text from the request shown back in a desc: printable ASCII only, so that it is valid UTF-8
 * for jansson whatever the host sent, and bounded. */
static char *shown(const char *s)
{
        return escape_text(s, strlen(s), 128, ESCAPE_ECHO);
}

static json_t *answer_command(const char *command, const GpuState *gpu)
{
        if (streq(command, "guest-ping"))
                return json_pack("{s:{}}", "return");

        if (streq(command, "guest-info")) {
                json_t *list = json_array();
                if (!list)
                        return NULL;
                for (size_t i = 0; i < ELEMENTSOF(agent_commands); i++)
                        if (json_array_append_new(list,
                                                  json_pack("{s:s,s:b}", "name", agent_commands[i],
                                                            "enabled", 1)) < 0) {
                                json_decref(list);
                                return NULL;
                        }
                return json_pack("{s:{s:s,s:o}}", "return", "version", VGPUD_VERSION,
                                 "supported_commands", list);
        }

        if (streq(command, "guest-gpu-init-status"))
                return json_pack("{s:{s:s,s:s}}", "return", "state",
                                 gpu_init_state_to_string(gpu->state), "failure_message",
                                 gpu_state_failure_message(gpu));

        _cleanup_free_ char *name = shown(command);
        if (!name)
                return NULL;
        return protocol_error_replyf("CommandNotFound", "command \"%s\" not found", name);
}

/* AGENT-14: the keys a request may have; the format is ours, so anything else is refused. */
static json_t *check_request(json_t *req)
{
        static const char *const keys[] = {"execute", "arguments", "id", NULL};
        const char *key = json_first_unknown_key(req, keys);
        if (key) {
                _cleanup_free_ char *k = shown(key);
                if (!k)
                        return NULL;
                return protocol_error_replyf("GenericError", "unknown key \"%s\"", k);
        }

        json_t *execute = json_object_get(req, "execute");
        if (!execute)
                return protocol_error_reply("GenericError", "missing \"execute\"");
        if (!json_is_string(execute))
                return protocol_error_reply("GenericError", "\"execute\" must be a string");
        json_t *args = json_object_get(req, "arguments");
        if (args && !json_is_object(args))
                return protocol_error_reply("GenericError", "\"arguments\" must be an object");
        return NULL;
}

static int reply_line(json_t *reply, char **ret)
{
        if (!reply)
                return -ENOMEM;
        _cleanup_free_ char *text = json_dumps(reply, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        char *line = NULL;
        if (strprintf(&line, "%s\n", text) < 0)
                return -ENOMEM;
        *ret = line;
        return 0;
}

char *protocol_error_line(const char *class, const char *desc)
{
        json_t *reply = protocol_error_reply(class, desc);
        char *line = NULL;
        int r = reply_line(reply, &line);
        json_decref(reply);
        return r < 0 ? NULL : line;
}

char *protocol_overlong_line(void)
{
        return protocol_error_line("GenericError", "request line exceeds 65536 bytes");
}

int protocol_answer(const char *line, size_t n, const GpuState *gpu, char **ret)
{
        if (line_is_blank(line, n)) {
                *ret = NULL;
                return 0;
        }

        json_t *reply = NULL;
        json_t *req = NULL;
        if (json_text_too_deep(line, n, JSON_DEPTH_MAX))
                reply = protocol_error_replyf(
                    "GenericError", "invalid JSON: nesting exceeds %u levels", JSON_DEPTH_MAX);
        else {
                json_error_t err;
                req = json_loadb(line, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
                if (!req)
                        reply = protocol_error_replyf("GenericError", "invalid JSON: %s", err.text);
                else if (!json_is_object(req))
                        reply =
                            protocol_error_reply("GenericError", "request is not a JSON object");
                else {
                        reply = check_request(req);
                        if (!reply)
                                reply = answer_command(
                                    json_string_value(json_object_get(req, "execute")), gpu);
                        json_t *id = json_object_get(req, "id");
                        if (reply && id && json_object_set(reply, "id", id) < 0)
                                reply = (json_decref(reply), NULL);
                }
        }

        int r = reply_line(reply, ret);
        json_decref(reply);
        json_decref(req);
        return r;
}

/* ---- one connection's buffers -------------------------------------------------------------- */

void conn_init(Conn *c)
{
        c->in_len = 0;
        c->discarding = false;
        c->out = NULL;
        c->out_len = c->out_off = c->out_size = 0;
        c->out_since = 0;
}

void conn_done(Conn *c)
{
        c->out = (free(c->out), NULL);
        conn_init(c);
}

void conn_reset(Conn *c)
{
        conn_done(c);
}

void conn_drop_partial(Conn *c)
{
        c->in_len = 0;
        c->discarding = false;
}

char *conn_read_buffer(Conn *c, size_t *ret_size)
{
        *ret_size = sizeof c->in - c->in_len;
        return c->in + c->in_len;
}

static int conn_queue(Conn *c, const char *text, nsec_t now)
{
        size_t n = strlen(text);

        if (c->out_off == c->out_len) {
                c->out_off = c->out_len = 0;
                c->out_since = now;
        }
        if (c->out_len + n > c->out_size) {
                size_t size = c->out_size ? c->out_size : 4096;
                while (size < c->out_len + n)
                        size *= 2;
                char *p = realloc(c->out, size);
                if (!p)
                        return -ENOMEM;
                c->out = p;
                c->out_size = size;
        }
        memcpy(c->out + c->out_len, text, n);
        c->out_len += n;
        return 0;
}

static int conn_answer(Conn *c, const char *line, size_t n, const GpuState *gpu, nsec_t now)
{
        _cleanup_free_ char *reply = NULL;
        int r = protocol_answer(line, n, gpu, &reply);
        if (r < 0)
                return r;
        return reply ? conn_queue(c, reply, now) : 0;
}

int conn_received(Conn *c, size_t n, const GpuState *gpu, nsec_t now)
{
        size_t total = c->in_len + n, start = 0;

        for (;;) {
                char *nl = memchr(c->in + start, '\n', total - start);
                if (!nl)
                        break;
                size_t end = (size_t)(nl - c->in);
                if (c->discarding)
                        c->discarding = false;
                else {
                        int r = conn_answer(c, c->in + start, end - start, gpu, now);
                        if (r < 0)
                                return r;
                }
                start = end + 1;
        }

        size_t rest = total - start;
        if (c->discarding) {
                c->in_len = 0;
                return 0;
        }
        if (rest > PROTOCOL_LINE_MAX) {
                /* Answered now, not at its newline: the host learns at once, and the agent never
                 * holds more than one line's worth of a request. */
                c->discarding = true;
                c->in_len = 0;
                _cleanup_free_ char *reply = protocol_overlong_line();
                if (!reply)
                        return -ENOMEM;
                return conn_queue(c, reply, now);
        }
        memmove(c->in, c->in + start, rest);
        c->in_len = rest;
        return 0;
}

int conn_flush(Conn *c, int fd)
{
        while (conn_has_output(c)) {
                ssize_t k = write(fd, c->out + c->out_off, c->out_len - c->out_off);
                if (k > 0) {
                        c->out_off += (size_t)k;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return 0;
                return k < 0 ? negative_errno() : -EIO;
        }
        c->out_off = c->out_len = 0;
        return 0;
}
