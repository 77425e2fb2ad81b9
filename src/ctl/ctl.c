/* SPDX-License-Identifier: GPL-2.0-or-later */
/* vgpuctl's commands: one request each, or a token minted locally (OPS-7, OPS-8). */
#include "config.h"
#include "ctl.h"
#include "jwt/jwt.h"

/* The token check in ctl-args.c must match what the daemon accepts in the header. */
_Static_assert(CTL_TOKEN_MAX + sizeof("Bearer ") - 1 == JWT_AUTHORIZATION_MAX,
               "CTL_TOKEN_MAX does not fill the Authorization header");

static int fail_oom(const CtlEnv *env)
{
        fputs("vgpuctl: out of memory\n", env->err);
        return CTL_EXIT_API;
}

/* A non-2xx answer: API-11 promises {"code", "message"}; anything else is still an error. */
static int print_api_error(const CtlArgs *a, const CtlEnv *env, const CtlResponse *resp)
{
        json_auto_t *body = json_loadb(resp->body, resp->size, JSON_REJECT_DUPLICATES, NULL);
        const char *code, *message;

        if (body && json_unpack(body, "{s:s, s:s}", "code", &code, "message", &message) == 0) {
                fputs("error: ", env->err);
                ctl_print_sanitized(env->err, code);
                fputs(": ", env->err);
                ctl_print_sanitized(env->err, message);
                fprintf(env->err, " (HTTP %ld)\n", resp->status);
        } else {
                fprintf(env->err, "error: HTTP %ld without a JSON error body\n", resp->status);
        }
        if (resp->status == 401 && !a->token)
                fputs("hint: no token was given; use --token, --token-file or VGPUD_TOKEN\n",
                      env->err);
        return CTL_EXIT_API;
}

static int print_human(const CtlArgs *a, json_t *body, const CtlEnv *env, char **error)
{
        _cleanup_free_ char *summary = NULL;
        int r = 0;

        switch (a->command) {
        case CTL_COMMAND_RESOURCES:
                return ctl_print_resources(env->out, body, error);
        case CTL_COMMAND_GPUS:
                return ctl_print_gpus(env->out, body, error);
        case CTL_COMMAND_HEALTH_LIST:
                return ctl_print_health(env->out, body, error);
        case CTL_COMMAND_HEALTH_QUARANTINE:
                r = strprintf(&summary, "quarantined VF %s", a->address);
                break;
        case CTL_COMMAND_HEALTH_CLEAR:
                r = strprintf(&summary, "cleared VF %s", a->address);
                break;
        case CTL_COMMAND_HEALTH_DRAIN:
                r = strprintf(&summary, "drained GPU %s", a->address);
                break;
        case CTL_COMMAND_HEALTH_UNDRAIN:
                r = strprintf(&summary, "undrained GPU %s", a->address);
                break;
        case CTL_COMMAND_HEALTH_CLEAR_GPU:
                r = strprintf(&summary, "cleared the VF records of GPU %s", a->address);
                break;
        case CTL_COMMAND_HEALTH_BREAKER_RESET:
                r = strprintf(&summary, "closed the quarantine breaker");
                break;
        default:
                return error_set(error, -EINVAL, "no output for this command");
        }
        if (r < 0)
                return error_set_oom(error);
        return ctl_print_operator_result(env->out, summary, body, error);
}

static int run_request(const CtlArgs *a, const CtlEnv *env, const char *method, const char *path,
                       const char *json_body)
{
        _cleanup_(ctl_response_done) CtlResponse resp = {};
        _cleanup_free_ char *error = NULL;

        int r = ctl_http_request(a, env, method, path, json_body, &resp, &error);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fprintf(env->err, "error: %s\n", error);
                return r == -EMSGSIZE ? CTL_EXIT_API : CTL_EXIT_CONNECT;
        }
        if (resp.status < 200 || resp.status > 299)
                return print_api_error(a, env, &resp);

        json_error_t e;
        json_auto_t *body = json_loadb(resp.body, resp.size, JSON_REJECT_DUPLICATES, &e);
        if (!body || !json_is_object(body)) {
                fprintf(env->err, "error: invalid JSON in the response (HTTP %ld): %s\n",
                        resp.status, body ? "not an object" : e.text);
                return CTL_EXIT_API;
        }

        if (a->json) {
                /* Passed through as the daemon wrote it, only completed with a newline. */
                fwrite(resp.body, 1, resp.size, env->out);
                if (resp.size == 0 || resp.body[resp.size - 1] != '\n')
                        fputc('\n', env->out);
                return CTL_EXIT_OK;
        }

        r = print_human(a, body, env, &error);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fprintf(env->err, "error: %s\n", error);
                return CTL_EXIT_API;
        }
        return CTL_EXIT_OK;
}

