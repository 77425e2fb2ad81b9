/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Human output of vgpuctl: the JSON shapes of SPEC API-4, API-6, API-7, API-10 and API-18 as
 * aligned tables. Keys the client does not use are ignored (see ctl.h); the keys it uses must have
 * the SPEC's types, or the answer is reported as unexpected rather than half printed.
 */
#include "ctl.h"

#define INT_STRLEN 24

static char *format_int(json_int_t v, char buf[static INT_STRLEN])
{
        snprintf(buf, INT_STRLEN, "%" JSON_INTEGER_FORMAT, v);
        return buf;
}

static int shape_error(char **error, const char *what, const json_error_t *e)
{
        return error_set(error, -EBADMSG, "unexpected %s in the response: %s", what, e->text);
}

/* A table or a memory stream that could not be built: only memory can fail them. */
static int format_failed(char **error, int r)
{
        return error_set(error, r, "format the answer: %s", strerror(-r));
}

/* ---- GET /resources (API-4, API-5) ----------------------------------------------------------- */

static int print_profiles(FILE *out, json_t *profiles, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        size_t i;
        json_t *p;
        int r;

        if (!json_is_array(profiles))
                return error_set(error, -EBADMSG,
                                 "unexpected profiles in the response: not an "
                                 "array");
        if (json_array_size(profiles) == 0) {
                fputs("no vGPU profiles\n", out);
                return 0;
        }

        r = ctl_table_init(&t, 3);
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"PROFILE", "FRAMEBUFFER", "AVAILABLE"});
        if (r < 0)
                return format_failed(error, r);

        json_array_foreach (profiles, i, p) {
                const char *name;
                json_t *framebuffer = NULL;
                json_int_t available;
                json_error_t e;
                char fb[INT_STRLEN + 4], avail[INT_STRLEN];

                if (json_unpack_ex(p, &e, 0, "{s:s, s?o, s:I}", "name", &name, "framebuffer_mb",
                                   &framebuffer, "available", &available) < 0)
                        return shape_error(error, "profile", &e);
                /* A size the host could not learn (DISC-15, DISC-16) is shown as unknown. */
                if (json_is_integer(framebuffer) && json_integer_value(framebuffer) > 0)
                        snprintf(fb, sizeof fb, "%" JSON_INTEGER_FORMAT " MiB",
                                 json_integer_value(framebuffer));
                else
                        snprintf(fb, sizeof fb, "-");

                r = ctl_table_add_row(&t, (const char *[]){name, fb, format_int(available, avail)});
                if (r < 0)
                        return format_failed(error, r);
        }
        r = ctl_table_print(&t, out, "");
        return r < 0 ? format_failed(error, r) : 0;
}

