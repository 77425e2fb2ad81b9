/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The request/reply halves of fake-qemu, kept free of I/O: QMP as QEMU 7.2 speaks it, the guest
 * agent protocol through vgpu-agent's own code, the per-instance control flags, and the one
 * lookup into vgpu-sim's state.
 */
#include "agent/protocol.h"
#include "fake-qemu.h"

#include <inttypes.h>

/* The agent channel's limits are the agent's own. */
_Static_assert(FQ_LINE_MAX == PROTOCOL_LINE_MAX, "AGENT-17's line limit");
_Static_assert(FQ_AGENT_WRITE_TIMEOUT == PROTOCOL_WRITE_TIMEOUT, "AGENT-17's write timeout");

/* ---- helpers ------------------------------------------------------------------------------- */

int fq_sanitize(const char *s, size_t max, char **ret)
{
        size_t n = strnlen(s, max + 1);
        bool cut = n > max;
        if (cut)
                n = max;
        char *out = malloc(n + (cut ? 3 : 0) + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                out[i] = s[i] >= ' ' && s[i] < 0x7f ? s[i] : '?';
        if (cut)
                memcpy(out + n, "...", 3);
        out[n + (cut ? 3 : 0)] = 0;
        *ret = out;
        return 0;
}

/* Copies the request's "id" into the reply, as both QEMU and vgpu-agent do. */
static json_t *with_id(json_t *reply, const json_t *request)
{
        json_t *id = request ? json_object_get(request, "id") : NULL;
        if (reply && id && json_object_set(reply, "id", (json_t *)id) < 0) {
                json_decref(reply);
                return NULL;
        }
        return reply;
}

/* Loads one request line: JSON_DECODE_ANY so that "42" is told apart from "{". */
static json_t *load_line(const char *line, size_t size, json_error_t *err)
{
        return json_loadb(line, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, err);
}

bool fq_qmp_line_is_blank(const char *line, size_t size)
{
        for (size_t i = 0; i < size; i++)
                if (!strchr(" \t\r", line[i]))
                        return false;
        return true;
}

/* ---- flags --------------------------------------------------------------------------------- */

int fq_flags_parse(const char *text, FqFlags *ret, char **error)
{
        FqFlags f = {0};
        size_t lineno = 0;

        for (const char *p = text; *p;) {
                const char *nl = strchr(p, '\n');
                size_t len = nl ? (size_t)(nl - p) : strlen(p);
                _cleanup_free_ char *line = strndup(p, len);
                if (!line)
                        return -ENOMEM;
                p += len + (nl ? 1 : 0);
                lineno++;

                const char *ms;
                if (line[0] == 0)
                        continue;
                if (streq(line, "hold-devices"))
                        f.hold_devices = true;
                else if (streq(line, "ignore-sigterm"))
                        f.ignore_sigterm = true;
                else if (streq(line, "hang-qmp"))
                        f.hang_qmp = true;
                else if (streq(line, "silent-agent"))
                        f.silent_agent = true;
                else if ((ms = startswith(line, "exit-early:"))) {
                        int r = parse_uint64_range(ms, 0, FQ_EXIT_EARLY_MS_MAX, &f.exit_early_ms);
                        if (r < 0)
                                return error_set(error, r,
                                                 "line %zu: invalid exit-early delay \"%s\"",
                                                 lineno, ms);
                        f.exit_early = true;
                } else {
                        _cleanup_free_ char *shown = NULL;
                        int r = fq_sanitize(line, 64, &shown);
                        if (r < 0)
                                return r;
                        return error_set(error, -EINVAL, "line %zu: unknown flag \"%s\"", lineno,
                                         shown);
                }
        }

        *ret = f;
        return 0;
}

int fq_flags_format(const FqFlags *f, char **ret)
{
        _cleanup_free_ char *s = NULL;
        int r = 0;

        if (f->ignore_sigterm)
                r = strextend(&s, "%s%s", s ? "," : "", "ignore-sigterm");
        if (r >= 0 && f->hang_qmp)
                r = strextend(&s, "%s%s", s ? "," : "", "hang-qmp");
        if (r >= 0 && f->exit_early)
                r = strextend(&s, "%sexit-early:%" PRIu64, s ? "," : "", f->exit_early_ms);
        if (r >= 0 && f->silent_agent)
                r = strextend(&s, "%s%s", s ? "," : "", "silent-agent");
        if (r >= 0 && f->hold_devices)
                r = strextend(&s, "%s%s", s ? "," : "", "hold-devices");
        if (r >= 0 && !s)
                r = strextend(&s, "none");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

/* ---- simulator state ----------------------------------------------------------------------- */

/*
 * vgpu-sim's state.json (sim/README.md, version 1) lists every VF under gpus[].vfs[] with its
 * "address" and a boolean "wedged" (set by `wedge <vf>`; for an mdev, on its parent VF). Only
 * that path is read, and strictly; the rest of the document belongs to vgpu-sim, whose own
 * readers check it. A VF the model does not list is not wedged.
 */
int fq_state_vf_is_wedged(const json_t *state, const char *vf, bool *ret, char **error)
{
        json_t *version = json_object_get(state, "version");
        json_t *gpus = json_object_get(state, "gpus");

        if (!json_is_object(state))
                return error_set(error, -EINVAL, "not a JSON object");
        if (!json_is_integer(version) || json_integer_value(version) != 1)
                return error_set(error, -EINVAL, "expected \"version\": 1");
        if (!json_is_array(gpus))
                return error_set(error, -EINVAL, "expected a \"gpus\" array");

        for (size_t i = 0; i < json_array_size(gpus); i++) {
                json_t *vfs = json_object_get(json_array_get(gpus, i), "vfs");
                if (!json_is_array(vfs))
                        return error_set(error, -EINVAL, "gpus[%zu]: expected a \"vfs\" array", i);
                for (size_t j = 0; j < json_array_size(vfs); j++) {
                        json_t *v = json_array_get(vfs, j);
                        json_t *address = json_object_get(v, "address");
                        json_t *wedged = json_object_get(v, "wedged");
                        if (!json_is_string(address) || !json_is_boolean(wedged))
                                return error_set(error, -EINVAL,
                                                 "gpus[%zu].vfs[%zu]: expected a string "
                                                 "\"address\" and a boolean \"wedged\"",
                                                 i, j);
                        if (streq(json_string_value(address), vf)) {
                                *ret = json_is_true(wedged);
                                return 0;
                        }
                }
        }
        *ret = false;
        return 0;
}

int fq_wedged_message(const char *vf, char **ret)
{
        return strprintf(ret, "NVRM: GPU %s: RmInitAdapter failed! (0x22:0x65:884)", vf);
}

/* ---- QMP ----------------------------------------------------------------------------------- */

json_t *fq_qmp_greeting(void)
{
        return json_pack("{s:{s:{s:{s:i,s:i,s:i},s:s},s:[]}}", "QMP", "version", "qemu", "micro", 0,
                         "minor", 2, "major", 7, "package", "fake-qemu", "capabilities");
}

json_t *fq_qmp_overlong_reply(void)
{
        return protocol_error_reply("GenericError",
                                    "JSON parse error, request exceeds 65536 bytes");
}

json_t *fq_qmp_event(const char *name, json_t *data)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        json_t *e = json_pack("{s:{s:I,s:I},s:s}", "timestamp", "seconds", (json_int_t)ts.tv_sec,
                              "microseconds", (json_int_t)(ts.tv_nsec / 1000), "event", name);
        if (e && data && json_object_set_new(e, "data", data) < 0) {
                json_decref(e);
                return NULL;
        }
        if (!e)
                json_decref(data);
        return e;
}

/* Checks the framing of one QMP request the way qmp_dispatch_check_obj() does. */
static json_t *qmp_check_request(const json_t *req)
{
        for (void *it = json_object_iter((json_t *)req); it;
             it = json_object_iter_next((json_t *)req, it)) {
                const char *key = json_object_iter_key(it);
                const json_t *v = json_object_iter_value(it);
                if (streq(key, "execute")) {
                        if (!json_is_string(v))
                                return protocol_error_reply(
                                    "GenericError", "QMP input member 'execute' must be a string");
                } else if (streq(key, "arguments")) {
                        if (!json_is_object(v))
                                return protocol_error_reply(
                                    "GenericError",
                                    "QMP input member 'arguments' must be an object");
                } else if (!streq(key, "id"))
                        return protocol_error_replyf("GenericError",
                                                     "QMP input member '%s' is unexpected", key);
        }
        if (!json_object_get(req, "execute"))
                return protocol_error_reply("GenericError", "QMP input lacks member 'execute'");
        return NULL;
}

/* The commands fake-qemu implements take no arguments, except qmp_capabilities' "enable". */
static json_t *qmp_check_arguments(const char *command, const json_t *args)
{
        for (void *it = json_object_iter((json_t *)args); it;
             it = json_object_iter_next((json_t *)args, it)) {
                const char *key = json_object_iter_key(it);
                const json_t *v = json_object_iter_value(it);
                if (streq(command, "qmp_capabilities") && streq(key, "enable")) {
                        if (!json_is_array(v))
                                return protocol_error_reply(
                                    "GenericError",
                                    "Invalid parameter type for 'enable', expected: array");
                        if (json_array_size(v) > 0) {
                                json_t *cap = json_array_get(v, 0);
                                return protocol_error_replyf(
                                    "GenericError", "Capability '%s' not available",
                                    json_is_string(cap) ? json_string_value(cap) : "?");
                        }
                        continue;
                }
                return protocol_error_replyf("GenericError", "Parameter '%s' is unexpected", key);
        }
        return NULL;
}

static json_t *qmp_dispatch(FqQmpSession *s, const char *command, const json_t *args,
                            FqQmpAction *action)
{
        bool block = s->block && fq_block_handles(command);
        bool known = streq(command, "qmp_capabilities") || streq(command, "query-status") ||
                     streq(command, "system_powerdown") || streq(command, "quit") || block;

        *action = FQ_QMP_ACTION_NONE;
        if (!s->negotiated && !streq(command, "qmp_capabilities"))
                return protocol_error_reply(
                    "CommandNotFound",
                    "Expecting capabilities negotiation with 'qmp_capabilities'");
        if (!known)
                return protocol_error_replyf("CommandNotFound", "The command %s has not been found",
                                             command);
        if (s->negotiated && streq(command, "qmp_capabilities"))
                return protocol_error_reply(
                    "CommandNotFound",
                    "Capabilities negotiation is already complete, command ignored");
        if (block)
                return s->events
                           ? fq_block_answer(s->block, command, args, s->hold_devices, s->events)
                           : NULL;
        if (args) {
                json_t *bad = qmp_check_arguments(command, args);
                if (bad)
                        return bad;
        }

        if (streq(command, "qmp_capabilities"))
                s->negotiated = true;
        else if (streq(command, "query-status"))
                return json_pack("{s:{s:s,s:b}}", "return", "status", "running", "running", 1);
        else if (streq(command, "system_powerdown"))
                *action = FQ_QMP_ACTION_POWERDOWN;
        else if (streq(command, "quit"))
                *action = FQ_QMP_ACTION_QUIT;
        return json_pack("{s:{}}", "return");
}

int fq_qmp_peek_command(const char *line, size_t size, char **ret)
{
        json_error_t err;
        json_auto_t *req = load_line(line, size, &err);
        json_t *execute = req ? json_object_get(req, "execute") : NULL;
        char *name = NULL;

        if (json_is_string(execute)) {
                name = strdup(json_string_value(execute));
                if (!name)
                        return -ENOMEM;
        }
        *ret = name;
        return 0;
}

int fq_qmp_answer(FqQmpSession *s, const char *line, size_t size, json_t **ret_reply,
                  char **ret_command, FqQmpAction *ret_action)
{
        json_error_t err;
        json_auto_t *req = load_line(line, size, &err);
        json_t *reply;
        _cleanup_free_ char *command = NULL;
        FqQmpAction action = FQ_QMP_ACTION_NONE;

        if (!req)
                reply = protocol_error_replyf("GenericError", "JSON parse error, %s", err.text);
        else if (!json_is_object(req))
                reply = protocol_error_reply("GenericError", "QMP input must be a JSON object");
        else if ((reply = qmp_check_request(req)))
                reply = with_id(reply, req);
        else {
                json_t *args = json_object_get(req, "arguments");
                command = strdup(json_string_value(json_object_get(req, "execute")));
                if (!command)
                        return -ENOMEM;
                reply = with_id(qmp_dispatch(s, command, args, &action), req);
        }
        if (!reply)
                return -ENOMEM;

        *ret_reply = reply;
        *ret_command = TAKE_PTR(command);
        *ret_action = action;
        return 0;
}

/* ---- guest agent --------------------------------------------------------------------------- */

/* The real agent's protocol (src/agent/protocol.c): the host side meets the replies it will see. */
int fq_agent_answer(const char *failure_message, const char *line, size_t size, char **ret)
{
        GpuState g = {
            .state = failure_message ? GPU_INIT_FAILED : GPU_INIT_OK,
            .failure_message = (char *)failure_message,
        };
        return protocol_answer(line, size, &g, ret);
}

char *fq_agent_overlong_line(void)
{
        return protocol_overlong_line();
}
