/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "base/base.h"
#include "config/config.h"
#include "testlib.h"

#define FILE_NAME "vgpud.yaml"

/* ---- helpers -------------------------------------------------------------------------------- */

static void config_donep(Config **c)
{
        if (*c) {
                config_done(*c);
                free(*c);
        }
}

static Config *defaults(void)
{
        Config *c = calloc(1, sizeof *c);
        assert_non_null(c);
        assert_int_equal(config_init_defaults(c), 0);
        return c;
}

static char *dump(const Config *c)
{
        char *text = NULL;
        assert_int_equal(config_dump(c, &text), 0);
        assert_non_null(text);
        return text;
}

static int load_text(Config *c, const char *yaml, char **error)
{
        return config_load_buffer(c, FILE_NAME, yaml, strlen(yaml), error);
}

/* Loads yaml on top of the defaults; the load must succeed. */
static Config *loaded(const char *yaml)
{
        Config *c = defaults();
        _cleanup_free_ char *error = NULL;
        int r = load_text(c, yaml, &error);
        if (r < 0)
                fail_msg("load failed: %d %s\n%s", r, error ? error : "(no message)", yaml);
        return c;
}

/*
 * The load must fail with -EINVAL and exactly message, and leave the Config as it was (all or
 * nothing).
 */
static void load_fails(const char *yaml, size_t size, const char *message)
{
        _cleanup_(config_donep) Config *c = defaults();
        _cleanup_free_ char *before = dump(c), *after = NULL, *error = NULL;

        int r = config_load_buffer(c, FILE_NAME, yaml, size, &error);
        if (r >= 0)
                fail_msg("load succeeded, expected: %s\n%s", message, yaml);
        assert_int_equal(r, -EINVAL);
        assert_non_null(error);
        assert_string_equal(error, message);
        after = dump(c);
        assert_string_equal(before, after);
}

#define LOAD_FAILS(yaml, message) load_fails(yaml, strlen(yaml), message)

static void set_ok(Config *c, const char *assignment)
{
        _cleanup_free_ char *error = NULL;
        int r = config_set(c, assignment, &error);
        if (r < 0)
                fail_msg("--set %s failed: %d %s", assignment, r, error ? error : "(no message)");
}

/* The --set must fail with exactly message and leave the Config as it was. */
static void set_fails(const char *assignment, const char *message)
{
        _cleanup_(config_donep) Config *c = defaults();
        _cleanup_free_ char *before = dump(c), *after = NULL, *error = NULL;

        int r = config_set(c, assignment, &error);
        if (r >= 0)
                fail_msg("--set %s succeeded, expected: %s", assignment, message);
        assert_int_equal(r, -EINVAL);
        assert_non_null(error);
        assert_string_equal(error, message);
        after = dump(c);
        assert_string_equal(before, after);
}

/*
 * YAML setting one dotted key as nested mappings ("gpu.breaker.window" becomes three lines),
 * with the 1-based position of the value.
 */
static char *nested_yaml(const char *key, const char *value, unsigned *ret_line,
                         unsigned *ret_column)
{
        _cleanup_free_ char *yaml = NULL;
        unsigned depth = 0;
        const char *p = key;

        for (const char *dot; (dot = strchr(p, '.')); p = dot + 1, depth++)
                assert_int_equal(
                    strextend(&yaml, "%*s%.*s:\n", (int)depth * 2, "", (int)(dot - p), p), 0);
        assert_int_equal(strextend(&yaml, "%*s%s: %s\n", (int)depth * 2, "", p, value), 0);
        *ret_line = depth + 1;
        /* libyaml places an empty value right after the colon */
        *ret_column = depth * 2 + (unsigned)strlen(p) + (*value ? 3 : 2);
        return TAKE_PTR(yaml);
}

/* The value of a numeric or duration key, for the range tests. */
static uint64_t numeric(const Config *c, const char *key)
{
        static const struct {
                const char *key;
                size_t offset;
                size_t size;
        } fields[] = {
#define F(k, f) {k, offsetof(Config, f), sizeof(((Config *)0)->f)}
            F("vmm.boot_timeout", vmm.boot_timeout),
            F("vmm.stop_timeout", vmm.stop_timeout),
            F("vmm.device_release_timeout", vmm.device_release_timeout),
            F("vmm.console_max_bytes", vmm.console_max_bytes),
            F("gpu.vf_quarantine_threshold", gpu.vf_quarantine_threshold),
            F("gpu.nvml_timeout", gpu.nvml_timeout),
            F("gpu.sysfs_timeout", gpu.sysfs_timeout),
            F("gpu.reconcile_interval", gpu.reconcile_interval),
            F("gpu.sentinel_interval", gpu.sentinel_interval),
            F("gpu.sentinel_timeout", gpu.sentinel_timeout),
            F("gpu.sentinel_concurrency", gpu.sentinel_concurrency),
            F("gpu.vfio_term_grace", gpu.vfio_term_grace),
            F("gpu.vfio_init_window", gpu.vfio_init_window),
            F("gpu.breaker.window", gpu.breaker.window),
            F("gpu.breaker.max_quarantines", gpu.breaker.max_quarantines),
#undef F
        };
        for (size_t i = 0; i < ELEMENTSOF(fields); i++)
                if (streq(fields[i].key, key)) {
                        const char *p = (const char *)c + fields[i].offset;
                        if (fields[i].size == sizeof(unsigned))
                                return *(const unsigned *)p;
                        return *(const uint64_t *)p;
                }
        fail_msg("no numeric key %s", key);
        return 0;
}

static char *make_tmpdir(void)
{
        /* Short on purpose: runtime_dir must stay within 65 bytes (VMM-15). */
        char *dir = strdup("/tmp/test-config-XXXXXX");
        assert_non_null(dir);
        assert_non_null(mkdtemp(dir));
        return dir;
}

static void remove_tree(const char *dir)
{
        assert_int_equal(test_remove_tree_at(AT_FDCWD, dir), 0);
}

static void replace(char **field, const char *value)
{
        free(*field);
        *field = strdup(value);
        assert_non_null(*field);
}

/* ---- defaults ------------------------------------------------------------------------------- */

/* CFG-3, GEN-1 (every root has its default from the configuration), HEALTH-7 default */
static void test_defaults(void **state)
{
        _cleanup_(config_donep) Config *c = defaults();

        assert_string_equal(c->listen, "127.0.0.1:8080");
        assert_string_equal(c->unix_socket, "");
        assert_int_equal(c->unix_socket_mode, 0600);
        assert_string_equal(c->jwt_secret_file, "/etc/vgpud/jwt.secret");
        assert_string_equal(c->data_dir, "/var/lib/vgpud");
        assert_string_equal(c->runtime_dir, "/run/vgpud");
        assert_string_equal(c->sysfs_root, "/sys");
        assert_string_equal(c->dev_root, "/dev");
        assert_string_equal(c->proc_root, "/proc");
        assert_string_equal(c->nvml_library, "libnvidia-ml.so.1");
        assert_string_equal(c->qemu_binary, "/usr/bin/qemu-system-x86_64");
        assert_int_equal(c->qemu_accel, CONFIG_QEMU_ACCEL_AUTO);
        assert_int_equal(strv_length(c->image_dirs), 1);
        assert_string_equal(c->image_dirs[0], "/var/lib/vgpud/import");
        assert_false(c->image_dirs_set);
        assert_int_equal(c->log_level, LOG_LEVEL_INFO);
        assert_int_equal(c->vmm.boot_timeout, 30 * NSEC_PER_SEC);
        assert_int_equal(c->vmm.stop_timeout, 30 * NSEC_PER_SEC);
        assert_int_equal(c->vmm.device_release_timeout, 30 * NSEC_PER_SEC); /* DISK-8 */
        assert_int_equal(c->vmm.console_max_bytes, 16777216);
        assert_int_equal(c->gpu.vf_quarantine_threshold, 2);
        assert_int_equal(c->gpu.placement_policy, PLACEMENT_POLICY_SPREAD);
        assert_int_equal(c->gpu.nvml_timeout, 5 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.sysfs_timeout, 30 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.reconcile_interval, 60 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.sentinel_interval, 5 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.sentinel_timeout, 5 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.sentinel_concurrency, 64);
        assert_false(c->gpu.sentinel_mdev);
        assert_int_equal(c->gpu.vfio_term_grace, 5 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.vfio_init_window, 60 * NSEC_PER_SEC);
        assert_true(c->gpu.breaker.enabled);
        assert_int_equal(c->gpu.breaker.window, NSEC_PER_HOUR);
        assert_int_equal(c->gpu.breaker.max_quarantines, 4);

        /* config_done leaves a zeroed Config that may be freed again */
        config_done(c);
        assert_null(c->listen);
        assert_null(c->image_dirs);
        config_done(c);
}

static const char default_dump[] = "listen: \"127.0.0.1:8080\"\n"
                                   "unix_socket: \"\"\n"
                                   "unix_socket_mode: 0600\n"
                                   "jwt_secret_file: \"/etc/vgpud/jwt.secret\"\n"
                                   "data_dir: \"/var/lib/vgpud\"\n"
                                   "runtime_dir: \"/run/vgpud\"\n"
                                   "sysfs_root: \"/sys\"\n"
                                   "dev_root: \"/dev\"\n"
                                   "proc_root: \"/proc\"\n"
                                   "nvml_library: \"libnvidia-ml.so.1\"\n"
                                   "qemu_binary: \"/usr/bin/qemu-system-x86_64\"\n"
                                   "qemu_accel: auto\n"
                                   "image_dirs:\n"
                                   "- \"/var/lib/vgpud/import\"\n"
                                   "log_level: info\n"
                                   "vmm:\n"
                                   "  boot_timeout: 30s\n"
                                   "  stop_timeout: 30s\n"
                                   "  device_release_timeout: 30s\n"
                                   "  console_max_bytes: 16777216\n"
                                   "storage:\n"
                                   "  min_free: 5%\n"
                                   "  max_image_size: 2TiB\n"
                                   "  max_disk_gb: 4096\n"
                                   "  qemu_img_binary: \"/usr/bin/qemu-img\"\n"
                                   "gpu:\n"
                                   "  vf_quarantine_threshold: 2\n"
                                   "  placement_policy: spread\n"
                                   "  nvml_timeout: 5s\n"
                                   "  sysfs_timeout: 30s\n"
                                   "  reconcile_interval: 1m\n"
                                   "  sentinel_interval: 5s\n"
                                   "  sentinel_timeout: 5s\n"
                                   "  sentinel_concurrency: 64\n"
                                   "  sentinel_mdev: false\n"
                                   "  vfio_term_grace: 5s\n"
                                   "  vfio_init_window: 1m\n"
                                   "  breaker:\n"
                                   "    enabled: true\n"
                                   "    window: 1h\n"
                                   "    max_quarantines: 4\n"
                                   "placement:\n"
                                   "  url: \"\"\n"
                                   "  auth: noauth\n"
                                   "  host_name: \"\"\n"
                                   "  sync_interval: 30s\n"
                                   "  orphan_grace: 10m\n"
                                   "  keystone:\n"
                                   "    auth_url: \"\"\n"
                                   "    application_credential_id: \"\"\n"
                                   "    application_credential_secret_file: \"\"\n"
                                   "network:\n"
                                   "  default_mode: nat\n"
                                   "  bridges: []\n"
                                   "  dnsmasq_binary: \"/usr/sbin/dnsmasq\"\n"
                                   "  nat:\n"
                                   "    enabled: true\n"
                                   "    bridge: \"vgpud0\"\n"
                                   "    subnet: \"10.233.0.0/24\"\n"
                                   "    isolate: true\n"
                                   "    port_range: \"20000-29999\"\n"
                                   "cloud_init:\n"
                                   "  vendor_data_file: \"\"\n";

