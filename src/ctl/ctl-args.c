/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpuctl's command line (OPS-6, OPS-7). Hand-written rather than getopt_long: getopt keeps
 * its position in globals, which would not survive the tests running many command lines in
 * one process, and it accepts abbreviations and repeated options that a strict parser refuses.
 */
#include <fcntl.h>

#include "ctl.h"
#include "fleet/fleet.h"
#include "instances/instances.h"

/* The client refuses a malformed id before sending it; the daemon's form must be the same. */
_Static_assert(CTL_INSTANCE_ID_LEN == INSTANCE_ID_LEN, "instance ids changed length");

const char ctl_usage[] =
    "usage: vgpuctl [--url URL | --unix PATH] [--token T | --token-file F] [--json] COMMAND\n"
    "\n"
    "Commands:\n"
    "  resources                          capacity summary and profile availability\n"
    "  gpus                               GPUs and their VFs\n"
    "  network                            the NAT network, its addresses and dnsmasq\n"
    "  health list                        VF health records and the quarantine breaker\n"
    "  health quarantine VF --reason R    keep a VF out of placement\n"
    "  health clear VF                    delete a VF's health record\n"
    "  health drain GPU --reason R        keep every VF of a GPU out of placement\n"
    "  health undrain GPU                 lift a GPU's drain (its VF records stay)\n"
    "  health clear-gpu GPU               delete the health records of a GPU's VFs\n"
    "  health breaker-reset               close an open quarantine breaker\n"
    "  instances list                     every instance, its state, its VF and its NIC\n"
    "  instances get ID                   one instance\n"
    "  instances create --name N --vcpus N --memory-mb N [--image NAME [--disk-gb N]]\n"
    "                   [--kernel P] [--initrd P] [--cmdline S] [--disk P] [--profile P]\n"
    "                   [--volume ID|ID:ro]... [--network nat|bridge:NAME|none]\n"
    "                   [--port HOST:GUEST[/tcp|/udp]]... [--ip A --prefix N]\n"
    "                   [--gateway A] [--dns A]... [--ssh-key FILE]...\n"
    "                   [--user-data FILE] [--hostname NAME]\n"
    "                                     create and boot a VM (--image, --kernel or --disk\n"
    "                                     needed)\n"
    "  instances start ID                 boot a stopped or failed instance\n"
    "  instances stop ID                  shut an instance down and release its VF\n"
    "  instances delete ID                stop an instance and remove it\n"
    "  instances console ID [--tail-bytes N] [--follow]\n"
    "                                     the end of the guest console (default 64 KiB);\n"
    "                                     with --follow, then its output as it comes\n"
    "  instances console ID --attach      type into the guest console (Ctrl-] detaches)\n"
    "  instances ssh ID [--via HOST] [-- SSH-ARGS]\n"
    "                                     ssh to the instance's address (with --via: to HOST,\n"
    "                                     the daemon's host, by the forward to guest port 22)\n"
    "  instances attach-volume ID --volume V [--readonly]\n"
    "                                     attach a volume (by id or name), running or not\n"
    "  instances detach-volume ID --volume V\n"
    "                                     detach it (a running guest must let it go)\n"
    "  images list                        the image store\n"
    "  images get NAME                    one image\n"
    "  images import NAME --source PATH [--sha256 HEX]\n"
    "                                     import a raw or qcow2 file, showing its progress\n"
    "  images delete NAME                 delete an image no instance uses\n"
    "  volumes list                       every volume and who holds it\n"
    "  volumes get ID                     one volume\n"
    "  volumes create --name N --size-gb N\n"
    "                                     create an empty qcow2 volume\n"
    "  volumes delete ID                  delete a volume no instance holds\n"
    "  token mint --secret-file F [--ttl D] [--sub S]\n"
    "                                     print a bearer token (default TTL 1h)\n"
    "  fleet hosts --placement URL --hosts FILE\n"
    "                                     each host's root provider and readiness\n"
    "  fleet resources --placement URL --hosts FILE\n"
    "                                     each PF provider's inventories, usage and traits\n"
    "  fleet create --placement URL --hosts FILE --profile P --name N --vcpus N\n"
    "               --memory-mb N [--kernel P] [--initrd P] [--cmdline S] [--disk P]\n"
    "               [--count N] [--image NAME]\n"
    "                                     place VMs through Placement on the hosts\n"
    "  fleet delete ID --hosts FILE --host H\n"
    "                                     delete an instance on host H\n"
    "\n"
    "Options:\n"
    "  --url URL         the daemon's base URL (default $VGPUD_URL, else " CTL_DEFAULT_URL ")\n"
    "  --unix PATH       talk to the daemon's Unix socket instead\n"
    "  --token T         bearer token (default $VGPUD_TOKEN)\n"
    "  --token-file F    read the bearer token from F\n"
    "  --json            print the daemon's JSON instead of tables\n"
    "  --placement URL   fleet: the Placement endpoint\n"
    "  --placement-token-file F\n"
    "                    fleet: a Keystone token for Placement (default: noauth2's admin)\n"
    "  --hosts FILE      fleet: the JSON file naming each host, its URL and token file\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 success, 1 API error, 2 usage error, 3 connection error.\n";