int ctl_print_resources(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        json_t *gpu = NULL, *profiles = NULL;
        const char *mode, *disabled = NULL, *warning = NULL;
        json_int_t total, used, allocatable, quarantined;
        char b_total[INT_STRLEN], b_used[INT_STRLEN], b_alloc[INT_STRLEN], b_quar[INT_STRLEN];
        json_error_t e;
        int r;

        if (json_unpack_ex(body, &e, 0, "{s:o}", "gpu", &gpu) < 0)
                return shape_error(error, "resources", &e);
        if (json_is_null(gpu)) {
                fputs("no vGPU framework on this host\n", out);
                return 0;
        }
        if (json_unpack_ex(gpu, &e, 0, "{s:s, s:I, s:I, s:I, s:I, s:o, s?s, s?s}", "mode", &mode,
                           "total_slots", &total, "used_slots", &used, "allocatable_slots",
                           &allocatable, "quarantined_slots", &quarantined, "profiles", &profiles,
                           "placement_disabled_reason", &disabled, "placement_warning",
                           &warning) < 0)
                return shape_error(error, "resources", &e);

        r = ctl_table_init(&t, 2);
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"mode", mode});
        if (r >= 0)
                r = ctl_table_add_row(&t,
                                      (const char *[]){"total slots", format_int(total, b_total)});
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"used slots", format_int(used, b_used)});
        if (r >= 0)
                r = ctl_table_add_row(
                    &t, (const char *[]){"allocatable slots", format_int(allocatable, b_alloc)});
        if (r >= 0)
                r = ctl_table_add_row(
                    &t, (const char *[]){"quarantined slots", format_int(quarantined, b_quar)});
        if (r >= 0 && disabled)
                r = ctl_table_add_row(&t, (const char *[]){"placement disabled", disabled});
        if (r >= 0 && warning)
                r = ctl_table_add_row(&t, (const char *[]){"placement warning", warning});
        if (r < 0)
                return format_failed(error, r);

        /* Check the profiles before printing anything, so a bad answer prints nothing. */
        if (!json_is_array(profiles))
                return error_set(error, -EBADMSG,
                                 "unexpected profiles in the response: not an "
                                 "array");
        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        _cleanup_fclose_ FILE *mem = open_memstream(&buf, &size);
        if (!mem)
                return error_set_oom(error);
        r = print_profiles(mem, profiles, error);
        if (r < 0)
                return r;
        if (fflush(mem) != 0)
                return error_set_oom(error);

        r = ctl_table_print(&t, out, "");
        if (r < 0)
                return format_failed(error, r);
        fputc('\n', out);
        fwrite(buf, 1, size, out);
        return 0;
}

/* ---- GET /gpus (API-6, API-22) --------------------------------------------------------------- */

static int print_vfs(FILE *out, json_t *vfs, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        size_t i;
        json_t *vf;
        int r;

        if (!json_is_array(vfs))
                return error_set(error, -EBADMSG, "unexpected vfs in the response: not an array");
        if (json_array_size(vfs) == 0) {
                fputs("  no VFs\n", out);
                return 0;
        }

        r = ctl_table_init(&t, 5);
        if (r >= 0)
                r = ctl_table_add_row(
                    &t, (const char *[]){"VF", "STATE", "PROFILE", "INSTANCE", "FAILURES"});
        if (r < 0)
                return format_failed(error, r);

        json_array_foreach (vfs, i, vf) {
                const char *address, *state, *profile = NULL, *instance = NULL;
                json_int_t failures;
                int uncertain = 0;
                json_error_t e;
                char b_failures[INT_STRLEN];
                _cleanup_free_ char *state_text = NULL;

                if (json_unpack_ex(vf, &e, 0, "{s:s, s:s, s?s, s?s, s:I, s?b}", "address", &address,
                                   "state", &state, "profile", &profile, "instance_id", &instance,
                                   "failures", &failures, "uncertain", &uncertain) < 0)
                        return shape_error(error, "VF", &e);
                /* An uncertain VF has a driver call stuck past its deadline (GEN-4). */
                if (strprintf(&state_text, "%s%s", state, uncertain ? " (uncertain)" : "") < 0)
                        return error_set_oom(error);
                r = ctl_table_add_row(&t, (const char *[]){address, state_text, profile, instance,
                                                           format_int(failures, b_failures)});
                if (r < 0)
                        return format_failed(error, r);
        }
        r = ctl_table_print(&t, out, "  ");
        return r < 0 ? format_failed(error, r) : 0;
}

