/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * config: vgpud's configuration (SPEC §13): one YAML file, `--set KEY=VALUE` overrides, the
 * start-up checks of the configured paths, and the runtime-directory lock.
 *
 * Promises:
 *  - strict: unknown keys, duplicate keys, anchors, aliases, tags, directives, more than one
 *    document, wrong types and out-of-range values are refused with the SPEC's message form
 *    `<file>:<line>:<column>: <message>` (CFG-4), the position being the offending node's, or
 *    `--set <key>=<value>: <message>` for flags. Value messages read
 *    `<key> must be <what>, got "<value>"`; HEALTH-7's text is one of them.
 *  - typing follows YAML's core schema, only stricter: booleans are the plain scalars `true`
 *    and `false`; integers are plain decimal scalars without sign or leading zero; a quoted
 *    scalar is always a string, so `"2"` is no integer and `yes` no boolean.
 *  - all or nothing: a load or a --set that fails leaves the Config as it was.
 *  - the file is read whole with a cap (CONFIG_FILE_MAX), never truncated (GEN-5).
 *  - nothing here reads the environment (CFG-7) or logs; callers log once, at the edge.
 *
 * Use at start-up (GEN-10), stopping at the first failure with its one error line:
 *
 *      config_init_defaults → config_load_file → config_set (each --set, in order) →
 *      config_validate → config_check_paths → config_prepare_dirs → config_lock_runtime_dir
 *
 * `--check-config` stops after config_check_paths; config_dump shows the result.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "base/base.h"

#define CONFIG_DEFAULT_PATH "/etc/vgpud/vgpud.yaml"

/* The largest configuration file read; a larger one is refused, never truncated (GEN-5). */
#define CONFIG_FILE_MAX (1024 * 1024)

/*
 * VMM-15: `<runtime_dir>/instances/<20-character id>/agent.sock` must fit the 107 bytes of a
 * Unix socket address, which leaves 107 - strlen("/instances/") - 20 - strlen("/agent.sock").
 */
#define CONFIG_RUNTIME_DIR_MAX 65

/* A Unix socket path must fit sun_path with its terminating NUL. */
#define CONFIG_UNIX_SOCKET_PATH_MAX 107

/* Bounds on image_dirs, so a hostile file cannot make the list grow without end (GEN-5). */
#define CONFIG_IMAGE_DIRS_MAX 64

/* The lock file inside runtime_dir (CFG-9). */
#define CONFIG_LOCK_FILE "vgpud.lock"

typedef enum ConfigQemuAccel {
        CONFIG_QEMU_ACCEL_AUTO, /* kvm when it works, else tcg (VMM-1) */
        CONFIG_QEMU_ACCEL_KVM,
        CONFIG_QEMU_ACCEL_TCG,
} ConfigQemuAccel;

/* gpu.placement_policy: the one policy enum, which placement/ decides with. */
typedef enum PlacementPolicy {
        PLACEMENT_POLICY_SPREAD, /* the default (PLACE-13) */
        PLACEMENT_POLICY_PACK,   /* PLACE-14 */
} PlacementPolicy;

typedef struct ConfigVmm {
        nsec_t boot_timeout;           /* 1s..10m, default 30s */
        nsec_t stop_timeout;           /* 1s..10m, default 30s */
        nsec_t device_release_timeout; /* 1s..10m, default 30s: a hot detach's wait (DISK-8) */
        uint64_t console_max_bytes;    /* 65536..1073741824, default 16777216 */
} ConfigVmm;

typedef struct ConfigBreaker {
        bool enabled;             /* default true */
        nsec_t window;            /* 1m..168h, default 1h */
        unsigned max_quarantines; /* 1..1000, default 4 */
} ConfigBreaker;

typedef struct ConfigGpu {
        unsigned vf_quarantine_threshold; /* 1..64, default 2 (HEALTH-7) */
        PlacementPolicy placement_policy;
        nsec_t nvml_timeout;           /* 100ms..60s, default 5s */
        nsec_t sysfs_timeout;          /* 1s..10m, default 30s */
        nsec_t reconcile_interval;     /* 5s..1h, default 60s */
        nsec_t sentinel_interval;      /* 1s..5m, default 5s */
        nsec_t sentinel_timeout;       /* 100ms..60s, default 5s */
        unsigned sentinel_concurrency; /* 1..4096, default 64 */
        bool sentinel_mdev;            /* default false */
        nsec_t vfio_term_grace;        /* 0s..60s, default 5s */
        nsec_t vfio_init_window;       /* 0s..10m, default 60s */
        ConfigBreaker breaker;
} ConfigGpu;