typedef enum CtlOption {
        OPT_URL,
        OPT_UNIX,
        OPT_TOKEN,
        OPT_TOKEN_FILE,
        OPT_JSON,
        OPT_HELP,
        OPT_VERSION,
        _OPT_GLOBAL_MAX, /* the options above apply to every command */
        OPT_REASON = _OPT_GLOBAL_MAX,
        OPT_SECRET_FILE,
        OPT_TTL,
        OPT_SUB,
        OPT_NAME,
        OPT_VCPUS,
        OPT_MEMORY_MB,
        OPT_KERNEL,
        OPT_INITRD,
        OPT_CMDLINE,
        OPT_DISK,
        OPT_PROFILE,
        OPT_TAIL_BYTES,
        OPT_PLACEMENT,
        OPT_PLACEMENT_TOKEN_FILE,
        OPT_HOSTS,
        OPT_HOST,
        OPT_COUNT,
        OPT_FOLLOW,
        OPT_ATTACH,
        OPT_IMAGE,
        OPT_DISK_GB,
        OPT_VOLUME,
        OPT_NETWORK,
        OPT_PORT,
        OPT_IP,
        OPT_PREFIX,
        OPT_GATEWAY,
        OPT_DNS,
        OPT_SSH_KEY_FILE,
        OPT_USER_DATA_FILE,
        OPT_HOSTNAME,
        OPT_VIA,
        OPT_SOURCE,   /* images import (DISK-2) */
        OPT_SHA256,   /* images import */
        OPT_SIZE_GB,  /* volumes create (DISK-7) */
        OPT_READONLY, /* instances attach-volume */
        _OPT_MAX,
} CtlOption;

#define OPT_BIT(o) (UINT64_C(1) << (o))
_Static_assert(_OPT_MAX <= 64, "a command's options no longer fit its mask");

static const struct {
        const char *name;
        bool has_value;
        bool repeats; /* given more than once, each value is kept (in order) */
} options[_OPT_MAX] = {
    [OPT_URL] = {"--url", true},
    [OPT_UNIX] = {"--unix", true},
    [OPT_TOKEN] = {"--token", true},
    [OPT_TOKEN_FILE] = {"--token-file", true},
    [OPT_JSON] = {"--json", false},
    [OPT_HELP] = {"--help", false},
    [OPT_VERSION] = {"--version", false},
    [OPT_REASON] = {"--reason", true},
    [OPT_SECRET_FILE] = {"--secret-file", true},
    [OPT_TTL] = {"--ttl", true},
    [OPT_SUB] = {"--sub", true},
    [OPT_NAME] = {"--name", true},
    [OPT_VCPUS] = {"--vcpus", true},
    [OPT_MEMORY_MB] = {"--memory-mb", true},
    [OPT_KERNEL] = {"--kernel", true},
    [OPT_INITRD] = {"--initrd", true},
    [OPT_CMDLINE] = {"--cmdline", true},
    [OPT_DISK] = {"--disk", true},
    [OPT_PROFILE] = {"--profile", true},
    [OPT_TAIL_BYTES] = {"--tail-bytes", true},
    [OPT_PLACEMENT] = {"--placement", true},
    [OPT_PLACEMENT_TOKEN_FILE] = {"--placement-token-file", true},
    [OPT_HOSTS] = {"--hosts", true},
    [OPT_HOST] = {"--host", true},
    [OPT_COUNT] = {"--count", true},
    [OPT_FOLLOW] = {"--follow", false},
    [OPT_ATTACH] = {"--attach", false},
    [OPT_IMAGE] = {"--image", true},
    [OPT_DISK_GB] = {"--disk-gb", true},
    [OPT_VOLUME] = {"--volume", true, true},
    [OPT_NETWORK] = {"--network", true},
    [OPT_PORT] = {"--port", true, true},
    [OPT_IP] = {"--ip", true},
    [OPT_PREFIX] = {"--prefix", true},
    [OPT_GATEWAY] = {"--gateway", true},
    [OPT_DNS] = {"--dns", true, true},
    [OPT_SSH_KEY_FILE] = {"--ssh-key", true, true},
    [OPT_USER_DATA_FILE] = {"--user-data", true},
    [OPT_HOSTNAME] = {"--hostname", true},
    [OPT_VIA] = {"--via", true},
    [OPT_SOURCE] = {"--source", true},
    [OPT_SHA256] = {"--sha256", true},
    [OPT_SIZE_GB] = {"--size-gb", true},
    [OPT_READONLY] = {"--readonly", false},
};

/* What a command's positional argument is; it becomes part of the request path. */
typedef enum CtlTarget {
        TARGET_NONE,
        TARGET_PCI_ADDRESS,
        TARGET_INSTANCE_ID,
        TARGET_IMAGE_NAME, /* INST-4's pattern (DISK-1) */
        TARGET_VOLUME_ID,  /* INST-3's form (DISK-7) */
} CtlTarget;

#define REASON OPT_BIT(OPT_REASON)
#define MINT (OPT_BIT(OPT_SECRET_FILE) | OPT_BIT(OPT_TTL) | OPT_BIT(OPT_SUB))
#define CREATE_REQUIRED (OPT_BIT(OPT_NAME) | OPT_BIT(OPT_VCPUS) | OPT_BIT(OPT_MEMORY_MB))
#define CREATE                                                                                  \
        (CREATE_REQUIRED | OPT_BIT(OPT_KERNEL) | OPT_BIT(OPT_INITRD) | OPT_BIT(OPT_CMDLINE) |   \
         OPT_BIT(OPT_DISK) | OPT_BIT(OPT_PROFILE) | OPT_BIT(OPT_IMAGE) | OPT_BIT(OPT_DISK_GB) | \
         OPT_BIT(OPT_VOLUME) | OPT_BIT(OPT_NETWORK) | OPT_BIT(OPT_PORT) | OPT_BIT(OPT_IP) |     \
         OPT_BIT(OPT_PREFIX) | OPT_BIT(OPT_GATEWAY) | OPT_BIT(OPT_DNS) |                        \
         OPT_BIT(OPT_SSH_KEY_FILE) | OPT_BIT(OPT_USER_DATA_FILE) | OPT_BIT(OPT_HOSTNAME))