/* CFG-2 (--check-config shows the result), CFG-3 */
static void test_dump_defaults(void **state)
{
        _cleanup_(config_donep) Config *c = defaults();
        _cleanup_free_ char *text = dump(c);

        assert_string_equal(text, default_dump);
}

/* Every key at a valid value other than its default; each dump line differs from the default. */
static const char poison_yaml[] = "listen: \"[::1]:9090\"\n"
                                  "unix_socket: /run/poison/api.sock\n"
                                  "unix_socket_mode: 0660\n"
                                  "jwt_secret_file: /poison/jwt.secret\n"
                                  "data_dir: /poison/data\n"
                                  "runtime_dir: /poison/run\n"
                                  "sysfs_root: /poison/sys\n"
                                  "dev_root: /poison/dev\n"
                                  "proc_root: /poison/proc\n"
                                  "nvml_library: \"\"\n"
                                  "qemu_binary: /poison/qemu\n"
                                  "qemu_accel: tcg\n"
                                  "image_dirs: [/poison/images]\n"
                                  "log_level: debug\n"
                                  "vmm:\n"
                                  "  boot_timeout: 1m\n"
                                  "  stop_timeout: 1s\n"
                                  "  device_release_timeout: 2s\n"
                                  "  console_max_bytes: 65536\n"
                                  "storage:\n"
                                  "  min_free: 10GiB\n"
                                  "  max_image_size: 512MiB\n"
                                  "  max_disk_gb: 65536\n"
                                  "  qemu_img_binary: /poison/qemu-img\n"
                                  "gpu:\n"
                                  "  vf_quarantine_threshold: 64\n"
                                  "  placement_policy: pack\n"
                                  "  nvml_timeout: 100ms\n"
                                  "  sysfs_timeout: 10m\n"
                                  "  reconcile_interval: 5s\n"
                                  "  sentinel_interval: 1s\n"
                                  "  sentinel_timeout: 1m\n"
                                  "  sentinel_concurrency: 4096\n"
                                  "  sentinel_mdev: true\n"
                                  "  vfio_term_grace: 0s\n"
                                  "  vfio_init_window: 10m\n"
                                  "  breaker:\n"
                                  "    enabled: false\n"
                                  "    window: 168h\n"
                                  "    max_quarantines: 1000\n"
                                  "placement:\n"
                                  "  url: http://placement.poison:8778/\n"
                                  "  auth: keystone\n"
                                  "  host_name: poison-1.example\n"
                                  "  sync_interval: 10m\n"
                                  "  orphan_grace: 168h\n"
                                  "  keystone:\n"
                                  "    auth_url: https://keystone.poison/identity\n"
                                  "    application_credential_id: 0123abcd\n"
                                  "    application_credential_secret_file: /poison/secret\n"
                                  "network:\n"
                                  "  default_mode: bridge\n"
                                  "  bridges: [br-lan]\n"
                                  "  dnsmasq_binary: /poison/dnsmasq\n"
                                  "  nat:\n"
                                  "    enabled: false\n"
                                  "    bridge: poison0\n"
                                  "    subnet: 192.168.0.0/16\n"
                                  "    isolate: false\n"
                                  "    port_range: 80-80\n"
                                  "cloud_init:\n"
                                  "  vendor_data_file: /poison/vendor-data\n";

/* CFG-1, CFG-3: a file with every key, nested mappings for the dotted keys */
static void test_every_key_loads(void **state)
{
        _cleanup_(config_donep) Config *c = loaded(poison_yaml);

        assert_string_equal(c->listen, "[::1]:9090");
        assert_string_equal(c->unix_socket, "/run/poison/api.sock");
        assert_int_equal(c->unix_socket_mode, 0660);
        assert_string_equal(c->jwt_secret_file, "/poison/jwt.secret");
        assert_string_equal(c->data_dir, "/poison/data");
        assert_string_equal(c->runtime_dir, "/poison/run");
        assert_string_equal(c->sysfs_root, "/poison/sys");
        assert_string_equal(c->dev_root, "/poison/dev");
        assert_string_equal(c->proc_root, "/poison/proc");
        assert_string_equal(c->nvml_library, "");
        assert_string_equal(c->qemu_binary, "/poison/qemu");
        assert_int_equal(c->qemu_accel, CONFIG_QEMU_ACCEL_TCG);
        assert_int_equal(strv_length(c->image_dirs), 1);
        assert_string_equal(c->image_dirs[0], "/poison/images");
        assert_true(c->image_dirs_set);
        assert_int_equal(c->log_level, LOG_LEVEL_DEBUG);
        assert_int_equal(c->vmm.boot_timeout, NSEC_PER_MIN);
        assert_int_equal(c->vmm.stop_timeout, NSEC_PER_SEC);
        assert_int_equal(c->vmm.device_release_timeout, 2 * NSEC_PER_SEC); /* DISK-8 */
        assert_int_equal(c->vmm.console_max_bytes, 65536);
        assert_int_equal(c->storage.min_free.bytes, UINT64_C(10) << 30);
        assert_int_equal(c->storage.max_image_size, UINT64_C(512) << 20);
        assert_int_equal(c->storage.max_disk_gb, 65536);
        assert_string_equal(c->storage.qemu_img_binary, "/poison/qemu-img");
        assert_int_equal(c->gpu.vf_quarantine_threshold, 64);
        assert_int_equal(c->gpu.placement_policy, PLACEMENT_POLICY_PACK);
        assert_int_equal(c->gpu.nvml_timeout, 100 * NSEC_PER_MSEC);
        assert_int_equal(c->gpu.sysfs_timeout, 10 * NSEC_PER_MIN);
        assert_int_equal(c->gpu.reconcile_interval, 5 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.sentinel_interval, NSEC_PER_SEC);
        assert_int_equal(c->gpu.sentinel_timeout, NSEC_PER_MIN);
        assert_int_equal(c->gpu.sentinel_concurrency, 4096);
        assert_true(c->gpu.sentinel_mdev);
        assert_int_equal(c->gpu.vfio_term_grace, 0);
        assert_int_equal(c->gpu.vfio_init_window, 10 * NSEC_PER_MIN);
        assert_false(c->gpu.breaker.enabled);
        assert_int_equal(c->gpu.breaker.window, 168 * NSEC_PER_HOUR);
        assert_int_equal(c->gpu.breaker.max_quarantines, 1000);
        /* FLEET-1 */
        assert_string_equal(c->placement.url, "http://placement.poison:8778/");
        assert_int_equal(c->placement.auth, CONFIG_PLACEMENT_AUTH_KEYSTONE);
        assert_string_equal(c->placement.host_name, "poison-1.example");
        assert_int_equal(c->placement.sync_interval, 10 * NSEC_PER_MIN);
        assert_int_equal(c->placement.orphan_grace, 168 * NSEC_PER_HOUR);
        assert_string_equal(c->placement.keystone.auth_url, "https://keystone.poison/identity");
        assert_string_equal(c->placement.keystone.application_credential_id, "0123abcd");
        assert_string_equal(c->placement.keystone.application_credential_secret_file,
                            "/poison/secret");

        /* NET-1, NET-4 */
        assert_int_equal(c->network.default_mode, CONFIG_NETWORK_MODE_BRIDGE);
        assert_int_equal(strv_length(c->network.bridges), 1);
        assert_string_equal(c->network.bridges[0], "br-lan");
        assert_string_equal(c->network.dnsmasq_binary, "/poison/dnsmasq");
        assert_false(c->network.nat.enabled);
        assert_string_equal(c->network.nat.bridge, "poison0");
        assert_string_equal(c->network.nat.subnet, "192.168.0.0/16");
        assert_false(c->network.nat.isolate);
        assert_string_equal(c->network.nat.port_range, "80-80");
        /* SEED-2 */
        assert_string_equal(c->cloud_init.vendor_data_file, "/poison/vendor-data");

        /* every line of its dump but the section headers differs from the default dump */
        _cleanup_free_ char *text = dump(c);
        _cleanup_free_ char *mine = strdup(text), *theirs = strdup(default_dump);
        char *save_a = NULL, *save_b = NULL;
        char *a = strtok_r(mine, "\n", &save_a), *b = strtok_r(theirs, "\n", &save_b);
        size_t lines = 0;
        for (; a && b; a = strtok_r(NULL, "\n", &save_a), b = strtok_r(NULL, "\n", &save_b)) {
                lines++;
                /* A list with an item takes a line more than the empty default list. */
                if (streq(a, "  bridges:") && streq(b, "  bridges: []")) {
                        a = strtok_r(NULL, "\n", &save_a);
                        assert_string_equal(a, "  - \"br-lan\"");
                        continue;
                }
                if (a[strlen(a) - 1] == ':') {
                        assert_string_equal(a, b);
                        continue;
                }
                if (streq(a, b))
                        fail_msg("poison line equals the default: %s", a);
        }
        assert_null(a);
        assert_null(b);
        assert_int_equal(lines, 63);
}

/* OPS-5: the shipped example has every key, each at its default */
static void test_example_file(void **state)
{
        const char *data = getenv("VGPUD_TEST_DATA");
        _cleanup_free_ char *path = NULL, *error = NULL, *text = NULL, *raw = NULL;
        size_t size;

        assert_non_null(data);
        assert_int_equal(strprintf(&path, "%s/../../packaging/vgpud.yaml", data), 0);

        /* Loaded over the defaults it changes nothing ... */
        _cleanup_(config_donep) Config *c = defaults();
        assert_int_equal(config_load_file(c, path, true, &error), 1);
        text = dump(c);
        assert_string_equal(text, default_dump);

        /* ... and loaded over a Config where every key differs, it restores every default, so
         * it must set every key. */
        _cleanup_(config_donep) Config *p = loaded(poison_yaml);
        assert_int_equal(config_load_file(p, path, true, &error), 1);
        free(text);
        text = dump(p);
        assert_string_equal(text, default_dump);

        /* OPS-1: it names the host-preparation unit the shipped vgpud.service wants */
        assert_int_equal(read_file_at(AT_FDCWD, path, CONFIG_FILE_MAX, &raw, &size), 0);
        assert_non_null(strstr(raw, "vgpu-host-prepare.service"));
}

/* CFG-1: missing, empty and comment-only configurations are the defaults */
static void test_empty_documents(void **state)
{
        static const char *const empties[] = {
            "",    "# nothing here\n", "---\n",          "---\n...\n", "{}\n",
            "~\n", "\xef\xbb\xbf",     "gpu:\nvmm: ~\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(empties); i++) {
                _cleanup_(config_donep) Config *c = loaded(empties[i]);
                _cleanup_free_ char *text = dump(c);
                assert_string_equal(text, default_dump);
        }
}

/* ---- values --------------------------------------------------------------------------------- */

typedef struct RangeCase {
        const char *key;
        const char *below, *min, *max, *above; /* below is NULL when min is 0 */
        uint64_t min_value, max_value;
        const char *what;
} RangeCase;

