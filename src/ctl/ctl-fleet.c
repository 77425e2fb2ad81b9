/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpuctl fleet (FLEET-7): the hosts file, Placement's candidates and the reschedule on a host's
 * refusal. The pure parts (the hosts file, the candidates, their mapping to hosts and PFs, the
 * reschedule decision) come first and are unit-tested in tests/ctl/test-ctl-fleet.c; the
 * commands after them only make requests and print.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <sys/random.h>

#include "ctl.h"
#include "fleet/fleet.h"
#include "gpu/gpu.h"

_Static_assert(CTL_FLEET_UUID_STRLEN == FLEET_UUID_STRLEN, "uuid length differs from fleet's");

/* ---- the hosts file ---------------------------------------------------------------------------
 */

static void host_done(CtlFleetHost *h)
{
        free(h->name);
        free(h->url);
        free(h->token_file);
        if (h->token)
                explicit_bzero(h->token, strlen(h->token));
        free(h->token);
        *h = (CtlFleetHost){};
}

void ctl_fleet_hosts_done(CtlFleetHosts *h)
{
        for (size_t i = 0; h->hosts && i < h->n_hosts; i++)
                host_done(&h->hosts[i]);
        free(h->hosts);
        *h = (CtlFleetHosts){};
}

const CtlFleetHost *ctl_fleet_hosts_find(const CtlFleetHosts *h, const char *name)
{
        for (size_t i = 0; i < h->n_hosts; i++)
                if (streq(h->hosts[i].name, name))
                        return &h->hosts[i];
        return NULL;
}

static int host_parse(json_t *entry, size_t index, const char *dir, CtlFleetHost *ret, char **error)
{
        _cleanup_(host_done) CtlFleetHost h = {};
        const char *name, *url, *token_file = NULL;
        json_error_t e;
        int r;

        if (json_unpack_ex(entry, &e, JSON_STRICT, "{s:s, s:s, s?:s}", "name", &name, "url", &url,
                           "token_file", &token_file) < 0)
                return error_set(error, -EINVAL,
                                 "host %zu: %s (expected {\"name\", \"url\", \"token_file\"?})",
                                 index + 1, e.text);
        if (!fleet_host_name_is_valid(name))
                return error_set(error, -EINVAL,
                                 "host %zu: invalid name \"%s\": expected placement.host_name, 1 "
                                 "to %d letters, digits, '-', '.' and '_'",
                                 index + 1, name, FLEET_HOST_NAME_MAX);
        h.name = strdup(name);
        if (!h.name)
                return error_set_oom(error);

        _cleanup_free_ char *source = NULL;
        if (strprintf(&source, "host %s: url", name) < 0)
                return error_set_oom(error);
        r = ctl_url_normalize(source, url, &h.url, error);
        if (r < 0)
                return r;

        if (token_file) {
                if (!*token_file)
                        return error_set(error, -EINVAL, "host %s: token_file is empty", name);
                /* Relative to the hosts file, so that the file and its tokens move together. */
                if (token_file[0] == '/' || !dir)
                        h.token_file = strdup(token_file);
                else if (strprintf(&h.token_file, "%s/%s", dir, token_file) < 0)
                        h.token_file = NULL;
                if (!h.token_file)
                        return error_set_oom(error);
        }

        r = fleet_root_uuid(name, h.root_uuid);
        if (r < 0)
                return error_set(error, r, "host %s: root provider uuid: %s", name, strerror(-r));
        *ret = h;
        h = (CtlFleetHost){};
        return 0;
}

int ctl_fleet_hosts_parse(const char *text, size_t size, const char *dir, CtlFleetHosts *ret,
                          char **error)
{
        _cleanup_(ctl_fleet_hosts_done) CtlFleetHosts hosts = {};
        json_error_t e;
        json_t *list;

        json_auto_t *j = json_loadb(text, size, JSON_REJECT_DUPLICATES, &e);
        if (!j)
                return error_set(error, -EINVAL, "line %d: %s", e.line, e.text);
        if (json_unpack_ex(j, &e, JSON_STRICT, "{s:o}", "hosts", &list) < 0)
                return error_set(error, -EINVAL, "%s (expected {\"hosts\": [...]})", e.text);
        if (!json_is_array(list) || json_array_size(list) == 0 ||
            json_array_size(list) > CTL_FLEET_HOSTS_MAX)
                return error_set(error, -EINVAL, "\"hosts\" must be a list of 1 to %d hosts",
                                 CTL_FLEET_HOSTS_MAX);

        hosts.hosts = calloc(json_array_size(list), sizeof *hosts.hosts);
        if (!hosts.hosts)
                return error_set_oom(error);
        size_t i;
        json_t *entry;
        json_array_foreach (list, i, entry) {
                CtlFleetHost h;
                int r = host_parse(entry, i, dir, &h, error);
                if (r < 0)
                        return r;
                hosts.hosts[hosts.n_hosts++] = h;
                for (size_t k = 0; k + 1 < hosts.n_hosts; k++) {
                        if (streq(hosts.hosts[k].name, h.name))
                                return error_set(error, -EINVAL, "host %s is listed twice", h.name);
                        if (streq(hosts.hosts[k].url, h.url))
                                return error_set(error, -EINVAL,
                                                 "hosts %s and %s have the same url %s",
                                                 hosts.hosts[k].name, h.name, h.url);
                }
        }
        *ret = hosts;
        hosts = (CtlFleetHosts){};
        return 0;
}

/* A host's token file, as --token-file is read: one trailing newline dropped. */
static int host_read_token(CtlFleetHost *h, char **error)
{
        _cleanup_free_ char *buf = NULL, *source = NULL;
        size_t size;

        int r = read_file_at(AT_FDCWD, h->token_file, CTL_TOKEN_MAX + 2, &buf, &size);
        if (r == -EFBIG)
                return error_set(error, r, "host %s: token_file %s: larger than a token can be",
                                 h->name, h->token_file);
        if (r < 0)
                return error_set(error, r, "host %s: token_file %s: %s", h->name, h->token_file,
                                 strerror(-r));
        if (strlen(buf) != size)
                return error_set(error, -EINVAL, "host %s: token_file %s: contains a NUL byte",
                                 h->name, h->token_file);
        if (size > 0 && buf[size - 1] == '\n')
                buf[size - 1] = 0;
        if (strprintf(&source, "host %s: token_file %s", h->name, h->token_file) < 0)
                return error_set_oom(error);
        r = ctl_token_check(source, buf, error);
        if (r < 0)
                return r;
        h->token = TAKE_PTR(buf);
        return 0;
}