#define FLEET_REQUIRED (OPT_BIT(OPT_PLACEMENT) | OPT_BIT(OPT_HOSTS))
#define FLEET (FLEET_REQUIRED | OPT_BIT(OPT_PLACEMENT_TOKEN_FILE))
#define FLEET_CREATE_REQUIRED (FLEET_REQUIRED | CREATE_REQUIRED | OPT_BIT(OPT_PROFILE))
#define FLEET_DELETE_REQUIRED (OPT_BIT(OPT_HOSTS) | OPT_BIT(OPT_HOST))

/* The command words, with what each command takes besides the global options. */
static const struct {
        const char *words[2];
        CtlCommand command;
        CtlTarget target;
        uint64_t options;  /* OPT_BIT()s of the options it accepts */
        uint64_t required; /* ... and of those it cannot do without */
} commands[] = {
    {{"resources", NULL}, CTL_COMMAND_RESOURCES, TARGET_NONE, 0, 0},
    {{"gpus", NULL}, CTL_COMMAND_GPUS, TARGET_NONE, 0, 0},
    {{"network", NULL}, CTL_COMMAND_NETWORK, TARGET_NONE, 0, 0},
    {{"health", "list"}, CTL_COMMAND_HEALTH_LIST, TARGET_NONE, 0, 0},
    {{"health", "quarantine"}, CTL_COMMAND_HEALTH_QUARANTINE, TARGET_PCI_ADDRESS, REASON, REASON},
    {{"health", "clear"}, CTL_COMMAND_HEALTH_CLEAR, TARGET_PCI_ADDRESS, 0, 0},
    {{"health", "drain"}, CTL_COMMAND_HEALTH_DRAIN, TARGET_PCI_ADDRESS, REASON, REASON},
    {{"health", "undrain"}, CTL_COMMAND_HEALTH_UNDRAIN, TARGET_PCI_ADDRESS, 0, 0},
    {{"health", "clear-gpu"}, CTL_COMMAND_HEALTH_CLEAR_GPU, TARGET_PCI_ADDRESS, 0, 0},
    {{"health", "breaker-reset"}, CTL_COMMAND_HEALTH_BREAKER_RESET, TARGET_NONE, 0, 0},
    {{"instances", "list"}, CTL_COMMAND_INSTANCES_LIST, TARGET_NONE, 0, 0},
    {{"instances", "get"}, CTL_COMMAND_INSTANCES_GET, TARGET_INSTANCE_ID, 0, 0},
    {{"instances", "create"}, CTL_COMMAND_INSTANCES_CREATE, TARGET_NONE, CREATE, CREATE_REQUIRED},
    {{"instances", "start"}, CTL_COMMAND_INSTANCES_START, TARGET_INSTANCE_ID, 0, 0},
    {{"instances", "stop"}, CTL_COMMAND_INSTANCES_STOP, TARGET_INSTANCE_ID, 0, 0},
    {{"instances", "delete"}, CTL_COMMAND_INSTANCES_DELETE, TARGET_INSTANCE_ID, 0, 0},
    {{"instances", "console"},
     CTL_COMMAND_INSTANCES_CONSOLE,
     TARGET_INSTANCE_ID,
     OPT_BIT(OPT_TAIL_BYTES) | OPT_BIT(OPT_FOLLOW) | OPT_BIT(OPT_ATTACH),
     0},
    /* The words after the id are ssh's. */
    {{"instances", "ssh"}, CTL_COMMAND_INSTANCES_SSH, TARGET_INSTANCE_ID, OPT_BIT(OPT_VIA), 0},
    /* OPS-7: the disks (DISK-1, DISK-2, DISK-4, DISK-7, DISK-8). */
    {{"instances", "attach-volume"},
     CTL_COMMAND_INSTANCES_ATTACH_VOLUME,
     TARGET_INSTANCE_ID,
     OPT_BIT(OPT_VOLUME) | OPT_BIT(OPT_READONLY),
     OPT_BIT(OPT_VOLUME)},
    {{"instances", "detach-volume"},
     CTL_COMMAND_INSTANCES_DETACH_VOLUME,
     TARGET_INSTANCE_ID,
     OPT_BIT(OPT_VOLUME),
     OPT_BIT(OPT_VOLUME)},
    {{"images", "list"}, CTL_COMMAND_IMAGES_LIST, TARGET_NONE, 0, 0},
    {{"images", "get"}, CTL_COMMAND_IMAGES_GET, TARGET_IMAGE_NAME, 0, 0},
    {{"images", "import"},
     CTL_COMMAND_IMAGES_IMPORT,
     TARGET_IMAGE_NAME,
     OPT_BIT(OPT_SOURCE) | OPT_BIT(OPT_SHA256),
     OPT_BIT(OPT_SOURCE)},
    {{"images", "delete"}, CTL_COMMAND_IMAGES_DELETE, TARGET_IMAGE_NAME, 0, 0},
    {{"volumes", "list"}, CTL_COMMAND_VOLUMES_LIST, TARGET_NONE, 0, 0},
    {{"volumes", "get"}, CTL_COMMAND_VOLUMES_GET, TARGET_VOLUME_ID, 0, 0},
    {{"volumes", "create"},
     CTL_COMMAND_VOLUMES_CREATE,
     TARGET_NONE,
     OPT_BIT(OPT_NAME) | OPT_BIT(OPT_SIZE_GB),
     OPT_BIT(OPT_NAME) | OPT_BIT(OPT_SIZE_GB)},
    {{"volumes", "delete"}, CTL_COMMAND_VOLUMES_DELETE, TARGET_VOLUME_ID, 0, 0},
    {{"token", "mint"}, CTL_COMMAND_TOKEN_MINT, TARGET_NONE, MINT, OPT_BIT(OPT_SECRET_FILE)},
    {{"fleet", "hosts"}, CTL_COMMAND_FLEET_HOSTS, TARGET_NONE, FLEET, FLEET_REQUIRED},
    {{"fleet", "resources"}, CTL_COMMAND_FLEET_RESOURCES, TARGET_NONE, FLEET, FLEET_REQUIRED},
    {{"fleet", "create"},
     CTL_COMMAND_FLEET_CREATE,
     TARGET_NONE,
     FLEET | CREATE | OPT_BIT(OPT_COUNT) | OPT_BIT(OPT_IMAGE),
     FLEET_CREATE_REQUIRED},
    /* Placement is not needed: vgpud deletes the allocation itself (FLEET-6); the options are
     * taken so that one set of fleet options serves every fleet command. */
    {{"fleet", "delete"},
     CTL_COMMAND_FLEET_DELETE,
     TARGET_INSTANCE_ID,
     FLEET | OPT_BIT(OPT_HOST),
     FLEET_DELETE_REQUIRED},
};

