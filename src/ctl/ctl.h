/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * ctl: vgpuctl, the command-line client of vgpud's REST API (SPEC OPS-6, OPS-7, OPS-8).
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
#define CTL_FLEET_COUNT_MAX 1000     /* fleet create --count */

/* What the process brings: the environment (OPS-6), a clock, timeouts and the streams. */
typedef struct CtlEnv {
        const char *url;   /* VGPUD_URL; NULL or empty: CTL_DEFAULT_URL */
        const char *token; /* VGPUD_TOKEN; NULL or empty: no token */
        Clock clock;       /* "now" for `token mint` */
        long connect_timeout_ms;
        long timeout_ms;           /* reads and operator routes */
        long lifecycle_timeout_ms; /* create, start, stop, delete (CTL_LIFECYCLE_TIMEOUT_MS) */
        FILE *out;                 /* tables, JSON, tokens; the console's bytes */
        FILE *err;                 /* error messages */
        int in_fd;                 /* what is typed into an attached console (CONS-4) */
} CtlEnv;

/* Runs one vgpuctl command line (argv[0] is the program name); returns a CTL_EXIT_* status. */
int ctl_run(int argc, char *const *argv, const CtlEnv *env);

/* ---- arguments (ctl-args.c) ------------------------------------------------------------------ */

typedef enum CtlCommand {
        CTL_COMMAND_HELP,
        CTL_COMMAND_VERSION,
        CTL_COMMAND_RESOURCES,
        CTL_COMMAND_GPUS,
        CTL_COMMAND_NETWORK,
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
        CTL_COMMAND_INSTANCES_SSH,
        CTL_COMMAND_INSTANCES_ATTACH_VOLUME, /* DISK-8 */
        CTL_COMMAND_INSTANCES_DETACH_VOLUME,
        CTL_COMMAND_IMAGES_LIST, /* DISK-1, DISK-2, DISK-4 */
        CTL_COMMAND_IMAGES_GET,
        CTL_COMMAND_IMAGES_IMPORT,
        CTL_COMMAND_IMAGES_DELETE,
        CTL_COMMAND_VOLUMES_LIST, /* DISK-7 */
        CTL_COMMAND_VOLUMES_GET,
        CTL_COMMAND_VOLUMES_CREATE,
        CTL_COMMAND_VOLUMES_DELETE,
        CTL_COMMAND_TOKEN_MINT,
        CTL_COMMAND_FLEET_HOSTS,
        CTL_COMMAND_FLEET_RESOURCES,
        CTL_COMMAND_FLEET_CREATE,
        CTL_COMMAND_FLEET_DELETE,
        _CTL_COMMAND_MAX,
} CtlCommand;