/* placement.auth (FLEET-1). */
typedef enum ConfigPlacementAuth {
        CONFIG_PLACEMENT_AUTH_NOAUTH,   /* placement's noauth2 (tests, closed networks) */
        CONFIG_PLACEMENT_AUTH_KEYSTONE, /* Keystone application credentials */
} ConfigPlacementAuth;

/* The bounds of placement.* (FLEET-1): a URL, a credential id. */
#define CONFIG_URL_MAX 2048
#define CONFIG_CREDENTIAL_ID_MAX 255
#define CONFIG_HOST_NAME_MAX 64

typedef struct ConfigKeystone {
        char *auth_url;                           /* http(s) URL, or "" */
        char *application_credential_id;          /* or "" */
        char *application_credential_secret_file; /* absolute path, or "" (API-14's modes) */
} ConfigKeystone;

/* The OpenStack Placement sync (SPEC §18, FLEET-1); off while url is "". */
typedef struct ConfigPlacement {
        char *url;                /* http(s) URL, or "" */
        ConfigPlacementAuth auth; /* default noauth */
        char *host_name;          /* "" means the kernel host name, read at start-up */
        nsec_t sync_interval;     /* 5s..10m, default 30s */
        nsec_t orphan_grace;      /* 5s..168h, default 10m (FLEET-6) */
        ConfigKeystone keystone;
} ConfigPlacement;

/* storage.min_free (DISK-10): a share of the filesystem or a number of bytes. */
typedef struct ConfigMinFree {
        unsigned percent; /* 0..99; used when bytes is 0 */
        uint64_t bytes;
} ConfigMinFree;

/* Disks (SPEC §19). */
typedef struct ConfigStorage {
        ConfigMinFree min_free;  /* default 5% */
        uint64_t max_image_size; /* bytes, 1MiB..1PiB, default 2TiB (DISK-3) */
        unsigned max_disk_gb;    /* 1..65536, default 4096 (DISK-5, DISK-7) */
        char *qemu_img_binary;   /* absolute path, default /usr/bin/qemu-img */
} ConfigStorage;
/* network.default_mode (NET-1). */
typedef enum ConfigNetworkMode {
        CONFIG_NETWORK_MODE_NAT,
        CONFIG_NETWORK_MODE_BRIDGE,
        CONFIG_NETWORK_MODE_NONE,
} ConfigNetworkMode;

/* network.nat.subnet's prefix lengths (CFG-3). */
#define CONFIG_SUBNET_PREFIX_MIN 16
#define CONFIG_SUBNET_PREFIX_MAX 29

/* Bounds on network.bridges, so a hostile file cannot make the list grow without end (GEN-5). */
#define CONFIG_BRIDGES_MAX 64

/* network.nat.* (NET-4, NET-5, NET-6): the bridge, subnet and rules vgpud owns. */
typedef struct ConfigNat {
        bool enabled;     /* default true */
        char *bridge;     /* an interface name, default "vgpud0" */
        char *subnet;     /* IPv4 CIDR /16../29 without host bits, default "10.233.0.0/24" */
        bool isolate;     /* default true: guests never reach each other */
        char *port_range; /* "<lo>-<hi>", default "20000-29999" */
} ConfigNat;

typedef struct ConfigNetwork {
        ConfigNetworkMode default_mode; /* default nat; see config_network_default_mode() */
        char **bridges;                 /* interface names, NULL-terminated; may be empty */
        ConfigNat nat;
        char *dnsmasq_binary; /* absolute path, default /usr/sbin/dnsmasq */
} ConfigNetwork;

/* cloud_init.* (SEED-2). */
typedef struct ConfigCloudInit {
        /* absolute path or "" (none): the vendor-data of every seed, read when a seed is made */
        char *vendor_data_file;
} ConfigCloudInit;

/*
 * Every key of CFG-3. Strings are owned by the Config and never NULL once it is initialised;
 * "" means "disabled" where CFG-3 allows empty (listen, unix_socket, nvml_library). Directory
 * paths are stored without trailing slashes.
 */
typedef struct Config {
        char *listen;            /* "127.0.0.1:8080", "[::1]:8080" or "" */
        char *unix_socket;       /* absolute path or "" */
        mode_t unix_socket_mode; /* 0000..0777, default 0600 */
        char *jwt_secret_file;
        char *data_dir;
        char *runtime_dir;
        char *sysfs_root;
        char *dev_root;
        char *proc_root;
        char *nvml_library; /* a name for the loader's search, an absolute path, or "" */
        char *qemu_binary;
        ConfigQemuAccel qemu_accel;
        /*
         * NULL-terminated, 1..CONFIG_IMAGE_DIRS_MAX entries. Until image_dirs is set, it
         * follows data_dir as [<data_dir>/import] (DISK-1: never inside the image store);
         * image_dirs_set says it was set.
         */
        char **image_dirs;
        bool image_dirs_set;
        int log_level; /* LOG_LEVEL_ERR..LOG_LEVEL_DEBUG */
        ConfigVmm vmm;
        ConfigStorage storage;
        ConfigGpu gpu;
        ConfigPlacement placement;
        ConfigNetwork network;
        ConfigCloudInit cloud_init;
} Config;