#define S NSEC_PER_SEC
#define MS NSEC_PER_MSEC
static const RangeCase ranges[] = {
    {"vmm.boot_timeout", "999ms", "1s", "10m", "10m1ms", S, 600 * S,
     "a duration between 1s and 10m0s"},
    {"vmm.stop_timeout", "999ms", "1s", "10m", "601s", S, 600 * S,
     "a duration between 1s and 10m0s"},
    /* DISK-8 */
    {"vmm.device_release_timeout", "999ms", "1s", "10m", "601s", S, 600 * S,
     "a duration between 1s and 10m0s"},
    {"vmm.console_max_bytes", "65535", "65536", "1073741824", "1073741825", 65536, 1073741824,
     "an integer between 65536 and 1073741824"},
    {"gpu.vf_quarantine_threshold", "0", "1", "64", "65", 1, 64, "an integer between 1 and 64"},
    {"gpu.nvml_timeout", "99ms", "100ms", "60s", "60s1ms", 100 * MS, 60 * S,
     "a duration between 100ms and 1m0s"},
    {"gpu.sysfs_timeout", "999ms", "1s", "10m", "10m1ms", S, 600 * S,
     "a duration between 1s and 10m0s"},
    {"gpu.reconcile_interval", "4s999ms", "5s", "1h", "1h0m1s", 5 * S, 3600 * S,
     "a duration between 5s and 1h0m0s"},
    {"gpu.sentinel_interval", "999ms", "1s", "5m", "5m1ms", S, 300 * S,
     "a duration between 1s and 5m0s"},
    {"gpu.sentinel_timeout", "99ms", "100ms", "1m", "61s", 100 * MS, 60 * S,
     "a duration between 100ms and 1m0s"},
    {"gpu.sentinel_concurrency", "0", "1", "4096", "4097", 1, 4096,
     "an integer between 1 and 4096"},
    {"gpu.vfio_term_grace", NULL, "0s", "60s", "60s1ms", 0, 60 * S,
     "a duration between 0s and 1m0s"},
    {"gpu.vfio_init_window", NULL, "0ms", "10m", "10m1ms", 0, 600 * S,
     "a duration between 0s and 10m0s"},
    {"gpu.breaker.window", "59s999ms", "1m", "168h", "168h0m1s", 60 * S, 168 * 3600 * S,
     "a duration between 1m0s and 168h0m0s"},
    {"gpu.breaker.max_quarantines", "0", "1", "1000", "1001", 1, 1000,
     "an integer between 1 and 1000"},
};
#undef S
#undef MS

/* A value that must be refused for key, in a file and in a --set, with got as the "got" part. */
static void value_fails(const char *key, const char *value, const char *what, const char *got)
{
        _cleanup_free_ char *yaml = NULL, *message = NULL, *assignment = NULL;
        _cleanup_free_ char *set_message = NULL;
        unsigned line, column;

        yaml = nested_yaml(key, value, &line, &column);
        assert_int_equal(strprintf(&message, FILE_NAME ":%u:%u: %s must be %s, got %s", line,
                                   column, key, what, got),
                         0);
        LOAD_FAILS(yaml, message);

        assert_int_equal(strprintf(&assignment, "%s=%s", key, value), 0);
        assert_int_equal(
            strprintf(&set_message, "--set %s: %s must be %s, got %s", assignment, key, what, got),
            0);
        set_fails(assignment, set_message);
}

/* CFG-3 ranges, CFG-4 out-of-range values and wrong types, HEALTH-7, GEN-12 (ranges as Go) */
static void test_range_edges(void **state)
{
        for (size_t i = 0; i < ELEMENTSOF(ranges); i++) {
                const RangeCase *t = &ranges[i];
                _cleanup_free_ char *got = NULL;
                unsigned line, column;

                /* both edges are valid, in a file and through --set */
                const char *edges[] = {t->min, t->max};
                const uint64_t values[] = {t->min_value, t->max_value};
                for (size_t e = 0; e < 2; e++) {
                        _cleanup_free_ char *yaml = nested_yaml(t->key, edges[e], &line, &column);
                        _cleanup_free_ char *assignment = NULL;
                        _cleanup_(config_donep) Config *c = loaded(yaml);
                        assert_int_equal(numeric(c, t->key), values[e]);

                        _cleanup_(config_donep) Config *d = defaults();
                        assert_int_equal(strprintf(&assignment, "%s=%s", t->key, edges[e]), 0);
                        set_ok(d, assignment);
                        assert_int_equal(numeric(d, t->key), values[e]);
                }

                /* one step outside is refused with the key, the range and the value */
                if (t->below) {
                        assert_int_equal(strprintf(&got, "\"%s\"", t->below), 0);
                        value_fails(t->key, t->below, t->what, got);
                        free(got);
                        got = NULL;
                }
                assert_int_equal(strprintf(&got, "\"%s\"", t->above), 0);
                value_fails(t->key, t->above, t->what, got);
        }
}

/* HEALTH-7: the exact text, for every kind of bad threshold */
static void test_quarantine_threshold(void **state)
{
        static const struct {
                const char *source, *got;
        } bad[] = {
            {"0", "\"0\""},
            {"65", "\"65\""},
            {"-1", "\"-1\""},
            {"+2", "\"+2\""},
            {"02", "\"02\""},
            {"2.0", "\"2.0\""},
            {"0x2", "\"0x2\""},
            {"1e1", "\"1e1\""},
            {"two", "\"two\""},
            {"18446744073709551617", "\"18446744073709551617\""},
            {"\"2\"", "\"\\\"2\\\"\""},
            {"'2'", "\"'2'\""},
            {"\"\"", "\"\\\"\\\"\""},
            {"", "\"\""},
            {"true", "\"true\""},
            {"[2]", "a list"},
            {"{a: 2}", "a mapping"},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                value_fails("gpu.vf_quarantine_threshold", bad[i].source,
                            "an integer between 1 and 64", bad[i].got);

        LOAD_FAILS("gpu:\n  vf_quarantine_threshold: 0\n",
                   "vgpud.yaml:2:28: gpu.vf_quarantine_threshold must be an integer between 1 "
                   "and 64, got \"0\"");
        set_fails("gpu.vf_quarantine_threshold=65",
                  "--set gpu.vf_quarantine_threshold=65: gpu.vf_quarantine_threshold must be an "
                  "integer between 1 and 64, got \"65\"");
}

/* CFG-3 durations: <digits><unit>, units ms s m h, concatenable; quoting is allowed */
static void test_durations(void **state)
{
        _cleanup_(config_donep) Config *c = loaded("vmm:\n"
                                                   "  boot_timeout: 1m30s\n"
                                                   "  stop_timeout: \"45s\"\n"
                                                   "gpu:\n"
                                                   "  nvml_timeout: 1s500ms\n"
                                                   "  breaker:\n"
                                                   "    window: 2h30m\n");
        assert_int_equal(c->vmm.boot_timeout, 90 * NSEC_PER_SEC);
        assert_int_equal(c->vmm.stop_timeout, 45 * NSEC_PER_SEC);
        assert_int_equal(c->gpu.nvml_timeout, 1500 * NSEC_PER_MSEC);
        assert_int_equal(c->gpu.breaker.window, 150 * NSEC_PER_MIN);

        /* and the dump spells them so that they read back */
        _cleanup_free_ char *text = dump(c);
        assert_non_null(strstr(text, "  boot_timeout: 1m30s\n"));
        assert_non_null(strstr(text, "  nvml_timeout: 1s500ms\n"));
        assert_non_null(strstr(text, "    window: 2h30m\n"));

        static const struct {
                const char *source, *got;
        } bad[] = {
            {"30", "\"30\""},         {"1.5s", "\"1.5s\""}, {"-1s", "\"-1s\""},
            {"30 s", "\"30 s\""},     {"30S", "\"30S\""},   {"1d", "\"1d\""},
            {"s", "\"s\""},           {"", "\"\""},         {"500us", "\"500us\""},
            {"true", "\"true\""},     {"[30s]", "a list"},  {"{a: 1}", "a mapping"},
            {"\"30 s\"", "\"30 s\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                value_fails("vmm.boot_timeout", bad[i].source, "a duration between 1s and 10m0s",
                            bad[i].got);
}

/* CFG-4: booleans are exactly true and false, unquoted */
static void test_booleans(void **state)
{
        _cleanup_(config_donep) Config *c = loaded("gpu:\n"
                                                   "  sentinel_mdev: true\n"
                                                   "  breaker:\n"
                                                   "    enabled: false\n");
        assert_true(c->gpu.sentinel_mdev);
        assert_false(c->gpu.breaker.enabled);

        static const struct {
                const char *source, *got;
        } bad[] = {
            {"yes", "\"yes\""},
            {"no", "\"no\""},
            {"on", "\"on\""},
            {"off", "\"off\""},
            {"True", "\"True\""},
            {"FALSE", "\"FALSE\""},
            {"1", "\"1\""},
            {"0", "\"0\""},
            {"y", "\"y\""},
            {"", "\"\""},
            {"~", "\"~\""},
            {"\"true\"", "\"\\\"true\\\"\""},
            {"'false'", "\"'false'\""},
            {"[true]", "a list"},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                value_fails("gpu.sentinel_mdev", bad[i].source, "true or false", bad[i].got);
                value_fails("gpu.breaker.enabled", bad[i].source, "true or false", bad[i].got);
        }
}

/* CFG-3 enumerations and log levels */
static void test_enumerations(void **state)
{
        static const struct {
                const char *value;
                ConfigQemuAccel accel;
        } accels[] = {
            {"auto", CONFIG_QEMU_ACCEL_AUTO},
            {"kvm", CONFIG_QEMU_ACCEL_KVM},
            {"\"tcg\"", CONFIG_QEMU_ACCEL_TCG},
        };
        for (size_t i = 0; i < ELEMENTSOF(accels); i++) {
                _cleanup_free_ char *yaml = NULL;
                assert_int_equal(strprintf(&yaml, "qemu_accel: %s\n", accels[i].value), 0);
                _cleanup_(config_donep) Config *c = loaded(yaml);
                assert_int_equal(c->qemu_accel, accels[i].accel);
        }
        value_fails("qemu_accel", "xen", "one of auto, kvm, tcg", "\"xen\"");
        value_fails("qemu_accel", "KVM", "one of auto, kvm, tcg", "\"KVM\"");
        value_fails("qemu_accel", "", "one of auto, kvm, tcg", "\"\"");

        _cleanup_(config_donep) Config *p = loaded("gpu: {placement_policy: pack}\n");
        assert_int_equal(p->gpu.placement_policy, PLACEMENT_POLICY_PACK);
        set_ok(p, "gpu.placement_policy=spread");
        assert_int_equal(p->gpu.placement_policy, PLACEMENT_POLICY_SPREAD);
        value_fails("gpu.placement_policy", "fill", "one of spread, pack", "\"fill\"");

        static const struct {
                const char *name;
                int level;
        } levels[] = {
            {"err", LOG_LEVEL_ERR},   {"warning", LOG_LEVEL_WARNING}, {"notice", LOG_LEVEL_NOTICE},
            {"info", LOG_LEVEL_INFO}, {"debug", LOG_LEVEL_DEBUG},
        };
        for (size_t i = 0; i < ELEMENTSOF(levels); i++) {
                _cleanup_free_ char *assignment = NULL;
                _cleanup_(config_donep) Config *c = defaults();
                assert_int_equal(strprintf(&assignment, "log_level=%s", levels[i].name), 0);
                set_ok(c, assignment);
                assert_int_equal(c->log_level, levels[i].level);
        }
        const char *what = "one of err, warning, notice, info, debug";
        value_fails("log_level", "warn", what, "\"warn\"");
        value_fails("log_level", "INFO", what, "\"INFO\"");
        value_fails("log_level", "6", what, "\"6\"");

        assert_string_equal(config_qemu_accel_to_string(CONFIG_QEMU_ACCEL_KVM), "kvm");
        assert_string_equal(placement_policy_to_string(PLACEMENT_POLICY_PACK), "pack");
        assert_null(config_qemu_accel_to_string((ConfigQemuAccel)42));
}

/* CFG-3: unix_socket_mode is an octal mode */
static void test_unix_socket_mode(void **state)
{
        static const struct {
                const char *value;
                mode_t mode;
        } good[] = {{"0600", 0600}, {"0660", 0660}, {"0000", 0}, {"0777", 0777}};
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                _cleanup_free_ char *assignment = NULL;
                _cleanup_(config_donep) Config *c = defaults();
                assert_int_equal(strprintf(&assignment, "unix_socket_mode=%s", good[i].value), 0);
                set_ok(c, assignment);
                assert_int_equal(c->unix_socket_mode, good[i].mode);
        }

        const char *what = "an octal mode from 0000 to 0777";
        value_fails("unix_socket_mode", "600", what, "\"600\"");
        value_fails("unix_socket_mode", "0800", what, "\"0800\"");
        value_fails("unix_socket_mode", "00600", what, "\"00600\"");
        value_fails("unix_socket_mode", "0o600", what, "\"0o600\"");
        value_fails("unix_socket_mode", "01777", what, "\"01777\"");
        value_fails("unix_socket_mode", "\"0600\"", what, "\"\\\"0600\\\"\"");
        value_fails("unix_socket_mode", "", what, "\"\"");
}

/* CFG-5: every path key must be absolute */
static void test_relative_paths(void **state)
{
        static const char *const keys[] = {"jwt_secret_file", "data_dir",  "sysfs_root",
                                           "dev_root",        "proc_root", "qemu_binary"};
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                value_fails(keys[i], "var/lib", "an absolute path", "\"var/lib\"");
                value_fails(keys[i], "./x", "an absolute path", "\"./x\"");
                value_fails(keys[i], "\"\"", "an absolute path", "\"\"");
                value_fails(keys[i], "", "an absolute path", "\"\"");
                value_fails(keys[i], "~", "an absolute path", "\"~\"");
        }

        /* a NUL byte (possible through a YAML escape) is never part of a path */
        LOAD_FAILS("data_dir: \"/var/lib\\0/x\"\n",
                   "vgpud.yaml:1:11: data_dir must be an absolute path, got \"/var/lib\\x00/x\"");
        /* over PATH_MAX */
        _cleanup_free_ char *long_path = malloc(4097);
        assert_non_null(long_path);
        memset(long_path, 'a', 4096);
        long_path[0] = '/';
        long_path[4096] = 0;
        _cleanup_free_ char *yaml = NULL, *message = NULL;
        assert_int_equal(strprintf(&yaml, "qemu_binary: %s\n", long_path), 0);
        assert_int_equal(strprintf(&message,
                                   "vgpud.yaml:1:14: qemu_binary must be an absolute path, got "
                                   "\"%.128s...\"",
                                   long_path),
                         0);
        LOAD_FAILS(yaml, message);
        long_path[4095] = 0;
        free(yaml);
        assert_int_equal(strprintf(&yaml, "qemu_binary: %s\n", long_path), 0);
        _cleanup_(config_donep) Config *c = loaded(yaml);
        assert_int_equal(strlen(c->qemu_binary), 4095);

        /* directories lose trailing slashes; other paths are kept as written */
        _cleanup_(config_donep) Config *d = loaded("data_dir: /srv/vgpud//\n"
                                                   "sysfs_root: /\n"
                                                   "jwt_secret_file: /etc/vgpud/jwt.secret\n");
        assert_string_equal(d->data_dir, "/srv/vgpud");
        assert_string_equal(d->sysfs_root, "/");
        assert_string_equal(d->image_dirs[0], "/srv/vgpud/import");
}