static int run_health_route(const CtlArgs *a, const CtlEnv *env, const char *method,
                            const char *collection, const char *action)
{
        _cleanup_free_ char *path = NULL, *body = NULL;

        if (strprintf(&path, "/gpu/%s/%s/%s", collection, a->address, action) < 0)
                return fail_oom(env);
        if (a->reason) {
                json_auto_t *j = json_pack("{s:s}", "reason", a->reason);
                body = j ? json_dumps(j, JSON_COMPACT) : NULL;
                if (!body)
                        return fail_oom(env);
        }
        return run_request(a, env, method, path, body);
}

static int run_token_mint(const CtlArgs *a, const CtlEnv *env)
{
        _cleanup_jwt_secret_ JwtSecret *secret = NULL;
        _cleanup_free_ char *error = NULL, *token = NULL;

        /* The daemon's own loader, so the file is judged exactly as vgpud judges it (API-14). */
        int r = jwt_secret_load(a->secret_file, &secret, &error);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fprintf(env->err, "error: %s\n", error);
                return CTL_EXIT_USAGE;
        }
        r = jwt_mint(secret, a->subject, clock_now(&env->clock), a->ttl, &token);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fprintf(env->err, "error: mint token: %s\n", strerror(-r));
                return CTL_EXIT_USAGE;
        }
        fprintf(env->out, "%s\n", token);
        return CTL_EXIT_OK;
}

static int dispatch(const CtlArgs *a, const CtlEnv *env)
{
        switch (a->command) {
        case CTL_COMMAND_HELP:
                fputs(ctl_usage, env->out);
                return CTL_EXIT_OK;
        case CTL_COMMAND_VERSION:
                fputs("vgpuctl " VGPUD_VERSION "\n", env->out);
                return CTL_EXIT_OK;
        case CTL_COMMAND_RESOURCES:
                return run_request(a, env, "GET", "/resources", NULL);
        case CTL_COMMAND_GPUS:
                return run_request(a, env, "GET", "/gpus", NULL);
        case CTL_COMMAND_HEALTH_LIST:
                return run_request(a, env, "GET", "/gpu/health", NULL);
        case CTL_COMMAND_HEALTH_QUARANTINE:
                return run_health_route(a, env, "POST", "vfs", "quarantine");
        case CTL_COMMAND_HEALTH_CLEAR:
                return run_health_route(a, env, "DELETE", "vfs", "quarantine");
        case CTL_COMMAND_HEALTH_DRAIN:
                return run_health_route(a, env, "POST", "gpus", "drain");
        case CTL_COMMAND_HEALTH_UNDRAIN:
                return run_health_route(a, env, "DELETE", "gpus", "drain");
        case CTL_COMMAND_HEALTH_CLEAR_GPU:
                return run_health_route(a, env, "DELETE", "gpus", "records");
        case CTL_COMMAND_HEALTH_BREAKER_RESET:
                return run_request(a, env, "DELETE", "/gpu/health/breaker", NULL);
        case CTL_COMMAND_TOKEN_MINT:
                return run_token_mint(a, env);
        }
        return CTL_EXIT_USAGE;
}

int ctl_run(int argc, char *const *argv, const CtlEnv *env)
{
        _cleanup_(ctl_args_done) CtlArgs args = {};
        _cleanup_free_ char *error = NULL;

        int r = ctl_args_parse(argc, argv, env, &args, &error);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fprintf(env->err, "vgpuctl: %s\nRun 'vgpuctl --help' for usage.\n", error);
                return CTL_EXIT_USAGE;
        }

        int status = dispatch(&args, env);
        /* A table cut short by a full disk or a closed pipe must not look like success. */
        if (fflush(env->out) != 0 || ferror(env->out)) {
                if (status == CTL_EXIT_OK)
                        fprintf(env->err, "vgpuctl: write output: %m\n");
                return status == CTL_EXIT_OK ? CTL_EXIT_API : status;
        }
        return status;
}