/* Fills *ret with the CFG-3 defaults. -ENOMEM. */
int config_init_defaults(Config *ret);

/* Frees what c owns and zeroes it; safe on a zeroed Config and twice. */
void config_done(Config *c);

/* Deep copy. -ENOMEM. */
int config_copy(const Config *c, Config *ret);

/*
 * Applies the YAML file at path on top of c (CFG-1). A missing file is no error when it is the
 * default path (explicit_path false): c stays as it is and the result is 0. Otherwise 1 when the
 * file was applied. Failures: -ENOENT and other -errno for the file itself
 * (`read configuration file <path>: <reason>`), -EFBIG beyond CONFIG_FILE_MAX, -EINVAL for
 * content (`<path>:<line>:<column>: <message>`), -ENOMEM.
 */
int config_load_file(Config *c, const char *path, bool explicit_path, char **error);

/* As config_load_file on bytes already in memory; name stands for the file in messages. */
int config_load_buffer(Config *c, const char *name, const void *buf, size_t size, char **error);

/*
 * Applies one `--set KEY=VALUE` (CFG-2): KEY is a dotted key of CFG-3, VALUE is parsed as one
 * YAML node and checked exactly as in a file. Every key takes a scalar except image_dirs, which
 * takes a flow sequence (`image_dirs=[/srv/images]`); an empty VALUE is the empty scalar. A
 * value YAML would read otherwise needs quotes: `listen="[::1]:8080"`.
 * -EINVAL with `--set <key>=<value>: <message>`, -ENOMEM.
 */
int config_set(Config *c, const char *assignment, char **error);

/*
 * Rules between keys, checked once every source is applied: the API needs at least one
 * listener (API-1). -EINVAL with a message.
 */
int config_validate(const Config *c, char **error);

/*
 * Start-up checks of the paths (CFG-5, VMM-15). First every string key is checked again by the
 * loader's rule, so a Config built or changed by hand gets the same verdict as a file: path keys
 * are absolute, runtime_dir is at most CONFIG_RUNTIME_DIR_MAX bytes without whitespace or
 * control characters (-EINVAL, `<key> must be <what>, got "<value>"`). Then sysfs_root,
 * dev_root, proc_root and data_dir must be existing directories (`<key> <path>: <reason>` with
 * -errno). Nothing is created.
 */
int config_check_paths(const Config *c, char **error);

/*
 * Creates what CFG-5 says vgpud creates when missing: runtime_dir (0755) and
 * <data_dir>/instances (0700), one level each; existing directories are left as they are.
 * `create <path>: <reason>` with -errno; -ENOTDIR when a non-directory is in the way.
 */
int config_prepare_dirs(const Config *c, char **error);

/*
 * CFG-9: opens (creating, 0644 less the umask) <runtime_dir>/vgpud.lock with O_CLOEXEC and
 * takes an exclusive non-blocking flock on it. The lock lives as long as the returned fd. A
 * lock held through another open file description, in this process or another, fails with
 * -EBUSY and `another vgpud holds <runtime_dir>/vgpud.lock`; other failures name the file.
 */
int config_lock_runtime_dir(const Config *c, int *ret_fd, char **error);

/*
 * The configuration as YAML with every key, in CFG-3's order, nested as in the file. For a
 * Config made by this module (defaults, loads, --set), loading the text on top of any Config
 * gives c back exactly. -ENOMEM; -EINVAL for an enum value no key knows.
 */
int config_dump(const Config *c, char **ret);

/*
 * CFG-6: "<IPv4>:<port>" or "[<IPv6>]:<port>", literal addresses only, port 1..65535 without a
 * leading zero. Fills a sockaddr_in or sockaddr_in6. -EINVAL otherwise (also for "").
 */
int config_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len);

/* VMM-15's rule for runtime_dir (see config_check_paths). */
bool config_runtime_dir_is_valid(const char *path);

const char *config_qemu_accel_to_string(ConfigQemuAccel a);
const char *placement_policy_to_string(PlacementPolicy p);
const char *config_placement_auth_to_string(ConfigPlacementAuth a);
const char *config_network_mode_to_string(ConfigNetworkMode m);

/*
 * NET-1: the mode of a create body without "network": network.default_mode, except that nat
 * means none while network.nat.enabled is false.
 */
ConfigNetworkMode config_network_default_mode(const Config *c);
