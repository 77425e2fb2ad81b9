/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "config/config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <yaml.h>

/* Bytes of an offending value quoted in a message: enough to recognise it, not a whole file. */
#define MESSAGE_VALUE_MAX 128

#define PATH_VALUE_MAX 4095

/* ---- the key table -------------------------------------------------------------------------- */

typedef enum KeyKind {
        KIND_SECTION,  /* a nested mapping: "gpu", "gpu.breaker" */
        KIND_STRING,   /* char *, checked by a StringRule */
        KIND_LIST,     /* char **, each item checked by the key's rule; at least .min items */
        KIND_UINT,     /* unsigned */
        KIND_UINT64,   /* uint64_t */
        KIND_DURATION, /* nsec_t */
        KIND_BOOL,     /* bool */
        KIND_ENUM,     /* an int-sized enum */
        KIND_MODE,     /* mode_t */
        KIND_SIZE,     /* uint64_t bytes: digits with an optional B, KiB, MiB, GiB or TiB */
        KIND_MIN_FREE, /* ConfigMinFree: "<0..99>%" or a size */
} KeyKind;

typedef enum StringRule {
        RULE_PATH,        /* absolute */
        RULE_DIRECTORY,   /* absolute, stored without trailing slashes */
        RULE_RUNTIME_DIR, /* RULE_DIRECTORY, and VMM-15 */
        RULE_UNIX_SOCKET, /* absolute and fits sun_path, or empty */
        RULE_LIBRARY,     /* a bare name for the loader's search, an absolute path, or empty */
        RULE_LISTEN,      /* CFG-6, or empty */
        RULE_URL,         /* http:// or https:// and printable ASCII without spaces, or empty */
        RULE_HOST_NAME,   /* letters, digits, '-', '.', '_' (FLEET-2's provider names), or empty */
        RULE_TOKEN,       /* printable ASCII without spaces, or empty */
        RULE_PATH_OR_EMPTY, /* absolute, or empty */
        RULE_IFNAME,        /* an interface name the kernel takes (NET-1, NET-4) */
        RULE_SUBNET,        /* IPv4 CIDR /16../29 without host bits (network.nat.subnet) */
        RULE_PORT_RANGE,    /* "<lo>-<hi>", 1 <= lo <= hi <= 65535 */
} StringRule;

typedef struct EnumValue {
        const char *name;
        int value;
} EnumValue;

typedef struct ConfigKey {
        const char *name; /* dotted, as in --set and in messages */
        KeyKind kind;
        size_t offset;
        uint64_t min, max; /* integers and durations, inclusive */
        StringRule rule;
        const EnumValue *values;
        size_t n_values;
} ConfigKey;

_Static_assert(sizeof(ConfigQemuAccel) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(PlacementPolicy) == sizeof(int), "enums are stored as int");
_Static_assert(sizeof(ConfigPlacementAuth) == sizeof(int), "enums are stored as int");

/* A compile-time error unless Config's field f has type t. */
#define TYPE_CHECK(f, t) \
        sizeof(char[__builtin_types_compatible_p(__typeof__(((Config *)0)->f), t) ? 1 : -1])
#define FIELD(f, t) (offsetof(Config, f) + 0 * TYPE_CHECK(f, t))

/* Field lists for the table below; each entry is {KIND(...)}. */
#define SECTION(n) .name = n, .kind = KIND_SECTION
#define STRING(n, f, r) .name = n, .kind = KIND_STRING, .offset = FIELD(f, char *), .rule = r
#define PATH_LIST(n, f)                                                                    \
        .name = n, .kind = KIND_LIST, .offset = FIELD(f, char **), .rule = RULE_DIRECTORY, \
        .min = 1, .max = CONFIG_IMAGE_DIRS_MAX
#define NAME_LIST(n, f, hi)                                                                       \
        .name = n, .kind = KIND_LIST, .offset = FIELD(f, char **), .rule = RULE_IFNAME, .min = 0, \
        .max = hi
#define UINT(n, f, lo, hi) \
        .name = n, .kind = KIND_UINT, .offset = FIELD(f, unsigned), .min = lo, .max = hi
#define UINT64(n, f, lo, hi) \
        .name = n, .kind = KIND_UINT64, .offset = FIELD(f, uint64_t), .min = lo, .max = hi
#define DURATION(n, f, lo, hi) \
        .name = n, .kind = KIND_DURATION, .offset = FIELD(f, nsec_t), .min = lo, .max = hi
#define BOOL(n, f) .name = n, .kind = KIND_BOOL, .offset = FIELD(f, bool)
#define ENUM(n, f, type, v)                                                  \
        .name = n, .kind = KIND_ENUM, .offset = FIELD(f, type), .values = v, \
        .n_values = ELEMENTSOF(v)
#define MODE(n, f) .name = n, .kind = KIND_MODE, .offset = FIELD(f, mode_t), .max = 0777
#define SIZE(n, f, lo, hi) \
        .name = n, .kind = KIND_SIZE, .offset = FIELD(f, uint64_t), .min = lo, .max = hi
#define MIN_FREE(n, f) .name = n, .kind = KIND_MIN_FREE, .offset = FIELD(f, ConfigMinFree)

static const EnumValue qemu_accels[] = {
    {"auto", CONFIG_QEMU_ACCEL_AUTO},
    {"kvm", CONFIG_QEMU_ACCEL_KVM},
    {"tcg", CONFIG_QEMU_ACCEL_TCG},
};

static const EnumValue placement_policies[] = {
    {"spread", PLACEMENT_POLICY_SPREAD},
    {"pack", PLACEMENT_POLICY_PACK},
};

static const EnumValue placement_auths[] = {
    {"noauth", CONFIG_PLACEMENT_AUTH_NOAUTH},
    {"keystone", CONFIG_PLACEMENT_AUTH_KEYSTONE},
};

static const EnumValue network_modes[] = {
    {"nat", CONFIG_NETWORK_MODE_NAT},
    {"bridge", CONFIG_NETWORK_MODE_BRIDGE},
    {"none", CONFIG_NETWORK_MODE_NONE},
};

static const EnumValue log_levels[] = {
    {"err", LOG_LEVEL_ERR},   {"warning", LOG_LEVEL_WARNING}, {"notice", LOG_LEVEL_NOTICE},
    {"info", LOG_LEVEL_INFO}, {"debug", LOG_LEVEL_DEBUG},
};

/*
 * CFG-3, in its order. A section comes right before its keys and a nested section last within
 * its parent, which is what lets config_dump() write the nesting in one pass.
 */
