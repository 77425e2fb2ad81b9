/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * ctl: vgpuctl, the command-line client of vgpud's REST API (SPEC OPS-6..8).
 *
 * The program is a library (everything but main.c) so that tests run it in-process with their
 * own environment, clock, timeouts and output streams; main.c only fills a CtlEnv from the
 * real process and returns ctl_run()'s exit status.
 *
 * Promises:
 *  - exit statuses are OPS-8's: CTL_EXIT_OK, CTL_EXIT_API (the server answered with an error,
 *    or with something that is not the API's JSON), CTL_EXIT_USAGE (bad arguments, or a local
 *    file named by them that cannot be used) and CTL_EXIT_CONNECT (no complete HTTP exchange);
 *    the rare local failure that fits none of them (out of memory, a failed write of the
 *    output) exits with CTL_EXIT_API;
 *  - an API error prints `error: <code>: <message> (HTTP <status>)` on the error stream;
 *  - responses are read up to CTL_RESPONSE_MAX bytes, never truncated, and parsed as strict
 *    JSON (duplicate keys refused) before anything is printed, --json included; keys the
 *    client does not know are ignored, so that an older vgpuctl keeps working against a daemon
 *    that adds fields to its answers;
 *  - text that came from the server is printed with control characters replaced by "?", so a
 *    reason string cannot drive the operator's terminal; the one exception is `instances
 *    console`, whose whole point is the guest's bytes as they are;
 *  - the token travels only in the Authorization header and is never printed.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

enum {
        CTL_EXIT_OK = 0,
        CTL_EXIT_API = 1,
        CTL_EXIT_USAGE = 2,
        CTL_EXIT_CONNECT = 3,
};

#define CTL_DEFAULT_URL "http://127.0.0.1:8080" /* the daemon's default `listen` (CFG-3) */
#define CTL_DEFAULT_TTL NSEC_PER_HOUR           /* `token mint` (OPS-7) */
#define CTL_CONNECT_TIMEOUT_MS 5000
#define CTL_TIMEOUT_MS 30000
/*
 * Create, start, stop and delete answer only once the operation has ended (INST-23): a create
 * waits for placement and up to `vmm.boot_timeout` (at most 10 minutes, CFG), a stop for up to
 * `vmm.stop_timeout` (the same bound) and then the termination ladder and the VF release.
 * Fifteen minutes covers the largest configurable wait with room for the steps around it.
 */
#define CTL_LIFECYCLE_TIMEOUT_MS (15 * 60 * 1000)
#define CTL_RESPONSE_MAX (16 * 1024 * 1024)
#define CTL_TOKEN_MAX (4096 - 7)     /* what fits a 4096-byte "Bearer <token>" header (API-12) */
#define CTL_REASON_MAX 256           /* quarantine and drain reasons (API-9) */
#define CTL_UNIX_SOCKET_PATH_MAX 107 /* sun_path less its terminating NUL */
#define CTL_CONSOLE_TAIL_MAX 1048576 /* `tail_bytes` of the console route (API-2) */
#define CTL_INSTANCE_ID_LEN 20       /* INST-3: [a-z0-9]{20} */

/* What the process brings: the environment (OPS-6), a clock, timeouts and the streams. */
typedef struct CtlEnv {
        const char *url;   /* VGPUD_URL; NULL or empty: CTL_DEFAULT_URL */
        const char *token; /* VGPUD_TOKEN; NULL or empty: no token */
        Clock clock;       /* "now" for `token mint` */
        long connect_timeout_ms;
        long timeout_ms;           /* reads and operator routes */
        long lifecycle_timeout_ms; /* create, start, stop, delete (CTL_LIFECYCLE_TIMEOUT_MS) */
        FILE *out;                 /* tables, JSON, tokens */
        FILE *err;                 /* error messages */
} CtlEnv;

/* Runs one vgpuctl command line (argv[0] is the program name); returns a CTL_EXIT_* status. */
int ctl_run(int argc, char *const *argv, const CtlEnv *env);

/* ---- arguments (ctl-args.c) ------------------------------------------------------------------ */

typedef enum CtlCommand {
        CTL_COMMAND_HELP,
        CTL_COMMAND_VERSION,
        CTL_COMMAND_RESOURCES,
        CTL_COMMAND_GPUS,
        CTL_COMMAND_HEALTH_LIST,
        CTL_COMMAND_HEALTH_QUARANTINE,
        CTL_COMMAND_HEALTH_CLEAR,
        CTL_COMMAND_HEALTH_DRAIN,
        CTL_COMMAND_HEALTH_UNDRAIN,
        CTL_COMMAND_HEALTH_CLEAR_GPU,
        CTL_COMMAND_HEALTH_BREAKER_RESET,
        CTL_COMMAND_INSTANCES_LIST,
        CTL_COMMAND_INSTANCES_GET,
        CTL_COMMAND_INSTANCES_CREATE,
        CTL_COMMAND_INSTANCES_START,
        CTL_COMMAND_INSTANCES_STOP,
        CTL_COMMAND_INSTANCES_DELETE,
        CTL_COMMAND_INSTANCES_CONSOLE,
        CTL_COMMAND_TOKEN_MINT,
        _CTL_COMMAND_MAX,
} CtlCommand;

typedef struct CtlArgs {
        CtlCommand command;
        bool json;
        /* Where the daemon is: a base URL without trailing "/", or a Unix socket path. */
        char *url;
        char *unix_socket;
        char *token;         /* NULL: no Authorization header */
        char *target;        /* the VF or GPU of a health command, the id of an instance command */
        char *body;          /* the JSON request body, built and checked here (API-9); or NULL */
        uint32_t tail_bytes; /* console; 0: the daemon's default */
        char *secret_file;   /* token mint */
        char *subject;       /* token mint; NULL: no "sub" */
        nsec_t ttl;          /* token mint */
} CtlArgs;

void ctl_args_done(CtlArgs *a);

/*
 * Parses a command line, resolving the defaults from env and reading --token-file. Options may
 * come before or after the command words; "--" ends them. Whatever becomes part of a request
 * path is checked here, before any request: PCI addresses, and instance ids against INST-3's
 * form. Values the daemon judges (names, sizes, boot paths) are only checked for what the
 * client needs to send them: a number where the body has an integer, UTF-8 where it has text.
 * On failure (-EINVAL, the errno of an unreadable token file, or -ENOMEM) *error is a one-line
 * message for the user.
 */
int ctl_args_parse(int argc, char *const *argv, const CtlEnv *env, CtlArgs *ret, char **error);

/* The --help text. */
extern const char ctl_usage[];

/* ---- HTTP (ctl-http.c) ----------------------------------------------------------------------- */

typedef struct CtlRequest {
        const char *method;
        const char *path;      /* starting with "/", query included */
        const char *json_body; /* NULL: none */
        const char *accept;    /* the Accept header's value */
        long timeout_ms;       /* the whole exchange */
} CtlRequest;

typedef struct CtlResponse {
        long status;
        char *body; /* NUL-terminated, for convenience; size says how much is body */
        size_t size;
} CtlResponse;

void ctl_response_done(CtlResponse *r);

/*
 * One HTTP/1.1 exchange with the daemon. Any HTTP status counts as success here; callers judge
 * it. Failures:
 *  -EMSGSIZE  the response was larger than CTL_RESPONSE_MAX (an API error, not a connection
 *             error: the server answered, just not acceptably);
 *  -ENOMEM    out of memory;
 *  other < 0  no complete exchange (refused, unreachable, timed out, cut off): exit 3.
 * *error then says what happened, naming the URL or socket.
 */
int ctl_http_request(const CtlArgs *args, const CtlEnv *env, const CtlRequest *req,
                     CtlResponse *ret, char **error);

/* ---- output (ctl-print.c) -------------------------------------------------------------------- */

/*
 * Each prints a successful response's JSON for humans. -EBADMSG with *error describing the
 * mismatch when the JSON does not have the SPEC's shape (API-4, API-6, API-7, API-10, API-18);
 * any other failure (-ENOMEM) sets *error too. Nothing is printed on failure.
 */
int ctl_print_resources(FILE *out, json_t *body, char **error);
int ctl_print_gpus(FILE *out, json_t *body, char **error);
int ctl_print_health(FILE *out, json_t *body, char **error);
/* GET /instances: an array of API-7 instances, one table row each. */
int ctl_print_instances(FILE *out, json_t *body, char **error);
/* One API-7 instance as "key  value" lines, absent values left out. */
int ctl_print_instance(FILE *out, json_t *body, char **error);
/* An operator route's answer: summary is the first line ("quarantined VF 0000:e3:00.4"). */
int ctl_print_operator_result(FILE *out, const char *summary, json_t *body, char **error);

/* Writes s with every ASCII control character replaced by "?". */
void ctl_print_sanitized(FILE *out, const char *s);

/* ---- tables (ctl-table.c) -------------------------------------------------------------------- */

/* Left-aligned columns two spaces apart; widths count UTF-8 characters, not bytes. */
typedef struct CtlTable {
        size_t n_columns;
        size_t n_cells;
        char **cells; /* row-major, sanitized copies */
} CtlTable;

int ctl_table_init(CtlTable *t, size_t n_columns);
void ctl_table_done(CtlTable *t);
/* Appends one row of n_columns strings; NULL is shown as "-". */
int ctl_table_add_row(CtlTable *t, const char *const *row);
/* Prints every row, each preceded by indent; the last column is never padded. */
int ctl_table_print(const CtlTable *t, FILE *out, const char *indent);