int ctl_fleet_hosts_load(const char *path, CtlFleetHosts *ret, char **error)
{
        _cleanup_(ctl_fleet_hosts_done) CtlFleetHosts hosts = {};
        _cleanup_free_ char *buf = NULL, *dir = NULL;
        size_t size;

        int r = read_file_at(AT_FDCWD, path, CTL_FLEET_HOSTS_FILE_MAX, &buf, &size);
        if (r == -EFBIG)
                return error_set(error, r, "--hosts %s: larger than %d bytes", path,
                                 CTL_FLEET_HOSTS_FILE_MAX);
        if (r < 0)
                return error_set(error, r, "--hosts %s: %s", path, strerror(-r));

        const char *slash = strrchr(path, '/');
        if (slash) {
                dir = strndup(path, slash == path ? 1 : (size_t)(slash - path));
                if (!dir)
                        return error_set_oom(error);
        }
        r = ctl_fleet_hosts_parse(buf, size, dir, &hosts, error);
        if (r < 0)
                return error_prefix(error, r, "--hosts %s", path);
        for (size_t i = 0; i < hosts.n_hosts; i++)
                if (hosts.hosts[i].token_file) {
                        r = host_read_token(&hosts.hosts[i], error);
                        if (r < 0)
                                return error_prefix(error, r, "--hosts %s", path);
                }
        *ret = hosts;
        hosts = (CtlFleetHosts){};
        return 0;
}

/* ---- candidates --------------------------------------------------------------------------- */

int ctl_fleet_pf_from_provider_name(const char *host_name, const char *provider_name,
                                    char ret[static PCI_ADDRESS_STRLEN])
{
        if (!fleet_host_name_is_valid(host_name))
                return -EINVAL;
        const char *rest = startswith(provider_name, host_name);
        rest = rest ? startswith(rest, "_pci_") : NULL;
        /* "dddd_bb_dd_f": the address's digits with its separators as '_' (FLEET-2). */
        if (!rest || strlen(rest) != PCI_ADDRESS_STRLEN - 1)
                return -EINVAL;
        char pf[PCI_ADDRESS_STRLEN];
        memcpy(pf, rest, sizeof pf);
        if (pf[4] != '_' || pf[7] != '_' || pf[10] != '_')
                return -EINVAL;
        pf[4] = pf[7] = ':';
        pf[10] = '.';
        if (!pci_address_is_valid(pf))
                return -EINVAL;
        memcpy(ret, pf, sizeof pf);
        return 0;
}

int ctl_fleet_candidate_map(const CtlFleetHosts *hosts, const char *provider_uuid,
                            const char *root_uuid, const char *provider_name, size_t *ret_host,
                            char ret_pf[static PCI_ADDRESS_STRLEN], char **error)
{
        size_t h = 0;
        while (h < hosts->n_hosts && !streq(hosts->hosts[h].root_uuid, root_uuid))
                h++;
        if (h == hosts->n_hosts)
                return error_set(error, -ENOENT,
                                 "provider %s: its root %s is no host of the hosts file",
                                 provider_uuid, root_uuid);
        const char *host = hosts->hosts[h].name;

        char pf[PCI_ADDRESS_STRLEN];
        if (ctl_fleet_pf_from_provider_name(host, provider_name, pf) < 0)
                return error_set(error, -EINVAL,
                                 "provider %s of host %s: name \"%s\" is not %s_pci_<dddd>_<bb>_"
                                 "<dd>_<f>",
                                 provider_uuid, host, provider_name, host);
        char want[FLEET_UUID_STRLEN];
        int r = fleet_pf_uuid(host, pf, want);
        if (r < 0)
                return error_set(error, r, "provider %s: uuid of %s: %s", provider_uuid, pf,
                                 strerror(-r));
        if (!streq(want, provider_uuid))
                return error_set(error, -EINVAL,
                                 "provider %s is named like %s's PF %s, whose uuid is %s",
                                 provider_uuid, host, pf, want);
        *ret_host = h;
        memcpy(ret_pf, pf, sizeof pf);
        return 0;
}

static bool is_uuid_text(const char *s)
{
        if (strlen(s) != FLEET_UUID_STRLEN - 1)
                return false;
        for (size_t i = 0; s[i]; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-' : hex_value_lower(s[i]) < 0)
                        return false;
        }
        return true;
}

static int compare_candidates(const void *a, const void *b)
{
        const CtlFleetCandidate *x = a, *y = b;
        if (x->free_vgpu != y->free_vgpu)
                return x->free_vgpu < y->free_vgpu ? -1 : 1;
        if (x->host != y->host)
                return x->host < y->host ? -1 : 1;
        return strcmp(x->provider_uuid, y->provider_uuid);
}

/* capacity - used of the summary's VGPU; 0 when the summary lacks it. */
static int64_t summary_free_vgpu(json_t *summary)
{
        json_int_t capacity = 0, used = 0;
        if (json_unpack(summary, "{s:{s:{s:I, s:I}}}", "resources", FLEET_RC_VGPU, "capacity",
                        &capacity, "used", &used) < 0)
                return 0;
        return capacity - used;
}

int ctl_fleet_candidates_parse(json_t *body, const CtlFleetHosts *hosts, CtlFleetCandidate **ret,
                               size_t *ret_n, char **error)
{
        json_t *requests, *summaries;
        json_error_t e;

        if (json_unpack_ex(body, &e, 0, "{s:o, s:o}", "allocation_requests", &requests,
                           "provider_summaries", &summaries) < 0 ||
            !json_is_array(requests) || !json_is_object(summaries))
                return error_set(error, -EBADMSG,
                                 "allocation candidates: expected \"allocation_requests\" (a "
                                 "list) and \"provider_summaries\" (an object)");

        _cleanup_free_ CtlFleetCandidate *c =
            calloc(json_array_size(requests) ? json_array_size(requests) : 1, sizeof *c);
        if (!c)
                return error_set_oom(error);
        size_t n = 0, i;
        json_t *request;
        json_array_foreach (requests, i, request) {
                json_t *allocations = json_object_get(request, "allocations");
                if (!json_is_object(allocations))
                        return error_set(error, -EBADMSG,
                                         "allocation request %zu has no \"allocations\" object",
                                         i + 1);
                /* One numbered group on one provider: anything else is not what was asked. */
                if (json_object_size(allocations) != 1)
                        continue;
                const char *uuid = json_object_iter_key(json_object_iter(allocations));
                json_t *resources =
                    json_object_get(json_object_get(allocations, uuid), "resources");
                json_t *summary = json_object_get(summaries, uuid);
                const char *root =
                    json_string_value(json_object_get(summary, "root_provider_uuid"));
                if (!is_uuid_text(uuid) || !json_is_object(resources) || !root ||
                    !is_uuid_text(root))
                        return error_set(error, -EBADMSG,
                                         "allocation request %zu: expected a provider uuid with "
                                         "\"resources\" and a summary naming its root",
                                         i + 1);
                size_t h = 0;
                while (h < hosts->n_hosts && !streq(hosts->hosts[h].root_uuid, root))
                        h++;
                if (h == hosts->n_hosts)
                        continue; /* another tree: not a host vgpuctl can call */
                CtlFleetCandidate *x = &c[n++];
                *x = (CtlFleetCandidate){
                    .resources = resources, .free_vgpu = summary_free_vgpu(summary), .host = h};
                memcpy(x->provider_uuid, uuid, FLEET_UUID_STRLEN);
                memcpy(x->root_uuid, root, FLEET_UUID_STRLEN);
        }
        if (n > 1)
                qsort(c, n, sizeof *c, compare_candidates);
        *ret = n ? TAKE_PTR(c) : NULL;
        *ret_n = n;
        return 0;
}