/* VMM-15: runtime_dir fits socket paths and has no whitespace or control characters */
static void test_runtime_dir(void **state)
{
        const char *what = "an absolute path of at most 65 bytes without whitespace or control "
                           "characters";
        char path[80];

        /* 65 bytes: "<dir>/instances/<20 chars>/agent.sock" is exactly 107 bytes */
        memset(path, 'r', sizeof path);
        path[0] = '/';
        path[65] = 0;
        _cleanup_free_ char *assignment = NULL, *got = NULL;
        assert_int_equal(strprintf(&assignment, "runtime_dir=%s", path), 0);
        _cleanup_(config_donep) Config *c = defaults();
        set_ok(c, assignment);
        assert_string_equal(c->runtime_dir, path);
        _cleanup_free_ char *socket = NULL;
        assert_int_equal(
            strprintf(&socket, "%s/instances/%s/agent.sock", path, "k3x9q2m8v1c4z7n5b0wd"), 0);
        assert_int_equal(strlen(socket), 107);
        assert_true(config_runtime_dir_is_valid(path));

        /* a trailing slash does not count against it */
        path[65] = '/';
        path[66] = 0;
        free(assignment);
        assert_int_equal(strprintf(&assignment, "runtime_dir=%s", path), 0);
        set_ok(c, assignment);
        assert_int_equal(strlen(c->runtime_dir), 65);

        path[65] = 'r';
        assert_false(config_runtime_dir_is_valid(path));
        assert_int_equal(strprintf(&got, "\"%s\"", path), 0);
        value_fails("runtime_dir", path, what, got);

        value_fails("runtime_dir", "\"/run/vg pud\"", what, "\"/run/vg pud\"");
        value_fails("runtime_dir", "\"/run/vg\\tpud\"", what, "\"/run/vg\\x09pud\"");
        value_fails("runtime_dir", "\"/run/vg\\npud\"", what, "\"/run/vg\\x0apud\"");
        value_fails("runtime_dir", "\"/run/vg\\x7fpud\"", what, "\"/run/vg\\x7fpud\"");
        value_fails("runtime_dir", "run/vgpud", what, "\"run/vgpud\"");
        assert_false(config_runtime_dir_is_valid(NULL));
}

/* API-1: unix_socket is an absolute path that fits a socket address, or empty */
static void test_unix_socket(void **state)
{
        const char *what = "an absolute path of at most 107 bytes, or empty";
        char path[120];

        memset(path, 's', sizeof path);
        path[0] = '/';
        path[107] = 0;
        _cleanup_free_ char *assignment = NULL, *got = NULL;
        assert_int_equal(strprintf(&assignment, "unix_socket=%s", path), 0);
        _cleanup_(config_donep) Config *c = defaults();
        set_ok(c, assignment);
        assert_string_equal(c->unix_socket, path);
        set_ok(c, "unix_socket=");
        assert_string_equal(c->unix_socket, "");

        path[107] = 's';
        path[108] = 0;
        assert_int_equal(strprintf(&got, "\"%s\"", path), 0);
        value_fails("unix_socket", path, what, got);
        value_fails("unix_socket", "api.sock", what, "\"api.sock\"");
        value_fails("unix_socket", "null", what, "\"null\"");
}

/* NVML-1: nvml_library is a name, an absolute path, or empty */
static void test_nvml_library(void **state)
{
        const char *what = "a library name, an absolute path, or empty";
        static const char *const good[] = {"libnvidia-ml.so.1", "/opt/sim/libnvidia-ml.so.1",
                                           "\"\"", ""};
        static const char *const stored[] = {"libnvidia-ml.so.1", "/opt/sim/libnvidia-ml.so.1", "",
                                             ""};
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                _cleanup_free_ char *yaml = NULL;
                assert_int_equal(strprintf(&yaml, "nvml_library: %s\n", good[i]), 0);
                _cleanup_(config_donep) Config *c = loaded(yaml);
                assert_string_equal(c->nvml_library, stored[i]);
        }
        value_fails("nvml_library", "lib/libnvidia-ml.so.1", what, "\"lib/libnvidia-ml.so.1\"");
        /* YAML reads these as no string at all */
        value_fails("nvml_library", "true", what, "\"true\"");
        value_fails("nvml_library", "123", what, "\"123\"");
        value_fails("nvml_library", "~", what, "\"~\"");
        value_fails("nvml_library", "NULL", what, "\"NULL\"");
        /* quoted, they are strings */
        _cleanup_(config_donep) Config *q = loaded("nvml_library: \"123\"\n");
        assert_string_equal(q->nvml_library, "123");
}

/* CFG-6: listen takes literal addresses and a port 1..65535, or empty */
static void test_listen(void **state)
{
        static const struct {
                const char *value;
                int family;
                const char *address;
                uint16_t port;
        } good[] = {
            {"127.0.0.1:8080", AF_INET, "127.0.0.1", 8080},
            {"0.0.0.0:1", AF_INET, "0.0.0.0", 1},
            {"[::1]:65535", AF_INET6, "::1", 65535},
            {"[fd00::1:2]:80", AF_INET6, "fd00::1:2", 80},
            {"[::ffff:10.0.0.1]:443", AF_INET6, "::ffff:10.0.0.1", 443},
        };
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                struct sockaddr_storage ss;
                socklen_t len;
                char text[INET6_ADDRSTRLEN];

                assert_int_equal(config_parse_listen(good[i].value, &ss, &len), 0);
                assert_int_equal(ss.ss_family, good[i].family);
                if (good[i].family == AF_INET) {
                        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
                        assert_int_equal(len, sizeof *a);
                        assert_int_equal(ntohs(a->sin_port), good[i].port);
                        assert_non_null(inet_ntop(AF_INET, &a->sin_addr, text, sizeof text));
                } else {
                        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
                        assert_int_equal(len, sizeof *a);
                        assert_int_equal(ntohs(a->sin6_port), good[i].port);
                        assert_non_null(inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text));
                }
                assert_string_equal(text, good[i].address);

                _cleanup_free_ char *yaml = NULL;
                assert_int_equal(strprintf(&yaml, "listen: \"%s\"\n", good[i].value), 0);
                _cleanup_(config_donep) Config *c = loaded(yaml);
                assert_string_equal(c->listen, good[i].value);
        }

        /* empty disables the TCP listener */
        _cleanup_(config_donep) Config *c = loaded("listen: \"\"\nunix_socket: /run/vgpud.sock\n");
        assert_string_equal(c->listen, "");
        set_ok(c, "listen=");
        assert_string_equal(c->listen, "");

        static const char *const bad[] = {
            "localhost:8080",
            "example.com:80",
            "127.0.0.1",
            "127.0.0.1:",
            ":8080",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:08080",
            "127.0.0.1:+80",
            "127.0.0.1:80 ",
            " 127.0.0.1:80",
            "127.1:80",
            "127.0.0.01:80",
            "::1:8080",
            "[::1]8080",
            "[::1]:",
            "[::1",
            "[fe80::1%eth0]:80",
            "[127.0.0.1]:80",
            "[]:80",
            "1.2.3.4:5:6",
            "1234567890123456789012345678901234567890123456789.0.0.1:80",
            "[1234:5678:9abc:def0:1234:5678:9abc:def0:1234:5678:9abc:def0]:80",
            "[::1]:99999999999999999999",
        };
        const char *what = "<IPv4>:<port> or [<IPv6>]:<port> with a port between 1 and 65535, or "
                           "empty";
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct sockaddr_storage ss = {.ss_family = 77};
                socklen_t len = 99;
                _cleanup_free_ char *value = NULL, *got = NULL;

                assert_int_equal(config_parse_listen(bad[i], &ss, &len), -EINVAL);
                assert_int_equal(ss.ss_family, 77); /* untouched on failure */
                assert_int_equal(len, 99);
                assert_int_equal(strprintf(&value, "\"%s\"", bad[i]), 0);
                assert_int_equal(strprintf(&got, "\"%s\"", bad[i]), 0);
                value_fails("listen", value, what, got);
        }
        assert_int_equal(config_parse_listen("", &(struct sockaddr_storage){}, &(socklen_t){0}),
                         -EINVAL);
        /* a plain port number is no string */
        value_fails("listen", "8080", what, "\"8080\"");
}