typedef struct CtlArgs {
        CtlCommand command;
        bool json;
        /* Where the daemon is: a base URL without trailing "/", or a Unix socket path. */
        char *url;
        char *unix_socket;
        char *token; /* NULL: no Authorization header */
        /* the VF or GPU of a health command, the id of an instance or volume, an image's name */
        char *target;
        char *volume;        /* detach-volume: the volume, by id or name, appended to the path */
        char *body;          /* the JSON request body, built and checked here (API-9); or NULL */
        uint32_t tail_bytes; /* console; 0: the daemon's default */
        bool follow;         /* console --follow (CONS-2) */
        bool attach;         /* console --attach (CONS-4) */
        char *secret_file;   /* token mint */
        char *subject;       /* token mint; NULL: no "sub" */
        nsec_t ttl;          /* token mint */
        /* fleet (FLEET-7) */
        char *placement_url;   /* normalized like --url; NULL for fleet delete without it */
        char *placement_token; /* --placement-token-file's token; NULL: noauth2's "admin" */
        char *hosts_file;      /* --hosts */
        char *host;            /* fleet delete --host */
        char *profile;         /* fleet create --profile (also in body) */
        uint32_t count;        /* fleet create --count; 1 without it */
        char *image;           /* fleet create --image (DISK-12); NULL: none */
        /* instances ssh */
        char *via;       /* --via HOST: the daemon's host, reached by a forward to guest port 22 */
        char **ssh_args; /* the words after the id, for ssh; NULL when none */
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

/*
 * A base URL as --url takes it (http or https, no query, fragment, space or control byte),
 * without trailing slashes; source names where it came from in *error.
 */
int ctl_url_normalize(const char *source, const char *url, char **ret, char **error);
/* What may travel in a header as a token: 1..CTL_TOKEN_MAX visible ASCII bytes. */
int ctl_token_check(const char *source, const char *token, char **error);

/* ---- the create body (ctl-create.c) --------------------------------------------------------- */

/* `instances create`'s flags for the body's image, volumes, network and cloud_init; NULL: absent.
 */
typedef struct CtlCreateFlags {
        const char *image;
        const char *disk_gb;
        char *const *volumes; /* "ID[:ro]" each */
        const char *network;  /* nat, none, bridge or bridge:NAME */
        char *const *ports;   /* "HOST:GUEST[/tcp|/udp]" each */
        const char *ip, *prefix, *gateway;
        char *const *dns;
        char *const *ssh_key_files; /* each non-empty line one key */
        const char *user_data_file;
        const char *hostname;
} CtlCreateFlags;

/*
 * Adds "image", "disk_gb", "volumes", "network" and "cloud_init" to body as API-9, NET-1 and
 * SEED-1 shape them, reading the key and user-data files. -EINVAL (or the errno of a file that
 * cannot be read) with *error a one-line message naming the flag; -ENOMEM.
 */
int ctl_create_body_add(json_t *body, const CtlCreateFlags *f, char **error);

/* ---- ssh (ctl-ssh.c) ------------------------------------------------------------------------- */

/*
 * `instances ssh ID`: the ssh command line for an API-7 instance: `ssh -o
 * StrictHostKeyChecking=accept-new [-p PORT] ADDRESS EXTRA...`. ADDRESS is network.ip (a nat
 * address, or a bridge's static one); with via, that host and the host port of the instance's
 * first tcp forward to guest port 22. -ENOENT with *error saying what is missing; -ENOMEM.
 */
int ctl_ssh_argv(json_t *instance, const char *via, char *const *extra, char ***ret, char **error);

/* Looks the instance up and execs ssh; returns only on failure, with a CTL_EXIT_* status. */
int ctl_ssh_run(const CtlArgs *a, const CtlEnv *env);

/* ---- HTTP (ctl-http.c) ----------------------------------------------------------------------- */

typedef struct CtlRequest {
        const char *method;
        const char *path;           /* starting with "/", query included */
        const char *json_body;      /* NULL: none */
        const char *accept;         /* the Accept header's value */
        long timeout_ms;            /* the whole exchange */
        const char *const *headers; /* more "Name: value" lines, NULL-ended; or NULL */
        const char *peer;           /* who answers, for messages; NULL: "vgpud" */
        /*
         * A successful (2xx) body is written here as it arrives and flushed piece by piece,
         * without CTL_RESPONSE_MAX, instead of being kept (the console's --follow, CONS-2); an
         * error body is still kept. NULL: kept.
         */
        FILE *stream;
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

/*
 * A non-2xx answer on the error stream: API-11 promises {"code", "message"}; anything else is
 * still an error. Returns CTL_EXIT_API.
 */
int ctl_print_api_error(const CtlArgs *a, const CtlEnv *env, const CtlResponse *resp);

/* ---- the console (ctl-console.c, CONS-4) ----------------------------------------------------- */

/*
 * `instances console ID --attach`: the console's WebSocket (CONS-3) on the terminal, in raw mode
 * until Ctrl-] detaches, the console closes, the connection drops or a signal (SIGTERM, SIGHUP,
 * SIGINT, SIGQUIT) comes; the terminal is restored on every one of those ways out. Exit status:
 * 0 detached or the console closed normally, 1 refused by the API, a signal, or any other end,
 * 3 no connection or the connection lost.
 */
int ctl_console_attach(const CtlArgs *a, const CtlEnv *env);

/* ---- output (ctl-print.c) -------------------------------------------------------------------- */

/*
 * Each prints a successful response's JSON for humans. -EBADMSG with *error describing the
 * mismatch when the JSON does not have the SPEC's shape (API-4, API-6, API-7, API-10, API-18);
 * any other failure (-ENOMEM) sets *error too. Nothing is printed on failure.
 */
int ctl_print_resources(FILE *out, json_t *body, char **error);
int ctl_print_gpus(FILE *out, json_t *body, char **error);
int ctl_print_network(FILE *out, json_t *body, char **error);
int ctl_print_health(FILE *out, json_t *body, char **error);
/* GET /instances: an array of API-7 instances, one table row each. */
int ctl_print_instances(FILE *out, json_t *body, char **error);
/* One API-7 instance as "key  value" lines, absent values left out. */
int ctl_print_instance(FILE *out, json_t *body, char **error);
/* An operator route's answer: summary is the first line ("quarantined VF 0000:e3:00.4"). */
int ctl_print_operator_result(FILE *out, const char *summary, json_t *body, char **error);

/* The disks (ctl-disks.c; DISK-1, DISK-2, DISK-7): tables of GET /images and GET /volumes, and
 * one image or volume as "key  value" lines. */
int ctl_print_images(FILE *out, json_t *body, char **error);
int ctl_print_image(FILE *out, json_t *body, char **error);
int ctl_print_volumes(FILE *out, json_t *body, char **error);
int ctl_print_volume(FILE *out, json_t *body, char **error);
/*
 * `images import NAME --source P`: POST /images, then GET /images/NAME until the image is no
 * longer importing, its progress shown as it goes; exit 0 when it is ready, 1 when it failed
 * (`error: import failed: <why>`) or the API refused.
 */
int ctl_images_import(const CtlArgs *a, const CtlEnv *env);
/* A non-2xx answer as OPS-8 prints it; returns CTL_EXIT_API. */
int ctl_print_api_error(const CtlArgs *a, const CtlEnv *env, const CtlResponse *resp);

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

/* ---- fleet (ctl-fleet.c, FLEET-7) ------------------------------------------------------------ */

/*
 * `vgpuctl fleet`: a thin client of OpenStack Placement and of the hosts' vgpud (SPEC §18). It
 * never schedules by itself beyond ordering Placement's candidates: Placement says which PFs can
 * take a vGPU, the chosen host has the last word (FLEET-6), and a refusal moves the allocation
 * to the next candidate, at most CTL_FLEET_MOVES_MAX times.
 *
 * Every Placement request carries `OpenStack-API-Version: placement 1.39` and `X-Auth-Token`
 * (--placement-token-file's token, else "admin", what Placement's noauth2 strategy expects).
 */
#define CTL_FLEET_MOVES_MAX 3         /* FLEET-7 */
#define CTL_FLEET_CANDIDATES_LIMIT 10 /* FLEET-7: `limit` of GET /allocation_candidates */
#define CTL_FLEET_HOSTS_MAX 1024
#define CTL_FLEET_UUID_STRLEN 37 /* FLEET_UUID_STRLEN */
#define CTL_FLEET_HOSTS_FILE_MAX (1024 * 1024)
/* Placement 1.39 wants a project, a user and a consumer type with every allocation; vgpuctl
 * writes these fixed values (vgpuctl(1)). */
#define CTL_FLEET_PROJECT_ID "vgpuctl"
#define CTL_FLEET_USER_ID "vgpuctl"
#define CTL_FLEET_CONSUMER_TYPE "INSTANCE"

/* One host of the hosts file. */
typedef struct CtlFleetHost {
        char *name;       /* placement.host_name: the root provider's name */
        char *url;        /* vgpud's base URL, normalized as --url */
        char *token_file; /* NULL: none; a relative one is taken from the hosts file's directory */
        char *token;      /* read from token_file by ctl_fleet_hosts_load(); NULL: none */
        char root_uuid[CTL_FLEET_UUID_STRLEN]; /* FLEET-2: UUIDv5 of "vgpud:<name>" */
} CtlFleetHost;

typedef struct CtlFleetHosts {
        CtlFleetHost *hosts;
        size_t n_hosts;
} CtlFleetHosts;

void ctl_fleet_hosts_done(CtlFleetHosts *h);

/*
 * The hosts file, JSON:
 *   {"hosts": [{"name": "gpu-1", "url": "http://10.0.0.1:8080", "token_file": "gpu-1.token"}]}
 * parsed strictly: duplicate keys, unknown keys, an empty list, more than CTL_FLEET_HOSTS_MAX
 * hosts, an invalid name (fleet_host_name_is_valid()), a name or URL given twice, or a bad URL
 * are -EINVAL with *error naming the entry. `dir` is the file's directory, for relative token
 * files. No file is read.
 */
int ctl_fleet_hosts_parse(const char *text, size_t size, const char *dir, CtlFleetHosts *ret,
                          char **error);
/* Reads and parses the hosts file and each host's token file (-errno, *error names the file). */
int ctl_fleet_hosts_load(const char *path, CtlFleetHosts *ret, char **error);
/* The host of that name, or NULL. */
const CtlFleetHost *ctl_fleet_hosts_find(const CtlFleetHosts *h, const char *name);

/*
 * The PF address that FLEET-2's provider name `<host_name>_pci_<dddd>_<bb>_<dd>_<f>` stands for.
 * -EINVAL for any other name.
 */
int ctl_fleet_pf_from_provider_name(const char *host_name, const char *provider_name,
                                    char ret[static PCI_ADDRESS_STRLEN]);

/*
 * One allocation candidate: a single provider with the request group's resources (borrowed
 * from the parsed answer), its tree's root, and the VGPU units it has free.
 */
typedef struct CtlFleetCandidate {
        char provider_uuid[CTL_FLEET_UUID_STRLEN];
        char root_uuid[CTL_FLEET_UUID_STRLEN];
        json_t *resources; /* {"VGPU": 1, ...}, borrowed */
        int64_t free_vgpu; /* capacity - used of the provider summary's VGPU */
        size_t host;       /* index in the hosts file */
} CtlFleetCandidate;

/*
 * The candidates of a GET /allocation_candidates answer that vgpuctl can act on: allocation
 * requests with exactly one provider whose root is a host of the hosts file; the others are
 * skipped (another scheduler's tree, or an answer that split the group). Ordered to pack:
 * fewest free VGPU units first, which keeps whole cards free for large profiles, then the
 * hosts file's order, then the provider uuid. -EBADMSG (with *error) when the answer does not
 * have 1.39's shape. *ret is NULL and *ret_n 0 when nothing is left.
 */
int ctl_fleet_candidates_parse(json_t *body, const CtlFleetHosts *hosts, CtlFleetCandidate **ret,
                               size_t *ret_n, char **error);

/*
 * Which host and PF a candidate's provider is: its root names the host, its FLEET-2 name the
 * PF, and the provider's uuid must be the one FLEET-2 derives from both (a provider that only
 * looks like a vgpud PF is refused). -ENOENT when the root is no host of the file, -EINVAL
 * otherwise, with *error naming the provider.
 */
int ctl_fleet_candidate_map(const CtlFleetHosts *hosts, const char *provider_uuid,
                            const char *root_uuid, const char *provider_name, size_t *ret_host,
                            char ret_pf[static PCI_ADDRESS_STRLEN], char **error);

typedef enum CtlFleetOutcome {
        CTL_FLEET_CREATED, /* 2xx */
        /* the host cannot place it: 409 insufficient_resources (FLEET-6), 503
         * placement_disabled, or Placement refused the allocation's write with a 409 */
        CTL_FLEET_REFUSED,
        CTL_FLEET_FAILED, /* anything else: the request itself is wrong, or the host failed */
} CtlFleetOutcome;

/* A host's answer to POST /instances as an outcome. code may be NULL (no API-11 body). */
CtlFleetOutcome ctl_fleet_classify(long status, const char *code);

typedef enum CtlFleetStep {
        CTL_FLEET_STEP_DONE,    /* created */
        CTL_FLEET_STEP_MOVE,    /* move the allocation to the next candidate and try it */
        CTL_FLEET_STEP_GIVE_UP, /* refused everywhere tried: delete the allocation, fail */
        CTL_FLEET_STEP_FAIL,    /* delete the allocation (vgpud did on its side) and fail */
} CtlFleetStep;

/*
 * The reschedule decision after `tried` hosts (1 = the first candidate) of n_candidates have
 * answered, the last with outcome o: a refusal moves on while a candidate is left and fewer than
 * CTL_FLEET_MOVES_MAX moves were made.
 */
CtlFleetStep ctl_fleet_next_step(CtlFleetOutcome o, unsigned tried, size_t n_candidates);

/* Runs a fleet command; a CTL_EXIT_* status. */
int ctl_fleet_run(const CtlArgs *a, const CtlEnv *env);