CtlFleetOutcome ctl_fleet_classify(long status, const char *code)
{
        if (status >= 200 && status <= 299)
                return CTL_FLEET_CREATED;
        if (status == 409 && streq_ptr(code, "insufficient_resources"))
                return CTL_FLEET_REFUSED;
        /* The host's placement is off (API-5): its Placement figures say so within one sync,
         * but a candidate read before that must move on, not fail the create. */
        if (status == 503 && streq_ptr(code, "placement_disabled"))
                return CTL_FLEET_REFUSED;
        return CTL_FLEET_FAILED;
}

CtlFleetStep ctl_fleet_next_step(CtlFleetOutcome o, unsigned tried, size_t n_candidates)
{
        switch (o) {
        case CTL_FLEET_CREATED:
                return CTL_FLEET_STEP_DONE;
        case CTL_FLEET_REFUSED:
                /* tried - 1 moves so far; one more is allowed while fewer than the maximum. */
                if (tried >= 1 && tried - 1 < CTL_FLEET_MOVES_MAX && tried < n_candidates)
                        return CTL_FLEET_STEP_MOVE;
                return CTL_FLEET_STEP_GIVE_UP;
        case CTL_FLEET_FAILED:
        default:
                return CTL_FLEET_STEP_FAIL;
        }
}

/* ---- talking to Placement and the hosts ------------------------------------------------------ */

typedef struct Fleet {
        const CtlArgs *args;
        const CtlEnv *env;
        CtlFleetHosts hosts;
        CtlArgs placement; /* .url only: Placement's token goes in X-Auth-Token */
        char *auth_header;
        const char *headers[3];
        /* Providers already mapped to a host and PF in this run (their names do not change). */
        struct {
                char uuid[FLEET_UUID_STRLEN];
                size_t host;
                char pf[PCI_ADDRESS_STRLEN];
                bool ok;
        } * mapped;
        size_t n_mapped;
} Fleet;

static void fleet_done(Fleet *f)
{
        ctl_fleet_hosts_done(&f->hosts);
        if (f->auth_header)
                explicit_bzero(f->auth_header, strlen(f->auth_header));
        free(f->auth_header);
        free(f->mapped);
}

/* The exit status of a failed exchange or check (OPS-8). */
static int exit_of(int r)
{
        switch (r) {
        case -EREMOTEIO: /* an error status */
        case -EBADMSG:   /* not the JSON expected */
        case -EMSGSIZE:  /* an answer too large */
        case -ENOMEM:
                return CTL_EXIT_API;
        default:
                return CTL_EXIT_CONNECT;
        }
}

static int fail(const Fleet *f, int r, const char *error)
{
        const char *text = r == -ENOMEM ? ERROR_OUT_OF_MEMORY : error ? error : strerror(-r);
        fprintf(f->env->err, "error: %s\n", text);
        return exit_of(r);
}

/* Placement's error body: {"errors": [{"status", "title", "detail", "code"?}]}. */
static const char *placement_detail(json_t *body)
{
        json_t *first = json_array_get(json_object_get(body, "errors"), 0);
        const char *d = json_string_value(json_object_get(first, "detail"));
        return d ? d : "no error detail";
}

/*
 * One request to Placement. A non-empty answer must be strict JSON when the status is 2xx; an
 * error answer's body is kept when it parses. *ret_body may be NULL (204, or an error without
 * JSON).
 */
static int placement_call(Fleet *f, const char *method, const char *path, json_t *body,
                          long *ret_status, json_t **ret_body, char **error)
{
        _cleanup_(ctl_response_done) CtlResponse resp = {};
        _cleanup_free_ char *text = NULL;

        if (body) {
                text = json_dumps(body, JSON_COMPACT);
                if (!text)
                        return error_set_oom(error);
        }
        const CtlRequest req = {
            .method = method,
            .path = path,
            .json_body = text,
            .accept = "application/json",
            .timeout_ms = f->env->timeout_ms,
            .headers = f->headers,
            .peer = "Placement",
        };
        int r = ctl_http_request(&f->placement, f->env, &req, &resp, error);
        if (r < 0)
                return r;

        json_t *j = NULL;
        if (resp.size > 0) {
                json_error_t e;
                j = json_loadb(resp.body, resp.size, JSON_REJECT_DUPLICATES, &e);
                if (!j && resp.status >= 200 && resp.status <= 299)
                        return error_set(error, -EBADMSG,
                                         "%s %s: invalid JSON from Placement (HTTP %ld): %s",
                                         method, path, resp.status, e.text);
        }
        *ret_status = resp.status;
        *ret_body = j;
        return 0;
}

/* A GET that must answer 200 with a JSON object. */
static int placement_get(Fleet *f, const char *path, json_t **ret, char **error)
{
        json_auto_t *body = NULL;
        long status;

        int r = placement_call(f, "GET", path, NULL, &status, &body, error);
        if (r < 0)
                return r;
        if (status != 200)
                return error_set(error, -EREMOTEIO, "Placement: GET %s: HTTP %ld: %s", path, status,
                                 placement_detail(body));
        if (!json_is_object(body))
                return error_set(error, -EBADMSG, "Placement: GET %s: not a JSON object", path);
        *ret = TAKE_PTR(body);
        return 0;
}

static int fleet_init(Fleet *f, const CtlArgs *a, const CtlEnv *env)
{
        _cleanup_free_ char *error = NULL;

        *f = (Fleet){.args = a, .env = env};
        f->placement.url = a->placement_url;
        int r = ctl_fleet_hosts_load(a->hosts_file, &f->hosts, &error);
        if (r < 0) {
                fprintf(env->err, "vgpuctl: %s\n", r == -ENOMEM ? ERROR_OUT_OF_MEMORY : error);
                return r == -ENOMEM ? CTL_EXIT_API : CTL_EXIT_USAGE;
        }
        if (strprintf(&f->auth_header, "X-Auth-Token: %s",
                      a->placement_token ? a->placement_token : "admin") < 0) {
                fputs("vgpuctl: out of memory\n", env->err);
                return CTL_EXIT_API;
        }
        f->headers[0] = "OpenStack-API-Version: placement " FLEET_MICROVERSION;
        f->headers[1] = f->auth_header;
        return CTL_EXIT_OK;
}

static CtlArgs host_args(const CtlFleetHost *h)
{
        return (CtlArgs){.url = h->url, .token = h->token};
}

/* An API-11 error of a host, as vgpuctl prints the daemon's errors. */
static void print_host_error(const Fleet *f, const CtlFleetHost *h, const CtlResponse *resp)
{
        json_auto_t *body = json_loadb(resp->body, resp->size, JSON_REJECT_DUPLICATES, NULL);
        const char *code, *message;

        fprintf(f->env->err, "error: host %s: ", h->name);
        if (body && json_unpack(body, "{s:s, s:s}", "code", &code, "message", &message) == 0) {
                ctl_print_sanitized(f->env->err, code);
                fputs(": ", f->env->err);
                ctl_print_sanitized(f->env->err, message);
                fprintf(f->env->err, " (HTTP %ld)\n", resp->status);
        } else {
                fprintf(f->env->err, "HTTP %ld without a JSON error body\n", resp->status);
        }
}

