/* SPDX-License-Identifier: GPL-2.0-or-later */
/* vgpuctl's commands: one request each, or a token minted locally (OPS-7, OPS-8). */
#include <inttypes.h>

#include "config.h"
#include "ctl.h"
#include "jwt/jwt.h"

/* The token check in ctl-args.c must match what the daemon accepts in the header. */
_Static_assert(CTL_TOKEN_MAX + sizeof("Bearer ") - 1 == JWT_AUTHORIZATION_MAX,
               "CTL_TOKEN_MAX does not fill the Authorization header");

static const char *strempty(const char *s)
{
        return s ? s : "";
}

static int fail_oom(const CtlEnv *env)
{
        fputs("vgpuctl: out of memory\n", env->err);
        return CTL_EXIT_API;
}

/* A non-2xx answer: API-11 promises {"code", "message"}; anything else is still an error. */
int ctl_print_api_error(const CtlArgs *a, const CtlEnv *env, const CtlResponse *resp)
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

/* What a command's successful answer carries, and so how it is printed. */
typedef enum Answer {
        ANSWER_OBJECT, /* a JSON object: print, or the summary and the operator result */
        ANSWER_ARRAY,  /* a JSON array: print */
        ANSWER_RAW,    /* bytes written as received, --json or not */
        ANSWER_NONE,   /* no body (204): the summary alone, nothing with --json */
} Answer;

/*
 * Each command that talks to the daemon, by CtlCommand: its request, what the answer is and
 * how it is shown. The path is path[0], the command's target (a PCI address or an instance id,
 * checked by ctl-args.c), then path[1].
 */
static const struct {
        const char *method;
        const char *path[2];
        Answer answer;
        bool waits; /* the daemon answers once a lifecycle operation has ended (INST-23) */
        int (*print)(FILE *out, json_t *body, char **error);
        const char *summary; /* without print: the first line, followed by the target */
} routes[_CTL_COMMAND_MAX] = {
    [CTL_COMMAND_RESOURCES] = {"GET", {"/resources"}, .print = ctl_print_resources},
    [CTL_COMMAND_GPUS] = {"GET", {"/gpus"}, .print = ctl_print_gpus},
    [CTL_COMMAND_NETWORK] = {"GET", {"/network"}, .print = ctl_print_network},
    [CTL_COMMAND_HEALTH_LIST] = {"GET", {"/gpu/health"}, .print = ctl_print_health},
    [CTL_COMMAND_HEALTH_QUARANTINE] = {"POST",
                                       {"/gpu/vfs/", "/quarantine"},
                                       .summary = "quarantined VF "},
    [CTL_COMMAND_HEALTH_CLEAR] = {"DELETE", {"/gpu/vfs/", "/quarantine"}, .summary = "cleared VF "},
    [CTL_COMMAND_HEALTH_DRAIN] = {"POST", {"/gpu/gpus/", "/drain"}, .summary = "drained GPU "},
    [CTL_COMMAND_HEALTH_UNDRAIN] = {"DELETE",
                                    {"/gpu/gpus/", "/drain"},
                                    .summary = "undrained GPU "},
    [CTL_COMMAND_HEALTH_CLEAR_GPU] = {"DELETE",
                                      {"/gpu/gpus/", "/records"},
                                      .summary = "cleared the VF records of GPU "},
    [CTL_COMMAND_HEALTH_BREAKER_RESET] = {"DELETE",
                                          {"/gpu/health/breaker"},
                                          .summary = "closed the quarantine breaker"},
    [CTL_COMMAND_INSTANCES_LIST] = {"GET",
                                    {"/instances"},
                                    ANSWER_ARRAY,
                                    .print = ctl_print_instances},
    [CTL_COMMAND_INSTANCES_GET] = {"GET", {"/instances/"}, .print = ctl_print_instance},
    [CTL_COMMAND_INSTANCES_CREATE] = {"POST",
                                      {"/instances"},
                                      .waits = true,
                                      .print = ctl_print_instance},
    [CTL_COMMAND_INSTANCES_START] = {"POST",
                                     {"/instances/", "/start"},
                                     .waits = true,
                                     .print = ctl_print_instance},
    [CTL_COMMAND_INSTANCES_STOP] = {"POST",
                                    {"/instances/", "/stop"},
                                    .waits = true,
                                    .print = ctl_print_instance},
    [CTL_COMMAND_INSTANCES_DELETE] =
        {"DELETE", {"/instances/"}, ANSWER_NONE, .waits = true, .summary = "deleted instance "},
    [CTL_COMMAND_INSTANCES_CONSOLE] = {"GET", {"/instances/", "/console"}, ANSWER_RAW},
    /* DISK-8: a detach waits for the guest (vmm.device_release_timeout); the path ends with
     * the volume. */
    [CTL_COMMAND_INSTANCES_ATTACH_VOLUME] = {"POST",
                                             {"/instances/", "/volumes"},
                                             .waits = true,
                                             .print = ctl_print_instance},
    [CTL_COMMAND_INSTANCES_DETACH_VOLUME] = {"DELETE",
                                             {"/instances/", "/volumes/"},
                                             .waits = true,
                                             .print = ctl_print_instance},
    [CTL_COMMAND_IMAGES_LIST] = {"GET", {"/images"}, ANSWER_ARRAY, .print = ctl_print_images},
    [CTL_COMMAND_IMAGES_GET] = {"GET", {"/images/"}, .print = ctl_print_image},
    [CTL_COMMAND_IMAGES_DELETE] = {"DELETE",
                                   {"/images/"},
                                   ANSWER_NONE,
                                   .summary = "deleted image "},
    [CTL_COMMAND_VOLUMES_LIST] = {"GET", {"/volumes"}, ANSWER_ARRAY, .print = ctl_print_volumes},
    [CTL_COMMAND_VOLUMES_GET] = {"GET", {"/volumes/"}, .print = ctl_print_volume},
    [CTL_COMMAND_VOLUMES_CREATE] = {"POST", {"/volumes"}, .print = ctl_print_volume},
    [CTL_COMMAND_VOLUMES_DELETE] = {"DELETE",
                                    {"/volumes/"},
                                    ANSWER_NONE,
                                    .summary = "deleted volume "},
};