int ctl_print_gpus(FILE *out, json_t *body, char **error)
{
        json_t *gpus = NULL, *g;
        json_error_t e;
        size_t i;

        if (json_unpack_ex(body, &e, 0, "{s:o}", "gpus", &gpus) < 0)
                return shape_error(error, "gpus", &e);
        if (!json_is_array(gpus))
                return error_set(error, -EBADMSG, "unexpected gpus in the response: not an array");

        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        _cleanup_fclose_ FILE *mem = open_memstream(&buf, &size);
        if (!mem)
                return error_set_oom(error);

        if (json_array_size(gpus) == 0)
                fputs("no GPUs\n", mem);
        json_array_foreach (gpus, i, g) {
                const char *address, *model, *framework, *mode, *nvml;
                json_t *vfs;

                if (json_unpack_ex(g, &e, 0, "{s:s, s:s, s:s, s:s, s:s, s:o}", "address", &address,
                                   "model", &model, "framework", &framework, "mode", &mode, "nvml",
                                   &nvml, "vfs", &vfs) < 0)
                        return shape_error(error, "GPU", &e);
                if (i > 0)
                        fputc('\n', mem);
                fputs("GPU ", mem);
                ctl_print_sanitized(mem, address);
                fputs("  ", mem);
                ctl_print_sanitized(mem, model);
                fputs("  ", mem);
                ctl_print_sanitized(mem, framework);
                fputs("  mode: ", mem);
                ctl_print_sanitized(mem, mode);
                fputs("  nvml: ", mem);
                ctl_print_sanitized(mem, nvml);
                fputc('\n', mem);
                /* HEALTH-26: a drained GPU's VFs show as quarantined; say why. */
                json_t *drained = json_object_get(g, "drained");
                if (drained) {
                        const char *reason, *since;
                        if (json_unpack_ex(drained, &e, 0, "{s:s, s:s}", "reason", &reason,
                                           "drained_at", &since) < 0)
                                return shape_error(error, "GPU drain", &e);
                        fputs("  drained since ", mem);
                        ctl_print_sanitized(mem, since);
                        fputs(": ", mem);
                        ctl_print_sanitized(mem, reason);
                        fputc('\n', mem);
                }

                int r = print_vfs(mem, vfs, error);
                if (r < 0)
                        return r;
        }
        if (fflush(mem) != 0)
                return error_set_oom(error);
        fwrite(buf, 1, size, out);
        return 0;
}

/* ---- health records (API-10, API-18) --------------------------------------------------------- */

static int print_records(FILE *out, json_t *records, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        size_t i;
        json_t *rec;
        int r;

        if (!json_is_array(records))
                return error_set(error, -EBADMSG,
                                 "unexpected records in the response: not an "
                                 "array");

        r = ctl_table_init(&t, 7);
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"VF", "GPU", "PRESENT", "FAILURES",
                                                           "QUARANTINED", "SOURCE", "REASON"});
        if (r < 0)
                return format_failed(error, r);

        json_array_foreach (records, i, rec) {
                const char *vf, *gpu = NULL, *quarantined_at = NULL, *source = NULL, *reason = NULL;
                json_t *failures = NULL;
                int present;
                json_error_t e;
                char b_failures[INT_STRLEN];

                if (json_unpack_ex(rec, &e, 0, "{s:s, s?o, s?s, s?s, s?s, s?s, s:b}", "vf_address",
                                   &vf, "failures", &failures, "quarantined_at", &quarantined_at,
                                   "reason", &reason, "source", &source, "gpu", &gpu, "present",
                                   &present) < 0)
                        return shape_error(error, "health record", &e);
                if (failures && !json_is_array(failures))
                        return error_set(error, -EBADMSG,
                                         "unexpected failures of VF %s in the "
                                         "response: not an array",
                                         vf);

                r = ctl_table_add_row(
                    &t,
                    (const char *[]){vf, gpu, present ? "yes" : "no",
                                     format_int((json_int_t)json_array_size(failures), b_failures),
                                     quarantined_at, source, reason});
                if (r < 0)
                        return format_failed(error, r);
        }
        r = ctl_table_print(&t, out, "");
        return r < 0 ? format_failed(error, r) : 0;
}