static int print_json(const Fleet *f, json_t *j)
{
        if (json_dumpf(j, f->env->out, JSON_INDENT(2) | JSON_SORT_KEYS) < 0)
                return CTL_EXIT_API;
        fputc('\n', f->env->out);
        return CTL_EXIT_OK;
}

/* ---- fleet hosts ---------------------------------------------------------------------------- */

/* "ready", "not ready (HTTP n)" or "unreachable": what /readyz says, which needs no token. */
static int host_readiness(const Fleet *f, const CtlFleetHost *h, char **ret)
{
        _cleanup_(ctl_response_done) CtlResponse resp = {};
        _cleanup_free_ char *error = NULL;
        const CtlArgs ha = {.url = h->url};
        const CtlRequest req = {
            .method = "GET",
            .path = "/readyz",
            .accept = "application/json",
            .timeout_ms = f->env->timeout_ms,
        };
        int r = ctl_http_request(&ha, f->env, &req, &resp, &error);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return strdup_nullable("unreachable", ret);
        if (resp.status == 200)
                return strdup_nullable("ready", ret);
        return strprintf(ret, "not ready (HTTP %ld)", resp.status) < 0 ? -ENOMEM : 0;
}

static int run_hosts(Fleet *f)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        _cleanup_free_ char *error = NULL;
        json_auto_t *out = json_array();
        int r;

        if (!out || ctl_table_init(&t, 5) < 0)
                return fail(f, -ENOMEM, NULL);
        const char *header[] = {"NAME", "ROOT PROVIDER", "PLACEMENT", "VGPUD", "URL"};
        if (ctl_table_add_row(&t, header) < 0)
                return fail(f, -ENOMEM, NULL);

        for (size_t i = 0; i < f->hosts.n_hosts; i++) {
                const CtlFleetHost *h = &f->hosts.hosts[i];
                _cleanup_free_ char *path = NULL, *ready = NULL;
                json_auto_t *body = NULL;
                long status;

                if (strprintf(&path, "/resource_providers/%s", h->root_uuid) < 0)
                        return fail(f, -ENOMEM, NULL);
                r = placement_call(f, "GET", path, NULL, &status, &body, &error);
                if (r < 0)
                        return fail(f, r, error);
                if (status != 200 && status != 404) {
                        error_set(&error, -EREMOTEIO, "Placement: GET %s: HTTP %ld: %s", path,
                                  status, placement_detail(body));
                        return fail(f, -EREMOTEIO, error);
                }
                r = host_readiness(f, h, &ready);
                if (r < 0)
                        return fail(f, r, NULL);

                const char *row[] = {h->name, h->root_uuid, status == 200 ? "yes" : "missing",
                                     ready, h->url};
                if (ctl_table_add_row(&t, row) < 0 ||
                    json_array_append_new(
                        out,
                        json_pack("{s:s, s:s, s:s, s:b, s:b, s:s}", "name", h->name, "url", h->url,
                                  "root_provider_uuid", h->root_uuid, "in_placement", status == 200,
                                  "ready", streq(ready, "ready"), "vgpud", ready)) < 0)
                        return fail(f, -ENOMEM, NULL);
        }
        if (f->args->json) {
                json_auto_t *doc = json_pack("{s:O}", "hosts", out);
                return doc ? print_json(f, doc) : fail(f, -ENOMEM, NULL);
        }
        return ctl_table_print(&t, f->env->out, "") < 0 ? CTL_EXIT_API : CTL_EXIT_OK;
}

/* ---- fleet resources ------------------------------------------------------------------------ */

static uint64_t inventory_figure(json_t *inv, const char *rc, const char *key)
{
        json_int_t v = json_integer_value(json_object_get(json_object_get(inv, rc), key));
        return v > 0 ? (uint64_t)v : 0;
}

/* What Placement would still allocate of a class: total - reserved - used, at least 0. */
static uint64_t free_of(json_t *inventories, json_t *usages, const char *rc)
{
        uint64_t total = inventory_figure(inventories, rc, "total");
        uint64_t taken = inventory_figure(inventories, rc, "reserved");
        json_int_t used = json_integer_value(json_object_get(usages, rc));
        taken += used > 0 ? (uint64_t)used : 0;
        return total > taken ? total - taken : 0;
}

/* The per-size classes as "1G 30, 2G 22, ..." by size. */
static int format_places(json_t *inventories, json_t *usages, char **ret)
{
        _cleanup_free_ char *s = NULL;
        for (uint64_t gib = 1; gib <= 1024; gib++) {
                _cleanup_free_ char *rc = NULL;
                if (fleet_place_class(gib, &rc) < 0)
                        return -ENOMEM;
                if (!json_object_get(inventories, rc))
                        continue;
                if (strextend(&s, "%s%" PRIu64 "G %" PRIu64, s ? ", " : "", gib,
                              free_of(inventories, usages, rc)) < 0)
                        return -ENOMEM;
        }
        return strdup_nullable(s ? s : "-", ret);
}

static bool json_strings_contain(json_t *list, const char *s)
{
        size_t i;
        json_t *v;
        json_array_foreach (list, i, v)
                if (streq_ptr(json_string_value(v), s))
                        return true;
        return false;
}

static int compare_by_name(const void *a, const void *b)
{
        const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
        const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));
        return strcmp(x ? x : "", y ? y : "");
}

/* One PF provider's inventories, usages and traits as one JSON object. */
static int provider_read(Fleet *f, const CtlFleetHost *h, json_t *p, json_t **ret, char **error)
{
        const char *uuid = json_string_value(json_object_get(p, "uuid"));
        const char *name = json_string_value(json_object_get(p, "name"));
        json_auto_t *inv = NULL, *use = NULL, *tr = NULL;
        _cleanup_free_ char *path = NULL;
        int r;

        if (!uuid || !name || !is_uuid_text(uuid))
                return error_set(error, -EBADMSG,
                                 "Placement: a provider of %s without uuid or "
                                 "name",
                                 h->name);
        const char *parts[] = {"inventories", "usages", "traits"};
        json_t **into[] = {&inv, &use, &tr};
        for (size_t i = 0; i < ELEMENTSOF(parts); i++) {
                free(path);
                path = NULL;
                if (strprintf(&path, "/resource_providers/%s/%s", uuid, parts[i]) < 0)
                        return error_set_oom(error);
                r = placement_get(f, path, into[i], error);
                if (r < 0)
                        return r;
        }
        char pf[PCI_ADDRESS_STRLEN] = "";
        bool is_pf = ctl_fleet_pf_from_provider_name(h->name, name, pf) >= 0;
        json_t *inventories = json_object_get(inv, "inventories");
        json_t *usages = json_object_get(use, "usages");
        json_t *traits = json_object_get(tr, "traits");
        json_t *o = json_pack("{s:s, s:s, s:s?, s:O?, s:O?, s:O?}", "uuid", uuid, "name", name,
                              "pf", is_pf ? pf : NULL, "inventories", inventories, "usages", usages,
                              "traits", traits);
        if (!o)
                return error_set_oom(error);
        *ret = o;
        return 0;
}