static const ConfigKey config_keys[] = {
    {STRING("listen", listen, RULE_LISTEN)},
    {STRING("unix_socket", unix_socket, RULE_UNIX_SOCKET)},
    {MODE("unix_socket_mode", unix_socket_mode)},
    {STRING("jwt_secret_file", jwt_secret_file, RULE_PATH)},
    {STRING("data_dir", data_dir, RULE_DIRECTORY)},
    {STRING("runtime_dir", runtime_dir, RULE_RUNTIME_DIR)},
    {STRING("sysfs_root", sysfs_root, RULE_DIRECTORY)},
    {STRING("dev_root", dev_root, RULE_DIRECTORY)},
    {STRING("proc_root", proc_root, RULE_DIRECTORY)},
    {STRING("nvml_library", nvml_library, RULE_LIBRARY)},
    {STRING("qemu_binary", qemu_binary, RULE_PATH)},
    {ENUM("qemu_accel", qemu_accel, ConfigQemuAccel, qemu_accels)},
    {PATH_LIST("image_dirs", image_dirs)},
    {ENUM("log_level", log_level, int, log_levels)},
    {SECTION("vmm")},
    {DURATION("vmm.boot_timeout", vmm.boot_timeout, NSEC_PER_SEC, 10 * NSEC_PER_MIN)},
    {DURATION("vmm.stop_timeout", vmm.stop_timeout, NSEC_PER_SEC, 10 * NSEC_PER_MIN)},
    {DURATION("vmm.device_release_timeout", vmm.device_release_timeout, NSEC_PER_SEC,
              10 * NSEC_PER_MIN)},
    {UINT64("vmm.console_max_bytes", vmm.console_max_bytes, 65536, 1073741824)},
    {SECTION("storage")},
    {MIN_FREE("storage.min_free", storage.min_free)},
    {SIZE("storage.max_image_size", storage.max_image_size, UINT64_C(1) << 20, UINT64_C(1) << 50)},
    {UINT("storage.max_disk_gb", storage.max_disk_gb, 1, 65536)},
    {STRING("storage.qemu_img_binary", storage.qemu_img_binary, RULE_PATH)},
    {SECTION("gpu")},
    {UINT("gpu.vf_quarantine_threshold", gpu.vf_quarantine_threshold, 1, 64)},
    {ENUM("gpu.placement_policy", gpu.placement_policy, PlacementPolicy, placement_policies)},
    {DURATION("gpu.nvml_timeout", gpu.nvml_timeout, 100 * NSEC_PER_MSEC, 60 * NSEC_PER_SEC)},
    {DURATION("gpu.sysfs_timeout", gpu.sysfs_timeout, NSEC_PER_SEC, 10 * NSEC_PER_MIN)},
    {DURATION("gpu.reconcile_interval", gpu.reconcile_interval, 5 * NSEC_PER_SEC, NSEC_PER_HOUR)},
    {DURATION("gpu.sentinel_interval", gpu.sentinel_interval, NSEC_PER_SEC, 5 * NSEC_PER_MIN)},
    {DURATION("gpu.sentinel_timeout", gpu.sentinel_timeout, 100 * NSEC_PER_MSEC,
              60 * NSEC_PER_SEC)},
    {UINT("gpu.sentinel_concurrency", gpu.sentinel_concurrency, 1, 4096)},
    {BOOL("gpu.sentinel_mdev", gpu.sentinel_mdev)},
    {DURATION("gpu.vfio_term_grace", gpu.vfio_term_grace, 0, 60 * NSEC_PER_SEC)},
    {DURATION("gpu.vfio_init_window", gpu.vfio_init_window, 0, 10 * NSEC_PER_MIN)},
    {SECTION("gpu.breaker")},
    {BOOL("gpu.breaker.enabled", gpu.breaker.enabled)},
    {DURATION("gpu.breaker.window", gpu.breaker.window, NSEC_PER_MIN, 168 * NSEC_PER_HOUR)},
    {UINT("gpu.breaker.max_quarantines", gpu.breaker.max_quarantines, 1, 1000)},
    {SECTION("placement")},
    {STRING("placement.url", placement.url, RULE_URL)},
    {ENUM("placement.auth", placement.auth, ConfigPlacementAuth, placement_auths)},
    {STRING("placement.host_name", placement.host_name, RULE_HOST_NAME)},
    {DURATION("placement.sync_interval", placement.sync_interval, 5 * NSEC_PER_SEC,
              10 * NSEC_PER_MIN)},
    {DURATION("placement.orphan_grace", placement.orphan_grace, 5 * NSEC_PER_SEC,
              168 * NSEC_PER_HOUR)},
    {SECTION("placement.keystone")},
    {STRING("placement.keystone.auth_url", placement.keystone.auth_url, RULE_URL)},
    {STRING("placement.keystone.application_credential_id",
            placement.keystone.application_credential_id, RULE_TOKEN)},
    {STRING("placement.keystone.application_credential_secret_file",
            placement.keystone.application_credential_secret_file, RULE_PATH_OR_EMPTY)},
    /* NET-1, NET-4, NET-5, NET-6: after placement, so that each area's keys stay together. */
    {SECTION("network")},
    {ENUM("network.default_mode", network.default_mode, ConfigNetworkMode, network_modes)},
    {NAME_LIST("network.bridges", network.bridges, CONFIG_BRIDGES_MAX)},
    {STRING("network.dnsmasq_binary", network.dnsmasq_binary, RULE_PATH)},
    {SECTION("network.nat")},
    {BOOL("network.nat.enabled", network.nat.enabled)},
    {STRING("network.nat.bridge", network.nat.bridge, RULE_IFNAME)},
    {STRING("network.nat.subnet", network.nat.subnet, RULE_SUBNET)},
    {BOOL("network.nat.isolate", network.nat.isolate)},
    {STRING("network.nat.port_range", network.nat.port_range, RULE_PORT_RANGE)},
    /* SEED-2: the size cap is checked when a seed reads the file, which may change meanwhile. */
    {SECTION("cloud_init")},
    {STRING("cloud_init.vendor_data_file", cloud_init.vendor_data_file, RULE_PATH_OR_EMPTY)},
};

#define N_KEYS ELEMENTSOF(config_keys)
#define SECTION_DEPTH_MAX 2

static const ConfigKey *config_key_lookup(const char *name)
{
        for (size_t i = 0; i < N_KEYS; i++)
                if (streq(config_keys[i].name, name))
                        return &config_keys[i];
        return NULL;
}

static void *key_field(Config *c, const ConfigKey *k)
{
        return (char *)c + k->offset;
}

static const void *key_field_const(const Config *c, const ConfigKey *k)
{
        return (const char *)c + k->offset;
}

static const char *enum_name(const EnumValue *values, size_t n, int value)
{
        for (size_t i = 0; i < n; i++)
                if (values[i].value == value)
                        return values[i].name;
        return NULL;
}

/* ---- sizes (storage.*) ---------------------------------------------------------------------- */

#define SIZE_STRLEN 24

static const struct {
        const char *suffix;
        unsigned shift;
} size_units[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}, {"", 0}};

/* Digits (no leading zero) and an optional binary unit: "2TiB", "512MiB", "1048576". */
static int parse_size(const char *s, uint64_t *ret)
{
        size_t digits = strspn(s, "0123456789");
        if (digits == 0 || (s[0] == '0' && digits > 1))
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(size_units); i++) {
                if (!streq(s + digits, size_units[i].suffix))
                        continue;
                _cleanup_free_ char *number = strndup(s, digits);
                uint64_t n;
                if (!number)
                        return -ENOMEM;
                if (parse_uint64(number, &n) < 0 || n > (UINT64_MAX >> size_units[i].shift))
                        return -ERANGE;
                *ret = n << size_units[i].shift;
                return 0;
        }
        return -EINVAL;
}

/* The largest unit that states bytes exactly. */
static char *format_size(uint64_t bytes, char buf[static SIZE_STRLEN])
{
        for (size_t i = 0; i < ELEMENTSOF(size_units); i++) {
                uint64_t unit = UINT64_C(1) << size_units[i].shift;
                if (bytes != 0 && bytes % unit == 0) {
                        snprintf(buf, SIZE_STRLEN, "%" PRIu64 "%s", bytes / unit,
                                 size_units[i].suffix);
                        return buf;
                }
        }
        snprintf(buf, SIZE_STRLEN, "%" PRIu64, bytes);
        return buf;
}

const char *config_qemu_accel_to_string(ConfigQemuAccel a)
{
        return enum_name(qemu_accels, ELEMENTSOF(qemu_accels), (int)a);
}

const char *placement_policy_to_string(PlacementPolicy p)
{
        return enum_name(placement_policies, ELEMENTSOF(placement_policies), (int)p);
}

const char *config_placement_auth_to_string(ConfigPlacementAuth a)
{
        return enum_name(placement_auths, ELEMENTSOF(placement_auths), (int)a);
}

const char *config_network_mode_to_string(ConfigNetworkMode m)
{
        return enum_name(network_modes, ELEMENTSOF(network_modes), (int)m);
}

ConfigNetworkMode config_network_default_mode(const Config *c)
{
        if (c->network.default_mode == CONFIG_NETWORK_MODE_NAT && !c->network.nat.enabled)
                return CONFIG_NETWORK_MODE_NONE;
        return c->network.default_mode;
}

/* ---- life cycle ----------------------------------------------------------------------------- */