static int print_human(const CtlArgs *a, json_t *body, const CtlEnv *env, char **error)
{
        _cleanup_free_ char *summary = NULL;

        if (routes[a->command].print)
                return routes[a->command].print(env->out, body, error);
        if (strprintf(&summary, "%s%s", routes[a->command].summary, strempty(a->target)) < 0)
                return error_set_oom(error);
        return ctl_print_operator_result(env->out, summary, body, error);
}

/* The raw answer, as the daemon wrote it; JSON is only completed with a newline. */
static void print_raw(const CtlResponse *resp, bool newline, const CtlEnv *env)
{
        fwrite(resp->body, 1, resp->size, env->out);
        if (newline && (resp->size == 0 || resp->body[resp->size - 1] != '\n'))
                fputc('\n', env->out);
}

static int run_route(const CtlArgs *a, const CtlEnv *env)
{
        _cleanup_(ctl_response_done) CtlResponse resp = {};
        _cleanup_free_ char *error = NULL, *path = NULL, *query = NULL;
        Answer answer = routes[a->command].answer;
        bool waits = routes[a->command].waits;
        int r = 0;

        if (a->follow && a->tail_bytes > 0)
                r = strprintf(&query, "?follow=true&tail_bytes=%" PRIu32, a->tail_bytes);
        else if (a->follow)
                r = strprintf(&query, "?follow=true");
        else if (a->tail_bytes > 0)
                r = strprintf(&query, "?tail_bytes=%" PRIu32, a->tail_bytes);
        if (r < 0)
                return fail_oom(env);
        if (strprintf(&path, "%s%s%s%s%s", routes[a->command].path[0], strempty(a->target),
                      strempty(routes[a->command].path[1]), strempty(a->volume),
                      strempty(query)) < 0)
                return fail_oom(env);

        const CtlRequest req = {
            .method = routes[a->command].method,
            .path = path,
            .json_body = a->body,
            .accept = answer == ANSWER_RAW ? "text/plain" : "application/json",
            /* A follow lasts as long as the VM runs (CONS-2): no bound on the exchange. */
            .timeout_ms = a->follow ? 0
                          : waits   ? env->lifecycle_timeout_ms
                                    : env->timeout_ms,
            .stream = a->follow ? env->out : NULL,
        };
        r = ctl_http_request(a, env, &req, &resp, &error);
        if (r == -ENOMEM)
                return fail_oom(env);
        if (r < 0) {
                fprintf(env->err, "error: %s\n", error);
                if (r == -ETIMEDOUT && waits)
                        fputs("hint: vgpud goes on with the operation; see 'vgpuctl instances "
                              "list'\n",
                              env->err);
                return r == -EMSGSIZE ? CTL_EXIT_API : CTL_EXIT_CONNECT;
        }
        if (resp.status < 200 || resp.status > 299)
                return ctl_print_api_error(a, env, &resp);

        if (answer == ANSWER_RAW) {
                print_raw(&resp, false, env);
                return CTL_EXIT_OK;
        }
        if (answer == ANSWER_NONE) {
                if (!a->json)
                        fprintf(env->out, "%s%s\n", routes[a->command].summary,
                                strempty(a->target));
                return CTL_EXIT_OK;
        }

        json_error_t e;
        json_auto_t *body = json_loadb(resp.body, resp.size, JSON_REJECT_DUPLICATES, &e);
        bool is_array = answer == ANSWER_ARRAY;
        if (!body || (is_array ? !json_is_array(body) : !json_is_object(body))) {
                fprintf(env->err, "error: invalid JSON in the response (HTTP %ld): %s\n",
                        resp.status,
                        !body      ? e.text
                        : is_array ? "not an array"
                                   : "not an object");
                return CTL_EXIT_API;
        }

        if (a->json) {
                print_raw(&resp, true, env);
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
        case CTL_COMMAND_TOKEN_MINT:
                return run_token_mint(a, env);
        case CTL_COMMAND_INSTANCES_SSH:
                return ctl_ssh_run(a, env);
        case CTL_COMMAND_IMAGES_IMPORT:
                return ctl_images_import(a, env);
        case CTL_COMMAND_FLEET_HOSTS:
        case CTL_COMMAND_FLEET_RESOURCES:
        case CTL_COMMAND_FLEET_CREATE:
        case CTL_COMMAND_FLEET_DELETE:
                return ctl_fleet_run(a, env);
        default:
                break;
        }
        if ((size_t)a->command >= ELEMENTSOF(routes) || !routes[a->command].method)
                return CTL_EXIT_USAGE;
        if (a->command == CTL_COMMAND_INSTANCES_CONSOLE && a->attach)
                return ctl_console_attach(a, env);
        return run_route(a, env);
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