/* NET-1, NET-4, CFG-3, CFG-4: the network keys and their refusals */
static void test_network(void **state)
{
        _cleanup_(config_donep) Config *c = loaded("network:\n"
                                                   "  bridges: [br-lan, vlan.100]\n"
                                                   "  nat:\n"
                                                   "    subnet: 10.1.0.0/29\n"
                                                   "    port_range: 30000-30010\n");
        assert_int_equal(strv_length(c->network.bridges), 2);
        assert_string_equal(c->network.bridges[1], "vlan.100");
        assert_int_equal(config_network_default_mode(c), CONFIG_NETWORK_MODE_NAT);
        set_ok(c, "network.nat.enabled=false");
        /* NET-1: without NAT, a body without "network" gets none. */
        assert_int_equal(config_network_default_mode(c), CONFIG_NETWORK_MODE_NONE);
        set_ok(c, "network.default_mode=bridge");
        assert_int_equal(config_network_default_mode(c), CONFIG_NETWORK_MODE_BRIDGE);
        set_ok(c, "network.bridges=[]");
        assert_int_equal(strv_length(c->network.bridges), 0);
        assert_non_null(c->network.bridges);

        const char *subnet = "an IPv4 network a.b.c.d/n with n between 16 and 29 and no host "
                             "bits set";
        value_fails("network.nat.subnet", "10.0.0.0/8", subnet, "\"10.0.0.0/8\"");
        value_fails("network.nat.subnet", "10.233.0.0/30", subnet, "\"10.233.0.0/30\"");
        value_fails("network.nat.subnet", "10.233.0.1/24", subnet, "\"10.233.0.1/24\"");
        value_fails("network.nat.subnet", "10.233.0.0", subnet, "\"10.233.0.0\"");
        const char *range = "<lo>-<hi> with 1 <= lo <= hi <= 65535";
        value_fails("network.nat.port_range", "29999-20000", range, "\"29999-20000\"");
        value_fails("network.nat.port_range", "0-100", range, "\"0-100\"");
        value_fails("network.nat.port_range", "20000", range, "\"20000\"");
        const char *ifname = "an interface name (1 to 15 bytes, no '/', ':' or white space)";
        value_fails("network.nat.bridge", "a-name-of-16-chr", ifname, "\"a-name-of-16-chr\"");
        value_fails("network.nat.bridge", "br/0", ifname, "\"br/0\"");
        value_fails("network.nat.bridge", "", ifname, "\"\"");
        value_fails("network.default_mode", "bridged", "one of nat, bridge, none", "\"bridged\"");
        LOAD_FAILS("network:\n  bridges: [br-lan, \"br 1\"]\n",
                   "vgpud.yaml:2:21: network.bridges must be a list of at most 64 interface "
                   "names, got \"br 1\"");
        LOAD_FAILS("network:\n  bridges: br-lan\n",
                   "vgpud.yaml:2:12: network.bridges must be a list of at most 64 interface "
                   "names, got \"br-lan\"");
        value_fails("network.dnsmasq_binary", "dnsmasq", "an absolute path", "\"dnsmasq\"");
        /* SEED-2, CFG-4 */
        value_fails("cloud_init.vendor_data_file", "vendor.yaml", "an absolute path, or empty",
                    "\"vendor.yaml\"");
}

/* INST-6, DISK-1 (decision in CFG-3): image_dirs is a list of absolute paths, <data_dir>/import
 * by default */
static void test_image_dirs(void **state)
{
        const char *what = "a list of 1 to 64 absolute paths";

        _cleanup_(config_donep) Config *c = loaded("image_dirs:\n"
                                                   "  - /srv/images/\n"
                                                   "  - \"/opt/kernels\"\n");
        assert_true(c->image_dirs_set);
        assert_int_equal(strv_length(c->image_dirs), 2);
        assert_string_equal(c->image_dirs[0], "/srv/images");
        assert_string_equal(c->image_dirs[1], "/opt/kernels");

        /* the default follows data_dir, from the file and from --set, in either order ... */
        _cleanup_(config_donep) Config *d = loaded("data_dir: /srv/vgpud\n");
        assert_false(d->image_dirs_set);
        assert_string_equal(d->image_dirs[0], "/srv/vgpud/import");
        set_ok(d, "data_dir=/");
        assert_string_equal(d->image_dirs[0], "/import");
        assert_int_equal(strv_length(d->image_dirs), 1);

        /* ... until image_dirs is set, before or after data_dir */
        _cleanup_(config_donep) Config *e = loaded("image_dirs: [/img]\ndata_dir: /srv\n");
        assert_string_equal(e->image_dirs[0], "/img");
        set_ok(e, "data_dir=/elsewhere");
        assert_string_equal(e->image_dirs[0], "/img");
        _cleanup_(config_donep) Config *f = loaded("data_dir: /srv\n");
        set_ok(f, "image_dirs=[/a, /b/]");
        set_ok(f, "data_dir=/later");
        assert_int_equal(strv_length(f->image_dirs), 2);
        assert_string_equal(f->image_dirs[0], "/a");
        assert_string_equal(f->image_dirs[1], "/b");

        /* 64 entries are fine, the 65th is refused where it stands */
        _cleanup_free_ char *yaml = strdup("image_dirs:\n");
        assert_non_null(yaml);
        for (int i = 0; i < 64; i++)
                assert_int_equal(strextend(&yaml, "  - /d%d\n", i), 0);
        _cleanup_(config_donep) Config *g = loaded(yaml);
        assert_int_equal(strv_length(g->image_dirs), 64);
        assert_int_equal(strextend(&yaml, "  - /d64\n"), 0);
        LOAD_FAILS(yaml, "vgpud.yaml:66:5: image_dirs must be a list of 1 to 64 absolute paths, "
                         "got \"/d64\"");

        LOAD_FAILS("image_dirs: []\n",
                   "vgpud.yaml:1:13: image_dirs must be a list of 1 to 64 absolute paths, got an "
                   "empty list");
        LOAD_FAILS("image_dirs:\n  - /ok\n  - rel\n",
                   "vgpud.yaml:3:5: image_dirs must be a list of 1 to 64 absolute paths, got "
                   "\"rel\"");
        LOAD_FAILS("image_dirs:\n  - [/nested]\n",
                   "vgpud.yaml:2:5: image_dirs must be a list of 1 to 64 absolute paths, got a "
                   "list");
        LOAD_FAILS("image_dirs:\n  - {a: b}\n",
                   "vgpud.yaml:2:5: image_dirs must be a list of 1 to 64 absolute paths, got a "
                   "mapping");
        LOAD_FAILS("image_dirs: [~]\n",
                   "vgpud.yaml:1:14: image_dirs must be a list of 1 to 64 absolute paths, got "
                   "\"~\"");
        LOAD_FAILS("image_dirs: [\"/a\\0b\"]\n",
                   "vgpud.yaml:1:14: image_dirs must be a list of 1 to 64 absolute paths, got "
                   "\"/a\\x00b\"");
        LOAD_FAILS("image_dirs: [&x /a]\n", "vgpud.yaml:1:14: anchors are not allowed");
        value_fails("image_dirs", "/srv/images", what, "\"/srv/images\"");
        value_fails("image_dirs", "{a: b}", what, "a mapping");
        value_fails("image_dirs", "", what, "\"\"");
        set_fails("image_dirs=[]", "--set image_dirs=[]: image_dirs must be a list of 1 to 64 "
                                   "absolute paths, got an empty list");
}

/* CFG-3, CFG-4: storage.*'s sizes and shares (DISK-3, DISK-5, DISK-10) */
static void test_storage_keys(void **state)
{
        _cleanup_(config_donep) Config *c = loaded("storage:\n"
                                                   "  min_free: 0%\n"
                                                   "  max_image_size: 1099511627776\n");
        assert_int_equal(c->storage.min_free.percent, 0);
        assert_int_equal(c->storage.min_free.bytes, 0);
        assert_int_equal(c->storage.max_image_size, UINT64_C(1) << 40);
        set_ok(c, "storage.min_free=4096B");
        assert_int_equal(c->storage.min_free.bytes, 4096);
        set_ok(c, "storage.max_image_size=3MiB");
        assert_int_equal(c->storage.max_image_size, 3 << 20);

        const char *share = "a percentage from 0% to 99%, or a size";
        value_fails("storage.min_free", "100%", share, "\"100%\"");
        value_fails("storage.min_free", "05%", share, "\"05%\"");
        value_fails("storage.min_free", "5 %", share, "\"5 %\"");
        value_fails("storage.min_free", "0", share, "\"0\"");
        value_fails("storage.min_free", "1PB", share, "\"1PB\"");
        const char *size = "a size between 1MiB and 1024TiB";
        value_fails("storage.max_image_size", "1KiB", size, "\"1KiB\"");
        value_fails("storage.max_image_size", "2PiB", size, "\"2PiB\"");
        value_fails("storage.max_image_size", "2tib", size, "\"2tib\"");
        value_fails("storage.max_image_size", "-1", size, "\"-1\"");
        value_fails("storage.max_image_size", "99999999999999999999", size,
                    "\"99999999999999999999\"");
        value_fails("storage.max_disk_gb", "0", "an integer between 1 and 65536", "\"0\"");
        value_fails("storage.max_disk_gb", "65537", "an integer between 1 and 65536", "\"65537\"");
        value_fails("storage.qemu_img_binary", "qemu-img", "an absolute path", "\"qemu-img\"");
}

/* ---- refusals (CFG-4) ----------------------------------------------------------------------- */

/* CFG-4: the SPEC's own example, at line 12 column 3 */
static void test_unknown_keys(void **state)
{
        LOAD_FAILS("listen: \"127.0.0.1:8080\"\n"
                   "unix_socket: \"\"\n"
                   "data_dir: /var/lib/vgpud\n"
                   "runtime_dir: /run/vgpud\n"
                   "log_level: info\n"
                   "vmm:\n"
                   "  boot_timeout: 30s\n"
                   "  stop_timeout: 30s\n"
                   "gpu:\n"
                   "  vf_quarantine_threshold: 2\n"
                   "  placement_policy: spread\n"
                   "  sentinel_intervall: 5s\n",
                   "vgpud.yaml:12:3: unknown key \"gpu.sentinel_intervall\"");

        LOAD_FAILS("listn: x\n", "vgpud.yaml:1:1: unknown key \"listn\"");
        LOAD_FAILS("gpu:\n  breaker:\n    enable: true\n",
                   "vgpud.yaml:3:5: unknown key \"gpu.breaker.enable\"");
        LOAD_FAILS("vmm:\n  breaker: {}\n", "vgpud.yaml:2:3: unknown key \"vmm.breaker\"");
        /* keys are case-sensitive */
        LOAD_FAILS("Listen: x\n", "vgpud.yaml:1:1: unknown key \"Listen\"");
        /* a key with a NUL byte never matches a known key by its prefix */
        LOAD_FAILS("\"listen\\0x\": x\n", "vgpud.yaml:1:1: unknown key \"listen\\x00x\"");
        LOAD_FAILS("\"\": x\n", "vgpud.yaml:1:1: unknown key \"\"");
        LOAD_FAILS("<<: {listen: x}\n", "vgpud.yaml:1:1: unknown key \"<<\"");
        /* keys in quotes are still keys */
        _cleanup_(config_donep) Config *c = loaded("\"gpu\":\n  'sentinel_mdev': true\n");
        assert_true(c->gpu.sentinel_mdev);

        /* dotted keys are written as nested mappings */
        LOAD_FAILS("gpu.nvml_timeout: 5s\n",
                   "vgpud.yaml:1:1: key \"gpu.nvml_timeout\" must be written as nested mappings");
        LOAD_FAILS("gpu:\n  breaker.enabled: true\n",
                   "vgpud.yaml:2:3: key \"gpu.breaker.enabled\" must be written as nested "
                   "mappings");
        LOAD_FAILS("gpu.nvml_timeoutt: 5s\n", "vgpud.yaml:1:1: unknown key \"gpu.nvml_timeoutt\"");

        /* a long unknown key is cut in the message */
        _cleanup_free_ char *yaml = malloc(300);
        assert_non_null(yaml);
        memset(yaml, 'k', 200);
        strcpy(yaml + 200, ": 1\n");
        _cleanup_free_ char *message = NULL;
        assert_int_equal(strprintf(&message, "vgpud.yaml:1:1: unknown key \"%.128s...\"", yaml), 0);
        LOAD_FAILS(yaml, message);
}