void config_done(Config *c)
{
        for (size_t i = 0; i < N_KEYS; i++) {
                const ConfigKey *k = &config_keys[i];
                if (k->kind == KIND_STRING)
                        freep(key_field(c, k));
                else if (k->kind == KIND_LIST)
                        strv_freep(key_field(c, k));
        }
        *c = (Config){};
}

/* [<data_dir>/import], the image_dirs that follow data_dir until image_dirs is set (DISK-1). */
static int image_dirs_for_data_dir(const char *data_dir, char ***ret)
{
        _cleanup_strv_free_ char **dirs = NULL;
        _cleanup_free_ char *images = NULL;

        /* "/" is the one directory path that keeps its trailing slash. */
        if (strprintf(&images, "%s/import", streq(data_dir, "/") ? "" : data_dir) < 0)
                return -ENOMEM;
        if (strv_push(&dirs, images) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(dirs);
        return 0;
}

int config_init_defaults(Config *ret)
{
        static const struct {
                size_t offset;
                const char *value;
        } strings[] = {
            {offsetof(Config, listen), "127.0.0.1:8080"},
            {offsetof(Config, unix_socket), ""},
            {offsetof(Config, jwt_secret_file), "/etc/vgpud/jwt.secret"},
            {offsetof(Config, data_dir), "/var/lib/vgpud"},
            {offsetof(Config, runtime_dir), "/run/vgpud"},
            {offsetof(Config, sysfs_root), "/sys"},
            {offsetof(Config, dev_root), "/dev"},
            {offsetof(Config, proc_root), "/proc"},
            {offsetof(Config, nvml_library), "libnvidia-ml.so.1"},
            {offsetof(Config, qemu_binary), "/usr/bin/qemu-system-x86_64"},
            {offsetof(Config, storage.qemu_img_binary), "/usr/bin/qemu-img"},
            {offsetof(Config, placement.url), ""},
            {offsetof(Config, placement.host_name), ""},
            {offsetof(Config, placement.keystone.auth_url), ""},
            {offsetof(Config, placement.keystone.application_credential_id), ""},
            {offsetof(Config, placement.keystone.application_credential_secret_file), ""},
            {offsetof(Config, network.dnsmasq_binary), "/usr/sbin/dnsmasq"},
            {offsetof(Config, network.nat.bridge), "vgpud0"},
            {offsetof(Config, network.nat.subnet), "10.233.0.0/24"},
            {offsetof(Config, network.nat.port_range), "20000-29999"},
            {offsetof(Config, cloud_init.vendor_data_file), ""},
        };
        _cleanup_(config_done) Config c = {
            .unix_socket_mode = 0600,
            .qemu_accel = CONFIG_QEMU_ACCEL_AUTO,
            .log_level = LOG_LEVEL_INFO,
            .vmm =
                {
                    .boot_timeout = 30 * NSEC_PER_SEC,
                    .stop_timeout = 30 * NSEC_PER_SEC,
                    .device_release_timeout = 30 * NSEC_PER_SEC,
                    .console_max_bytes = 16777216,
                },
            .storage =
                {
                    .min_free = {.percent = 5},
                    .max_image_size = UINT64_C(2) << 40,
                    .max_disk_gb = 4096,
                },
            .gpu =
                {
                    .vf_quarantine_threshold = 2,
                    .placement_policy = PLACEMENT_POLICY_SPREAD,
                    .nvml_timeout = 5 * NSEC_PER_SEC,
                    .sysfs_timeout = 30 * NSEC_PER_SEC,
                    .reconcile_interval = 60 * NSEC_PER_SEC,
                    .sentinel_interval = 5 * NSEC_PER_SEC,
                    .sentinel_timeout = 5 * NSEC_PER_SEC,
                    .sentinel_concurrency = 64,
                    .sentinel_mdev = false,
                    .vfio_term_grace = 5 * NSEC_PER_SEC,
                    .vfio_init_window = 60 * NSEC_PER_SEC,
                    .breaker =
                        {
                            .enabled = true,
                            .window = NSEC_PER_HOUR,
                            .max_quarantines = 4,
                        },
                },
            .placement =
                {
                    .auth = CONFIG_PLACEMENT_AUTH_NOAUTH,
                    .sync_interval = 30 * NSEC_PER_SEC,
                    .orphan_grace = 10 * NSEC_PER_MIN,
                },
            .network =
                {
                    .default_mode = CONFIG_NETWORK_MODE_NAT,
                    .nat = {.enabled = true, .isolate = true},
                },
        };

        for (size_t i = 0; i < ELEMENTSOF(strings); i++) {
                char *s = strdup(strings[i].value);
                if (!s)
                        return -ENOMEM;
                *(char **)((char *)&c + strings[i].offset) = s;
        }
        if (image_dirs_for_data_dir(c.data_dir, &c.image_dirs) < 0)
                return -ENOMEM;

        *ret = c;
        c = (Config){};
        return 0;
}

/* An empty list stays a list, so the copy of a loaded Config never reads as unset. */
static int list_copy(char *const *strv, char ***ret)
{
        static char *const empty[] = {NULL};
        return strv_copy(strv ? strv : empty, ret);
}

int config_copy(const Config *c, Config *ret)
{
        _cleanup_(config_done) Config t = *c;

        /* First forget the borrowed pointers, so a failure half way frees only the copies. */
        for (size_t i = 0; i < N_KEYS; i++)
                if (config_keys[i].kind == KIND_STRING || config_keys[i].kind == KIND_LIST)
                        *(void **)key_field(&t, &config_keys[i]) = NULL;

        for (size_t i = 0; i < N_KEYS; i++) {
                const ConfigKey *k = &config_keys[i];
                if (k->kind == KIND_STRING) {
                        const char *s = *(char *const *)key_field_const(c, k);
                        if (s && !(*(char **)key_field(&t, k) = strdup(s)))
                                return -ENOMEM;
                } else if (k->kind == KIND_LIST) {
                        char *const *strv = *(char **const *)key_field_const(c, k);
                        if (strv && list_copy(strv, key_field(&t, k)) < 0)
                                return -ENOMEM;
                }
        }

        *ret = t;
        t = (Config){};
        return 0;
}

/* ---- values --------------------------------------------------------------------------------- */

static bool is_control(unsigned char c)
{
        return c < 0x20 || c == 0x7f;
}

bool config_runtime_dir_is_valid(const char *path)
{
        if (!path || path[0] != '/' || strlen(path) > CONFIG_RUNTIME_DIR_MAX)
                return false;
        /* /proc/net/unix prints socket paths raw, space separated (VMM-17). */
        for (const unsigned char *p = (const unsigned char *)path; *p; p++)
                if (*p == ' ' || is_control(*p))
                        return false;
        return true;
}

/* The port of CFG-6: 1..65535, decimal, no sign and no leading zero. */
static int parse_port(const char *s, uint16_t *ret)
{
        uint64_t v;

        if (s[0] == '0')
                return -EINVAL;
        if (parse_uint64_range(s, 1, 65535, &v) < 0)
                return -EINVAL;
        *ret = (uint16_t)v;
        return 0;
}

int config_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len)
{
        char host[INET6_ADDRSTRLEN];
        const char *port_text;
        bool v6 = s[0] == '[';

        if (v6) {
                const char *close = strchr(s, ']');
                if (!close || close[1] != ':')
                        return -EINVAL;
                size_t n = (size_t)(close - (s + 1));
                if (n >= sizeof host)
                        return -EINVAL;
                memcpy(host, s + 1, n);
                host[n] = 0;
                port_text = close + 2;
        } else {
                /* One colon only: an unbracketed IPv6 address is ambiguous and refused. */
                const char *colon = strchr(s, ':');
                if (!colon || strchr(colon + 1, ':'))
                        return -EINVAL;
                size_t n = (size_t)(colon - s);
                if (n >= sizeof host)
                        return -EINVAL;
                memcpy(host, s, n);
                host[n] = 0;
                port_text = colon + 1;
        }

        uint16_t port;
        if (parse_port(port_text, &port) < 0)
                return -EINVAL;

        struct sockaddr_storage ss = {};
        socklen_t len;
        if (v6) {
                struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
                if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
                        return -EINVAL;
                a->sin6_family = AF_INET6;
                a->sin6_port = htons(port);
                len = sizeof *a;
        } else {
                struct sockaddr_in *a = (struct sockaddr_in *)&ss;
                /* inet_pton takes dotted quads only: no host names, no "127.1", no octal. */
                if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
                        return -EINVAL;
                a->sin_family = AF_INET;
                a->sin_port = htons(port);
                len = sizeof *a;
        }
        *ret = ss;
        *ret_len = len;
        return 0;
}