static int format_breaker(json_t *breaker, char **ret, char **error)
{
        int enabled, open;
        const char *opened_at = NULL, *reason = NULL, *window;
        json_int_t max_quarantines;
        json_error_t e;
        int r;

        if (json_unpack_ex(breaker, &e, 0, "{s:b, s:b, s?s, s?s, s:s, s:I}", "enabled", &enabled,
                           "open", &open, "opened_at", &opened_at, "reason", &reason, "window",
                           &window, "max_quarantines", &max_quarantines) < 0)
                return shape_error(error, "breaker", &e);

        /* An open breaker matters even when it was disabled later: it still needs a reset. */
        if (open)
                r = strprintf(ret, "open%s%s: %s", opened_at ? " since " : "",
                              opened_at ? opened_at : "", reason ? reason : "no reason given");
        else if (!enabled)
                r = strprintf(ret, "disabled");
        else
                r = strprintf(ret,
                              "closed; opens at more than %" JSON_INTEGER_FORMAT
                              " automatic quarantines within %s",
                              max_quarantines, window);
        return r < 0 ? error_set_oom(error) : 0;
}

int ctl_print_health(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        _cleanup_free_ char *store = NULL, *breaker_text = NULL;
        int available;
        const char *unavailable_reason = NULL;
        json_int_t threshold;
        json_t *breaker, *records;
        json_error_t e;
        char b_threshold[INT_STRLEN + 16];
        int r;

        if (json_unpack_ex(body, &e, 0, "{s:b, s?s, s:I, s:o, s:o}", "available", &available,
                           "unavailable_reason", &unavailable_reason, "threshold", &threshold,
                           "breaker", &breaker, "records", &records) < 0)
                return shape_error(error, "health", &e);
        r = format_breaker(breaker, &breaker_text, error);
        if (r < 0)
                return r;
        if (available)
                r = strprintf(&store, "available");
        else
                r = strprintf(&store, "unavailable: %s",
                              unavailable_reason ? unavailable_reason : "no reason given");
        if (r < 0)
                return error_set_oom(error);
        snprintf(b_threshold, sizeof b_threshold, "%" JSON_INTEGER_FORMAT " failures", threshold);

        r = ctl_table_init(&t, 2);
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"store", store});
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"threshold", b_threshold});
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"breaker", breaker_text});
        if (r < 0)
                return format_failed(error, r);

        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        _cleanup_fclose_ FILE *mem = open_memstream(&buf, &size);
        if (!mem)
                return error_set_oom(error);
        if (json_is_array(records) && json_array_size(records) == 0)
                fputs("no health records\n", mem);
        else if ((r = print_records(mem, records, error)) < 0)
                return r;
        if (fflush(mem) != 0)
                return error_set_oom(error);

        r = ctl_table_print(&t, out, "");
        if (r < 0)
                return format_failed(error, r);
        fputc('\n', out);
        fwrite(buf, 1, size, out);
        return 0;
}

/* ---- operator routes (API-18) ---------------------------------------------------------------- */

static int print_running(FILE *out, json_t *running, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        size_t i;
        json_t *inst;
        int r;

        if (!json_is_array(running))
                return error_set(error, -EBADMSG,
                                 "unexpected running_instances in the "
                                 "response: not an array");
        if (json_array_size(running) == 0)
                return 0;

        r = ctl_table_init(&t, 2);
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"INSTANCE", "VF"});
        if (r < 0)
                return format_failed(error, r);
        json_array_foreach (running, i, inst) {
                const char *id, *vf;
                json_error_t e;

                if (json_unpack_ex(inst, &e, 0, "{s:s, s:s}", "id", &id, "vf", &vf) < 0)
                        return shape_error(error, "running instance", &e);
                r = ctl_table_add_row(&t, (const char *[]){id, vf});
                if (r < 0)
                        return format_failed(error, r);
        }

        /* HEALTH-24: quarantine only takes capacity away; these VMs stop when someone says so. */
        fputs("\nstill running on these VFs (a quarantine never stops a VM; stop or delete them "
              "to free the VFs):\n",
              out);
        r = ctl_table_print(&t, out, "");
        return r < 0 ? format_failed(error, r) : 0;
}