static int run_resources(Fleet *f)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        _cleanup_free_ char *error = NULL;
        json_auto_t *out = json_array();
        int r;

        if (!out || ctl_table_init(&t, 6) < 0)
                return fail(f, -ENOMEM, NULL);
        const char *header[] = {"HOST",         "PF",      "VGPU T/R/U",
                                "FB_GIB T/R/U", "DRAINED", "FREE PLACEMENTS"};
        if (ctl_table_add_row(&t, header) < 0)
                return fail(f, -ENOMEM, NULL);

        for (size_t i = 0; i < f->hosts.n_hosts; i++) {
                const CtlFleetHost *h = &f->hosts.hosts[i];
                _cleanup_free_ char *path = NULL;
                json_auto_t *tree = NULL, *providers = json_array();

                if (!providers ||
                    strprintf(&path, "/resource_providers?in_tree=%s", h->root_uuid) < 0)
                        return fail(f, -ENOMEM, NULL);
                r = placement_get(f, path, &tree, &error);
                if (r < 0)
                        return fail(f, r, error);
                json_t *list = json_object_get(tree, "resource_providers");
                size_t n = json_array_size(list);
                _cleanup_free_ json_t **sorted = calloc(n ? n : 1, sizeof *sorted);
                if (!sorted)
                        return fail(f, -ENOMEM, NULL);
                for (size_t k = 0; k < n; k++)
                        sorted[k] = json_array_get(list, k);
                qsort(sorted, n, sizeof *sorted, compare_by_name);

                bool any = false;
                for (size_t k = 0; k < n; k++) {
                        const char *parent =
                            json_string_value(json_object_get(sorted[k], "parent_provider_uuid"));
                        if (!streq_ptr(parent, h->root_uuid))
                                continue; /* the root itself has no inventory */
                        json_auto_t *p = NULL;
                        r = provider_read(f, h, sorted[k], &p, &error);
                        if (r < 0)
                                return fail(f, r, error);
                        json_t *inv = json_object_get(p, "inventories");
                        json_t *use = json_object_get(p, "usages");
                        _cleanup_free_ char *vgpu = NULL, *fb = NULL, *places = NULL;
                        if (strprintf(&vgpu, "%" PRIu64 "/%" PRIu64 "/%" PRIu64,
                                      inventory_figure(inv, FLEET_RC_VGPU, "total"),
                                      inventory_figure(inv, FLEET_RC_VGPU, "reserved"),
                                      (uint64_t)json_integer_value(
                                          json_object_get(use, FLEET_RC_VGPU))) < 0 ||
                            strprintf(&fb, "%" PRIu64 "/%" PRIu64 "/%" PRIu64,
                                      inventory_figure(inv, FLEET_RC_FB, "total"),
                                      inventory_figure(inv, FLEET_RC_FB, "reserved"),
                                      (uint64_t)json_integer_value(
                                          json_object_get(use, FLEET_RC_FB))) < 0 ||
                            format_places(inv, use, &places) < 0)
                                return fail(f, -ENOMEM, NULL);
                        const char *pf = json_string_value(json_object_get(p, "pf"));
                        bool drained =
                            json_strings_contain(json_object_get(p, "traits"), FLEET_TRAIT_DRAINED);
                        const char *row[] = {
                            h->name,
                            pf ? pf : json_string_value(json_object_get(p, "name")),
                            vgpu,
                            fb,
                            drained ? "yes" : "no",
                            places};
                        if (ctl_table_add_row(&t, row) < 0 || json_array_append(providers, p) < 0)
                                return fail(f, -ENOMEM, NULL);
                        any = true;
                }
                if (!any) {
                        const char *row[] = {h->name, "-", "-",
                                             "-",     "-", "no PF provider in Placement"};
                        if (ctl_table_add_row(&t, row) < 0)
                                return fail(f, -ENOMEM, NULL);
                }
                if (json_array_append_new(out, json_pack("{s:s, s:s, s:O}", "name", h->name,
                                                         "root_provider_uuid", h->root_uuid,
                                                         "providers", providers)) < 0)
                        return fail(f, -ENOMEM, NULL);
        }
        if (f->args->json) {
                json_auto_t *doc = json_pack("{s:O}", "hosts", out);
                return doc ? print_json(f, doc) : fail(f, -ENOMEM, NULL);
        }
        return ctl_table_print(&t, f->env->out, "") < 0 ? CTL_EXIT_API : CTL_EXIT_OK;
}

/* ---- fleet create --------------------------------------------------------------------------- */

/* A random (version 4) uuid for a new Placement consumer. */
static int consumer_uuid(char ret[static FLEET_UUID_STRLEN])
{
        uint8_t b[16];
        size_t got = 0;
        while (got < sizeof b) {
                ssize_t n = getrandom(b + got, sizeof b - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                got += (size_t)n;
        }
        b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
        b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;
        for (size_t i = 0; i < 16; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10)
                        ret[o++] = '-';
                ret[o++] = hex[b[i] >> 4];
                ret[o++] = hex[b[i] & 0xf];
        }
        ret[o] = 0;
        return 0;
}

/* The host and PF of a candidate, asked of Placement once per provider and run. */
static int candidate_resolve(Fleet *f, const CtlFleetCandidate *c, size_t *ret_host,
                             char ret_pf[static PCI_ADDRESS_STRLEN], char **error)
{
        for (size_t i = 0; i < f->n_mapped; i++)
                if (streq(f->mapped[i].uuid, c->provider_uuid)) {
                        if (!f->mapped[i].ok)
                                return -EINVAL;
                        *ret_host = f->mapped[i].host;
                        memcpy(ret_pf, f->mapped[i].pf, PCI_ADDRESS_STRLEN);
                        return 0;
                }

        _cleanup_free_ char *path = NULL;
        json_auto_t *p = NULL;
        if (strprintf(&path, "/resource_providers/%s", c->provider_uuid) < 0)
                return error_set_oom(error);
        int r = placement_get(f, path, &p, error);
        if (r < 0)
                return r;
        const char *name = json_string_value(json_object_get(p, "name"));
        size_t host = 0;
        char pf[PCI_ADDRESS_STRLEN] = "";
        r = ctl_fleet_candidate_map(&f->hosts, c->provider_uuid, c->root_uuid, name ? name : "",
                                    &host, pf, error);
        if (r < 0 && r != -EINVAL && r != -ENOENT)
                return r;

        void *n = realloc(f->mapped, (f->n_mapped + 1) * sizeof *f->mapped);
        if (!n)
                return error_set_oom(error);
        f->mapped = n;
        f->mapped[f->n_mapped].host = host;
        f->mapped[f->n_mapped].ok = r >= 0;
        memcpy(f->mapped[f->n_mapped].uuid, c->provider_uuid, FLEET_UUID_STRLEN);
        memcpy(f->mapped[f->n_mapped].pf, pf, PCI_ADDRESS_STRLEN);
        f->n_mapped++;
        if (r < 0) {
                /* Not a vgpud PF after all: skipped, and said once. */
                fprintf(f->env->err, "warning: skipping candidate: %s\n", *error);
                return -EINVAL;
        }
        *ret_host = host;
        memcpy(ret_pf, pf, PCI_ADDRESS_STRLEN);
        return 0;
}