/* CFG-4 */
static void test_duplicate_keys(void **state)
{
        LOAD_FAILS("listen: \"127.0.0.1:1\"\nlisten: \"127.0.0.1:2\"\n",
                   "vgpud.yaml:2:1: duplicate key \"listen\"");
        LOAD_FAILS("gpu:\n  nvml_timeout: 1s\n  nvml_timeout: 2s\n",
                   "vgpud.yaml:3:3: duplicate key \"gpu.nvml_timeout\"");
        LOAD_FAILS("gpu:\n  nvml_timeout: 1s\nvmm: {}\ngpu:\n  sysfs_timeout: 2s\n",
                   "vgpud.yaml:4:1: duplicate key \"gpu\"");
        LOAD_FAILS("gpu: {breaker: {enabled: true}, breaker: {}}\n",
                   "vgpud.yaml:1:33: duplicate key \"gpu.breaker\"");
        LOAD_FAILS("gpu:\nlog_level: info\ngpu: {}\n", "vgpud.yaml:3:1: duplicate key \"gpu\"");
}

/* CFG-4: anchors, aliases, tags and directives */
static void test_yaml_features_refused(void **state)
{
        LOAD_FAILS("listen: &a \"127.0.0.1:80\"\n", "vgpud.yaml:1:9: anchors are not allowed");
        LOAD_FAILS("gpu: &g\n  sentinel_mdev: true\n", "vgpud.yaml:1:6: anchors are not allowed");
        LOAD_FAILS("image_dirs: &l [/a]\n", "vgpud.yaml:1:13: anchors are not allowed");
        LOAD_FAILS("&k listen: x\n", "vgpud.yaml:1:1: anchors are not allowed");
        LOAD_FAILS("listen: *a\n", "vgpud.yaml:1:9: aliases are not allowed");
        LOAD_FAILS("gpu:\n  breaker: *b\n", "vgpud.yaml:2:12: aliases are not allowed");
        LOAD_FAILS("listen: !!str 127.0.0.1:80\n", "vgpud.yaml:1:9: tags are not allowed");
        LOAD_FAILS("gpu:\n  vf_quarantine_threshold: !!int 2\n",
                   "vgpud.yaml:2:28: tags are not allowed");
        LOAD_FAILS("gpu: !!map {}\n", "vgpud.yaml:1:6: tags are not allowed");
        LOAD_FAILS("image_dirs: !!seq [/a]\n", "vgpud.yaml:1:13: tags are not allowed");
        LOAD_FAILS("listen: ! x\n", "vgpud.yaml:1:9: tags are not allowed");
        LOAD_FAILS("!local\nlisten: x\n", "vgpud.yaml:1:1: tags are not allowed");
        LOAD_FAILS("%YAML 1.1\n---\nlisten: x\n", "vgpud.yaml:1:1: directives are not allowed");
        LOAD_FAILS("%TAG ! tag:example.com,2000:\n---\nlisten: x\n",
                   "vgpud.yaml:1:1: directives are not allowed");
}

/* CFG-4: more than one document */
static void test_documents(void **state)
{
        LOAD_FAILS("listen: \"\"\n---\nlog_level: debug\n",
                   "vgpud.yaml:2:1: more than one document");
        LOAD_FAILS("---\nlog_level: debug\n...\n---\n", "vgpud.yaml:4:1: more than one document");
        LOAD_FAILS("---\n---\n", "vgpud.yaml:2:1: more than one document");
        LOAD_FAILS("log_level: debug\n...\n%YAML 1.1\n---\n",
                   "vgpud.yaml:3:1: directives are not allowed");
}

/* CFG-4: wrong shapes at the top and for sections */
static void test_wrong_shapes(void **state)
{
        LOAD_FAILS("- listen\n", "vgpud.yaml:1:1: the configuration must be a mapping");
        LOAD_FAILS("hello\n", "vgpud.yaml:1:1: the configuration must be a mapping");
        LOAD_FAILS("\"\"\n", "vgpud.yaml:1:1: the configuration must be a mapping");
        LOAD_FAILS("gpu: 5\n", "vgpud.yaml:1:6: gpu must be a mapping, got \"5\"");
        LOAD_FAILS("gpu: \"\"\n", "vgpud.yaml:1:6: gpu must be a mapping, got \"\"");
        LOAD_FAILS("gpu: []\n", "vgpud.yaml:1:6: gpu must be a mapping, got a list");
        LOAD_FAILS("gpu:\n  breaker: true\n",
                   "vgpud.yaml:2:12: gpu.breaker must be a mapping, got \"true\"");
        LOAD_FAILS("listen: {a: b}\n",
                   "vgpud.yaml:1:9: listen must be <IPv4>:<port> or [<IPv6>]:<port> with a port "
                   "between 1 and 65535, or empty, got a mapping");
        LOAD_FAILS("data_dir:\n  - /a\n",
                   "vgpud.yaml:2:3: data_dir must be an absolute path, got a list");
        LOAD_FAILS("? [a, b]\n: 1\n", "vgpud.yaml:1:3: mapping keys must be scalars");
        LOAD_FAILS("gpu:\n  ? {a: 1}\n  : 1\n", "vgpud.yaml:2:5: mapping keys must be scalars");
}

/* CFG-4: what libyaml refuses, with its position */
static void test_syntax_errors(void **state)
{
        /* Events arrive in order, so a value refused on the spot wins over a syntax error
         * later on the same line: an unquoted IPv6 listen address is a list. */
        LOAD_FAILS("listen: [::1]:8080\n",
                   "vgpud.yaml:1:9: listen must be <IPv4>:<port> or [<IPv6>]:<port> with a port "
                   "between 1 and 65535, or empty, got a list");
        LOAD_FAILS("gpu:\n  nvml_timeout: 5s\n sysfs_timeout: 30s\n",
                   "vgpud.yaml:3:2: invalid YAML: did not find expected key (while parsing a "
                   "block mapping)");
        /* syntax errors where a value, a list item or a section's value should be */
        LOAD_FAILS("listen: @x\n", "vgpud.yaml:1:9: invalid YAML: found character that cannot "
                                   "start any token (while scanning for the next token)");
        LOAD_FAILS("gpu:\n  breaker: @x\n", "vgpud.yaml:2:12: invalid YAML: found character "
                                            "that cannot start any token (while scanning for "
                                            "the next token)");
        LOAD_FAILS("image_dirs:\n  - /a\n  - @\n",
                   "vgpud.yaml:3:5: invalid YAML: found character that cannot start any token "
                   "(while scanning for the next token)");
        LOAD_FAILS("@listen: x\n", "vgpud.yaml:1:1: invalid YAML: found character that cannot "
                                   "start any token (while scanning for the next token)");
        LOAD_FAILS("log_level: info\n- a\n",
                   "vgpud.yaml:2:1: invalid YAML: did not find expected key (while parsing a "
                   "block mapping)");
        LOAD_FAILS("listen: \"unterminated\n",
                   "vgpud.yaml:2:1: invalid YAML: found unexpected end of stream (while "
                   "scanning a quoted scalar)");
        LOAD_FAILS("gpu:\n\tnvml_timeout: 5s\n",
                   "vgpud.yaml:2:1: invalid YAML: found character that cannot start any token "
                   "(while scanning for the next token)");
        /* bytes that are not UTF-8, control characters, NUL and UTF-16 */
        LOAD_FAILS("log_level: info\nlisten: \"\xff\"\n",
                   "vgpud.yaml:2:10: invalid YAML: invalid leading UTF-8 octet");
        LOAD_FAILS("log_level: info\nlisten: \"\x01\"\n",
                   "vgpud.yaml:2:10: invalid YAML: control characters are not allowed");
        load_fails("listen: \"\"\n\0\n", 13,
                   "vgpud.yaml:2:1: invalid YAML: control characters are not allowed");
        load_fails("\xff\xfel\0:\0 \0x\0\n\0", 12,
                   "vgpud.yaml:1:1: invalid YAML: invalid leading UTF-8 octet");
}

/* CFG-4, GEN-5: offending values are quoted safely and cut when long */
static void test_message_quoting(void **state)
{
        LOAD_FAILS("qemu_accel: \"a\\\"b\\\\c\\e\"\n",
                   "vgpud.yaml:1:13: qemu_accel must be one of auto, kvm, tcg, got "
                   "\"a\\\"b\\\\c\\x1b\"");
        /* UTF-8 stays readable, and columns count characters */
        LOAD_FAILS("log_level: \"é\"\nqemu_accel: ü\n",
                   "vgpud.yaml:1:12: log_level must be one of err, warning, notice, info, debug, "
                   "got \"é\"");
        LOAD_FAILS("gpu: {placement_policy: \"é\", nvml_timeout: x}\n",
                   "vgpud.yaml:1:25: gpu.placement_policy must be one of spread, pack, got "
                   "\"é\"");
        LOAD_FAILS("gpu: {placement_policy: pack, nvml_timeout: é}\n",
                   "vgpud.yaml:1:45: gpu.nvml_timeout must be a duration between 100ms and "
                   "1m0s, got \"é\"");

        /* a long value: the first 128 bytes, not splitting a character, then "..." */
        _cleanup_free_ char *value = malloc(400);
        assert_non_null(value);
        value[0] = 0;
        strcat(value, "x");
        for (int i = 0; i < 100; i++)
                strcat(value, "é");
        _cleanup_free_ char *yaml = NULL, *message = NULL;
        assert_int_equal(strprintf(&yaml, "log_level: %s\n", value), 0);
        /* 1 + 63 characters of two bytes = 127 bytes; the 64th would cross 128 */
        assert_int_equal(strprintf(&message,
                                   "vgpud.yaml:1:12: log_level must be one of err, warning, "
                                   "notice, info, debug, got \"%.127s...\"",
                                   value),
                         0);
        LOAD_FAILS(yaml, message);
}

/* CFG-4, rule 3 of STYLE.md: a failed load changes nothing, even after valid keys */
static void test_failed_load_changes_nothing(void **state)
{
        _cleanup_(config_donep) Config *c = loaded("log_level: debug\n");
        _cleanup_free_ char *error = NULL, *before = dump(c), *after = NULL;

        assert_int_equal(load_text(c,
                                   "listen: \"\"\n"
                                   "data_dir: /elsewhere\n"
                                   "gpu:\n"
                                   "  vf_quarantine_threshold: 3\n"
                                   "  nvml_timeout: forever\n",
                                   &error),
                         -EINVAL);
        assert_string_equal(error, "vgpud.yaml:5:17: gpu.nvml_timeout must be a duration between "
                                   "100ms and 1m0s, got \"forever\"");
        after = dump(c);
        assert_string_equal(before, after);
        assert_int_equal(c->log_level, LOG_LEVEL_DEBUG);

        /* a NULL error pointer is allowed */
        assert_int_equal(load_text(c, "bogus: 1\n", NULL), -EINVAL);
        assert_int_equal(config_set(c, "bogus=1", NULL), -EINVAL);
}

/* ---- files (CFG-1) -------------------------------------------------------------------------- */