int ctl_print_operator_result(FILE *out, const char *summary, json_t *body, char **error)
{
        json_t *records = NULL, *running = NULL;
        json_error_t e;
        int r;

        /* Closing the breaker has no documented answer beyond 200: both keys are optional. */
        if (json_unpack_ex(body, &e, 0, "{s?o, s?o}", "records", &records, "running_instances",
                           &running) < 0)
                return shape_error(error, "answer", &e);

        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        _cleanup_fclose_ FILE *mem = open_memstream(&buf, &size);
        if (!mem)
                return error_set_oom(error);

        ctl_print_sanitized(mem, summary);
        fputc('\n', mem);
        if (records && !(json_is_array(records) && json_array_size(records) == 0)) {
                fputc('\n', mem);
                r = print_records(mem, records, error);
                if (r < 0)
                        return r;
        }
        if (running) {
                r = print_running(mem, running, error);
                if (r < 0)
                        return r;
        }
        if (fflush(mem) != 0)
                return error_set_oom(error);
        fwrite(buf, 1, size, out);
        return 0;
}

/* ---- instances (API-7, API-8) ---------------------------------------------------------------- */

/* The parts of an API-7 instance that vgpuctl shows; NULL where absent (API-8). */
typedef struct InstanceView {
        const char *id, *name, *state, *created_at, *error;
        json_int_t vcpus, memory_mb;
        const char *kernel, *initrd, *cmdline, *disk;
        const char *profile, *device_path, *mdev_uuid, *claimed_at;
        const char *consumer; /* FLEET-6's placement consumer */
        const char *net_mode, *net_bridge, *net_mac, *net_ip, *net_tap; /* NET-9 */
        const char *net_gateway;
        json_t *net_ports; /* NET-9's port forwards, borrowed */
} InstanceView;

static int instance_unpack(json_t *j, InstanceView *ret, char **error)
{
        InstanceView v = {};
        json_t *boot = NULL, *gpu = NULL, *placement = NULL, *network = NULL;
        json_error_t e;

        if (json_unpack_ex(j, &e, 0, "{s:s, s:s, s:s, s:s, s:I, s:I, s?o, s?o, s?o, s?s, s?o}",
                           "id", &v.id, "name", &v.name, "state", &v.state, "created_at",
                           &v.created_at, "vcpus", &v.vcpus, "memory_mb", &v.memory_mb, "boot",
                           &boot, "gpu", &gpu, "placement", &placement, "error", &v.error,
                           "network", &network) < 0)
                return shape_error(error, "instance", &e);
        if (network &&
            json_unpack_ex(network, &e, 0, "{s:s, s?s, s?s, s?s, s?s, s?s, s?o}", "mode",
                           &v.net_mode, "bridge", &v.net_bridge, "mac", &v.net_mac, "ip", &v.net_ip,
                           "tap", &v.net_tap, "gateway", &v.net_gateway, "ports", &v.net_ports) < 0)
                return shape_error(error, "instance network", &e);
        json_t *p;
        size_t i;
        json_array_foreach (v.net_ports, i, p) {
                json_int_t host, guest;
                const char *protocol;
                if (json_unpack_ex(p, &e, 0, "{s:I, s:I, s:s}", "host", &host, "guest", &guest,
                                   "protocol", &protocol) < 0)
                        return shape_error(error, "instance network ports", &e);
        }
        if (boot && json_unpack_ex(boot, &e, 0, "{s?s, s?s, s?s, s?s}", "kernel", &v.kernel,
                                   "initrd", &v.initrd, "cmdline", &v.cmdline, "disk", &v.disk) < 0)
                return shape_error(error, "instance boot", &e);
        if (gpu && json_unpack_ex(gpu, &e, 0, "{s:s, s?s, s?s, s?s}", "profile", &v.profile,
                                  "device_path", &v.device_path, "mdev_uuid", &v.mdev_uuid,
                                  "claimed_at", &v.claimed_at) < 0)
                return shape_error(error, "instance gpu", &e);
        if (placement && json_unpack_ex(placement, &e, 0, "{s?s}", "consumer", &v.consumer) < 0)
                return shape_error(error, "instance placement", &e);
        *ret = v;
        return 0;
}