/* The consumer's generation now, or JSON null when Placement holds no allocation for it (a
 * consumer without allocations is removed, and a new one is written with null). */
static int consumer_generation(Fleet *f, const char *consumer, json_t **ret, char **error)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *body = NULL;
        if (strprintf(&path, "/allocations/%s", consumer) < 0)
                return error_set_oom(error);
        int r = placement_get(f, path, &body, error);
        if (r < 0)
                return r;
        json_t *g = json_object_get(body, "consumer_generation");
        *ret = json_is_integer(g) ? json_incref(g) : json_null();
        return 0;
}

static int allocation_delete(Fleet *f, const char *consumer, char **error)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *body = NULL;
        long status;
        if (strprintf(&path, "/allocations/%s", consumer) < 0)
                return error_set_oom(error);
        int r = placement_call(f, "DELETE", path, NULL, &status, &body, error);
        if (r < 0)
                return r;
        if (status != 204 && status != 404)
                return error_set(error, -EREMOTEIO, "Placement: DELETE %s: HTTP %ld: %s", path,
                                 status, placement_detail(body));
        return 0;
}

/*
 * PUT /allocations/{consumer} of one candidate. *ret_refused is set when Placement answered 409
 * (the capacity went to someone else since the candidates were read, or the consumer moved):
 * the caller tries the next candidate.
 */
static int allocation_put(Fleet *f, const char *consumer, const CtlFleetCandidate *c,
                          json_t *generation, bool *ret_refused, char **error)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *answer = NULL;
        long status;

        json_auto_t *body = json_pack(
            "{s:{s:{s:O}}, s:s, s:s, s:O, s:s}", "allocations", c->provider_uuid, "resources",
            c->resources, "project_id", CTL_FLEET_PROJECT_ID, "user_id", CTL_FLEET_USER_ID,
            "consumer_generation", generation, "consumer_type", CTL_FLEET_CONSUMER_TYPE);
        if (!body || strprintf(&path, "/allocations/%s", consumer) < 0)
                return error_set_oom(error);
        int r = placement_call(f, "PUT", path, body, &status, &answer, error);
        if (r < 0)
                return r;
        if (status == 409) {
                /* Not a failure: the refusal's text for the list of refusals. */
                free(*error);
                *error = strdup(placement_detail(answer));
                if (!*error)
                        return -ENOMEM;
                *ret_refused = true;
                return 0;
        }
        if (status != 204)
                return error_set(error, -EREMOTEIO, "Placement: PUT %s: HTTP %ld: %s", path, status,
                                 placement_detail(answer));
        *ret_refused = false;
        return 0;
}

typedef struct Placed {
        json_t *instance; /* the host's answer */
        size_t host;
        char pf[PCI_ADDRESS_STRLEN];
        char consumer[FLEET_UUID_STRLEN];
        unsigned reschedules;
        json_t *refusals; /* ["<host>: <code>: <message>", ...] */
} Placed;

static void placed_done(Placed *p)
{
        json_decref(p->instance);
        json_decref(p->refusals);
        *p = (Placed){};
}

/* The name of VM i of --count n: the name itself for one VM, "<name>-<i>" from 1 otherwise. */
static int vm_name(const char *name, uint32_t i, uint32_t n, char **ret)
{
        if (n == 1)
                return strdup_nullable(name, ret);
        return strprintf(ret, "%s-%" PRIu32, name, i + 1) < 0 ? -ENOMEM : 0;
}

/* A refusal, as listed when every host refused: "<host>: <code>: <message>". */
static int refusal_add(json_t *list, const char *host, const CtlResponse *resp, const char *text)
{
        _cleanup_free_ char *s = NULL;
        json_auto_t *body =
            resp ? json_loadb(resp->body, resp->size, JSON_REJECT_DUPLICATES, NULL) : NULL;
        const char *code = NULL, *message = NULL;
        if (body)
                (void)json_unpack(body, "{s:s, s:s}", "code", &code, "message", &message);
        int r = code ? strprintf(&s, "%s: %s: %s", host, code, message)
                     : strprintf(&s, "%s: %s", host, text ? text : "refused");
        if (r < 0)
                return -ENOMEM;
        return json_array_append_new(list, json_string(s)) < 0 ? -ENOMEM : 0;
}

typedef struct CreateContext {
        json_t *body; /* the API-9 body from the command line */
        const char *query;
        const char *profile;
} CreateContext;

/*
 * One VM: a consumer, the candidates, then the allocation written on the first, the host asked,
 * and on a refusal the allocation moved to the next (FLEET-7). Returns a CTL_EXIT_* status; the
 * error is printed here.
 */