static bool printable_without_spaces(const char *s)
{
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
                if (*p <= ' ' || *p >= 0x7f)
                        return false;
        return true;
}

static bool string_is_valid(StringRule rule, const char *s)
{
        size_t n = strlen(s);
        bool absolute = s[0] == '/' && n <= PATH_VALUE_MAX;

        switch (rule) {
        case RULE_PATH:
        case RULE_DIRECTORY:
                return absolute;
        case RULE_RUNTIME_DIR:
                return config_runtime_dir_is_valid(s);
        case RULE_UNIX_SOCKET:
                return n == 0 || (absolute && n <= CONFIG_UNIX_SOCKET_PATH_MAX);
        case RULE_LIBRARY:
                /* A relative path with a slash would name a file below the working directory. */
                return n == 0 || absolute || (!strchr(s, '/') && n <= PATH_VALUE_MAX);
        case RULE_LISTEN: {
                struct sockaddr_storage ss;
                socklen_t len;
                return n == 0 || config_parse_listen(s, &ss, &len) >= 0;
        }
        case RULE_URL: {
                if (n == 0)
                        return true;
                const char *rest = startswith(s, "http://");
                if (!rest)
                        rest = startswith(s, "https://");
                if (!rest || !*rest || *rest == '/' || n > CONFIG_URL_MAX)
                        return false;
                return printable_without_spaces(s);
        }
        case RULE_HOST_NAME:
                if (n > CONFIG_HOST_NAME_MAX)
                        return false;
                for (const char *p = s; *p; p++)
                        if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') &&
                            !(*p >= '0' && *p <= '9') && *p != '-' && *p != '.' && *p != '_')
                                return false;
                return true;
        case RULE_TOKEN:
                return n <= CONFIG_CREDENTIAL_ID_MAX && printable_without_spaces(s);
        case RULE_PATH_OR_EMPTY:
                return n == 0 || absolute;
        case RULE_IFNAME:
                return ifname_is_valid(s);
        case RULE_SUBNET: {
                uint32_t network;
                unsigned prefix;
                return parse_ipv4_network(s, CONFIG_SUBNET_PREFIX_MIN, CONFIG_SUBNET_PREFIX_MAX,
                                          &network, &prefix) >= 0;
        }
        case RULE_PORT_RANGE: {
                uint16_t lo, hi;
                return parse_port_range(s, &lo, &hi) >= 0;
        }
        }
        return false;
}

/* Copies s for storing under rule: directories lose their trailing slashes. */
static int string_normalize(StringRule rule, const char *s, char **ret)
{
        size_t n = strlen(s);

        if (rule == RULE_DIRECTORY || rule == RULE_RUNTIME_DIR)
                while (n > 1 && s[n - 1] == '/')
                        n--;
        char *copy = strndup(s, n);
        if (!copy)
                return -ENOMEM;
        *ret = copy;
        return 0;
}

/* What a key accepts, for "<key> must be <what>, got ...". */
static void key_describe(const ConfigKey *k, char *buf, size_t size)
{
        char lo[DURATION_STRLEN], hi[DURATION_STRLEN];

        switch (k->kind) {
        case KIND_SECTION:
                snprintf(buf, size, "a mapping");
                return;
        case KIND_STRING:
                switch (k->rule) {
                case RULE_PATH:
                case RULE_DIRECTORY:
                        snprintf(buf, size, "an absolute path");
                        return;
                case RULE_RUNTIME_DIR:
                        snprintf(buf, size,
                                 "an absolute path of at most %d bytes without whitespace or "
                                 "control characters",
                                 CONFIG_RUNTIME_DIR_MAX);
                        return;
                case RULE_UNIX_SOCKET:
                        snprintf(buf, size, "an absolute path of at most %d bytes, or empty",
                                 CONFIG_UNIX_SOCKET_PATH_MAX);
                        return;
                case RULE_LIBRARY:
                        snprintf(buf, size, "a library name, an absolute path, or empty");
                        return;
                case RULE_LISTEN:
                        snprintf(buf, size,
                                 "<IPv4>:<port> or [<IPv6>]:<port> with a port between 1 and "
                                 "65535, or empty");
                        return;
                case RULE_URL:
                        snprintf(buf, size,
                                 "an http:// or https:// URL of at most %d bytes without spaces, "
                                 "or empty",
                                 CONFIG_URL_MAX);
                        return;
                case RULE_HOST_NAME:
                        snprintf(buf, size,
                                 "a host name of at most %d letters, digits, '-', '.' or '_', or "
                                 "empty",
                                 CONFIG_HOST_NAME_MAX);
                        return;
                case RULE_TOKEN:
                        snprintf(buf, size,
                                 "at most %d printable characters without spaces, or empty",
                                 CONFIG_CREDENTIAL_ID_MAX);
                        return;
                case RULE_PATH_OR_EMPTY:
                        snprintf(buf, size, "an absolute path, or empty");
                        return;
                case RULE_IFNAME:
                        snprintf(buf, size,
                                 "an interface name (1 to %d bytes, no '/', ':' or "
                                 "white space)",
                                 IFNAME_MAX);
                        return;
                case RULE_SUBNET:
                        snprintf(buf, size,
                                 "an IPv4 network a.b.c.d/n with n between %d and %d "
                                 "and no host bits set",
                                 CONFIG_SUBNET_PREFIX_MIN, CONFIG_SUBNET_PREFIX_MAX);
                        return;
                case RULE_PORT_RANGE:
                        snprintf(buf, size, "<lo>-<hi> with 1 <= lo <= hi <= 65535");
                        return;
                }
                break;
        case KIND_LIST:
                if (k->rule == RULE_IFNAME)
                        snprintf(buf, size, "a list of at most %" PRIu64 " interface names",
                                 k->max);
                else
                        snprintf(buf, size, "a list of %" PRIu64 " to %" PRIu64 " absolute paths",
                                 k->min, k->max);
                return;
        case KIND_UINT:
        case KIND_UINT64:
                snprintf(buf, size, "an integer between %" PRIu64 " and %" PRIu64, k->min, k->max);
                return;
        case KIND_DURATION:
                snprintf(buf, size, "a duration between %s and %s", format_duration(k->min, lo),
                         format_duration(k->max, hi));
                return;
        case KIND_BOOL:
                snprintf(buf, size, "true or false");
                return;
        case KIND_ENUM: {
                size_t used = (size_t)snprintf(buf, size, "one of ");
                for (size_t i = 0; i < k->n_values && used < size; i++)
                        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                                                 k->values[i].name);
                return;
        }
        case KIND_MODE:
                snprintf(buf, size, "an octal mode from 0000 to 0777");
                return;
        case KIND_SIZE:
                snprintf(buf, size, "a size between %s and %s", format_size(k->min, lo),
                         format_size(k->max, hi));
                return;
        case KIND_MIN_FREE:
                snprintf(buf, size, "a percentage from 0%% to 99%%, or a size");
                return;
        }
        snprintf(buf, size, "a valid value");
}

/*
 * `"<v>"`, cut at MESSAGE_VALUE_MAX: a value or key from the file (CFG-4, GEN-5). The file is
 * the operator's own UTF-8, which libyaml has checked, so it stays readable.
 */