static void format_mib(json_int_t mib, char buf[static INT_STRLEN + 4])
{
        snprintf(buf, INT_STRLEN + 4, "%" JSON_INTEGER_FORMAT " MiB", mib);
}

/* The claimed VF (or mdev) by its last path component: ".../devices/0000:e3:00.6". */
static const char *device_name(const char *device_path)
{
        if (!device_path)
                return NULL;
        const char *slash = strrchr(device_path, '/');
        return slash && slash[1] ? slash + 1 : device_path;
}

int ctl_print_instances(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        size_t i;
        json_t *j;
        int r;

        if (!json_is_array(body))
                return error_set(error, -EBADMSG,
                                 "unexpected instances in the response: not an "
                                 "array");
        if (json_array_size(body) == 0) {
                fputs("no instances\n", out);
                return 0;
        }

        r = ctl_table_init(&t, 10);
        if (r >= 0)
                r = ctl_table_add_row(&t, (const char *[]){"ID", "NAME", "STATE", "VCPUS", "MEMORY",
                                                           "PROFILE", "VF", "NETWORK", "IP",
                                                           "CREATED"});
        if (r < 0)
                return format_failed(error, r);

        json_array_foreach (body, i, j) {
                InstanceView v;
                char b_vcpus[INT_STRLEN], b_memory[INT_STRLEN + 4];

                r = instance_unpack(j, &v, error);
                if (r < 0)
                        return r;
                format_mib(v.memory_mb, b_memory);
                r = ctl_table_add_row(&t, (const char *[]){v.id, v.name, v.state,
                                                           format_int(v.vcpus, b_vcpus), b_memory,
                                                           v.profile, device_name(v.device_path),
                                                           v.net_mode, v.net_ip, v.created_at});
                if (r < 0)
                        return format_failed(error, r);
        }
        r = ctl_table_print(&t, out, "");
        return r < 0 ? format_failed(error, r) : 0;
}

/* NET-9's forwards on one line: "20001->22/tcp, 20002->53/udp"; NULL without any. */
static int format_ports(json_t *ports, char **ret)
{
        _cleanup_free_ char *s = NULL;
        json_t *p;
        size_t i;
        json_array_foreach (ports, i, p) {
                char *next = NULL;
                if (strprintf(&next, "%s%s%" JSON_INTEGER_FORMAT "->%" JSON_INTEGER_FORMAT "/%s",
                              s ? s : "", s ? ", " : "",
                              json_integer_value(json_object_get(p, "host")),
                              json_integer_value(json_object_get(p, "guest")),
                              json_string_value(json_object_get(p, "protocol"))) < 0)
                        return -ENOMEM;
                free(s);
                s = next;
        }
        *ret = TAKE_PTR(s);
        return 0;
}

int ctl_print_instance(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {};
        _cleanup_free_ char *ports = NULL;
        InstanceView v;
        char b_vcpus[INT_STRLEN], b_memory[INT_STRLEN + 4];
        int r;

        r = instance_unpack(body, &v, error);
        if (r < 0)
                return r;
        format_mib(v.memory_mb, b_memory);
        if (format_ports(v.net_ports, &ports) < 0)
                return format_failed(error, -ENOMEM);

        /* In the order an operator reads them: what it is, how it is doing, what it runs. */
        const char *const rows[][2] = {
            {"id", v.id},
            {"name", v.name},
            {"state", v.state},
            {"error", v.error},
            {"created", v.created_at},
            {"vcpus", format_int(v.vcpus, b_vcpus)},
            {"memory", b_memory},
            {"kernel", v.kernel},
            {"initrd", v.initrd},
            {"cmdline", v.cmdline},
            {"disk", v.disk},
            {"profile", v.profile},
            {"device path", v.device_path},
            {"mdev uuid", v.mdev_uuid},
            {"claimed", v.claimed_at},
            {"placement consumer", v.consumer},
            {"network", v.net_mode},
            {"bridge", v.net_bridge},
            {"mac", v.net_mac},
            {"ip", v.net_ip},
            {"gateway", v.net_gateway},
            {"ports", ports},
            {"tap", v.net_tap},
        };

        r = ctl_table_init(&t, 2);
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(rows); i++)
                if (rows[i][1])
                        r = ctl_table_add_row(&t, rows[i]);
        if (r < 0)
                return format_failed(error, r);
        r = ctl_table_print(&t, out, "");
        return r < 0 ? format_failed(error, r) : 0;
}