/* CFG-1: missing default file = defaults; missing explicit file = error */
static void test_load_file(void **state)
{
        _cleanup_free_ char *dir = make_tmpdir(), *path = NULL, *missing = NULL, *big = NULL;
        _cleanup_free_ char *error = NULL, *text = NULL;
        _cleanup_(config_donep) Config *c = defaults();

        assert_int_equal(strprintf(&missing, "%s/absent/vgpud.yaml", dir), 0);
        assert_int_equal(config_load_file(c, missing, false, &error), 0);
        assert_null(error);
        text = dump(c);
        assert_string_equal(text, default_dump);

        _cleanup_free_ char *expected = NULL;
        assert_int_equal(config_load_file(c, missing, true, &error), -ENOENT);
        assert_int_equal(
            strprintf(&expected, "read configuration file %s: No such file or directory", missing),
            0);
        assert_string_equal(error, expected);

        /* a directory is an error even at the default path */
        free(error);
        error = NULL;
        free(expected);
        assert_int_equal(config_load_file(c, dir, false, &error), -EISDIR);
        assert_int_equal(strprintf(&expected, "read configuration file %s: Is a directory", dir),
                         0);
        assert_string_equal(error, expected);

        /* a FIFO is refused at once, never waited on for a writer (--check-config included) */
        _cleanup_free_ char *fifo = NULL;
        assert_int_equal(strprintf(&fifo, "%s/fifo.yaml", dir), 0);
        assert_int_equal(mkfifo(fifo, 0644), 0);
        free(error);
        error = NULL;
        free(expected);
        assert_int_equal(config_load_file(c, fifo, true, &error), -EBADFD);
        assert_int_equal(
            strprintf(&expected, "read configuration file %s: not a regular file", fifo), 0);
        assert_string_equal(error, expected);
        assert_int_equal(unlink(fifo), 0);

        /* a file: 1, and messages name the path as given */
        assert_int_equal(strprintf(&path, "%s/vgpud.yaml", dir), 0);
        static const char yaml[] = "gpu:\n  reconcile_interval: 2m\n";
        assert_int_equal(write_file_atomic_at(AT_FDCWD, path, yaml, strlen(yaml), 0644, NULL), 0);
        assert_int_equal(config_load_file(c, path, false, &error), 1);
        assert_int_equal(c->gpu.reconcile_interval, 2 * NSEC_PER_MIN);

        static const char bad[] = "gpu:\n  reconcile_interval: 2\n";
        assert_int_equal(write_file_atomic_at(AT_FDCWD, path, bad, strlen(bad), 0644, NULL), 0);
        assert_int_equal(config_load_file(c, path, true, &error), -EINVAL);
        free(expected);
        assert_int_equal(strprintf(&expected,
                                   "%s:2:23: gpu.reconcile_interval must be a duration between "
                                   "5s and 1h0m0s, got \"2\"",
                                   path),
                         0);
        assert_string_equal(error, expected);

        /* GEN-5: larger than the cap is refused, not truncated */
        big = malloc(CONFIG_FILE_MAX + 1);
        assert_non_null(big);
        memset(big, '#', CONFIG_FILE_MAX + 1);
        assert_int_equal(write_file_atomic_at(AT_FDCWD, path, big, CONFIG_FILE_MAX + 1, 0644, NULL),
                         0);
        assert_int_equal(config_load_file(c, path, true, &error), -EFBIG);
        free(expected);
        assert_int_equal(
            strprintf(&expected, "read configuration file %s: larger than 1048576 bytes", path), 0);
        assert_string_equal(error, expected);
        /* exactly the cap is fine */
        assert_int_equal(write_file_atomic_at(AT_FDCWD, path, big, CONFIG_FILE_MAX, 0644, NULL), 0);
        assert_int_equal(config_load_file(c, path, true, &error), 1);

        assert_int_equal(c->gpu.reconcile_interval, 2 * NSEC_PER_MIN);
        remove_tree(dir);
}

/* ---- --set (CFG-2, CFG-4) ------------------------------------------------------------------- */

/* CFG-2: --set overrides the file, later --set overrides earlier */
static void test_set_precedence(void **state)
{
        _cleanup_(config_donep) Config *c = loaded("gpu:\n"
                                                   "  vf_quarantine_threshold: 5\n"
                                                   "  breaker:\n"
                                                   "    enabled: true\n"
                                                   "log_level: debug\n");
        set_ok(c, "gpu.vf_quarantine_threshold=7");
        set_ok(c, "gpu.breaker.enabled=false");
        set_ok(c, "gpu.vf_quarantine_threshold=9");
        assert_int_equal(c->gpu.vf_quarantine_threshold, 9);
        assert_false(c->gpu.breaker.enabled);
        assert_int_equal(c->log_level, LOG_LEVEL_DEBUG);

        /* values are YAML: quotes, '=' inside, and values YAML would read otherwise */
        set_ok(c, "listen=\"[::1]:8080\"");
        assert_string_equal(c->listen, "[::1]:8080");
        set_ok(c, "unix_socket=/run/a=b.sock");
        assert_string_equal(c->unix_socket, "/run/a=b.sock");
        set_ok(c, "jwt_secret_file='/etc/vgpud/my secret'");
        assert_string_equal(c->jwt_secret_file, "/etc/vgpud/my secret");
        set_ok(c, "gpu.nvml_timeout=  250ms  ");
        assert_int_equal(c->gpu.nvml_timeout, 250 * NSEC_PER_MSEC);
        set_ok(c, "unix_socket_mode=0640 # a comment");
        assert_int_equal(c->unix_socket_mode, 0640);
        set_ok(c, "qemu_accel=---\nkvm\n");
        assert_int_equal(c->qemu_accel, CONFIG_QEMU_ACCEL_KVM);
}

/* CFG-2, CFG-4: `--set <key>=<value>: <message>` */
static void test_set_errors(void **state)
{
        set_fails("gpu.vf_quarantine_threshold", "--set gpu.vf_quarantine_threshold: expected "
                                                 "KEY=VALUE");
        set_fails("", "--set : expected KEY=VALUE");
        set_fails("gpu.sentinel_intervall=5s",
                  "--set gpu.sentinel_intervall=5s: unknown key \"gpu.sentinel_intervall\"");
        set_fails("=5s", "--set =5s: unknown key \"\"");
        set_fails("GPU.nvml_timeout=5s",
                  "--set GPU.nvml_timeout=5s: unknown key \"GPU.nvml_timeout\"");
        set_fails("gpu=x", "--set gpu=x: \"gpu\" is a section, not a key");
        set_fails("gpu.breaker={enabled: false}",
                  "--set gpu.breaker={enabled: false}: \"gpu.breaker\" is a section, not a key");
        set_fails("gpu.breaker.enabled=yes",
                  "--set gpu.breaker.enabled=yes: gpu.breaker.enabled must be true or false, got "
                  "\"yes\"");
        set_fails("gpu.sentinel_concurrency=\"64\"",
                  "--set gpu.sentinel_concurrency=\"64\": gpu.sentinel_concurrency must be an "
                  "integer between 1 and 4096, got \"\\\"64\\\"\"");
        set_fails("data_dir=", "--set data_dir=: data_dir must be an absolute path, got \"\"");
        set_fails("data_dir=# only a comment",
                  "--set data_dir=# only a comment: data_dir must be an absolute path, got \"\"");
        set_fails("listen=[::1]:8080",
                  "--set listen=[::1]:8080: listen must be <IPv4>:<port> or [<IPv6>]:<port> with "
                  "a port between 1 and 65535, or empty, got a list");
        set_fails("log_level=info: debug",
                  "--set log_level=info: debug: log_level must be one of err, warning, notice, "
                  "info, debug, got a mapping");
        /* junk after the value, and after the end of its document */
        set_fails("log_level=\"info\" x", "--set log_level=\"info\" x: invalid YAML: did not "
                                          "find expected <document start>");
        set_fails("log_level=info\n...\n@",
                  "--set log_level=info\\x0a...\\x0a@: invalid YAML: found character that "
                  "cannot start any token (while scanning for the next token)");
        set_fails("log_level=@info", "--set log_level=@info: invalid YAML: found character that "
                                     "cannot start any token (while scanning for the next token)");
        set_fails("listen=a: b", "--set listen=a: b: listen must be <IPv4>:<port> or "
                                 "[<IPv6>]:<port> with a port between 1 and 65535, or empty, got "
                                 "a mapping");
        set_fails("log_level=&a info", "--set log_level=&a info: anchors are not allowed");
        set_fails("log_level=*a", "--set log_level=*a: aliases are not allowed");
        set_fails("log_level=!!str info", "--set log_level=!!str info: tags are not allowed");
        set_fails("log_level=%YAML 1.1\n--- info",
                  "--set log_level=%YAML 1.1\\x0a--- info: directives are not allowed");
        set_fails("log_level=info\n--- debug",
                  "--set log_level=info\\x0a--- debug: more than one document");
        set_fails("log_level=\"info",
                  "--set log_level=\"info: invalid YAML: found unexpected end of stream (while "
                  "scanning a quoted scalar)");
        set_fails("log_level=\xff", "--set log_level=\xff: invalid YAML: invalid leading UTF-8 "
                                    "octet");
        /* control bytes in the echo are escaped, so the message stays one line */
        set_fails("bad\tkey\n=1", "--set bad\\x09key\\x0a=1: unknown key \"bad\\x09key\\x0a\"");
        set_fails("no equals\n", "--set no equals\\x0a: expected KEY=VALUE");
        set_fails("image_dirs=[/a, [b]]", "--set image_dirs=[/a, [b]]: image_dirs must be a list "
                                          "of 1 to 64 absolute paths, got a list");
}

/* ---- validation and the host (CFG-5, CFG-9, API-1) ----------------------------------------- */

/* API-1: at least one listener */
static void test_validate(void **state)
{
        _cleanup_(config_donep) Config *c = defaults();
        _cleanup_free_ char *error = NULL;

        assert_int_equal(config_validate(c, &error), 0);
        set_ok(c, "listen=");
        assert_int_equal(config_validate(c, &error), -EINVAL);
        assert_string_equal(error, "listen and unix_socket are both empty: the API needs at "
                                   "least one listener");
        set_ok(c, "unix_socket=/run/vgpud.sock");
        assert_int_equal(config_validate(c, &error), 0);
}

/* A host tree for the path checks: <dir>/{sys,dev,proc,data}. */
static Config *host_config(const char *dir)
{
        static const char *const subdirs[] = {"sys", "dev", "proc", "data"};
        static const char *const keys[] = {"sysfs_root", "dev_root", "proc_root", "data_dir"};
        Config *c = defaults();

        for (size_t i = 0; i < ELEMENTSOF(subdirs); i++) {
                _cleanup_free_ char *path = NULL, *assignment = NULL;
                assert_int_equal(strprintf(&path, "%s/%s", dir, subdirs[i]), 0);
                if (mkdir(path, 0755) < 0)
                        assert_int_equal(errno, EEXIST);
                assert_int_equal(strprintf(&assignment, "%s=%s", keys[i], path), 0);
                set_ok(c, assignment);
        }
        _cleanup_free_ char *runtime = NULL;
        assert_int_equal(strprintf(&runtime, "runtime_dir=%s/run", dir), 0);
        set_ok(c, runtime);
        return c;
}

/* CFG-5, VMM-15 */
static void test_check_paths(void **state)
{
        _cleanup_free_ char *dir = make_tmpdir(), *error = NULL, *expected = NULL;
        _cleanup_(config_donep) Config *c = host_config(dir);

        assert_int_equal(config_check_paths(c, &error), 0);
        assert_null(error);

        /* each root must exist and be a directory */
        static const char *const keys[] = {"sysfs_root", "dev_root", "proc_root", "data_dir"};
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                _cleanup_(config_donep) Config *m = host_config(dir);
                _cleanup_free_ char *missing = NULL, *file = NULL, *assignment = NULL;

                assert_int_equal(strprintf(&missing, "%s/missing-%zu", dir, i), 0);
                assert_int_equal(strprintf(&assignment, "%s=%s", keys[i], missing), 0);
                set_ok(m, assignment);
                assert_int_equal(config_check_paths(m, &error), -ENOENT);
                free(expected);
                assert_int_equal(
                    strprintf(&expected, "%s %s: No such file or directory", keys[i], missing), 0);
                assert_string_equal(error, expected);

                assert_int_equal(strprintf(&file, "%s/file-%zu", dir, i), 0);
                assert_int_equal(write_file_atomic_at(AT_FDCWD, file, "x", 1, 0644, NULL), 0);
                free(assignment);
                assert_int_equal(strprintf(&assignment, "%s=%s", keys[i], file), 0);
                set_ok(m, assignment);
                assert_int_equal(config_check_paths(m, &error), -ENOTDIR);
                free(expected);
                assert_int_equal(strprintf(&expected, "%s %s: Not a directory", keys[i], file), 0);
                assert_string_equal(error, expected);
        }

        /* the rules again, for a Config that did not come through the loader */
        replace(&c->runtime_dir, "/run/with space");
        assert_int_equal(config_check_paths(c, &error), -EINVAL);
        assert_string_equal(error, "runtime_dir must be an absolute path of at most 65 bytes "
                                   "without whitespace or control characters, got \"/run/with "
                                   "space\"");
        replace(&c->runtime_dir, "/run/vgpud");
        replace(&c->qemu_binary, "qemu-system-x86_64");
        assert_int_equal(config_check_paths(c, &error), -EINVAL);
        assert_string_equal(error,
                            "qemu_binary must be an absolute path, got \"qemu-system-x86_64\"");
        replace(&c->qemu_binary, "/usr/bin/qemu-system-x86_64");
        strv_freep(&c->image_dirs);
        c->image_dirs = NULL;
        assert_int_equal(config_check_paths(c, &error), -EINVAL);
        assert_string_equal(error, "image_dirs must be a list of 1 to 64 absolute paths, got an "
                                   "empty list");
        assert_int_equal(strv_push(&c->image_dirs, "images"), 0);
        assert_int_equal(config_check_paths(c, &error), -EINVAL);
        assert_string_equal(error,
                            "image_dirs must be a list of 1 to 64 absolute paths, got \"images\"");
        free(c->image_dirs[0]);
        c->image_dirs[0] = strdup("/images");
        free(c->unix_socket);
        c->unix_socket = NULL; /* treated as empty */
        assert_int_equal(config_check_paths(c, &error), 0);

        remove_tree(dir);
}