/* The options whose values become strings of the create body (API-9). */
static const CtlOption create_text_options[] = {OPT_NAME,    OPT_KERNEL, OPT_INITRD,
                                                OPT_CMDLINE, OPT_DISK,   OPT_PROFILE};

void ctl_args_done(CtlArgs *a)
{
        free(a->url);
        free(a->unix_socket);
        free(a->token);
        free(a->target);
        free(a->body);
        free(a->secret_file);
        free(a->subject);
        free(a->placement_url);
        free(a->placement_token);
        free(a->hosts_file);
        free(a->host);
        free(a->profile);
        strv_free(a->ssh_args);
        free(a->via);
        free(a->volume);
        free(a->image);
        *a = (CtlArgs){};
}

/* A base URL: http or https, something after the scheme, nothing a shell or header mangles. */
int ctl_url_normalize(const char *source, const char *url, char **ret, char **error)
{
        const char *rest = startswith(url, "http://");
        if (!rest)
                rest = startswith(url, "https://");
        if (!rest || !*rest || *rest == '/')
                return error_set(error, -EINVAL,
                                 "%s: invalid URL \"%s\": expected http://HOST:PORT or "
                                 "https://HOST:PORT",
                                 source, url);
        for (const char *p = url; *p; p++)
                if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '?' || *p == '#')
                        return error_set(error, -EINVAL,
                                         "%s: invalid URL \"%s\": no spaces, control "
                                         "characters, query or fragment allowed",
                                         source, url);

        /* API paths are appended to it and the API never strips a trailing slash (API-3). */
        size_t n = strlen(url);
        while (n > 0 && url[n - 1] == '/')
                n--;
        char *copy = strndup(url, n);
        if (!copy)
                return error_set_oom(error);
        *ret = copy;
        return 0;
}

/* Whatever goes into the Authorization header must be visible ASCII and fit it (API-12). */
int ctl_token_check(const char *source, const char *token, char **error)
{
        size_t n = strlen(token);
        if (n == 0)
                return error_set(error, -EINVAL, "%s: the token is empty", source);
        if (n > CTL_TOKEN_MAX)
                return error_set(error, -EINVAL, "%s: the token is longer than %d bytes", source,
                                 CTL_TOKEN_MAX);
        for (const char *p = token; *p; p++)
                if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
                        return error_set(error, -EINVAL,
                                         "%s: the token contains a character not allowed in "
                                         "an HTTP header",
                                         source);
        return 0;
}