static int create_one(Fleet *f, const CreateContext *cc, const char *name, Placed *ret)
{
        _cleanup_free_ char *error = NULL;
        _cleanup_free_ CtlFleetCandidate *cand = NULL;
        _cleanup_(placed_done) Placed placed = {.refusals = json_array()};
        json_auto_t *answer = NULL, *generation = json_null();
        size_t n = 0;
        int r;

        if (!placed.refusals || !generation)
                return fail(f, -ENOMEM, NULL);
        r = consumer_uuid(placed.consumer);
        if (r < 0) {
                error_set(&error, r, "random consumer uuid: %s", strerror(-r));
                return fail(f, r, error);
        }

        r = placement_get(f, cc->query, &answer, &error);
        if (r >= 0)
                r = ctl_fleet_candidates_parse(answer, &f->hosts, &cand, &n, &error);
        if (r < 0)
                return fail(f, r, error);

        /* Only the candidates that are a host's PF; the order stays the packing order. */
        size_t n_ok = 0;
        for (size_t i = 0; i < n; i++) {
                size_t host;
                char pf[PCI_ADDRESS_STRLEN];
                free(error);
                error = NULL;
                r = candidate_resolve(f, &cand[i], &host, pf, &error);
                if (r == -EINVAL)
                        continue;
                if (r < 0)
                        return fail(f, r, error);
                cand[n_ok] = cand[i];
                cand[n_ok].host = host;
                n_ok++;
        }
        if (n_ok == 0) {
                fprintf(f->env->err,
                        "error: %s: Placement has no candidate on the hosts of %s for %s (no PF "
                        "with a free placement of its size, or every such PF drained)\n",
                        name, f->args->hosts_file, cc->profile);
                return CTL_EXIT_API;
        }

        json_auto_t *body = json_deep_copy(cc->body);
        if (!body || json_object_set_new(body, "name", json_string(name)) < 0)
                return fail(f, -ENOMEM, NULL);

        bool allocated = false;
        for (unsigned tried = 1; tried <= n_ok; tried++) {
                const CtlFleetCandidate *c = &cand[tried - 1];
                const CtlFleetHost *h = &f->hosts.hosts[c->host];
                char pf[PCI_ADDRESS_STRLEN];
                size_t host;
                bool refused = false;
                CtlFleetOutcome outcome;
                _cleanup_(ctl_response_done) CtlResponse resp = {};

                free(error);
                error = NULL;
                r = candidate_resolve(f, c, &host, pf, &error);
                if (r >= 0 && allocated) {
                        json_decref(generation);
                        generation = NULL;
                        r = consumer_generation(f, placed.consumer, &generation, &error);
                }
                if (r >= 0)
                        r = allocation_put(f, placed.consumer, c, generation, &refused, &error);
                if (r < 0) {
                        int status = fail(f, r, error);
                        if (allocated)
                                (void)allocation_delete(f, placed.consumer, &error);
                        return status;
                }
                allocated = allocated || !refused;

                if (refused) {
                        if (refusal_add(placed.refusals, "Placement", NULL, error) < 0)
                                return fail(f, -ENOMEM, NULL);
                        outcome = CTL_FLEET_REFUSED;
                } else {
                        _cleanup_free_ char *text = NULL;
                        const CtlArgs ha = host_args(h);
                        json_t *key =
                            json_pack("{s:s, s:s}", "consumer", placed.consumer, "gpu", pf);
                        if (!key || json_object_set_new(body, "placement", key) < 0 ||
                            !(text = json_dumps(body, JSON_COMPACT)))
                                return fail(f, -ENOMEM, NULL);
                        const CtlRequest req = {
                            .method = "POST",
                            .path = "/instances",
                            .json_body = text,
                            .accept = "application/json",
                            .timeout_ms = f->env->lifecycle_timeout_ms,
                        };
                        r = ctl_http_request(&ha, f->env, &req, &resp, &error);
                        if (r == -ENOMEM || r == -EMSGSIZE)
                                return fail(f, r, error);
                        if (r == -ETIMEDOUT) {
                                /* The host may still create it: its allocation stays, and
                                 * vgpud's orphan audit removes it if no record came of it. */
                                fprintf(f->env->err,
                                        "error: %s\nhint: host %s goes on with the create; see "
                                        "'vgpuctl instances list' there (consumer %s)\n",
                                        error, h->name, placed.consumer);
                                return CTL_EXIT_CONNECT;
                        }
                        if (r < 0) {
                                /* No exchange at all: the host cannot have started anything. */
                                if (refusal_add(placed.refusals, h->name, NULL, error) < 0)
                                        return fail(f, -ENOMEM, NULL);
                                outcome = CTL_FLEET_REFUSED;
                        } else {
                                json_auto_t *eb =
                                    json_loadb(resp.body, resp.size, JSON_REJECT_DUPLICATES, NULL);
                                const char *code = json_string_value(json_object_get(eb, "code"));
                                outcome = ctl_fleet_classify(resp.status, code);
                                if (outcome == CTL_FLEET_REFUSED &&
                                    refusal_add(placed.refusals, h->name, &resp, NULL) < 0)
                                        return fail(f, -ENOMEM, NULL);
                        }
                }

                switch (ctl_fleet_next_step(outcome, tried, n_ok)) {
                case CTL_FLEET_STEP_DONE: {
                        json_error_t e;
                        placed.instance =
                            json_loadb(resp.body, resp.size, JSON_REJECT_DUPLICATES, &e);
                        if (!json_is_object(placed.instance)) {
                                fprintf(f->env->err,
                                        "error: host %s: invalid JSON in the response (HTTP "
                                        "%ld): %s\n",
                                        h->name, resp.status,
                                        placed.instance ? "not an object" : e.text);
                                return CTL_EXIT_API;
                        }
                        placed.host = host;
                        memcpy(placed.pf, pf, sizeof pf);
                        *ret = placed;
                        placed = (Placed){};
                        return CTL_EXIT_OK;
                }
                case CTL_FLEET_STEP_MOVE:
                        placed.reschedules++;
                        continue;
                case CTL_FLEET_STEP_GIVE_UP: {
                        free(error);
                        error = NULL;
                        if (allocated && allocation_delete(f, placed.consumer, &error) < 0)
                                fprintf(f->env->err, "warning: %s\n", error);
                        fprintf(f->env->err, "error: %s: refused by every host tried (%u):\n", name,
                                tried);
                        size_t i;
                        json_t *v;
                        json_array_foreach (placed.refusals, i, v) {
                                fputs("  ", f->env->err);
                                ctl_print_sanitized(f->env->err, json_string_value(v));
                                fputc('\n', f->env->err);
                        }
                        return CTL_EXIT_API;
                }
                case CTL_FLEET_STEP_FAIL:
                default:
                        print_host_error(f, h, &resp);
                        /* vgpud deletes it on its side (FLEET-6); this covers an older one. */
                        free(error);
                        error = NULL;
                        if (allocated && allocation_delete(f, placed.consumer, &error) < 0)
                                fprintf(f->env->err, "warning: %s\n", error);
                        return CTL_EXIT_API;
                }
        }
        return CTL_EXIT_API; /* not reached: the last candidate gives up */
}

/*
 * Placement refuses a query that names a trait it does not know (400). The profile's trait
 * exists once a host has that profile in its catalog (FLEET-4), so its absence means that no
 * host can place it; the drained trait appears only when some PF is first drained, so it is
 * created here, which Placement does idempotently.
 */
/* A trait some host must carry: 404 means no host can take the VM (FLEET-4, DISK-12). */
static int require_trait(Fleet *f, const char *trait, const char *offer, const char *what)
{
        _cleanup_free_ char *error = NULL, *path = NULL;
        json_auto_t *body = NULL;
        long status;

        if (strprintf(&path, "/traits/%s", trait) < 0)
                return fail(f, -ENOMEM, NULL);
        int r = placement_call(f, "GET", path, NULL, &status, &body, &error);
        if (r < 0)
                return fail(f, r, error);
        if (status == 404) {
                fprintf(f->env->err, "error: no host %s %s: Placement has no trait %s (%s)\n",
                        offer, what, trait, streq(offer, "offers") ? "FLEET-4" : "DISK-12");
                return CTL_EXIT_API;
        }
        if (status != 204 && status != 200) {
                fprintf(f->env->err, "error: Placement: GET %s: HTTP %ld: %s\n", path, status,
                        placement_detail(body));
                return CTL_EXIT_API;
        }
        return CTL_EXIT_OK;
}

static int ensure_traits(Fleet *f, const char *profile_trait, const char *image_trait)
{
        _cleanup_free_ char *error = NULL;
        json_auto_t *body = NULL;
        long status;

        int r = require_trait(f, profile_trait, "offers", f->args->profile);
        if (r == CTL_EXIT_OK && image_trait)
                r = require_trait(f, image_trait, "holds image", f->args->image);
        if (r != CTL_EXIT_OK)
                return r;
        r = placement_call(f, "PUT", "/traits/" FLEET_TRAIT_DRAINED, NULL, &status, &body, &error);
        if (r < 0)
                return fail(f, r, error);
        if (status != 201 && status != 204) {
                fprintf(f->env->err,
                        "error: Placement: PUT /traits/" FLEET_TRAIT_DRAINED ": HTTP %ld: %s\n",
                        status, placement_detail(body));
                return CTL_EXIT_API;
        }
        return CTL_EXIT_OK;
}

static const char *instance_vf(json_t *instance)
{
        const char *path =
            json_string_value(json_object_get(json_object_get(instance, "gpu"), "device_path"));
        const char *slash = path ? strrchr(path, '/') : NULL;
        return slash ? slash + 1 : path;
}