static int quote_for_message(const char *v, size_t n, char **ret)
{
        char *s = escape_text(v, n, MESSAGE_VALUE_MAX, ESCAPE_QUOTE | ESCAPE_UTF8);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static bool is_plain(const yaml_event_t *e)
{
        return e->type == YAML_SCALAR_EVENT && e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static bool scalar_has_nul(const yaml_event_t *e)
{
        return strlen((const char *)e->data.scalar.value) != e->data.scalar.length;
}

/* YAML's null: the empty plain scalar, "~" and the spellings of "null". */
static bool is_null(const yaml_event_t *e)
{
        if (!is_plain(e))
                return false;
        const char *v = (const char *)e->data.scalar.value;
        return !*v || streq(v, "~") || streq(v, "null") || streq(v, "Null") || streq(v, "NULL");
}

/*
 * A plain scalar that YAML's core schema reads as null, a boolean or an integer: no string,
 * however the key would take its text. The empty scalar is left to the key's rule.
 */
static bool plain_is_not_string(const yaml_event_t *e)
{
        if (!is_plain(e))
                return false;
        const char *v = (const char *)e->data.scalar.value;
        if (!*v)
                return false;
        if (is_null(e))
                return true;
        static const char *const booleans[] = {"true", "True", "TRUE", "false", "False", "FALSE"};
        for (size_t i = 0; i < ELEMENTSOF(booleans); i++)
                if (streq(v, booleans[i]))
                        return true;
        const char *p = v + (*v == '-' || *v == '+');
        return *p && strspn(p, "0123456789") == strlen(p);
}

/* Kinds whose values YAML types, so that quoting one changes its type. */
static bool kind_wants_plain(KeyKind kind)
{
        return kind == KIND_UINT || kind == KIND_UINT64 || kind == KIND_BOOL || kind == KIND_MODE;
}

/* ---- the loader ----------------------------------------------------------------------------- */

typedef struct Loader {
        yaml_parser_t parser;
        bool parser_ready;
        const char *name; /* the file for `<file>:<line>:<column>: `, or NULL for a --set value */
        const char *input;
        size_t size;
        char **error;
} Loader;

static void loader_done(Loader *l)
{
        if (l->parser_ready)
                yaml_parser_delete(&l->parser);
        l->parser_ready = false;
}

static int oom(Loader *l);

static int loader_init(Loader *l, const char *name, const void *buf, size_t size, char **error)
{
        *l = (Loader){.name = name, .input = buf, .size = size, .error = error};
        if (!yaml_parser_initialize(&l->parser))
                return oom(l);
        l->parser_ready = true;
        yaml_parser_set_input_string(&l->parser, buf, size);
        /* Only UTF-8: libyaml would otherwise also take UTF-16 by its byte-order mark. */
        yaml_parser_set_encoding(&l->parser, YAML_UTF8_ENCODING);
        return 0;
}

/* Out of memory, said with the file's name (a --set caller adds its own prefix). */
static int oom(Loader *l)
{
        if (!l->name)
                return error_set(l->error, -ENOMEM, "%s", strerror(ENOMEM));
        return error_set(l->error, -ENOMEM, "%s: %s", l->name, strerror(ENOMEM));
}

_printf_(4, 5) static int loader_error_at(Loader *l, size_t line, size_t column, const char *fmt,
                                          ...)
{
        va_list ap;

        va_start(ap, fmt);
        int r = error_setv(l->error, -EINVAL, fmt, ap);
        va_end(ap);
        if (!l->name)
                return r;
        /* libyaml counts from 0; editors and the SPEC's examples from 1. */
        return error_prefix(l->error, r, "%s:%zu:%zu", l->name, line + 1, column + 1);
}

#define loader_error(l, mark, ...) loader_error_at(l, (mark).line, (mark).column, __VA_ARGS__)

static int loader_syntax_error(Loader *l)
{
        const yaml_parser_t *p = &l->parser;
        size_t line = p->problem_mark.line, column = p->problem_mark.column;

        if (p->error == YAML_MEMORY_ERROR)
                return oom(l);
        if (p->error == YAML_READER_ERROR) {
                /* Reader errors (bad UTF-8, control characters) carry a byte offset only. */
                size_t end = p->problem_offset < l->size ? p->problem_offset : l->size;
                line = column = 0;
                for (size_t i = 0; i < end; i++) {
                        column++;
                        if (l->input[i] == '\n') {
                                line++;
                                column = 0;
                        }
                }
        }
        const char *problem = p->problem ? p->problem : "unknown error";
        if (p->context)
                return loader_error_at(l, line, column, "invalid YAML: %s (%s)", problem,
                                       p->context);
        return loader_error_at(l, line, column, "invalid YAML: %s", problem);
}

/*
 * The next event, refusing on the spot what the configuration never uses: aliases, anchors,
 * tags and directives (CFG-4), each at the position of the node that carries it.
 */
static int loader_next(Loader *l, yaml_event_t *ret)
{
        _cleanup_(yaml_event_delete) yaml_event_t e = {};
        const yaml_char_t *anchor = NULL, *tag = NULL;

        if (!yaml_parser_parse(&l->parser, &e))
                return loader_syntax_error(l);

        switch (e.type) {
        case YAML_ALIAS_EVENT:
                return loader_error(l, e.start_mark, "aliases are not allowed");
        case YAML_DOCUMENT_START_EVENT:
                if (e.data.document_start.version_directive ||
                    e.data.document_start.tag_directives.start !=
                        e.data.document_start.tag_directives.end)
                        return loader_error(l, e.start_mark, "directives are not allowed");
                break;
        case YAML_SCALAR_EVENT:
                anchor = e.data.scalar.anchor;
                tag = e.data.scalar.tag;
                break;
        case YAML_SEQUENCE_START_EVENT:
                anchor = e.data.sequence_start.anchor;
                tag = e.data.sequence_start.tag;
                break;
        case YAML_MAPPING_START_EVENT:
                anchor = e.data.mapping_start.anchor;
                tag = e.data.mapping_start.tag;
                break;
        default:
                break;
        }
        if (anchor)
                return loader_error(l, e.start_mark, "anchors are not allowed");
        if (tag)
                return loader_error(l, e.start_mark, "tags are not allowed");

        *ret = e;
        e = (yaml_event_t){};
        return 0;
}

/* Reads the next event and requires it to be of the given type; a libyaml guarantee. */
static int loader_expect(Loader *l, yaml_event_type_t type)
{
        _cleanup_(yaml_event_delete) yaml_event_t e = {};
        int r = loader_next(l, &e);
        if (r < 0)
                return r;
        if (e.type != type)
                return loader_error(l, e.start_mark, "invalid YAML: unexpected event");
        return 0;
}

/* `<key> must be <what>, got <got>` at node; got describes the node unless given. */
static int loader_value_error(Loader *l, const ConfigKey *k, const yaml_event_t *node,
                              const char *got)
{
        _cleanup_free_ char *quoted = NULL, *shown = NULL;
        char what[256];

        key_describe(k, what, sizeof what);
        if (!got) {
                if (node->type == YAML_MAPPING_START_EVENT)
                        got = "a mapping";
                else if (node->type == YAML_SEQUENCE_START_EVENT)
                        got = "a list";
                else {
                        const char *v = (const char *)node->data.scalar.value;
                        size_t n = node->data.scalar.length;
                        yaml_scalar_style_t style = node->data.scalar.style;
                        /* When quotes are the fault, show them. */
                        if (kind_wants_plain(k->kind) &&
                            (style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                             style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)) {
                                char q = style == YAML_SINGLE_QUOTED_SCALAR_STYLE ? '\'' : '"';
                                shown = malloc(n + 3);
                                if (!shown)
                                        return oom(l);
                                shown[0] = q;
                                memcpy(shown + 1, v, n);
                                shown[n + 1] = q;
                                shown[n + 2] = 0;
                                v = shown;
                                n += 2;
                        }
                        if (quote_for_message(v, n, &quoted) < 0)
                                return oom(l);
                        got = quoted;
                }
        }
        return loader_error(l, node->start_mark, "%s must be %s, got %s", k->name, what, got);
}

/* Stores a string, keeping image_dirs on <data_dir>/import until image_dirs is set. */
static int config_store_string(Config *c, const ConfigKey *k, char *s)
{
        _cleanup_free_ char *value = s;

        if (streq(k->name, "data_dir") && !c->image_dirs_set) {
                char **dirs;
                if (image_dirs_for_data_dir(value, &dirs) < 0)
                        return -ENOMEM;
                strv_freep(&c->image_dirs);
                c->image_dirs = dirs;
        }
        char **field = key_field(c, k);
        free(*field);
        *field = TAKE_PTR(value);
        return 0;
}

static int apply_scalar(Loader *l, Config *c, const ConfigKey *k, const yaml_event_t *node)
{
        const char *v = (const char *)node->data.scalar.value;
        bool plain = is_plain(node);
        void *field = key_field(c, k);

        if (scalar_has_nul(node))
                return loader_value_error(l, k, node, NULL);

        switch (k->kind) {
        case KIND_STRING: {
                _cleanup_free_ char *s = NULL;
                if (plain_is_not_string(node))
                        return loader_value_error(l, k, node, NULL);
                if (string_normalize(k->rule, v, &s) < 0)
                        return oom(l);
                if (!string_is_valid(k->rule, s))
                        return loader_value_error(l, k, node, NULL);
                if (config_store_string(c, k, TAKE_PTR(s)) < 0)
                        return oom(l);
                return 0;
        }
        case KIND_UINT:
        case KIND_UINT64: {
                uint64_t u;
                /* No leading zero: YAML 1.1 readers take 0100 for octal. */
                if (!plain || (v[0] == '0' && v[1]) ||
                    parse_uint64_range(v, k->min, k->max, &u) < 0)
                        return loader_value_error(l, k, node, NULL);
                if (k->kind == KIND_UINT)
                        *(unsigned *)field = (unsigned)u;
                else
                        *(uint64_t *)field = u;
                return 0;
        }
        case KIND_DURATION: {
                nsec_t d;
                if (parse_duration(v, &d) < 0 || d < k->min || d > k->max)
                        return loader_value_error(l, k, node, NULL);
                *(nsec_t *)field = d;
                return 0;
        }
        case KIND_BOOL:
                if (!plain || (!streq(v, "true") && !streq(v, "false")))
                        return loader_value_error(l, k, node, NULL);
                *(bool *)field = streq(v, "true");
                return 0;
        case KIND_ENUM:
                for (size_t i = 0; i < k->n_values; i++)
                        if (streq(v, k->values[i].name)) {
                                memcpy(field, &k->values[i].value, sizeof(int));
                                return 0;
                        }
                return loader_value_error(l, k, node, NULL);
        case KIND_MODE:
                /* Exactly "0" and three octal digits, so nobody mistakes it for decimal. */
                if (!plain || strlen(v) != 4 || v[0] != '0' || strspn(v + 1, "01234567") != 3)
                        return loader_value_error(l, k, node, NULL);
                *(mode_t *)field = (mode_t)strtoul(v, NULL, 8);
                return 0;
        case KIND_SIZE: {
                uint64_t bytes;
                if (parse_size(v, &bytes) < 0 || bytes < k->min || bytes > k->max)
                        return loader_value_error(l, k, node, NULL);
                *(uint64_t *)field = bytes;
                return 0;
        }
        case KIND_MIN_FREE: {
                ConfigMinFree m = {0};
                size_t n = strlen(v);
                uint64_t u;
                if (n >= 2 && v[n - 1] == '%') {
                        _cleanup_free_ char *digits = strndup(v, n - 1);
                        if (!digits)
                                return oom(l);
                        if ((digits[0] == '0' && digits[1]) ||
                            parse_uint64_range(digits, 0, 99, &u) < 0)
                                return loader_value_error(l, k, node, NULL);
                        m.percent = (unsigned)u;
                } else if (parse_size(v, &m.bytes) < 0 || m.bytes == 0)
                        return loader_value_error(l, k, node, NULL);
                *(ConfigMinFree *)field = m;
                return 0;
        }
        case KIND_SECTION:
        case KIND_LIST:
                break;
        }
        return loader_value_error(l, k, node, NULL);
}

static int apply_path_list(Loader *l, Config *c, const ConfigKey *k, const yaml_event_t *node)
{
        _cleanup_strv_free_ char **dirs = NULL;
        size_t n = 0;

        if (node->type != YAML_SEQUENCE_START_EVENT)
                return loader_value_error(l, k, node, NULL);

        for (;;) {
                _cleanup_(yaml_event_delete) yaml_event_t item = {};
                _cleanup_free_ char *s = NULL;
                int r = loader_next(l, &item);
                if (r < 0)
                        return r;
                if (item.type == YAML_SEQUENCE_END_EVENT)
                        break;
                if (item.type != YAML_SCALAR_EVENT || scalar_has_nul(&item) ||
                    plain_is_not_string(&item) || n == k->max)
                        return loader_value_error(l, k, &item, NULL);
                if (string_normalize(k->rule, (const char *)item.data.scalar.value, &s) < 0)
                        return oom(l);
                if (!string_is_valid(k->rule, s))
                        return loader_value_error(l, k, &item, NULL);
                if (strv_push(&dirs, s) < 0)
                        return oom(l);
                n++;
        }
        if (n < k->min)
                return loader_value_error(l, k, node, "an empty list");
        /* An empty list is a list, not "unset". */
        if (!dirs && !(dirs = calloc(1, sizeof(char *))))
                return oom(l);

        char ***field = key_field(c, k);
        strv_freep(field);
        *field = TAKE_PTR(dirs);
        if (streq(k->name, "image_dirs"))
                c->image_dirs_set = true;
        return 0;
}

/* Applies the value node that starts with node (a scalar, or a sequence for a list key). */
static int apply_node(Loader *l, Config *c, const ConfigKey *k, const yaml_event_t *node)
{
        if (k->kind == KIND_LIST)
                return apply_path_list(l, c, k, node);
        if (node->type != YAML_SCALAR_EVENT)
                return loader_value_error(l, k, node, NULL);
        return apply_scalar(l, c, k, node);
}

/*
 * The keys of one mapping, up to its end. section is "" at the top, else the dotted section;
 * seen spans the whole document, which works because every dotted key is unique.
 */
static int load_mapping(Loader *l, Config *c, const char *section, bool seen[static N_KEYS])
{
        for (;;) {
                _cleanup_(yaml_event_delete) yaml_event_t key = {}, value = {};
                _cleanup_free_ char *path = NULL, *quoted = NULL;

                int r = loader_next(l, &key);
                if (r < 0)
                        return r;
                if (key.type == YAML_MAPPING_END_EVENT)
                        return 0;
                if (key.type != YAML_SCALAR_EVENT)
                        return loader_error(l, key.start_mark, "mapping keys must be scalars");

                /* The dotted path, as --set spells it; the key may hold NUL bytes. */
                const char *name = (const char *)key.data.scalar.value;
                size_t name_len = key.data.scalar.length;
                size_t prefix = *section ? strlen(section) + 1 : 0;
                path = malloc(prefix + name_len + 1);
                if (!path)
                        return oom(l);
                if (prefix) {
                        memcpy(path, section, prefix - 1);
                        path[prefix - 1] = '.';
                }
                memcpy(path + prefix, name, name_len + 1);
                if (quote_for_message(path, prefix + name_len, &quoted) < 0)
                        return oom(l);

                const ConfigKey *k = NULL;
                if (!scalar_has_nul(&key))
                        k = config_key_lookup(path);
                if (k && strchr(name, '.'))
                        return loader_error(l, key.start_mark,
                                            "key %s must be written as nested mappings", quoted);
                if (!k)
                        return loader_error(l, key.start_mark, "unknown key %s", quoted);
                size_t i = (size_t)(k - config_keys);
                if (seen[i])
                        return loader_error(l, key.start_mark, "duplicate key %s", quoted);
                seen[i] = true;

                r = loader_next(l, &value);
                if (r < 0)
                        return r;
                if (k->kind != KIND_SECTION)
                        r = apply_node(l, c, k, &value);
                else if (value.type == YAML_MAPPING_START_EVENT)
                        r = load_mapping(l, c, k->name, seen);
                else if (!is_null(&value))
                        r = loader_value_error(l, k, &value, NULL);
                if (r < 0)
                        return r;
        }
}

/* The end of the one document a configuration is: nothing may follow it. */
static int expect_one_document_end(Loader *l)
{
        _cleanup_(yaml_event_delete) yaml_event_t next = {};
        int r = loader_expect(l, YAML_DOCUMENT_END_EVENT);
        if (r < 0)
                return r;
        r = loader_next(l, &next);
        if (r < 0)
                return r;
        if (next.type != YAML_STREAM_END_EVENT)
                return loader_error(l, next.start_mark, "more than one document");
        return 0;
}

/* A whole configuration stream: nothing, or one document holding a mapping (or nothing). */
static int load_stream(Loader *l, Config *c)
{
        _cleanup_(yaml_event_delete) yaml_event_t start = {}, root = {};
        bool seen[N_KEYS] = {};

        int r = loader_expect(l, YAML_STREAM_START_EVENT);
        if (r < 0)
                return r;
        r = loader_next(l, &start);
        if (r < 0)
                return r;
        if (start.type == YAML_STREAM_END_EVENT)
                return 0;

        r = loader_next(l, &root);
        if (r < 0)
                return r;
        if (root.type == YAML_MAPPING_START_EVENT)
                r = load_mapping(l, c, "", seen);
        else if (!is_null(&root))
                r = loader_error(l, root.start_mark, "the configuration must be a mapping");
        if (r < 0)
                return r;

        return expect_one_document_end(l);
}

int config_load_buffer(Config *c, const char *name, const void *buf, size_t size, char **error)
{
        _cleanup_(config_done) Config work = {};
        _cleanup_(loader_done) Loader l = {};

        /* Work on a copy so that a failure half way leaves c as it was. */
        int r = config_copy(c, &work);
        if (r < 0)
                return error_set(error, r, "%s: %s", name, strerror(-r));
        r = loader_init(&l, name, buf, size, error);
        if (r < 0)
                return error_set(error, r, "%s: %s", name, strerror(-r));
        r = load_stream(&l, &work);
        if (r < 0)
                return r;

        config_done(c);
        *c = work;
        work = (Config){};
        return 0;
}

int config_load_file(Config *c, const char *path, bool explicit_path, char **error)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;

        int r = read_file_at(AT_FDCWD, path, CONFIG_FILE_MAX, &buf, &size);
        if (r == -ENOENT && !explicit_path)
                return 0; /* CFG-1: no file at the default path means all defaults */
        if (r == -EFBIG)
                return error_set(error, r, "read configuration file %s: larger than %d bytes", path,
                                 CONFIG_FILE_MAX);
        if (r == -EBADFD)
                return error_set(error, r, "read configuration file %s: not a regular file", path);
        if (r < 0)
                return error_set(error, r, "read configuration file %s: %s", path, strerror(-r));

        r = config_load_buffer(c, path, buf, size, error);
        if (r < 0)
                return r;
        return 1;
}

/* The value of one --set: nothing (the empty scalar) or one document holding one node. */
static int load_set_value(Loader *l, Config *c, const ConfigKey *k)
{
        _cleanup_(yaml_event_delete) yaml_event_t start = {}, node = {};

        int r = loader_expect(l, YAML_STREAM_START_EVENT);
        if (r < 0)
                return r;
        r = loader_next(l, &start);
        if (r < 0)
                return r;
        if (start.type == YAML_STREAM_END_EVENT) {
                if (!yaml_scalar_event_initialize(&node, NULL, NULL, (yaml_char_t *)"", 0, 1, 1,
                                                  YAML_PLAIN_SCALAR_STYLE))
                        return oom(l);
                return apply_node(l, c, k, &node);
        }

        r = loader_next(l, &node);
        if (r < 0)
                return r;
        r = apply_node(l, c, k, &node);
        if (r < 0)
                return r;
        return expect_one_document_end(l);
}

int config_set(Config *c, const char *assignment, char **error)
{
        _cleanup_(config_done) Config work = {};
        _cleanup_(loader_done) Loader l = {};
        _cleanup_free_ char *shown = NULL, *key = NULL, *quoted = NULL;

        /* The assignment is echoed as typed, except that control bytes cannot break the line. */
        shown = escape_text(assignment, strlen(assignment), SIZE_MAX, ESCAPE_ECHO | ESCAPE_UTF8);
        if (!shown)
                return error_set(error, -ENOMEM, "--set: %s", strerror(ENOMEM));

        const char *eq = strchr(assignment, '=');
        if (!eq)
                return error_set(error, -EINVAL, "--set %s: expected KEY=VALUE", shown);
        key = strndup(assignment, (size_t)(eq - assignment));
        if (!key || quote_for_message(key, strlen(key), &quoted) < 0)
                return error_set(error, -ENOMEM, "--set %s: %s", shown, strerror(ENOMEM));

        const ConfigKey *k = config_key_lookup(key);
        if (!k)
                return error_set(error, -EINVAL, "--set %s: unknown key %s", shown, quoted);
        if (k->kind == KIND_SECTION)
                return error_set(error, -EINVAL, "--set %s: %s is a section, not a key", shown,
                                 quoted);

        int r = config_copy(c, &work);
        if (r >= 0)
                r = loader_init(&l, NULL, eq + 1, strlen(eq + 1), error);
        if (r < 0)
                return error_set(error, r, "--set %s: %s", shown, strerror(-r));
        r = load_set_value(&l, &work, k);
        if (r < 0)
                return error_prefix(error, r, "--set %s", shown);

        config_done(c);
        *c = work;
        work = (Config){};
        return 0;
}

int config_validate(const Config *c, char **error)
{
        if (!*c->listen && !*c->unix_socket)
                return error_set(error, -EINVAL,
                                 "listen and unix_socket are both empty: the API needs at least "
                                 "one listener");
        /* FLEET-1: Keystone needs all three of its keys. */
        const ConfigPlacement *p = &c->placement;
        if (*p->url && p->auth == CONFIG_PLACEMENT_AUTH_KEYSTONE) {
                const char *missing = !*p->keystone.auth_url ? "placement.keystone.auth_url"
                                      : !*p->keystone.application_credential_id
                                          ? "placement.keystone.application_credential_id"
                                      : !*p->keystone.application_credential_secret_file
                                          ? "placement.keystone.application_credential_secret_file"
                                          : NULL;
                if (missing)
                        return error_set(error, -EINVAL,
                                         "placement.auth is keystone but %s is empty", missing);
        }
        return 0;
}

/* ---- host checks ---------------------------------------------------------------------------- */

/*
 * "<key> must be <what>, got "<v>"", as the loader says it, for a value already stored; a NULL
 * v is an empty list.
 */
static int stored_value_error(const ConfigKey *k, const char *v, char **error)
{
        _cleanup_free_ char *quoted = NULL;
        char what[256];

        key_describe(k, what, sizeof what);
        if (v && quote_for_message(v, strlen(v), &quoted) < 0)
                return error_set(error, -ENOMEM, "%s", strerror(ENOMEM));
        return error_set(error, -EINVAL, "%s must be %s, got %s", k->name, what,
                         v ? quoted : "an empty list");
}

int config_check_paths(const Config *c, char **error)
{
        static const char *const roots[] = {"sysfs_root", "dev_root", "proc_root", "data_dir"};

        /* Again, for a Config that did not come through the loader (CFG-5, VMM-15). */
        for (size_t i = 0; i < N_KEYS; i++) {
                const ConfigKey *k = &config_keys[i];
                if (k->kind == KIND_STRING) {
                        const char *v = *(char *const *)key_field_const(c, k);
                        if (!v)
                                v = "";
                        if (!string_is_valid(k->rule, v))
                                return stored_value_error(k, v, error);
                } else if (k->kind == KIND_LIST) {
                        char *const *dirs = *(char **const *)key_field_const(c, k);
                        if (strv_length(dirs) < k->min || strv_length(dirs) > k->max)
                                return stored_value_error(k, NULL, error);
                        for (size_t j = 0; dirs && dirs[j]; j++)
                                if (!string_is_valid(k->rule, dirs[j]))
                                        return stored_value_error(k, dirs[j], error);
                }
        }

        for (size_t i = 0; i < ELEMENTSOF(roots); i++) {
                const char *path = *(char *const *)key_field_const(c, config_key_lookup(roots[i]));
                struct stat st;
                if (stat(path, &st) < 0) {
                        int r = negative_errno();
                        return error_set(error, r, "%s %s: %s", roots[i], path, strerror(-r));
                }
                if (!S_ISDIR(st.st_mode))
                        return error_set(error, -ENOTDIR, "%s %s: %s", roots[i], path,
                                         strerror(ENOTDIR));
        }
        return 0;
}

/* ---- dump ----------------------------------------------------------------------------------- */

/* A duration the configuration syntax reads back: "0s", "100ms", "1m30s", "1h". */
static char *format_config_duration(nsec_t d, char buf[static 64])
{
        static const struct {
                const char *unit;
                nsec_t size;
        } units[] = {
            {"h", NSEC_PER_HOUR},
            {"m", NSEC_PER_MIN},
            {"s", NSEC_PER_SEC},
            {"ms", NSEC_PER_MSEC},
        };
        size_t used = 0;

        buf[0] = 0;
        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                nsec_t n = d / units[i].size;
                d %= units[i].size;
                if (n)
                        used += (size_t)snprintf(buf + used, 64 - used, "%" PRIu64 "%s", n,
                                                 units[i].unit);
        }
        if (!used)
                snprintf(buf, 64, "0s");
        return buf;
}

