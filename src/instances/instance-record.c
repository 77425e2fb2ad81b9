/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Instance records as data: states (INST-8), instance.json (INST-2) and the create body (API-9,
 * INST-4, INST-5, INST-6, INST-7); ids and names are instance-id.c's. No I/O here; the files are
 * instance-files.c's.
 *
 * Both parsers read each object by one table of its fields (json_schema_read()), which refuses
 * an unknown, missing or mistyped key and names it by its path (INST-7 wants the field named,
 * which jansson's own messages do not do), and takes the values out in the same walk.
 */
#include <inttypes.h>
#include <jansson.h>

#include "instance-record-internal.h"

#define TIMESTAMP_MISSING ((Timestamp){.sec = TIMESTAMP_ZERO_SEC})
#define PROFILE_MAX 256
#define BOOT_ID_MAX 64

/* ---- states (INST-8) ----------------------------------------------------------------------- */

static const char *const state_names[_INSTANCE_STATE_MAX] = {
    [INSTANCE_CREATING] = "Creating", [INSTANCE_RUNNING] = "Running",
    [INSTANCE_STOPPING] = "Stopping", [INSTANCE_STOPPED] = "Stopped",
    [INSTANCE_FAILED] = "Failed",     [INSTANCE_DELETING] = "Deleting",
};

const char *instance_state_to_string(InstanceState s)
{
        return (unsigned)s < _INSTANCE_STATE_MAX ? state_names[s] : NULL;
}

int instance_state_from_string(const char *s, InstanceState *ret)
{
        for (unsigned i = 0; s && i < _INSTANCE_STATE_MAX; i++)
                if (streq(s, state_names[i])) {
                        *ret = (InstanceState)i;
                        return 0;
                }
        return -EINVAL;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

static void boot_done(InstanceBoot *b)
{
        free(b->kernel);
        free(b->initrd);
        free(b->cmdline);
        free(b->disk);
        *b = (InstanceBoot){0};
}

void instance_record_clear_claim(InstanceRecord *r)
{
        free(r->gpu.framework);
        free(r->gpu.device_path);
        free(r->gpu.mdev_uuid);
        r->gpu.framework = r->gpu.device_path = r->gpu.mdev_uuid = NULL;
        r->gpu.claimed_at = TIMESTAMP_MISSING;
}

static void placement_done(InstancePlacement *p)
{
        free(p->consumer);
        free(p->gpu);
        *p = (InstancePlacement){0};
}

static int placement_copy(const InstancePlacement *from, InstancePlacement *ret)
{
        InstancePlacement p = {0};
        if (strdup_nullable(from->consumer, &p.consumer) < 0 ||
            strdup_nullable(from->gpu, &p.gpu) < 0) {
                placement_done(&p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

void instance_record_clear_hypervisor(InstanceRecord *r)
{
        free(r->hypervisor.boot_id);
        free(r->hypervisor.qmp_socket);
        free(r->hypervisor.agent_socket);
        free(r->hypervisor.console_socket);
        r->hypervisor = (InstanceHypervisor){0};
}

void instance_record_done(InstanceRecord *r)
{
        free(r->name);
        free(r->error);
        boot_done(&r->boot);
        free(r->gpu.profile);
        instance_record_clear_claim(r);
        placement_done(&r->placement);
        instance_record_clear_hypervisor(r);
        instance_devices_done(r);
        *r = (InstanceRecord){0};
}

bool instance_record_is_claimed(const InstanceRecord *r)
{
        return r->gpu.device_path != NULL;
}

int instance_boot_copy(const InstanceBoot *from, InstanceBoot *ret)
{
        InstanceBoot b = {0};
        if (strdup_nullable(from->kernel, &b.kernel) < 0 ||
            strdup_nullable(from->initrd, &b.initrd) < 0 ||
            strdup_nullable(from->cmdline, &b.cmdline) < 0 ||
            strdup_nullable(from->disk, &b.disk) < 0) {
                boot_done(&b);
                return -ENOMEM;
        }
        *ret = b;
        return 0;
}

int instance_record_copy(const InstanceRecord *r, InstanceRecord *ret)
{
        _cleanup_(instance_record_done) InstanceRecord c = {0};
        memcpy(c.id, r->id, sizeof c.id);
        c.state = r->state;
        c.created_at = r->created_at;
        c.vcpus = r->vcpus;
        c.memory_mb = r->memory_mb;
        c.gpu.claimed_at = r->gpu.claimed_at;
        c.hypervisor.pid = r->hypervisor.pid;
        c.hypervisor.start_time = r->hypervisor.start_time;

        if (strdup_nullable(r->name, &c.name) < 0 || strdup_nullable(r->error, &c.error) < 0 ||
            instance_boot_copy(&r->boot, &c.boot) < 0 ||
            strdup_nullable(r->gpu.profile, &c.gpu.profile) < 0 ||
            strdup_nullable(r->gpu.framework, &c.gpu.framework) < 0 ||
            strdup_nullable(r->gpu.device_path, &c.gpu.device_path) < 0 ||
            strdup_nullable(r->gpu.mdev_uuid, &c.gpu.mdev_uuid) < 0 ||
            placement_copy(&r->placement, &c.placement) < 0 ||
            strdup_nullable(r->hypervisor.boot_id, &c.hypervisor.boot_id) < 0 ||
            strdup_nullable(r->hypervisor.qmp_socket, &c.hypervisor.qmp_socket) < 0 ||
            strdup_nullable(r->hypervisor.agent_socket, &c.hypervisor.agent_socket) < 0 ||
            strdup_nullable(r->hypervisor.console_socket, &c.hypervisor.console_socket) < 0 ||
            instance_devices_copy(r, &c) < 0)
                return -ENOMEM;
        *ret = c;
        c = (InstanceRecord){0};
        return 0;
}

void instance_spec_done(InstanceSpec *s)
{
        free(s->name);
        boot_done(&s->boot);
        free(s->profile);
        placement_done(&s->placement);
        free(s->disk.image);
        for (size_t i = 0; i < s->n_volumes; i++)
                free(s->volumes[i].volume);
        instance_network_done(&s->network);
        seed_cloud_init_done(&s->cloud_init);
        *s = (InstanceSpec){0};
}

/* ---- strict JSON helpers ------------------------------------------------------------------- */

/* jansson quotes the input near an error: keep a message one printable line. */
static void sanitize_jansson_text(char *text)
{
        for (char *p = text; *p; p++)
                if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                        *p = '?';
}

/* GEN-6: nesting, duplicate keys and malformed text refused before any field is looked at. */
static int parse_object(const char *buf, size_t size, int code, json_t **ret, char **error)
{
        if (json_text_too_deep(buf, size, JSON_DEPTH_MAX))
                return error_set(error, code, "JSON nested deeper than %d levels", JSON_DEPTH_MAX);

        json_error_t jerr;
        json_t *root = json_loadb(buf, size, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                sanitize_jansson_text(jerr.text);
                return error_set(error, code, "malformed JSON: %s (line %d, column %d)", jerr.text,
                                 jerr.line, jerr.column);
        }
        if (!json_is_object(root)) {
                json_decref(root);
                return error_set(error, code, "expected a JSON object");
        }
        *ret = root;
        return 0;
}

static bool is_printable_ascii(const char *s, size_t max)
{
        size_t n = 0;
        for (; s[n]; n++)
                if (n >= max || (unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e)
                        return false;
        return n > 0;
}

/* ---- the values INST-4, INST-5, INST-6 and API-9 have in common ----------------------------- */

static int check_name(const char *name, int code, char **error)
{
        if (!instance_name_is_valid(name))
                return error_set(error, code,
                                 "name must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
        return 0;
}

static int check_size(json_int_t vcpus, json_int_t memory_mb, int code, char **error)
{
        if (vcpus < (json_int_t)INSTANCE_VCPUS_MIN || vcpus > (json_int_t)INSTANCE_VCPUS_MAX)
                return error_set(error, code, "vcpus must be %u..%u", INSTANCE_VCPUS_MIN,
                                 INSTANCE_VCPUS_MAX);
        if (memory_mb < (json_int_t)INSTANCE_MEMORY_MB_MIN ||
            memory_mb > (json_int_t)INSTANCE_MEMORY_MB_MAX)
                return error_set(error, code, "memory_mb must be %" PRIu64 "..%" PRIu64,
                                 INSTANCE_MEMORY_MB_MIN, INSTANCE_MEMORY_MB_MAX);
        return 0;
}

static int check_profile(const char *profile, const char *key, int code, char **error)
{
        if (!is_printable_ascii(profile, PROFILE_MAX))
                return error_set(error, code, "%s must be 1..%d printable ASCII characters", key,
                                 PROFILE_MAX);
        return 0;
}

static int check_path(const char *path, const char *key, int code, char **error)
{
        if (strlen(path) > INSTANCE_PATH_MAX)
                return error_set(error, code, "%s must be at most %d bytes", key,
                                 INSTANCE_PATH_MAX);
        if (!instance_path_form_is_valid(path))
                return error_set(error, code,
                                 "%s must be an absolute path without . or .. components", key);
        return 0;
}

typedef struct BootKeys {
        const char *kernel, *initrd, *cmdline, *disk;
} BootKeys;

static const JsonField boot_fields[] = {
    {"kernel", JSON_FIELD_STRING, false, JSON_AT(BootKeys, kernel)},
    {"initrd", JSON_FIELD_STRING, false, JSON_AT(BootKeys, initrd)},
    {"cmdline", JSON_FIELD_STRING, false, JSON_AT(BootKeys, cmdline)},
    {"disk", JSON_FIELD_STRING, false, JSON_AT(BootKeys, disk)},
    {NULL},
};

/*
 * boot of a record or a create body: INST-5 and INST-6's form. With a root disk from an image
 * (DISK-5) boot may be absent (o NULL) or hold a kernel alone.
 */
static int boot_from_json(json_t *o, bool has_image, int code, InstanceBoot *ret, char **error)
{
        BootKeys v = {0};
        if (!o && !has_image)
                return error_set(error, code, "boot is required");
        int r = o ? json_schema_read(o, "boot", boot_fields, &v, code, error) : 0;
        if (r < 0)
                return r;
        const char *kernel = v.kernel, *initrd = v.initrd, *cmdline = v.cmdline, *disk = v.disk;

        if ((kernel && (r = check_path(kernel, "boot.kernel", code, error)) < 0) ||
            (initrd && (r = check_path(initrd, "boot.initrd", code, error)) < 0) ||
            (disk && (r = check_path(disk, "boot.disk", code, error)) < 0))
                return r;
        if (cmdline && strlen(cmdline) > INSTANCE_CMDLINE_MAX)
                return error_set(error, code, "boot.cmdline must be at most %d bytes",
                                 INSTANCE_CMDLINE_MAX);
        if (cmdline && strchr(cmdline, '\n'))
                return error_set(error, code, "boot.cmdline must not contain a newline");
        if (!kernel && !disk && !has_image)
                return error_set(error, code, "boot needs boot.kernel or boot.disk");
        /* QEMU refuses -initrd and -append without -kernel: say so before anything runs. */
        if (!kernel && initrd)
                return error_set(error, code, "boot.initrd needs boot.kernel");
        if (!kernel && cmdline)
                return error_set(error, code, "boot.cmdline needs boot.kernel");

        InstanceBoot b = {0};
        InstanceBoot view = {(char *)kernel, (char *)initrd, (char *)cmdline, (char *)disk};
        if (instance_boot_copy(&view, &b) < 0)
                return error_set_oom(error);
        *ret = b;
        return 0;
}

typedef struct PlacementKeys {
        const char *consumer, *gpu;
} PlacementKeys;

static const JsonField placement_fields[] = {
    {"consumer", JSON_FIELD_STRING, true, JSON_AT(PlacementKeys, consumer)},
    {"gpu", JSON_FIELD_STRING, true, JSON_AT(PlacementKeys, gpu)},
    {NULL},
};

/* placement of a record or a create body (FLEET-6): both keys, each in its canonical form. */
static int placement_from_json(json_t *o, int code, InstancePlacement *ret, char **error)
{
        PlacementKeys v = {0};
        int r = json_schema_read(o, "placement", placement_fields, &v, code, error);
        if (r < 0)
                return r;
        const char *consumer = v.consumer, *gpu = v.gpu;
        /* Placement prints consumers in lower case; another spelling would name the same
         * consumer twice and miss it in the audit's comparisons. */
        if (!uuid_is_lowercase(consumer))
                return error_set(error, code,
                                 "placement.consumer must be a lowercase UUID "
                                 "(xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)");
        if (!pci_address_is_valid(gpu))
                return error_set(error, code,
                                 "placement.gpu must be a PF's PCI address, dddd:bb:dd.f in "
                                 "lowercase hex");

        InstancePlacement view = {(char *)consumer, (char *)gpu};
        if (placement_copy(&view, ret) < 0)
                return error_set_oom(error);
        return 0;
}

/* ---- instance.json (INST-2) ---------------------------------------------------------------- */

#define RECORD_BAD (-EBADMSG)

/*
 * The device path the claim wrote: <sysfs_root>/bus/pci/devices/<VF> or
 * <sysfs_root>/bus/mdev/devices/<mdev_uuid>. The tail is what release acts on, so a damaged file
 * must not be able to name anything else.
 */
static bool device_path_is_valid(const char *path, const char *mdev_uuid)
{
        if (path[0] != '/' || strlen(path) > INSTANCE_PATH_MAX)
                return false;
        const char *slash = strrchr(path, '/');
        const char *dir = mdev_uuid ? "/bus/mdev/devices" : "/bus/pci/devices";
        size_t n = (size_t)(slash - path), m = strlen(dir);
        if (n < m || strncmp(slash - m, dir, m) != 0)
                return false;
        return mdev_uuid ? streq(slash + 1, mdev_uuid) : pci_address_is_valid(slash + 1);
}

/*
 * GEN-9 for reading; canonical asks for GEN-8's exact rendering too (claimed_at is compared as a
 * string). A time whose UTC rendering could not be read back (an offset past year 9999 or
 * before year 1) is refused, so that whatever loads also saves and loads again.
 */
static int timestamp_from_json(const char *s, const char *key, bool canonical, Timestamp *ret,
                               char **error)
{
        Timestamp t, again;
        char buf[TIMESTAMP_STRLEN];

        if (parse_timestamp(s, &t) < 0)
                return error_set(error, RECORD_BAD, "%s must be an RFC 3339 timestamp", key);
        if (timestamp_is_zero(t))
                return error_set(error, RECORD_BAD, "%s must not be the zero time", key);
        format_timestamp(t, buf);
        if (parse_timestamp(buf, &again) < 0)
                return error_set(error, RECORD_BAD, "%s is out of range", key);
        if (canonical && !streq(buf, s))
                return error_set(error, RECORD_BAD, "%s must be written %s (GEN-8)", key, buf);
        *ret = t;
        return 0;
}

typedef struct GpuKeys {
        const char *profile, *framework, *device_path, *mdev_uuid, *claimed_at;
} GpuKeys;

static const JsonField gpu_fields[] = {
    {"profile", JSON_FIELD_STRING, true, JSON_AT(GpuKeys, profile)},
    {"framework", JSON_FIELD_STRING, false, JSON_AT(GpuKeys, framework)},
    {"device_path", JSON_FIELD_STRING, false, JSON_AT(GpuKeys, device_path)},
    {"mdev_uuid", JSON_FIELD_STRING, false, JSON_AT(GpuKeys, mdev_uuid)},
    {"claimed_at", JSON_FIELD_STRING, false, JSON_AT(GpuKeys, claimed_at)},
    {NULL},
};

static int gpu_from_json(json_t *o, InstanceGpu *ret, char **error)
{
        GpuKeys v = {0};
        int r = json_schema_read(o, "gpu", gpu_fields, &v, RECORD_BAD, error);
        if (r < 0)
                return r;
        const char *profile = v.profile, *framework = v.framework, *device_path = v.device_path,
                   *mdev_uuid = v.mdev_uuid, *claimed_at = v.claimed_at;

        r = check_profile(profile, "gpu.profile", RECORD_BAD, error);
        if (r < 0)
                return r;

        /* A damaged file must never yield half a claim: the three come and go together. */
        if (!framework != !device_path || !framework != !claimed_at)
                return error_set(error, RECORD_BAD,
                                 "gpu.framework, gpu.device_path and gpu.claimed_at must be given "
                                 "together");
        Timestamp at = TIMESTAMP_MISSING;
        if (framework) {
                bool mdev = streq(framework, "mdev");
                if (!mdev && !streq(framework, "vendor-vfio"))
                        return error_set(error, RECORD_BAD,
                                         "gpu.framework must be vendor-vfio or mdev");
                if (mdev != !!mdev_uuid)
                        return error_set(error, RECORD_BAD,
                                         "gpu.mdev_uuid must be given exactly when gpu.framework "
                                         "is mdev");
                if (mdev && !uuid_is_lowercase(mdev_uuid))
                        return error_set(error, RECORD_BAD,
                                         "gpu.mdev_uuid must be a lowercase UUID");
                if (!device_path_is_valid(device_path, mdev_uuid))
                        return error_set(error, RECORD_BAD,
                                         mdev ? "gpu.device_path must end in "
                                                "/bus/mdev/devices/<gpu.mdev_uuid>"
                                              : "gpu.device_path must end in "
                                                "/bus/pci/devices/<VF address>");
                r = timestamp_from_json(claimed_at, "gpu.claimed_at", true, &at, error);
                if (r < 0)
                        return r;
        } else if (mdev_uuid)
                return error_set(error, RECORD_BAD,
                                 "gpu.mdev_uuid must be given exactly when gpu.framework is mdev");

        InstanceGpu g = {.claimed_at = at};
        if (strdup_nullable(profile, &g.profile) < 0 ||
            strdup_nullable(framework, &g.framework) < 0 ||
            strdup_nullable(device_path, &g.device_path) < 0 ||
            strdup_nullable(mdev_uuid, &g.mdev_uuid) < 0) {
                free(g.profile);
                free(g.framework);
                free(g.device_path);
                free(g.mdev_uuid);
                return error_set_oom(error);
        }
        *ret = g;
        return 0;
}

typedef struct HypervisorKeys {
        json_int_t pid, start_time;
        const char *boot_id, *qmp_socket, *agent_socket, *console_socket;
} HypervisorKeys;

static const JsonField hypervisor_fields[] = {
    {"pid", JSON_FIELD_INTEGER, false, JSON_AT(HypervisorKeys, pid)},
    {"start_time", JSON_FIELD_INTEGER, false, JSON_AT(HypervisorKeys, start_time)},
    {"boot_id", JSON_FIELD_STRING, false, JSON_AT(HypervisorKeys, boot_id)},
    {"qmp_socket", JSON_FIELD_STRING, false, JSON_AT(HypervisorKeys, qmp_socket)},
    {"agent_socket", JSON_FIELD_STRING, false, JSON_AT(HypervisorKeys, agent_socket)},
    {"console_socket", JSON_FIELD_STRING, false, JSON_AT(HypervisorKeys, console_socket)},
    {NULL},
};

static int hypervisor_from_json(json_t *o, InstanceHypervisor *ret, char **error)
{
        HypervisorKeys v = {0};
        int r = json_schema_read(o, "hypervisor", hypervisor_fields, &v, RECORD_BAD, error);
        if (r < 0)
                return r;
        json_int_t pid = v.pid, start_time = v.start_time;
        const char *boot_id = v.boot_id, *qmp = v.qmp_socket, *agent = v.agent_socket,
                   *console = v.console_socket;

        bool has_pid = json_object_get(o, "pid"), has_start = json_object_get(o, "start_time");
        /* The VMM's identity is whole or absent: a pid alone could name another process. */
        if (has_pid != has_start || has_pid != !!boot_id)
                return error_set(error, RECORD_BAD,
                                 "hypervisor.pid, hypervisor.start_time and hypervisor.boot_id "
                                 "must be given together");
        if (has_pid && (pid < 1 || pid > INT32_MAX))
                return error_set(error, RECORD_BAD, "hypervisor.pid must be 1..%d", INT32_MAX);
        if (start_time < 0)
                return error_set(error, RECORD_BAD, "hypervisor.start_time must not be negative");
        if (boot_id && !is_printable_ascii(boot_id, BOOT_ID_MAX))
                return error_set(error, RECORD_BAD,
                                 "hypervisor.boot_id must be 1..%d printable ASCII characters",
                                 BOOT_ID_MAX);
        if ((qmp && (r = check_path(qmp, "hypervisor.qmp_socket", RECORD_BAD, error)) < 0) ||
            (agent && (r = check_path(agent, "hypervisor.agent_socket", RECORD_BAD, error)) < 0) ||
            (console &&
             (r = check_path(console, "hypervisor.console_socket", RECORD_BAD, error)) < 0))
                return r;

        InstanceHypervisor h = {.pid = (pid_t)pid, .start_time = (uint64_t)start_time};
        if (strdup_nullable(boot_id, &h.boot_id) < 0 || strdup_nullable(qmp, &h.qmp_socket) < 0 ||
            strdup_nullable(agent, &h.agent_socket) < 0 ||
            strdup_nullable(console, &h.console_socket) < 0) {
                free(h.boot_id);
                free(h.qmp_socket);
                free(h.agent_socket);
                return error_set_oom(error);
        }
        *ret = h;
        return 0;
}

typedef struct RecordKeys {
        json_int_t version, vcpus, memory_mb;
        const char *id, *name, *state, *created_at, *error;
        json_t *boot, *gpu, *placement, *hypervisor;
        InstanceDevicesView devices;
} RecordKeys;

static const JsonField record_fields[] = {
    {"version", JSON_FIELD_INTEGER, true, JSON_AT(RecordKeys, version)},
    {"id", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, id)},
    {"name", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, name)},
    {"state", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, state)},
    {"created_at", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, created_at)},
    {"error", JSON_FIELD_STRING, false, JSON_AT(RecordKeys, error)},
    {"boot", JSON_FIELD_OBJECT, false, JSON_AT(RecordKeys, boot)}, /* DISK-5: or disk.image */
    {"vcpus", JSON_FIELD_INTEGER, true, JSON_AT(RecordKeys, vcpus)},
    {"memory_mb", JSON_FIELD_INTEGER, true, JSON_AT(RecordKeys, memory_mb)},
    {"gpu", JSON_FIELD_OBJECT, false, JSON_AT(RecordKeys, gpu)},
    {"placement", JSON_FIELD_OBJECT, false, JSON_AT(RecordKeys, placement)},
    {"hypervisor", JSON_FIELD_OBJECT, false, JSON_AT(RecordKeys, hypervisor)},
    /* Added later (INST-2): optional, so that records of every earlier shape load. */
    INSTANCE_DEVICE_FIELDS(RecordKeys, devices),
    {NULL},
};

int instance_record_from_json(const char *buf, size_t size, InstanceRecord *ret, char **error)
{
        if (size > INSTANCE_RECORD_MAX)
                return error_set(error, RECORD_BAD, "larger than %d bytes", INSTANCE_RECORD_MAX);

        json_auto_t *root = NULL;
        int r = parse_object(buf, size, RECORD_BAD, &root, error);
        if (r < 0)
                return r;
        RecordKeys v = {0};
        r = json_schema_read(root, "", record_fields, &v, RECORD_BAD, error);
        if (r < 0)
                return r;
        json_int_t version = v.version, vcpus = v.vcpus, memory_mb = v.memory_mb;
        const char *id = v.id, *name = v.name, *state = v.state, *created_at = v.created_at,
                   *failure = v.error;
        json_t *boot = v.boot, *gpu = v.gpu, *placement = v.placement, *hypervisor = v.hypervisor;

        if (version != 1)
                return error_set(error, RECORD_BAD,
                                 "version %" JSON_INTEGER_FORMAT " is not supported (only 1)",
                                 version);
        if (!instance_id_is_valid(id))
                return error_set(error, RECORD_BAD, "id must be %d characters of [a-z0-9]",
                                 INSTANCE_ID_LEN);
        r = check_name(name, RECORD_BAD, error);
        if (r < 0)
                return r;

        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        if (instance_state_from_string(state, &rec.state) < 0)
                return error_set(error, RECORD_BAD,
                                 "state must be Creating, Running, Stopping, Stopped, Failed or "
                                 "Deleting");
        r = timestamp_from_json(created_at, "created_at", false, &rec.created_at, error);
        if (r < 0)
                return r;
        /* The writer omits an absent error; an empty one is no record of ours. */
        if (failure && !failure[0])
                return error_set(error, RECORD_BAD, "error must not be empty");
        r = check_size(vcpus, memory_mb, RECORD_BAD, error);
        if (r < 0)
                return r;

        memcpy(rec.id, id, sizeof rec.id);
        rec.vcpus = (uint32_t)vcpus;
        rec.memory_mb = (uint64_t)memory_mb;
        rec.gpu.claimed_at = TIMESTAMP_MISSING;
        r = instance_devices_from_view(&v.devices, RECORD_BAD, &rec, error);
        if (r < 0)
                return r;
        r = boot_from_json(boot, rec.disk.image != NULL, RECORD_BAD, &rec.boot, error);
        if (r < 0)
                return r;
        if (gpu && (r = gpu_from_json(gpu, &rec.gpu, error)) < 0)
                return r;
        /* A consumer without a vGPU would hold an allocation that no claim ever matches. */
        if (placement && !gpu)
                return error_set(error, RECORD_BAD, "placement needs gpu");
        if (placement &&
            (r = placement_from_json(placement, RECORD_BAD, &rec.placement, error)) < 0)
                return r;
        if (hypervisor && (r = hypervisor_from_json(hypervisor, &rec.hypervisor, error)) < 0)
                return r;
        if (strdup_nullable(name, &rec.name) < 0 || strdup_nullable(failure, &rec.error) < 0)
                return error_set_oom(error);

        *ret = rec;
        rec = (InstanceRecord){0};
        return 0;
}

/* jansson takes only UTF-8; a string that is not is the caller's mistake, not a lack of memory. */
static bool is_utf8(const char *s)
{
        const unsigned char *p = (const unsigned char *)s;
        while (*p) {
                unsigned more = *p < 0x80             ? 0
                                : (*p & 0xe0) == 0xc0 ? 1
                                : (*p & 0xf0) == 0xe0 ? 2
                                : (*p & 0xf8) == 0xf0 ? 3
                                                      : 4;
                if (more == 4)
                        return false;
                p++;
                for (unsigned i = 0; i < more; i++, p++)
                        if ((*p & 0xc0) != 0x80)
                                return false;
        }
        return true;
}

int instance_json_put_string(json_t *o, const char *key, const char *value)
{
        if (!value)
                return 0;
        json_t *s = json_string(value);
        if (!s)
                return is_utf8(value) ? -ENOMEM : -EINVAL;
        return json_set(o, key, s);
}

static int put_timestamp(json_t *o, const char *key, Timestamp t)
{
        char buf[TIMESTAMP_STRLEN];
        return json_set(o, key, json_string(format_timestamp(t, buf)));
}

int instance_json_put_child(json_t *o, const char *key, json_t *child)
{
        if (child && json_object_size(child) == 0 && json_array_size(child) == 0) {
                json_decref(child);
                return 0;
        }
        return json_set(o, key, child);
}

static int boot_to_json(json_t *o, const InstanceBoot *b)
{
        int r;
        if ((r = instance_json_put_string(o, "kernel", b->kernel)) < 0 ||
            (r = instance_json_put_string(o, "initrd", b->initrd)) < 0 ||
            (r = instance_json_put_string(o, "cmdline", b->cmdline)) < 0 ||
            (r = instance_json_put_string(o, "disk", b->disk)) < 0)
                return r;
        return 0;
}

static int gpu_to_json(json_t *o, const InstanceGpu *g)
{
        /* A claimed_at of an unclaimed record is no value, whatever it holds. */
        bool claim = g->framework || g->device_path || g->mdev_uuid;
        int r;
        if ((r = instance_json_put_string(o, "profile", g->profile)) < 0 ||
            (r = instance_json_put_string(o, "framework", g->framework)) < 0 ||
            (r = instance_json_put_string(o, "device_path", g->device_path)) < 0 ||
            (r = instance_json_put_string(o, "mdev_uuid", g->mdev_uuid)) < 0)
                return r;
        if (claim && !timestamp_is_zero(g->claimed_at))
                return put_timestamp(o, "claimed_at", g->claimed_at);
        return 0;
}

static int placement_to_json(json_t *o, const InstancePlacement *p)
{
        int r;
        if ((r = instance_json_put_string(o, "consumer", p->consumer)) < 0 ||
            (r = instance_json_put_string(o, "gpu", p->gpu)) < 0)
                return r;
        return 0;
}

static int hypervisor_to_json(json_t *o, const InstanceHypervisor *h)
{
        int r;
        /* start_time belongs to a pid, and is written with it. */
        if (h->pid != 0 && ((r = json_set(o, "pid", json_integer(h->pid))) < 0 ||
                            (r = json_set(o, "start_time", json_u64(h->start_time))) < 0))
                return r;
        if ((r = instance_json_put_string(o, "boot_id", h->boot_id)) < 0 ||
            (r = instance_json_put_string(o, "qmp_socket", h->qmp_socket)) < 0 ||
            (r = instance_json_put_string(o, "agent_socket", h->agent_socket)) < 0 ||
            (r = instance_json_put_string(o, "console_socket", h->console_socket)) < 0)
                return r;
        return 0;
}

static int record_dump(const InstanceRecord *r, char **ret, size_t *ret_size)
{
        const char *state = instance_state_to_string(r->state);
        if (!state)
                return -EINVAL;

        json_auto_t *root = json_object(), *boot = json_object(), *gpu = json_object(),
                    *placement = json_object(), *hypervisor = json_object();
        if (!root || !boot || !gpu || !placement || !hypervisor)
                return -ENOMEM;

        /* A bad record's id need not be terminated; the check after the dump refuses it. */
        char id[INSTANCE_ID_LEN + 1];
        snprintf(id, sizeof id, "%.*s", INSTANCE_ID_LEN, r->id);

        int k;
        if ((k = json_set(root, "version", json_integer(1))) < 0 ||
            (k = instance_json_put_string(root, "id", id)) < 0 ||
            (k = instance_json_put_string(root, "name", r->name)) < 0 ||
            (k = instance_json_put_string(root, "state", state)) < 0 ||
            (k = put_timestamp(root, "created_at", r->created_at)) < 0 ||
            (k = instance_json_put_string(root, "error",
                                          r->error && r->error[0] ? r->error : NULL)) < 0 ||
            (k = boot_to_json(boot, &r->boot)) < 0 ||
            (k = instance_json_put_child(root, "boot", TAKE_PTR(boot))) < 0 ||
            (k = json_set(root, "vcpus", json_u64(r->vcpus))) < 0 ||
            (k = json_set(root, "memory_mb", json_u64(r->memory_mb))) < 0 ||
            (k = gpu_to_json(gpu, &r->gpu)) < 0 ||
            (k = instance_json_put_child(root, "gpu", TAKE_PTR(gpu))) < 0 ||
            (k = placement_to_json(placement, &r->placement)) < 0 ||
            (k = instance_json_put_child(root, "placement", TAKE_PTR(placement))) < 0 ||
            (k = hypervisor_to_json(hypervisor, &r->hypervisor)) < 0 ||
            (k = instance_json_put_child(root, "hypervisor", TAKE_PTR(hypervisor))) < 0 ||
            (k = instance_devices_to_json(root, r)) < 0)
                return k;

        /* Indent 0 keeps the record on one line, with ", " and ": " as INST-2 shows it. */
        return json_dump_file_text(root, JSON_PRESERVE_ORDER, ret, ret_size);
}

int instance_record_encode(const InstanceRecord *r, char **ret, size_t *ret_size, char **error)
{
        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        int k = record_dump(r, &buf, &size);
        if (k == -ENOMEM)
                return error_set_oom(error);
        if (k < 0)
                return error_set(error, k, "invalid record: %s",
                                 instance_state_to_string(r->state) ? "a string is not UTF-8"
                                                                    : "unknown state");

        /* What we write must load: a record this refuses would be a half claim on disk. */
        _cleanup_(instance_record_done) InstanceRecord check = {0};
        _cleanup_free_ char *why = NULL;
        k = instance_record_from_json(buf, size, &check, &why);
        if (k == -ENOMEM)
                return error_set_oom(error);
        if (k < 0)
                return error_set(error, -EINVAL, "invalid record: %s", why);

        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = size;
        return 0;
}

int instance_record_to_json(const InstanceRecord *r, char **ret, size_t *ret_size)
{
        _cleanup_free_ char *error = NULL;
        return instance_record_encode(r, ret, ret_size, &error);
}

/* ---- the create body (API-9, INST-4, INST-5, INST-6, INST-7) -------------------------------- */

#define SPEC_BAD (-EINVAL)

typedef struct SpecKeys {
        const char *name, *image;
        json_int_t vcpus, memory_mb, disk_gb;
        json_t *boot, *gpu, *placement, *volumes, *network, *cloud_init;
        InstanceNetworkView network_v;
} SpecKeys;

typedef struct SpecVolumeKeys {
        const char *volume;
        bool readonly;
} SpecVolumeKeys;

static const JsonField spec_volume_fields[] = {
    {"volume", JSON_FIELD_STRING, true, JSON_AT(SpecVolumeKeys, volume), 64},
    {"readonly", JSON_FIELD_BOOLEAN, false, JSON_AT(SpecVolumeKeys, readonly)},
    {NULL},
};

static const JsonField spec_fields[] = {
    {"name", JSON_FIELD_STRING, true, JSON_AT(SpecKeys, name)},
    {"vcpus", JSON_FIELD_INTEGER, true, JSON_AT(SpecKeys, vcpus)},
    {"memory_mb", JSON_FIELD_INTEGER, true, JSON_AT(SpecKeys, memory_mb)},
    {"image", JSON_FIELD_STRING, false, JSON_AT(SpecKeys, image)},      /* DISK-5 */
    {"disk_gb", JSON_FIELD_INTEGER, false, JSON_AT(SpecKeys, disk_gb)}, /* DISK-5 */
    {"boot", JSON_FIELD_OBJECT, false, JSON_AT(SpecKeys, boot)}, /* API-9: without image only */
    {.key = "volumes",                                           /* DISK-8 */
     .type = JSON_FIELD_ARRAY,
     .offset = JSON_AT(SpecKeys, volumes),
     .max = INSTANCE_VOLUMES_MAX,
     .element_type = JSON_FIELD_OBJECT,
     .element_fields = spec_volume_fields,
     .element_size = sizeof(SpecVolumeKeys)},
    {"gpu", JSON_FIELD_OBJECT, false, JSON_AT(SpecKeys, gpu)},
    {"placement", JSON_FIELD_OBJECT, false, JSON_AT(SpecKeys, placement)},
    {"network", JSON_FIELD_OBJECT, false, JSON_AT(SpecKeys, network),
     .fields = instance_network_body_fields, .nested_offset = JSON_AT(SpecKeys, network_v)},
    {"cloud_init", JSON_FIELD_OBJECT, false, JSON_AT(SpecKeys, cloud_init)}, /* SEED-1 */
    {NULL},
};

static const JsonField spec_gpu_fields[] = {
    {"profile", JSON_FIELD_STRING, true, 0},
    {NULL},
};

int instance_spec_from_json(const char *body, size_t size, InstanceSpec *ret, char **error)
{
        json_auto_t *root = NULL;
        int r = parse_object(body, size, SPEC_BAD, &root, error);
        if (r < 0)
                return r;
        SpecKeys v = {0};
        r = json_schema_read(root, "", spec_fields, &v, SPEC_BAD, error);
        if (r < 0)
                return r;
        const char *name = v.name, *profile = NULL;
        json_int_t vcpus = v.vcpus, memory_mb = v.memory_mb;
        json_t *boot = v.boot, *gpu = v.gpu, *placement = v.placement;

        r = check_name(name, SPEC_BAD, error);
        if (r < 0)
                return r;
        r = check_size(vcpus, memory_mb, SPEC_BAD, error);
        if (r < 0)
                return r;

        _cleanup_(instance_spec_done) InstanceSpec s = {
            .vcpus = (uint32_t)vcpus,
            .memory_mb = (uint64_t)memory_mb,
        };
        /* DISK-5: the image by name; disk_gb's range against the image is the manager's. */
        if (v.image && !resource_name_is_valid(v.image))
                return error_set(error, SPEC_BAD,
                                 "image must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
        if (v.disk_gb && !v.image)
                return error_set(error, SPEC_BAD, "disk_gb needs image");
        if (v.image && (v.disk_gb < 0 || (uint64_t)v.disk_gb > INSTANCE_DISK_GB_MAX ||
                        (v.disk_gb == 0 && json_object_get(root, "disk_gb"))))
                return error_set(error, SPEC_BAD, "disk_gb must be 1..%" PRIu64,
                                 INSTANCE_DISK_GB_MAX);
        s.disk.size_gb = (uint64_t)v.disk_gb;
        if (strdup_nullable(v.image, &s.disk.image) < 0)
                return error_set_oom(error);
        for (size_t i = 0; v.volumes && i < json_array_size(v.volumes); i++) {
                json_t *e = json_array_get(v.volumes, i);
                const char *ref = json_string_value(json_object_get(e, "volume"));
                for (size_t j = 0; j < i; j++)
                        if (streq(s.volumes[j].volume, ref))
                                return error_set(error, SPEC_BAD,
                                                 "volumes[%zu].volume repeats volumes[%zu]", i, j);
                if (!(s.volumes[i].volume = strdup(ref)))
                        return error_set_oom(error);
                s.volumes[i].readonly = json_is_true(json_object_get(e, "readonly"));
                s.n_volumes = i + 1;
        }
        r = boot_from_json(boot, v.image != NULL, SPEC_BAD, &s.boot, error);
        if (r < 0)
                return r;
        if (gpu) {
                /* The view of an object with one string field is that string. */
                r = json_schema_read(gpu, "gpu", spec_gpu_fields, &profile, SPEC_BAD, error);
                if (r < 0)
                        return r;
                r = check_profile(profile, "gpu.profile", SPEC_BAD, error);
                if (r < 0)
                        return r;
        }
        if (placement) {
                /* FLEET-6: the allocation is for a vGPU; without one there is nothing to claim. */
                if (!gpu)
                        return error_set(error, SPEC_BAD, "placement needs gpu.profile");
                r = placement_from_json(placement, SPEC_BAD, &s.placement, error);
                if (r < 0)
                        return r;
        }
        if (v.network) {
                r = instance_network_from_view(&v.network_v, v.network, SPEC_BAD, &s.network,
                                               error);
                if (r >= 0)
                        r = instance_network_body_check(&s.network, SPEC_BAD, error);
                if (r < 0)
                        return r;
        }
        if (v.cloud_init) {
                r = seed_cloud_init_from_json(v.cloud_init, "cloud_init", SPEC_BAD, &s.cloud_init,
                                              error);
                if (r < 0)
                        return r;
        }
        if (strdup_nullable(name, &s.name) < 0 || strdup_nullable(profile, &s.profile) < 0)
                return error_set_oom(error);
        *ret = s;
        s = (InstanceSpec){0};
        return 0;
}