/* NET-9's GET /network: the modes, the NAT network, then its addresses in use. */
int ctl_print_network(FILE *out, json_t *body, char **error)
{
        _cleanup_(ctl_table_done) CtlTable t = {}, u = {};
        const char *mode, *bridge, *subnet, *gateway, *range, *nat_error = NULL;
        json_t *bridges, *in_use, *forwards;
        json_int_t allocated, free_, restarts;
        int enabled, isolate, up;
        json_error_t e;
        if (json_unpack_ex(body, &e, 0,
                           "{s:s, s:o, s:{s:b, s:s, s:s, s:s, s:b, s:s, s:{s:I, s:I}, s:o, s:o, "
                           "s:{s:b, s:I}, s?s}}",
                           "default_mode", &mode, "bridges", &bridges, "nat", "enabled", &enabled,
                           "bridge", &bridge, "subnet", &subnet, "gateway", &gateway, "isolate",
                           &isolate, "port_range", &range, "addresses", "allocated", &allocated,
                           "free", &free_, "in_use", &in_use, "port_forwards", &forwards, "dnsmasq",
                           "up", &up, "restarts", &restarts, "error", &nat_error) < 0 ||
            !json_is_array(bridges) || !json_is_array(in_use))
                return shape_error(error, "network", &e);
        _cleanup_free_ char *names = strdup("");
        size_t i;
        json_t *j;
        json_array_foreach (bridges, i, j)
                if (!names || !json_is_string(j) ||
                    strextend(&names, "%s%s", i ? ", " : "", json_string_value(j)) < 0)
                        return format_failed(error, -ENOMEM);
        char b_alloc[INT_STRLEN], b_free[INT_STRLEN], b_restarts[INT_STRLEN];
        const char *const rows[][2] = {
            {"default mode", mode},
            {"bridges", names[0] ? names : "-"},
            {"nat", enabled ? "enabled" : "disabled"},
            {"nat bridge", bridge},
            {"subnet", subnet},
            {"gateway", gateway},
            {"isolate", isolate ? "yes" : "no"},
            {"port range", range},
            {"addresses allocated", format_int(allocated, b_alloc)},
            {"addresses free", format_int(free_, b_free)},
            {"dnsmasq", up ? "up" : "down"},
            {"dnsmasq restarts", format_int(restarts, b_restarts)},
            {"error", nat_error},
        };
        int r = ctl_table_init(&t, 2);
        for (size_t k = 0; r >= 0 && k < ELEMENTSOF(rows); k++)
                if (rows[k][1])
                        r = ctl_table_add_row(&t, rows[k]);
        if (r >= 0)
                r = ctl_table_print(&t, out, "");
        if (r < 0 || json_array_size(in_use) == 0)
                return r < 0 ? format_failed(error, r) : 0;
        r = ctl_table_init(&u, 4);
        if (r >= 0)
                r = ctl_table_add_row(&u, (const char *[]){"IP", "MAC", "INSTANCE", "NAME"});
        json_array_foreach (in_use, i, j) {
                const char *ip, *mac = NULL, *id, *name;
                if (json_unpack_ex(j, &e, 0, "{s:s, s?s, s:s, s:s}", "ip", &ip, "mac", &mac,
                                   "instance_id", &id, "name", &name) < 0)
                        return shape_error(error, "network in_use", &e);
                if (r >= 0)
                        r = ctl_table_add_row(&u, (const char *[]){ip, mac, id, name});
        }
        if (r >= 0) {
                fputc('\n', out);
                r = ctl_table_print(&u, out, "");
        }
        return r < 0 ? format_failed(error, r) : 0;
}