typedef struct Emitter {
        yaml_emitter_t emitter;
        bool ready;
} Emitter;

static void emitter_done(Emitter *e)
{
        if (e->ready)
                yaml_emitter_delete(&e->emitter);
        e->ready = false;
}

/* yaml_emitter_emit() owns the event from here on, whether it succeeds or not. */
static int emit(Emitter *e, yaml_event_t *event, int initialized)
{
        if (!initialized)
                return -ENOMEM;
        return yaml_emitter_emit(&e->emitter, event) ? 0 : -ENOMEM;
}

static int emit_scalar(Emitter *e, const char *v, bool quoted)
{
        yaml_event_t ev;
        int ok = yaml_scalar_event_initialize(
            &ev, NULL, NULL, (const yaml_char_t *)v, (int)strlen(v), !quoted, quoted,
            quoted ? YAML_DOUBLE_QUOTED_SCALAR_STYLE : YAML_PLAIN_SCALAR_STYLE);
        return emit(e, &ev, ok);
}

static int emit_mapping_start(Emitter *e)
{
        yaml_event_t ev;
        int ok = yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        return emit(e, &ev, ok);
}

static int emit_mapping_end(Emitter *e)
{
        yaml_event_t ev;
        int ok = yaml_mapping_end_event_initialize(&ev);
        return emit(e, &ev, ok);
}