static int run_create(Fleet *f)
{
        const CtlArgs *a = f->args;
        _cleanup_free_ char *trait = NULL, *place = NULL, *query = NULL, *image_trait = NULL,
                            *image_required = NULL;
        json_auto_t *placed = json_array();
        unsigned reschedules = 0;
        int status = CTL_EXIT_OK;

        uint64_t gib = gpu_profile_framebuffer_mib(a->profile) / 1024;
        if (gib == 0) {
                fprintf(f->env->err,
                        "vgpuctl: --profile \"%s\": no framebuffer size in the name (such as "
                        "\"NVIDIA L40S-4Q\")\n",
                        a->profile);
                return CTL_EXIT_USAGE;
        }
        int r = fleet_profile_trait(a->profile, &trait);
        if (r == -EINVAL) {
                fprintf(f->env->err, "vgpuctl: --profile \"%s\": not a profile name\n", a->profile);
                return CTL_EXIT_USAGE;
        }
        if (r < 0 || fleet_place_class(gib, &place) < 0 || !placed)
                return fail(f, -ENOMEM, NULL);
        /* DISK-12: only a PF of a host that holds the image. */
        if (a->image) {
                r = fleet_image_trait(a->image, &image_trait);
                if (r >= 0)
                        r = strprintf(&image_required, ",%s", image_trait);
                if (r < 0)
                        return fail(f, r, NULL);
        }
        /* One numbered group (FLEET-3), on one provider, never on a drained PF (FLEET-4). */
        if (strprintf(&query,
                      "/allocation_candidates?resources1=" FLEET_RC_VGPU ":1," FLEET_RC_FB
                      ":%" PRIu64 ",%s:1&required1=%s%s,%%21" FLEET_TRAIT_DRAINED
                      "&group_policy=none&limit=%d",
                      gib, place, trait, image_required ? image_required : "",
                      CTL_FLEET_CANDIDATES_LIMIT) < 0)
                return fail(f, -ENOMEM, NULL);

        r = ensure_traits(f, trait, image_trait);
        if (r != CTL_EXIT_OK)
                return r;

        json_auto_t *body = json_loads(a->body, JSON_REJECT_DUPLICATES, NULL);
        if (!body)
                return fail(f, -ENOMEM, NULL);
        if (a->image) {
                /* The image is the root disk (DISK-5); a boot with nothing in it goes. */
                if (json_object_size(json_object_get(body, "boot")) == 0)
                        (void)json_object_del(body, "boot");
                if (json_object_set_new(body, "image", json_string(a->image)) < 0)
                        return fail(f, -ENOMEM, NULL);
        }
        const CreateContext cc = {.body = body, .query = query, .profile = a->profile};

        for (uint32_t i = 0; i < a->count; i++) {
                _cleanup_free_ char *name = NULL;
                _cleanup_(placed_done) Placed p = {};
                const char *base = json_string_value(json_object_get(body, "name"));
                if (vm_name(base, i, a->count, &name) < 0)
                        return fail(f, -ENOMEM, NULL);
                status = create_one(f, &cc, name, &p);
                if (status != CTL_EXIT_OK)
                        break;
                reschedules += p.reschedules;
                const CtlFleetHost *h = &f->hosts.hosts[p.host];
                const char *id = json_string_value(json_object_get(p.instance, "id"));
                const char *vf = instance_vf(p.instance);
                if (!a->json) {
                        fputs("created ", f->env->out);
                        ctl_print_sanitized(f->env->out, name);
                        fputs(" ", f->env->out);
                        ctl_print_sanitized(f->env->out, id ? id : "-");
                        fprintf(f->env->out, " on %s %s", h->name, p.pf);
                        if (vf) {
                                fputs(" VF ", f->env->out);
                                ctl_print_sanitized(f->env->out, vf);
                        }
                        if (p.reschedules)
                                fprintf(f->env->out, " (after %u refusal%s)", p.reschedules,
                                        p.reschedules == 1 ? "" : "s");
                        fputc('\n', f->env->out);
                        fflush(f->env->out);
                }
                if (json_array_append_new(
                        placed, json_pack("{s:s, s:s, s:s, s:s*, s:I, s:O, s:O}", "host", h->name,
                                          "pf", p.pf, "consumer", p.consumer, "vf", vf,
                                          "reschedules", (json_int_t)p.reschedules, "refusals",
                                          p.refusals, "instance", p.instance)) < 0)
                        return fail(f, -ENOMEM, NULL);
        }

        /* What was created is shown also when a later VM failed: the operator must know it. */
        if (a->json) {
                json_auto_t *doc = json_pack("{s:O, s:I}", "instances", placed, "reschedules",
                                             (json_int_t)reschedules);
                if (!doc)
                        return fail(f, -ENOMEM, NULL);
                int s = print_json(f, doc);
                return status != CTL_EXIT_OK ? status : s;
        }
        if (a->count > 1 || reschedules > 0)
                fprintf(f->env->out, "%zu of %" PRIu32 " created, %u reschedule%s\n",
                        json_array_size(placed), a->count, reschedules,
                        reschedules == 1 ? "" : "s");
        return status;
}

/* ---- fleet delete --------------------------------------------------------------------------- */

static int run_delete(Fleet *f)
{
        _cleanup_(ctl_response_done) CtlResponse resp = {};
        _cleanup_free_ char *error = NULL, *path = NULL;

        const CtlFleetHost *h = ctl_fleet_hosts_find(&f->hosts, f->args->host);
        if (!h) {
                fprintf(f->env->err, "vgpuctl: --host %s: not in %s\n", f->args->host,
                        f->args->hosts_file);
                return CTL_EXIT_USAGE;
        }
        if (strprintf(&path, "/instances/%s", f->args->target) < 0)
                return fail(f, -ENOMEM, NULL);
        const CtlArgs ha = host_args(h);
        const CtlRequest req = {
            .method = "DELETE",
            .path = path,
            .accept = "application/json",
            .timeout_ms = f->env->lifecycle_timeout_ms,
        };
        int r = ctl_http_request(&ha, f->env, &req, &resp, &error);
        if (r < 0)
                return fail(f, r, error);
        if (resp.status < 200 || resp.status > 299) {
                print_host_error(f, h, &resp);
                return CTL_EXIT_API;
        }
        /* vgpud deletes the consumer's allocation itself (FLEET-6). */
        if (!f->args->json)
                fprintf(f->env->out, "deleted instance %s on %s\n", f->args->target, h->name);
        return CTL_EXIT_OK;
}

int ctl_fleet_run(const CtlArgs *a, const CtlEnv *env)
{
        _cleanup_(fleet_done) Fleet f = {};

        int status = fleet_init(&f, a, env);
        if (status != CTL_EXIT_OK)
                return status;
        switch (a->command) {
        case CTL_COMMAND_FLEET_HOSTS:
                return run_hosts(&f);
        case CTL_COMMAND_FLEET_RESOURCES:
                return run_resources(&f);
        case CTL_COMMAND_FLEET_CREATE:
                return run_create(&f);
        case CTL_COMMAND_FLEET_DELETE:
                return run_delete(&f);
        default:
                return CTL_EXIT_USAGE;
        }
}