static int token_read_file(const char *option, const char *path, char **ret, char **error)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;

        /* Room for the token and the newline that `token mint > file` leaves. */
        int r = read_file_at(AT_FDCWD, path, CTL_TOKEN_MAX + 2, &buf, &size);
        if (r == -EFBIG)
                return error_set(error, r, "%s %s: larger than a token can be", option, path);
        if (r < 0)
                return error_set(error, r, "%s %s: %s", option, path, strerror(-r));
        if (strlen(buf) != size)
                return error_set(error, -EINVAL, "%s %s: contains a NUL byte", option, path);
        if (size > 0 && buf[size - 1] == '\n')
                buf[size - 1] = 0;

        _cleanup_free_ char *source = NULL;
        if (strprintf(&source, "%s %s", option, path) < 0)
                return error_set_oom(error);
        r = ctl_token_check(source, buf, error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* Every value of each repeating option, in the order given. */
typedef struct OptionLists {
        char **v[_OPT_MAX];
} OptionLists;

static void option_lists_done(OptionLists *l)
{
        for (size_t o = 0; o < _OPT_MAX; o++)
                l->v[o] = strv_free(l->v[o]);
}

static int option_find(const char *arg, size_t len)
{
        for (size_t i = 0; i < _OPT_MAX; i++)
                if (strlen(options[i].name) == len && strncmp(options[i].name, arg, len) == 0)
                        return (int)i;
        return -ENOENT;
}

static bool is_valid_utf8(const char *s)
{
        json_t *j = json_string(s);
        json_decref(j);
        return j != NULL;
}

/* Checked here as well as by the daemon: the id becomes part of a URL (INST-3). */
static bool instance_id_is_wellformed(const char *id)
{
        size_t n = 0;
        for (; id[n]; n++)
                if (!((id[n] >= 'a' && id[n] <= 'z') || (id[n] >= '0' && id[n] <= '9')))
                        return false;
        return n == CTL_INSTANCE_ID_LEN;
}

static int parse_target(CtlTarget kind, const char *name, const char *word, CtlArgs *a,
                        char **error)
{
        switch (kind) {
        case TARGET_NONE:
                return 0;
        case TARGET_PCI_ADDRESS:
                /* Checked here as well as by the daemon: the address becomes part of a URL. */
                if (!pci_address_is_valid(word))
                        return error_set(error, -EINVAL,
                                         "invalid PCI address \"%s\": expected dddd:bb:dd.f in "
                                         "lowercase hex",
                                         word);
                break;
        case TARGET_INSTANCE_ID:
                if (!instance_id_is_wellformed(word))
                        return error_set(error, -EINVAL,
                                         "invalid instance id \"%s\" for \"%s\": expected %d "
                                         "characters from a-z and 0-9",
                                         word, name, CTL_INSTANCE_ID_LEN);
                break;
        case TARGET_VOLUME_ID:
                if (!instance_id_is_wellformed(word))
                        return error_set(error, -EINVAL,
                                         "invalid volume id \"%s\" for \"%s\": expected %d "
                                         "characters from a-z and 0-9",
                                         word, name, CTL_INSTANCE_ID_LEN);
                break;
        case TARGET_IMAGE_NAME:
                if (!resource_name_is_valid(word))
                        return error_set(error, -EINVAL,
                                         "invalid image name \"%s\" for \"%s\": expected a "
                                         "name like an instance's (INST-4)",
                                         word, name);
                break;
        }
        a->target = strdup(word);
        return a->target ? 0 : error_set_oom(error);
}

/* The options a command takes besides the global ones, and those it needs. */
static int check_command_options(size_t cmd, const char *const *values, const char *name,
                                 char **error)
{
        for (size_t o = _OPT_GLOBAL_MAX; o < _OPT_MAX; o++) {
                bool takes = commands[cmd].options & OPT_BIT(o);
                if (values[o] && !takes)
                        return error_set(error, -EINVAL, "option %s does not apply to \"%s\"",
                                         options[o].name, name);
        }
        for (size_t o = _OPT_GLOBAL_MAX; o < _OPT_MAX; o++)
                if ((commands[cmd].required & OPT_BIT(o)) && !values[o])
                        return error_set(error, -EINVAL, "\"%s\" needs %s", name, options[o].name);
        return 0;
}

static int parse_reason(const char *reason, CtlArgs *a, char **error)
{
        size_t n = strlen(reason);
        if (n < 1 || n > CTL_REASON_MAX || !is_valid_utf8(reason))
                return error_set(error, -EINVAL, "--reason must be UTF-8 text of 1 to %d bytes",
                                 CTL_REASON_MAX);
        json_auto_t *j = json_pack("{s:s}", "reason", reason);
        a->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        return a->body ? 0 : error_set_oom(error);
}

/*
 * The create body of API-9. The daemon judges names, sizes and paths and says which field is
 * wrong (INST-7); here only what the body needs: integers where it has integers, UTF-8 text,
 * and the one rule no single field shows, that there is something to boot (INST-5).
 */
static int parse_create(const char *const *values, char **const *lists, CtlArgs *a, char **error)
{
        uint32_t vcpus;
        uint64_t memory_mb;

        if (parse_uint32(values[OPT_VCPUS], &vcpus) < 0)
                return error_set(error, -EINVAL, "--vcpus \"%s\": expected a whole number",
                                 values[OPT_VCPUS]);
        if (parse_uint64_range(values[OPT_MEMORY_MB], 0, INT64_MAX, &memory_mb) < 0)
                return error_set(error, -EINVAL,
                                 "--memory-mb \"%s\": expected a whole number of MiB",
                                 values[OPT_MEMORY_MB]);
        for (size_t i = 0; i < ELEMENTSOF(create_text_options); i++) {
                const char *v = values[create_text_options[i]];
                if (v && !is_valid_utf8(v))
                        return error_set(error, -EINVAL, "%s must be UTF-8 text",
                                         options[create_text_options[i]].name);
        }
        /* An image is a root disk to boot from (DISK-5): boot is needed only without one. */
        if (!values[OPT_KERNEL] && !values[OPT_DISK] && !values[OPT_IMAGE])
                return error_set(error, -EINVAL,
                                 "\"instances create\" needs --image, --kernel or --disk");

        json_auto_t *gpu = NULL;
        if (values[OPT_PROFILE]) {
                gpu = json_pack("{s:s}", "profile", values[OPT_PROFILE]);
                if (!gpu)
                        return error_set_oom(error);
        }
        /* With an image alone there is nothing to say about booting (API-9: boot is optional). */
        json_auto_t *boot = NULL;
        if (values[OPT_KERNEL] || values[OPT_INITRD] || values[OPT_CMDLINE] || values[OPT_DISK]) {
                boot = json_pack("{s:s*, s:s*, s:s*, s:s*}", "kernel", values[OPT_KERNEL], "initrd",
                                 values[OPT_INITRD], "cmdline", values[OPT_CMDLINE], "disk",
                                 values[OPT_DISK]);
                if (!boot)
                        return error_set_oom(error);
        }
        json_auto_t *j = json_pack("{s:s, s:I, s:I, s:O*, s:O*}", "name", values[OPT_NAME], "vcpus",
                                   (json_int_t)vcpus, "memory_mb", (json_int_t)memory_mb, "boot",
                                   boot, "gpu", gpu);
        if (!j)
                return error_set_oom(error);
        const CtlCreateFlags flags = {
            .image = values[OPT_IMAGE],
            .disk_gb = values[OPT_DISK_GB],
            .volumes = lists[OPT_VOLUME],
            .network = values[OPT_NETWORK],
            .ports = lists[OPT_PORT],
            .ip = values[OPT_IP],
            .prefix = values[OPT_PREFIX],
            .gateway = values[OPT_GATEWAY],
            .dns = lists[OPT_DNS],
            .ssh_key_files = lists[OPT_SSH_KEY_FILE],
            .user_data_file = values[OPT_USER_DATA_FILE],
            .hostname = values[OPT_HOSTNAME],
        };
        int r = ctl_create_body_add(j, &flags, error);
        if (r < 0)
                return r;
        a->body = json_dumps(j, JSON_COMPACT);
        return a->body ? 0 : error_set_oom(error);
}

/*
 * The fleet commands (FLEET-7). Each host's URL and token come from the hosts file, which
 * ctl-fleet.c reads, so the options that name one daemon do not apply.
 */
static int parse_fleet(const char *const *values, CtlArgs *a, char **error)
{
        static const CtlOption one_daemon[] = {OPT_URL, OPT_UNIX, OPT_TOKEN, OPT_TOKEN_FILE};
        int r;

        for (size_t i = 0; i < ELEMENTSOF(one_daemon); i++)
                if (values[one_daemon[i]])
                        return error_set(error, -EINVAL,
                                         "option %s does not apply to fleet commands: the hosts "
                                         "file names each host's URL and token",
                                         options[one_daemon[i]].name);
        if (values[OPT_PLACEMENT]) {
                r = ctl_url_normalize("--placement", values[OPT_PLACEMENT], &a->placement_url,
                                      error);
                if (r < 0)
                        return r;
        }
        if (values[OPT_PLACEMENT_TOKEN_FILE]) {
                r = token_read_file("--placement-token-file", values[OPT_PLACEMENT_TOKEN_FILE],
                                    &a->placement_token, error);
                if (r < 0)
                        return r;
        }
        if (!*values[OPT_HOSTS])
                return error_set(error, -EINVAL, "--hosts needs a file name");
        a->hosts_file = strdup(values[OPT_HOSTS]);
        if (!a->hosts_file)
                return error_set_oom(error);
        if (values[OPT_HOST]) {
                if (!fleet_host_name_is_valid(values[OPT_HOST]))
                        return error_set(error, -EINVAL,
                                         "--host \"%s\": expected a host name of 1 to %d "
                                         "letters, digits, '-', '.' and '_'",
                                         values[OPT_HOST], FLEET_HOST_NAME_MAX);
                a->host = strdup(values[OPT_HOST]);
                if (!a->host)
                        return error_set_oom(error);
        }
        a->count = 1;
        if (values[OPT_COUNT]) {
                uint64_t n;
                if (parse_uint64_range(values[OPT_COUNT], 1, CTL_FLEET_COUNT_MAX, &n) < 0)
                        return error_set(error, -EINVAL,
                                         "--count \"%s\": expected a number of VMs from 1 to %d",
                                         values[OPT_COUNT], CTL_FLEET_COUNT_MAX);
                a->count = (uint32_t)n;
        }
        if (values[OPT_PROFILE]) {
                a->profile = strdup(values[OPT_PROFILE]);
                if (!a->profile)
                        return error_set_oom(error);
        }
        if (values[OPT_IMAGE]) {
                /* DISK-12: the trait a host of the image carries, and the create's image. */
                if (!resource_name_is_valid(values[OPT_IMAGE]))
                        return error_set(error, -EINVAL,
                                         "--image \"%s\": expected an image name (INST-4)",
                                         values[OPT_IMAGE]);
                a->image = strdup(values[OPT_IMAGE]);
                if (!a->image)
                        return error_set_oom(error);
        }
        return 0;
}

/*
 * The bodies of the disk commands (DISK-2, DISK-7, DISK-8); the daemon judges names, paths and
 * sizes. A detach's volume becomes part of the path, so it is checked as the daemon's router
 * would take it: an id or a name, nothing a URL would read otherwise.
 */
static int parse_disks(const char *const *values, CtlArgs *a, char **error)
{
        json_auto_t *j = NULL;
        uint64_t n;

        switch (a->command) {
        case CTL_COMMAND_IMAGES_IMPORT:
                if (!is_valid_utf8(values[OPT_SOURCE]) ||
                    (values[OPT_SHA256] && !is_valid_utf8(values[OPT_SHA256])))
                        return error_set(error, -EINVAL, "--source and --sha256 must be UTF-8");
                j = json_pack("{s:s, s:s, s:s*}", "name", a->target, "source", values[OPT_SOURCE],
                              "sha256", values[OPT_SHA256]);
                break;
        case CTL_COMMAND_VOLUMES_CREATE:
                if (parse_uint64_range(values[OPT_SIZE_GB], 1, INT64_MAX, &n) < 0)
                        return error_set(error, -EINVAL,
                                         "--size-gb \"%s\": expected a whole number of GiB",
                                         values[OPT_SIZE_GB]);
                if (!is_valid_utf8(values[OPT_NAME]))
                        return error_set(error, -EINVAL, "--name must be UTF-8 text");
                j = json_pack("{s:s, s:I}", "name", values[OPT_NAME], "size_gb", (json_int_t)n);
                break;
        case CTL_COMMAND_INSTANCES_ATTACH_VOLUME:
                if (!is_valid_utf8(values[OPT_VOLUME]))
                        return error_set(error, -EINVAL, "--volume must be UTF-8 text");
                j = json_pack("{s:s, s:b}", "volume", values[OPT_VOLUME], "readonly",
                              values[OPT_READONLY] != NULL);
                break;
        default: /* detach-volume */
                if (!instance_id_is_wellformed(values[OPT_VOLUME]) &&
                    !resource_name_is_valid(values[OPT_VOLUME]))
                        return error_set(error, -EINVAL,
                                         "--volume \"%s\": expected a volume id or name",
                                         values[OPT_VOLUME]);
                a->volume = strdup(values[OPT_VOLUME]);
                return a->volume ? 0 : error_set_oom(error);
        }
        a->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
        return a->body ? 0 : error_set_oom(error);
}

static int parse_console(const char *const *values, CtlArgs *a, char **error)
{
        uint64_t n;

        /* CONS-4: following and attaching are two different ways in. */
        a->follow = values[OPT_FOLLOW] != NULL;
        a->attach = values[OPT_ATTACH] != NULL;
        if (a->follow && a->attach)
                return error_set(error, -EINVAL, "--follow and --attach exclude each other");
        if (a->attach && values[OPT_TAIL_BYTES])
                return error_set(error, -EINVAL,
                                 "--tail-bytes goes with a tail or --follow, "
                                 "not --attach");
        if (!values[OPT_TAIL_BYTES])
                return 0;
        if (parse_uint64_range(values[OPT_TAIL_BYTES], 1, CTL_CONSOLE_TAIL_MAX, &n) < 0)
                return error_set(error, -EINVAL,
                                 "--tail-bytes \"%s\": expected a number of bytes from 1 to %d",
                                 values[OPT_TAIL_BYTES], CTL_CONSOLE_TAIL_MAX);
        a->tail_bytes = (uint32_t)n;
        return 0;
}

static int parse_mint(const char *const *values, CtlArgs *a, char **error)
{
        a->secret_file = strdup(values[OPT_SECRET_FILE]);
        if (!a->secret_file)
                return error_set_oom(error);

        a->ttl = CTL_DEFAULT_TTL;
        if (values[OPT_TTL]) {
                nsec_t ttl;
                if (parse_duration(values[OPT_TTL], &ttl) < 0 || ttl < NSEC_PER_SEC)
                        return error_set(error, -EINVAL,
                                         "--ttl \"%s\": expected a duration of at least 1s, "
                                         "such as 30m, 1h or 1h30m",
                                         values[OPT_TTL]);
                a->ttl = ttl;
        }
        if (values[OPT_SUB]) {
                if (!*values[OPT_SUB] || !is_valid_utf8(values[OPT_SUB]))
                        return error_set(error, -EINVAL, "--sub must be non-empty UTF-8 text");
                a->subject = strdup(values[OPT_SUB]);
                if (!a->subject)
                        return error_set_oom(error);
        }
        return 0;
}

/* Where to connect and with which token: the command line first, then the environment. */
static int parse_connection(const char *const *values, const CtlEnv *env, CtlArgs *a, char **error)
{
        int r;

        if (values[OPT_URL] && values[OPT_UNIX])
                return error_set(error, -EINVAL, "--url and --unix exclude each other");
        if (values[OPT_UNIX]) {
                size_t n = strlen(values[OPT_UNIX]);
                if (n == 0 || n > CTL_UNIX_SOCKET_PATH_MAX)
                        return error_set(error, -EINVAL,
                                         "--unix: a socket path needs 1 to %d bytes",
                                         CTL_UNIX_SOCKET_PATH_MAX);
                a->unix_socket = strdup(values[OPT_UNIX]);
                if (!a->unix_socket)
                        return error_set_oom(error);
        } else if (values[OPT_URL]) {
                r = ctl_url_normalize("--url", values[OPT_URL], &a->url, error);
                if (r < 0)
                        return r;
        } else {
                bool from_env = env->url && *env->url;
                r = ctl_url_normalize(from_env ? "VGPUD_URL" : "default URL",
                                      from_env ? env->url : CTL_DEFAULT_URL, &a->url, error);
                if (r < 0)
                        return r;
        }

        if (values[OPT_TOKEN] && values[OPT_TOKEN_FILE])
                return error_set(error, -EINVAL, "--token and --token-file exclude each other");
        if (values[OPT_TOKEN_FILE])
                return token_read_file("--token-file", values[OPT_TOKEN_FILE], &a->token, error);

        const char *token = values[OPT_TOKEN], *source = "--token";
        if (!token && env->token && *env->token) {
                token = env->token;
                source = "VGPUD_TOKEN";
        }
        if (!token)
                return 0;
        r = ctl_token_check(source, token, error);
        if (r < 0)
                return r;
        a->token = strdup(token);
        return a->token ? 0 : error_set_oom(error);
}

/*
 * --via's host goes to ssh as its destination: a name or an address, never something ssh would
 * read as an option or a user ("-oProxyCommand=...", "root@...").
 */
static bool via_host_is_plain(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 253 || s[0] == '-')
                return false;
        return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") == n;
}