static int emit_value(Emitter *e, const Config *c, const ConfigKey *k)
{
        const void *field = key_field_const(c, k);
        char buf[64];

        switch (k->kind) {
        case KIND_STRING: {
                const char *v = *(char *const *)field;
                return emit_scalar(e, v ? v : "", true);
        }
        case KIND_LIST: {
                yaml_event_t ev;
                int ok = yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                              YAML_BLOCK_SEQUENCE_STYLE);
                int r = emit(e, &ev, ok);
                for (char *const *p = *(char **const *)field; r >= 0 && p && *p; p++)
                        r = emit_scalar(e, *p, true);
                if (r < 0)
                        return r;
                ok = yaml_sequence_end_event_initialize(&ev);
                return emit(e, &ev, ok);
        }
        case KIND_UINT:
                snprintf(buf, sizeof buf, "%u", *(const unsigned *)field);
                return emit_scalar(e, buf, false);
        case KIND_UINT64:
                snprintf(buf, sizeof buf, "%" PRIu64, *(const uint64_t *)field);
                return emit_scalar(e, buf, false);
        case KIND_DURATION:
                return emit_scalar(e, format_config_duration(*(const nsec_t *)field, buf), false);
        case KIND_BOOL:
                return emit_scalar(e, *(const bool *)field ? "true" : "false", false);
        case KIND_ENUM: {
                int v;
                memcpy(&v, field, sizeof v);
                const char *name = enum_name(k->values, k->n_values, v);
                return name ? emit_scalar(e, name, false) : -EINVAL;
        }
        case KIND_MODE:
                snprintf(buf, sizeof buf, "%04o", (unsigned)*(const mode_t *)field);
                return emit_scalar(e, buf, false);
        case KIND_SIZE:
                return emit_scalar(e, format_size(*(const uint64_t *)field, buf), false);
        case KIND_MIN_FREE: {
                const ConfigMinFree *m = field;
                if (m->bytes)
                        return emit_scalar(e, format_size(m->bytes, buf), false);
                snprintf(buf, sizeof buf, "%u%%", m->percent);
                return emit_scalar(e, buf, false);
        }
        case KIND_SECTION:
                break;
        }
        return -EINVAL;
}