/* CFG-5: runtime_dir (0755) and <data_dir>/instances (0700) are created when missing */
static void test_prepare_dirs(void **state)
{
        _cleanup_free_ char *dir = make_tmpdir(), *error = NULL, *expected = NULL;
        _cleanup_free_ char *runtime = NULL, *instances = NULL;
        _cleanup_(config_donep) Config *c = host_config(dir);
        struct stat st;

        assert_int_equal(strprintf(&runtime, "%s/run", dir), 0);
        assert_int_equal(strprintf(&instances, "%s/data/instances", dir), 0);

        /* the modes are exact whatever the umask */
        mode_t old = umask(077);
        assert_int_equal(config_prepare_dirs(c, &error), 0);
        umask(old);
        assert_int_equal(stat(runtime, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0755);
        assert_int_equal(stat(instances, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0700);

        /* existing directories are left alone */
        assert_int_equal(chmod(runtime, 0750), 0);
        assert_int_equal(config_prepare_dirs(c, &error), 0);
        assert_int_equal(stat(runtime, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0750);

        /* something else in the way */
        assert_int_equal(rmdir(instances), 0);
        assert_int_equal(write_file_atomic_at(AT_FDCWD, instances, "x", 1, 0600, NULL), 0);
        assert_int_equal(config_prepare_dirs(c, &error), -ENOTDIR);
        assert_int_equal(strprintf(&expected, "create %s: Not a directory", instances), 0);
        assert_string_equal(error, expected);

        /* a dangling symlink in the way */
        _cleanup_free_ char *dangling = NULL, *link_runtime = NULL;
        assert_int_equal(strprintf(&dangling, "%s/dangling", dir), 0);
        assert_int_equal(symlink("/nonexistent/vgpud-run", dangling), 0);
        assert_int_equal(strprintf(&link_runtime, "runtime_dir=%s", dangling), 0);
        set_ok(c, link_runtime);
        assert_int_equal(config_prepare_dirs(c, &error), -ENOENT);
        free(expected);
        assert_int_equal(strprintf(&expected, "create %s: No such file or directory", dangling), 0);
        assert_string_equal(error, expected);

        /* one level only: a missing parent is an error */
        _cleanup_free_ char *deep = NULL;
        assert_int_equal(strprintf(&deep, "runtime_dir=%s/no/run", dir), 0);
        set_ok(c, deep);
        assert_int_equal(config_prepare_dirs(c, &error), -ENOENT);
        free(expected);
        assert_int_equal(strprintf(&expected, "create %s/no/run: No such file or directory", dir),
                         0);
        assert_string_equal(error, expected);

        _cleanup_free_ char *file_runtime = NULL;
        assert_int_equal(strprintf(&file_runtime, "runtime_dir=%s/data/instances", dir), 0);
        set_ok(c, file_runtime);
        assert_int_equal(config_prepare_dirs(c, &error), -ENOTDIR);
        free(expected);
        assert_int_equal(strprintf(&expected, "create %s: Not a directory", instances), 0);
        assert_string_equal(error, expected);

        _cleanup_free_ char *gone_data = NULL, *back = NULL;
        assert_int_equal(strprintf(&back, "runtime_dir=%s", runtime), 0);
        set_ok(c, back);
        assert_int_equal(strprintf(&gone_data, "data_dir=%s/gone", dir), 0);
        set_ok(c, gone_data);
        assert_int_equal(config_prepare_dirs(c, &error), -ENOENT);
        free(expected);
        assert_int_equal(
            strprintf(&expected, "create %s/gone/instances: No such file or directory", dir), 0);
        assert_string_equal(error, expected);

        remove_tree(dir);
}

/* CFG-9: one vgpud per runtime_dir */
static void test_lock(void **state)
{
        _cleanup_free_ char *dir = make_tmpdir(), *error = NULL, *expected = NULL, *lock = NULL;
        _cleanup_(config_donep) Config *c = defaults();
        _cleanup_free_ char *assignment = NULL;
        struct stat st;

        assert_int_equal(strprintf(&assignment, "runtime_dir=%s", dir), 0);
        set_ok(c, assignment);
        assert_int_equal(strprintf(&lock, "%s/vgpud.lock", dir), 0);

        mode_t old = umask(022);
        int first = -1;
        assert_int_equal(config_lock_runtime_dir(c, &first, &error), 0);
        umask(old);
        assert_true(first >= 0);
        assert_true(fcntl(first, F_GETFD) & FD_CLOEXEC);
        assert_int_equal(stat(lock, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0644);

        /* a second open file description conflicts, even in this process */
        int second = 12345;
        assert_int_equal(config_lock_runtime_dir(c, &second, &error), -EBUSY);
        assert_int_equal(second, 12345);
        assert_int_equal(strprintf(&expected, "another vgpud holds %s/vgpud.lock", dir), 0);
        assert_string_equal(error, expected);

        /* the lock goes with the descriptor */
        assert_int_equal(close(first), 0);
        assert_int_equal(config_lock_runtime_dir(c, &second, &error), 0);
        assert_int_equal(close(second), 0);

        /* a symlink at the lock's place is not followed */
        assert_int_equal(unlink(lock), 0);
        assert_int_equal(symlink("/tmp/elsewhere.lock", lock), 0);
        assert_int_equal(config_lock_runtime_dir(c, &second, &error), -ELOOP);
        free(expected);
        assert_int_equal(
            strprintf(&expected, "open lock file %s: Too many levels of symbolic links", lock), 0);
        assert_string_equal(error, expected);

        /* a missing runtime_dir */
        _cleanup_free_ char *missing = NULL;
        assert_int_equal(strprintf(&missing, "runtime_dir=%s/missing", dir), 0);
        set_ok(c, missing);
        assert_int_equal(config_lock_runtime_dir(c, &second, &error), -ENOENT);
        free(expected);
        assert_int_equal(strprintf(&expected,
                                   "open lock file %s/missing/vgpud.lock: No such file or "
                                   "directory",
                                   dir),
                         0);
        assert_string_equal(error, expected);

        remove_tree(dir);
}

/* ---- dump and copy -------------------------------------------------------------------------- */

/* CFG-2: the dump of any loaded Config reads back to the same Config */
static void test_dump_round_trip(void **state)
{
        static const char *const sources[] = {
            poison_yaml,
            "listen: \"\"\n"
            "unix_socket: \"/run/q\\\"uote\\\\d\"\n"
            "jwt_secret_file: \"/etc/\\u00e9t\\u2028\\u0085\\ufeff\\t\\x01\"\n"
            "qemu_binary: \"/x: #y, [z] {w} &a *b !c |d >e 'f' %g @h `i\"\n"
            "image_dirs: [\"/ leading\", \"/trailing \", \"/-\", \"/? x\"]\n"
            "nvml_library: \"true\"\n"
            "gpu:\n"
            "  nvml_timeout: 1s1ms\n"
            "  breaker: {window: 167h59m59s999ms}\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(sources); i++) {
                _cleanup_(config_donep) Config *c = loaded(sources[i]);
                _cleanup_free_ char *text = dump(c), *again = NULL;
                _cleanup_(config_donep) Config *p = loaded(poison_yaml);
                _cleanup_free_ char *error = NULL;

                /* loaded over a different Config, it gives the same one */
                if (load_text(p, text, &error) < 0)
                        fail_msg("dump does not load: %s\n%s", error, text);
                again = dump(p);
                assert_string_equal(text, again);
                assert_string_equal(p->jwt_secret_file, c->jwt_secret_file);
                assert_int_equal(p->image_dirs_set, true);
        }

        /* an enum value outside its table cannot be written */
        _cleanup_(config_donep) Config *c = defaults();
        char *text = NULL;
        c->qemu_accel = (ConfigQemuAccel)42;
        assert_int_equal(config_dump(c, &text), -EINVAL);
        assert_null(text);
}

static void test_copy(void **state)
{
        _cleanup_(config_donep) Config *c = loaded(poison_yaml);
        _cleanup_(config_done) Config copy = {};

        assert_int_equal(config_copy(c, &copy), 0);
        _cleanup_free_ char *a = dump(c), *b = dump(&copy);
        assert_string_equal(a, b);
        assert_ptr_not_equal(copy.listen, c->listen);
        assert_ptr_not_equal(copy.image_dirs, c->image_dirs);
        assert_ptr_not_equal(copy.image_dirs[0], c->image_dirs[0]);
        config_done(c);
        assert_string_equal(copy.listen, "[::1]:9090");

        /* a zeroed Config copies to a zeroed Config */
        _cleanup_(config_done) Config zero = {}, zero_copy = {};
        assert_int_equal(config_copy(&zero, &zero_copy), 0);
        assert_null(zero_copy.listen);
        assert_null(zero_copy.image_dirs);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_defaults),
            cmocka_unit_test(test_dump_defaults),
            cmocka_unit_test(test_every_key_loads),
            cmocka_unit_test(test_example_file),
            cmocka_unit_test(test_network),
            cmocka_unit_test(test_empty_documents),
            cmocka_unit_test(test_range_edges),
            cmocka_unit_test(test_quarantine_threshold),
            cmocka_unit_test(test_durations),
            cmocka_unit_test(test_booleans),
            cmocka_unit_test(test_enumerations),
            cmocka_unit_test(test_unix_socket_mode),
            cmocka_unit_test(test_relative_paths),
            cmocka_unit_test(test_runtime_dir),
            cmocka_unit_test(test_unix_socket),
            cmocka_unit_test(test_nvml_library),
            cmocka_unit_test(test_listen),
            cmocka_unit_test(test_image_dirs),
            cmocka_unit_test(test_storage_keys),
            cmocka_unit_test(test_unknown_keys),
            cmocka_unit_test(test_duplicate_keys),
            cmocka_unit_test(test_yaml_features_refused),
            cmocka_unit_test(test_documents),
            cmocka_unit_test(test_wrong_shapes),
            cmocka_unit_test(test_syntax_errors),
            cmocka_unit_test(test_message_quoting),
            cmocka_unit_test(test_failed_load_changes_nothing),
            cmocka_unit_test(test_load_file),
            cmocka_unit_test(test_set_precedence),
            cmocka_unit_test(test_set_errors),
            cmocka_unit_test(test_validate),
            cmocka_unit_test(test_check_paths),
            cmocka_unit_test(test_prepare_dirs),
            cmocka_unit_test(test_lock),
            cmocka_unit_test(test_dump_round_trip),
            cmocka_unit_test(test_copy),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