static int parse_command(const char *const *words, size_t n_words, const char *const *values,
                         char **const *lists, const CtlEnv *env, CtlArgs *a, char **error)
{
        size_t n_cmd = 0;
        size_t i = 0;
        bool group = false; /* words[0] starts some two-word command */
        for (; i < ELEMENTSOF(commands); i++) {
                n_cmd = commands[i].words[1] ? 2 : 1;
                if (!streq(words[0], commands[i].words[0]))
                        continue;
                group = group || n_cmd == 2;
                if (n_words >= n_cmd && (n_cmd == 1 || streq(words[1], commands[i].words[1])))
                        break;
        }
        if (i == ELEMENTSOF(commands)) {
                if (group && n_words >= 2)
                        return error_set(error, -EINVAL, "unknown command \"%s %s\"", words[0],
                                         words[1]);
                return error_set(error, -EINVAL, "unknown command \"%s\"", words[0]);
        }

        _cleanup_free_ char *name = NULL;
        if (strprintf(&name, "%s%s%s", commands[i].words[0], n_cmd == 2 ? " " : "",
                      n_cmd == 2 ? commands[i].words[1] : "") < 0)
                return error_set_oom(error);

        size_t n_args = commands[i].target != TARGET_NONE ? 1 : 0;
        static const char *const needs[] = {
            [TARGET_PCI_ADDRESS] = "a PCI address",
            [TARGET_INSTANCE_ID] = "an instance id",
            [TARGET_IMAGE_NAME] = "an image name",
            [TARGET_VOLUME_ID] = "a volume id",
        };
        if (n_words < n_cmd + n_args)
                return error_set(error, -EINVAL, "\"%s\" needs %s", name,
                                 needs[commands[i].target]);
        if (n_words > n_cmd + n_args && commands[i].command != CTL_COMMAND_INSTANCES_SSH)
                return error_set(error, -EINVAL, "unexpected argument \"%s\"",
                                 words[n_cmd + n_args]);

        a->command = commands[i].command;
        int r = check_command_options(i, values, name, error);
        if (r < 0)
                return r;
        /* Options repeat for create's lists only: attach-volume takes one --volume. */
        for (size_t o = 0; o < _OPT_MAX && a->command != CTL_COMMAND_INSTANCES_CREATE; o++)
                if (strv_length(lists[o]) > 1)
                        return error_set(error, -EINVAL, "option %s given twice", options[o].name);
        r = parse_target(commands[i].target, name, n_args ? words[n_cmd] : NULL, a, error);
        if (r < 0)
                return r;

        switch (a->command) {
        case CTL_COMMAND_HEALTH_QUARANTINE:
        case CTL_COMMAND_HEALTH_DRAIN:
                r = parse_reason(values[OPT_REASON], a, error);
                break;
        case CTL_COMMAND_INSTANCES_CREATE:
                r = parse_create(values, lists, a, error);
                break;
        case CTL_COMMAND_INSTANCES_SSH:
                if (values[OPT_VIA] && !via_host_is_plain(values[OPT_VIA]))
                        return error_set(error, -EINVAL,
                                         "--via \"%s\": expected a host name or address",
                                         values[OPT_VIA]);
                if (values[OPT_VIA] && !(a->via = strdup(values[OPT_VIA])))
                        return error_set_oom(error);
                for (size_t w = n_cmd + n_args; r >= 0 && w < n_words; w++)
                        if (strv_push(&a->ssh_args, words[w]) < 0)
                                r = error_set_oom(error);
                break;
        case CTL_COMMAND_INSTANCES_CONSOLE:
                r = parse_console(values, a, error);
                break;
        case CTL_COMMAND_INSTANCES_ATTACH_VOLUME:
        case CTL_COMMAND_INSTANCES_DETACH_VOLUME:
        case CTL_COMMAND_IMAGES_IMPORT:
        case CTL_COMMAND_VOLUMES_CREATE:
                r = parse_disks(values, a, error);
                break;
        case CTL_COMMAND_TOKEN_MINT:
                /* A local command: where the daemon is does not matter. */
                return parse_mint(values, a, error);
        case CTL_COMMAND_FLEET_CREATE:
                /* The hosts file says where each daemon is. */
                r = parse_create(values, lists, a, error);
                return r < 0 ? r : parse_fleet(values, a, error);
        case CTL_COMMAND_FLEET_HOSTS:
        case CTL_COMMAND_FLEET_RESOURCES:
        case CTL_COMMAND_FLEET_DELETE:
                /* The hosts file says where each daemon is. */
                return parse_fleet(values, a, error);
        default:
                break;
        }
        if (r < 0)
                return r;
        return parse_connection(values, env, a, error);
}