static int emit_config(Emitter *e, const Config *c)
{
        const char *open[SECTION_DEPTH_MAX];
        size_t depth = 0;
        yaml_event_t ev;
        int r;

        r = emit(e, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING));
        if (r >= 0)
                r = emit(e, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1));
        if (r >= 0)
                r = emit_mapping_start(e);

        for (size_t i = 0; r >= 0 && i < N_KEYS; i++) {
                const ConfigKey *k = &config_keys[i];
                const char *dot = strrchr(k->name, '.');
                size_t parent = dot ? (size_t)(dot - k->name) : 0;

                /* Close sections until the innermost open one is this key's parent. */
                while (r >= 0 && depth > 0 &&
                       !(strlen(open[depth - 1]) == parent &&
                         strncmp(open[depth - 1], k->name, parent) == 0)) {
                        r = emit_mapping_end(e);
                        depth--;
                }
                if (r >= 0)
                        r = emit_scalar(e, dot ? dot + 1 : k->name, false);
                if (r < 0)
                        break;
                if (k->kind == KIND_SECTION) {
                        r = emit_mapping_start(e);
                        open[depth++] = k->name;
                } else
                        r = emit_value(e, c, k);
        }
        for (; r >= 0 && depth > 0; depth--)
                r = emit_mapping_end(e);
        if (r >= 0)
                r = emit_mapping_end(e);
        if (r >= 0)
                r = emit(e, &ev, yaml_document_end_event_initialize(&ev, 1));
        if (r >= 0)
                r = emit(e, &ev, yaml_stream_end_event_initialize(&ev));
        if (r >= 0 && !yaml_emitter_flush(&e->emitter))
                r = -ENOMEM;
        return r;
}

int config_dump(const Config *c, char **ret)
{
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        _cleanup_(emitter_done) Emitter e = {};

        /* Declared after text, so it is closed (and text final) before text is freed. */
        _cleanup_fclose_ FILE *f = open_memstream(&text, &size);
        if (!f)
                return -ENOMEM;
        if (!yaml_emitter_initialize(&e.emitter))
                return -ENOMEM;
        e.ready = true;
        yaml_emitter_set_output_file(&e.emitter, f);
        yaml_emitter_set_unicode(&e.emitter, 1);
        yaml_emitter_set_width(&e.emitter, -1); /* long paths stay on one line */
        yaml_emitter_set_indent(&e.emitter, 2);

        int r = emit_config(&e, c);
        if (r < 0)
                return r;
        emitter_done(&e);
        if (fclose(TAKE_PTR(f)) != 0)
                return -ENOMEM;
        *ret = TAKE_PTR(text);
        return 0;
}
