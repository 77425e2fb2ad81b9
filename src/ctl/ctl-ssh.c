/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * `vgpuctl instances ssh ID [--via HOST] [-- SSH-ARGS]`: the instance's address from the API
 * (NET-9), then ssh in its place (exec, so the terminal, signals and exit status are ssh's own).
 * A nat address is reachable from the daemon's host only; --via HOST (the daemon's host, as the
 * caller reaches it) reaches a nat guest from anywhere through the host port forwarded to its
 * port 22 (NET-1, NET-4). The guest's host key
 * is new at each create, so it is accepted the first time and checked from then on
 * (StrictHostKeyChecking=accept-new).
 */
#include <unistd.h>

#include "ctl.h"

#define SSH_BINARY "ssh"
#define SSH_PORT 22

/* The host port of the first tcp forward to guest port 22; 0 when there is none. */
static json_int_t ssh_forward(json_t *network)
{
        json_t *p;
        size_t i;
        json_array_foreach (json_object_get(network, "ports"), i, p) {
                const char *protocol = json_string_value(json_object_get(p, "protocol"));
                if (json_integer_value(json_object_get(p, "guest")) == SSH_PORT &&
                    streq_ptr(protocol, "tcp"))
                        return json_integer_value(json_object_get(p, "host"));
        }
        return 0;
}

int ctl_ssh_argv(json_t *instance, const char *via, char *const *extra, char ***ret, char **error)
{
        const char *id = json_string_value(json_object_get(instance, "id"));
        json_t *network = json_object_get(instance, "network");
        const char *mode = json_string_value(json_object_get(network, "mode"));
        const char *ip = json_string_value(json_object_get(network, "ip"));
        const char *state = json_string_value(json_object_get(instance, "state"));
        if (!id)
                id = "?";
        if (state && !streq(state, "Running"))
                return error_set(error, -ENOENT, "instance %s is %s, not Running", id, state);

        _cleanup_strv_free_ char **argv = NULL;
        char port[16] = "";
        const char *address = ip;
        if (via) {
                json_int_t host_port = ssh_forward(network);
                if (host_port <= 0 || host_port > UINT16_MAX)
                        return error_set(error, -ENOENT,
                                         "instance %s forwards no host port to its port %d/tcp "
                                         "(create it with --port HOST:22)",
                                         id, SSH_PORT);
                snprintf(port, sizeof port, "%d", (int)host_port);
                address = via;
        } else if (!ip)
                return error_set(
                    error, -ENOENT, "instance %s has no address vgpud knows (network mode %s)%s",
                    id, mode ? mode : "none", ssh_forward(network) > 0 ? "; try --via HOST" : "");
        if (strv_push(&argv, SSH_BINARY) < 0 || strv_push(&argv, "-o") < 0 ||
            strv_push(&argv, "StrictHostKeyChecking=accept-new") < 0 ||
            (port[0] && (strv_push(&argv, "-p") < 0 || strv_push(&argv, port) < 0)) ||
            strv_push(&argv, address) < 0)
                return error_set_oom(error);
        /* After the destination: ssh reads options there too, and the rest is the command. */
        for (char *const *e = extra; e && *e; e++)
                if (strv_push(&argv, *e) < 0)
                        return error_set_oom(error);
        *ret = TAKE_PTR(argv);
        return 0;
}

static int fail_oom(const CtlEnv *env)
{
        fputs("vgpuctl: out of memory\n", env->err);
        return CTL_EXIT_API;
}

int ctl_ssh_run(const CtlArgs *a, const CtlEnv *env)
{
        _cleanup_(ctl_response_done) CtlResponse resp = {};
        _cleanup_free_ char *error = NULL, *path = NULL;
        if (strprintf(&path, "/instances/%s", a->target) < 0)
                return fail_oom(env);
        const CtlRequest req = {
            .method = "GET",
            .path = path,
            .accept = "application/json",
            .timeout_ms = env->timeout_ms,
        };
        int r = ctl_http_request(a, env, &req, &resp, &error);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fprintf(env->err, "error: %s\n", error);
                return r == -EMSGSIZE ? CTL_EXIT_API : CTL_EXIT_CONNECT;
        }
        if (resp.status < 200 || resp.status > 299)
                return ctl_print_api_error(a, env, &resp);
        json_auto_t *body = json_loadb(resp.body, resp.size, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(body)) {
                fprintf(env->err, "error: invalid JSON in the response (HTTP %ld)\n", resp.status);
                return CTL_EXIT_API;
        }
        _cleanup_strv_free_ char **argv = NULL;
        r = ctl_ssh_argv(body, a->via, a->ssh_args, &argv, &error);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fputs("error: ", env->err);
                ctl_print_sanitized(env->err, error);
                fputc('\n', env->err);
                return CTL_EXIT_API;
        }
        fflush(env->out);
        fflush(env->err);
        execvp(argv[0], argv);
        fprintf(env->err, "error: cannot run %s: %m\n", argv[0]);
        return CTL_EXIT_API;
}