int ctl_args_parse(int argc, char *const *argv, const CtlEnv *env, CtlArgs *ret, char **error)
{
        _cleanup_(ctl_args_done) CtlArgs a = {};
        _cleanup_free_ const char **words = calloc(argc > 0 ? (size_t)argc : 1, sizeof(char *));
        const char *values[_OPT_MAX] = {};
        _cleanup_(option_lists_done) OptionLists lists = {};
        bool flags[_OPT_MAX] = {};
        size_t n_words = 0;
        bool options_done = false;

        if (!words)
                return error_set_oom(error);

        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];

                if (options_done || arg[0] != '-' || arg[1] == 0) {
                        words[n_words++] = arg;
                        continue;
                }
                if (streq(arg, "--")) {
                        options_done = true;
                        continue;
                }

                const char *eq = strchr(arg, '=');
                size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
                int o = streq(arg, "-h") ? OPT_HELP : option_find(arg, len);
                if (o < 0)
                        return error_set(error, -EINVAL, "unknown option \"%.*s\"", (int)len, arg);
                if (flags[o] || (values[o] && !options[o].repeats))
                        return error_set(error, -EINVAL, "option %s given twice", options[o].name);
                if (!options[o].has_value) {
                        if (eq)
                                return error_set(error, -EINVAL, "option %s takes no value",
                                                 options[o].name);
                        flags[o] = true;
                        /* A command's own flags are checked against it like its values. */
                        if (o >= _OPT_GLOBAL_MAX)
                                values[o] = "";
                        continue;
                }
                const char *value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
                if (!value)
                        return error_set(error, -EINVAL, "option %s needs a value",
                                         options[o].name);
                /* A repeating option's first value also marks it as given. */
                if (!values[o])
                        values[o] = value;
                if (options[o].repeats && strv_push(&lists.v[o], value) < 0)
                        return error_set_oom(error);
        }

        a.json = flags[OPT_JSON];
        if (flags[OPT_HELP]) {
                a.command = CTL_COMMAND_HELP;
        } else if (flags[OPT_VERSION]) {
                a.command = CTL_COMMAND_VERSION;
        } else if (n_words == 0) {
                return error_set(error, -EINVAL, "no command given");
        } else {
                int r = parse_command(words, n_words, values, lists.v, env, &a, error);
                if (r < 0)
                        return r;
        }

        *ret = a;
        a = (CtlArgs){};
        return 0;
}
