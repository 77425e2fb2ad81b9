/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * hostcheck: is this host ready for vgpud? (SPEC §23, HOSTCHK-1..HOSTCHK-3)
 *
 * host_check_run() runs every check of HOSTCHK-2 once, in a fixed order, and reports each
 * result as it is decided. A check has one reason to fail and says what to do about it.
 *
 * Promises:
 *  - nothing is written: not to sysfs, not to /dev, not to data_dir, not to runtime_dir. Files
 *    are opened read-only, except the character devices <dev_root>/kvm and <dev_root>/net/tun,
 *    which are opened read-write and closed at once (that is what "usable" means for them; an
 *    open creates nothing). The lock of CFG-9 is looked up in <proc_root>/locks, never taken;
 *  - the host is read only through the configured roots (sysfs_root, dev_root, proc_root),
 *    nvml_library, qemu_binary and data_dir, so a simulator can stand in for any part of it;
 *    qemu-img and dnsmasq, which have no configuration key yet, are looked for at the paths
 *    CFG-3 gives them;
 *  - helpers (NVML, `qemu_binary -device help`) end by the setup's deadline. A sysfs read can
 *    block in the kernel with no deadline at all, so a caller that must bound the whole run
 *    runs this in a process of its own;
 *  - evidence is deterministic for a given host: paths, versions, counts, never timings.
 */

#include <stdbool.h>
#include <sys/types.h>

#include "base/base.h"
#include "config/config.h"

typedef enum HostCheckStatus {
        HOST_CHECK_PASS,
        HOST_CHECK_WARN, /* ready, with something the operator should know */
        HOST_CHECK_FAIL, /* not ready */
} HostCheckStatus;

/* "PASS", "WARN", "FAIL". */
const char *host_check_status_to_string(HostCheckStatus s);

typedef struct HostCheckResult {
        const char *check; /* the check's name (static): "cpu", "kvm", ... */
        HostCheckStatus status;
        char *evidence; /* what was found, one line */
        char *remedy;   /* what to do, one line; NULL when there is nothing to do */
} HostCheckResult;

void host_check_result_done(HostCheckResult *r);

/* How many checks host_check_run() reports, and their names in that order. */
#define HOST_CHECK_COUNT 18
extern const char *const host_check_names[HOST_CHECK_COUNT];

/*
 * The free space data_dir must keep: CFG-3's default for storage.min_free, a key this build
 * does not have yet (it comes with the image store).
 */
#define HOST_CHECK_MIN_FREE_PERCENT 5

/* The R550 branch is the oldest vGPU Manager vendor VFIO supports (GEN-11). */
#define HOST_CHECK_VENDOR_VFIO_MIN_BRANCH 550

typedef struct HostCheckSetup {
        /*
         * The configuration to check the host against. When loading it failed, config holds
         * what could be applied (the defaults at least) and config_error says why.
         */
        const Config *config;
        const char *config_error;
        const char *config_source; /* for the evidence: the file read, or what stood for it */
        nsec_t deadline;           /* CLOCK_MONOTONIC; helpers are stopped by it */
} HostCheckSetup;

/* Receives each result as it is decided, and takes it over (host_check_result_done()). */
typedef void (*HostCheckReport)(HostCheckResult *r, void *userdata);

/*
 * Runs the checks in host_check_names' order and reports each. Returns 0, or -ENOMEM when a
 * result could not be built (the checks reported so far stand).
 */
int host_check_run(const HostCheckSetup *setup, HostCheckReport report, void *userdata);

/* ---- the readers, pure, for the tests ------------------------------------------------------ */

/*
 * /proc/cpuinfo: which virtualisation flag the CPUs carry ("vmx" or "svm", static) and on how
 * many of the `flags` lines it appears (ret_cpus: how many there are). -ENOENT without any
 * `flags` line, -ENXIO when no line has either flag.
 */
int host_check_parse_cpuinfo(const char *cpuinfo, const char **ret_flag, unsigned *ret_with,
                             unsigned *ret_cpus);

/* The branch of a driver version ("580.159.01" gives 580). -EINVAL for another shape. */
int host_check_parse_driver_branch(const char *version, unsigned *ret);

/* Whether QEMU's `-device help` output lists the device (a line with `name "<device>"`). */
bool host_check_qemu_lists_device(const char *help, const char *device);

/*
 * /proc/locks: 1 when an exclusive flock is held on the file (dev, ino), with its holder's pid
 * as that /proc shows it (0 when it is outside its PID namespace); 0 when none is.
 */
int host_check_find_flock(const char *locks, dev_t dev, ino_t ino, pid_t *ret_pid);
