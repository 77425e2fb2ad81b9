/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The configuration (REL-5, CFG-1, CFG-2, CFG-3, CFG-4). The input is one configuration file, and
 * also, up to its first NUL byte, one --set assignment. Invariants beyond "no crash, no leak":
 *  - a refused file gets a one-line message naming the file, and leaves the Config unchanged;
 *  - an accepted file dumps to YAML that loads back, over the defaults and over a Config where
 *    every key differs, to the same dump;
 *  - a refused --set gets a one-line message starting "--set ".
 */
#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "fuzz.yaml"

/* Every key away from its default, so a dump that forgot a key cannot reproduce itself. */
static const char other_yaml[] = "listen: \"[::1]:9\"\n"
                                 "unix_socket: /s\n"
                                 "unix_socket_mode: 0640\n"
                                 "jwt_secret_file: /j\n"
                                 "data_dir: /d\n"
                                 "runtime_dir: /r\n"
                                 "sysfs_root: /sys2\n"
                                 "dev_root: /dev2\n"
                                 "proc_root: /proc2\n"
                                 "nvml_library: \"\"\n"
                                 "qemu_binary: /q\n"
                                 "qemu_accel: kvm\n"
                                 "image_dirs: [/i, /j]\n"
                                 "log_level: err\n"
                                 "vmm: {boot_timeout: 2s, stop_timeout: 3s, console_max_bytes: "
                                 "70000}\n"
                                 "gpu:\n"
                                 "  vf_quarantine_threshold: 9\n"
                                 "  placement_policy: pack\n"
                                 "  nvml_timeout: 7s\n"
                                 "  sysfs_timeout: 8s\n"
                                 "  reconcile_interval: 9s\n"
                                 "  sentinel_interval: 10s\n"
                                 "  sentinel_timeout: 11s\n"
                                 "  sentinel_concurrency: 12\n"
                                 "  sentinel_mdev: true\n"
                                 "  vfio_term_grace: 13s\n"
                                 "  vfio_init_window: 14s\n"
                                 "  breaker: {enabled: false, window: 15m, max_quarantines: 16}\n";

static bool is_one_line(const char *s)
{
        return s && !strchr(s, '\n');
}

/* Loads text over c and returns the dump of the result; aborts when either step fails. */
static char *reload(Config *c, const char *text)
{
        char *again = NULL;
        if (config_load_buffer(c, NAME, text, strlen(text), NULL) < 0)
                abort();
        if (config_dump(c, &again) < 0)
                abort();
        return again;
}

static void check_file(const uint8_t *data, size_t size)
{
        _cleanup_(config_done) Config c = {}, fresh = {}, other = {};
        _cleanup_free_ char *before = NULL, *after = NULL, *error = NULL;
        _cleanup_free_ char *text = NULL, *again = NULL, *again_other = NULL;

        if (config_init_defaults(&c) < 0 || config_dump(&c, &before) < 0)
                return;

        int r = config_load_buffer(&c, NAME, data, size, &error);
        if (r < 0) {
                if (r == -ENOMEM)
                        return;
                if (r != -EINVAL || !is_one_line(error) || !startswith(error, NAME ":"))
                        abort();
                if (config_dump(&c, &after) < 0 || !streq(before, after))
                        abort();
                return;
        }

        if (config_dump(&c, &text) < 0)
                abort();
        if (config_init_defaults(&fresh) < 0 || config_init_defaults(&other) < 0)
                return;
        again = reload(&fresh, text);
        if (!streq(text, again))
                abort();
        if (config_load_buffer(&other, NAME, other_yaml, strlen(other_yaml), NULL) < 0)
                abort();
        again_other = reload(&other, text);
        if (!streq(text, again_other))
                abort();

        /* The cross-key rule only reads what loaded. */
        (void)config_validate(&c, NULL);
}

static void check_set(const uint8_t *data, size_t size)
{
        _cleanup_(config_done) Config c = {};
        _cleanup_free_ char *assignment = NULL, *error = NULL;

        assignment = strndup((const char *)data, size);
        if (!assignment || config_init_defaults(&c) < 0)
                return;
        int r = config_set(&c, assignment, &error);
        if (r < 0 && r != -ENOMEM && (!is_one_line(error) || !startswith(error, "--set ")))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_file(data, size);
        check_set(data, size);
        return 0;
}
