/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The checks of HOSTCHK-2, one function each: it looks at one thing, through the configured
 * roots, and decides PASS, WARN or FAIL with the evidence and, when something is to be done,
 * the one thing to do.
 */
#include "hostcheck.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <systemd/sd-event.h>

#include "gpu/gpu.h"
#include "jwt/jwt.h"
#include "nvml/nvml.h"
#include "sysfs/sysfs.h"
#include "worker/worker.h"

#define CPUINFO_MAX ((size_t)16 * 1024 * 1024) /* about 1.5 KiB a CPU */
#define LOCKS_MAX ((size_t)4 * 1024 * 1024)
#define QEMU_HELP_MAX ((size_t)1024 * 1024) /* QEMU 7.2 prints about 30 KiB */
#define PCI_ATTR_MAX ((size_t)64)

/* What NVML leaves of the run's time for the checks after it, and what QEMU may take. */
#define NVML_RESERVE (4 * NSEC_PER_SEC)
#define NVML_TIMEOUT_MIN (100 * NSEC_PER_MSEC)
#define QEMU_TIMEOUT (3 * NSEC_PER_SEC)

/* Entries of data_dir looked at for a file to open with O_DIRECT, and how deep. */
#define DATA_DIR_PROBE_ENTRIES 256
#define DATA_DIR_PROBE_DEPTH 3

/*
 * CFG-3's path for storage.qemu_img_binary. This build has no such key (it comes with the image
 * store), so its default stands in; network.dnsmasq_binary is read from the configuration.
 */
#define QEMU_IMG_BINARY "/usr/bin/qemu-img"

#define NVIDIA_VENDOR "0x10de"

/* The devices vgpud's VMs need from QEMU (VMM-1). */
static const char *const qemu_devices[] = {"vfio-pci", "virtio-net-pci", "virtio-blk-pci"};

typedef struct HostCheck {
        const HostCheckSetup *setup;
        const Config *config;
        Root *sysfs, *dev, *proc; /* NULL when the root could not be opened */
        int sysfs_error, dev_error, proc_error;
        GpuHost *host; /* NULL when discovery failed (discover_error) or sysfs is missing */
        char *discover_error;
} HostCheck;

typedef int (*CheckFunc)(HostCheck *hc, HostCheckResult *r);

const char *host_check_status_to_string(HostCheckStatus s)
{
        switch (s) {
        case HOST_CHECK_PASS:
                return "PASS";
        case HOST_CHECK_WARN:
                return "WARN";
        case HOST_CHECK_FAIL:
                return "FAIL";
        }
        return "FAIL";
}

void host_check_result_done(HostCheckResult *r)
{
        free(r->evidence);
        free(r->remedy);
        r->evidence = r->remedy = NULL;
}

/* vasprintf() by the house rules: 0 or -ENOMEM, *ret written only on success. */
_printf_(2, 0) static int format_va(char **ret, const char *fmt, va_list ap)
{
        char *s;
        if (vasprintf(&s, fmt, ap) < 0)
                return -ENOMEM;
        *ret = s;
        return 0;
}

/*
 * Decides r: status, one remedy (NULL for none) and the evidence. The evidence carries text from
 * outside (paths, errors, versions): it is escaped once here, so that it is one line of
 * printable ASCII wherever it goes, a terminal or a JSON string. 0 or -ENOMEM.
 */
_printf_(4, 5) static int verdict(HostCheckResult *r, HostCheckStatus status, const char *remedy,
                                  const char *fmt, ...)
{
        _cleanup_free_ char *raw = NULL, *evidence = NULL, *what = NULL;
        va_list ap;

        va_start(ap, fmt);
        int k = format_va(&raw, fmt, ap);
        va_end(ap);
        if (k < 0 || !(evidence = escape_text(raw, strlen(raw), SIZE_MAX, ESCAPE_ECHO)) ||
            (remedy && !(what = strdup(remedy))))
                return -ENOMEM;
        host_check_result_done(r);
        r->status = status;
        r->evidence = TAKE_PTR(evidence);
        r->remedy = TAKE_PTR(what);
        return 0;
}

/* A check whose root could not be opened fails on that alone. */
static int root_unusable(HostCheckResult *r, const char *key, const char *path, int error)
{
        _cleanup_free_ char *remedy = NULL;
        if (strprintf(&remedy, "set %s to the directory it names on the host (CFG-3)", key) < 0)
                return -ENOMEM;
        return verdict(r, HOST_CHECK_FAIL, remedy, "open %s %s: %s", key, path, strerror(-error));
}

static nsec_t now_monotonic(void)
{
        return mono_clock_now(&mono_clock_system);
}

/* ---- the configuration (CFG-4, CFG-5, API-14) ---------------------------------------------- */

/*
 * CFG-5 as start-up checks it, except that a missing data_dir is left to the data-dir check: on
 * a new host it does not exist until the unit's first start creates it (StateDirectory=).
 */
static int check_config_paths(const Config *c, char **error)
{
        struct stat st;
        if (stat(c->data_dir, &st) >= 0 || errno != ENOENT)
                return config_check_paths(c, error);

        Config copy = {};
        int k = config_copy(c, &copy);
        if (k < 0)
                return error_set_oom(error);
        free(copy.data_dir);
        copy.data_dir = strdup("/");
        k = copy.data_dir ? config_check_paths(&copy, error) : error_set_oom(error);
        config_done(&copy);
        return k;
}

static int check_config(HostCheck *hc, HostCheckResult *r)
{
        const HostCheckSetup *s = hc->setup;
        _cleanup_free_ char *error = NULL;

        if (s->config_error)
                return verdict(r, HOST_CHECK_FAIL,
                               "correct it (vgpud.yaml(5)); the checks below ran without "
                               "it, on the defaults and the --set values",
                               "%s", s->config_error);
        int k = config_validate(hc->config, &error);
        if (k >= 0)
                k = check_config_paths(hc->config, &error);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return verdict(r, HOST_CHECK_FAIL, "correct the configuration (vgpud.yaml(5))",
                               "%s", error);
        return verdict(r, HOST_CHECK_PASS, NULL, "%s: valid", s->config_source);
}

static int check_secret(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_jwt_secret_ JwtSecret *secret = NULL;
        _cleanup_free_ char *error = NULL;

        int k = jwt_secret_load(hc->config->jwt_secret_file, &secret, &error);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return verdict(r, HOST_CHECK_FAIL,
                               "write at least 32 random bytes to it, readable by root only "
                               "(API-14)",
                               "%s", error);
        return verdict(r, HOST_CHECK_PASS, NULL, "%s: a token secret vgpud accepts",
                       hc->config->jwt_secret_file);
}

/* ---- the CPU and KVM ----------------------------------------------------------------------- */

static int check_cpu(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_free_ char *cpuinfo = NULL;
        const char *flag;
        unsigned with, cpus;

        if (!hc->proc)
                return root_unusable(r, "proc_root", hc->config->proc_root, hc->proc_error);
        int k = root_read_file(hc->proc, "cpuinfo", CPUINFO_MAX, &cpuinfo, NULL);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return verdict(r, HOST_CHECK_FAIL, "set proc_root to the proc mount (/proc)",
                               "read %s/cpuinfo: %s", hc->proc->path, strerror(-k));

        k = host_check_parse_cpuinfo(cpuinfo, &flag, &with, &cpus);
        if (k == -ENOENT)
                return verdict(r, HOST_CHECK_FAIL, "run vgpud on an x86-64 host",
                               "no CPU flags in %s/cpuinfo", hc->proc->path);
        if (k < 0)
                return verdict(r, HOST_CHECK_FAIL,
                               "enable Intel VT-x or AMD-V in the firmware setup (in a VM: "
                               "nested virtualisation)",
                               "neither vmx nor svm among the CPU flags in %s/cpuinfo",
                               hc->proc->path);
        return verdict(r, HOST_CHECK_PASS, NULL, "%s (%s) on %u of %u CPUs", flag,
                       streq(flag, "vmx") ? "Intel VT-x" : "AMD-V", with, cpus);
}

/*
 * Opens a character device of dev_root read-write and closes it again: what QEMU and the TAP
 * code will do first. An open of /dev/kvm or /dev/net/tun creates nothing (no VM, no TAP
 * without an ioctl). 0 or -errno.
 */
static int probe_device(const Root *dev, const char *rel)
{
        _cleanup_close_ int fd = openat(dev->fd, rel, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        return fd < 0 ? negative_errno() : 0;
}

static int check_kvm(HostCheck *hc, HostCheckResult *r)
{
        if (!hc->dev)
                return root_unusable(r, "dev_root", hc->config->dev_root, hc->dev_error);

        int k = probe_device(hc->dev, "kvm");
        if (k >= 0)
                return verdict(r, HOST_CHECK_PASS, NULL, "%s/kvm opens read-write", hc->dev->path);

        /* With qemu_accel tcg nothing asks for KVM: VMs run, slowly. */
        bool tcg = hc->config->qemu_accel == CONFIG_QEMU_ACCEL_TCG;
        const char *remedy = k == -EACCES || k == -EPERM
                                 ? "run vgpud as root, as its unit does"
                                 : "enable virtualisation in the firmware and load kvm_intel or "
                                   "kvm_amd";
        return verdict(r, tcg ? HOST_CHECK_WARN : HOST_CHECK_FAIL, remedy, "%s/kvm: %s%s",
                       hc->dev->path, strerror(-k),
                       tcg ? " (qemu_accel is tcg: VMs run without KVM)" : "");
}

/* ---- IOMMU and VFIO ------------------------------------------------------------------------ */

static int check_iommu(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_strv_free_ char **groups = NULL;

        if (!hc->sysfs)
                return root_unusable(r, "sysfs_root", hc->config->sysfs_root, hc->sysfs_error);
        int k = root_list_dir(hc->sysfs, "kernel/iommu_groups", &groups);
        if (k == -ENOMEM)
                return k;
        if (k < 0 && k != -ENOENT)
                return verdict(r, HOST_CHECK_FAIL, "set sysfs_root to the sysfs mount (/sys)",
                               "read %s/kernel/iommu_groups: %s", hc->sysfs->path, strerror(-k));
        size_t n = k < 0 ? 0 : strv_length(groups);
        if (n == 0)
                return verdict(r, HOST_CHECK_FAIL,
                               "enable VT-d or AMD-Vi in the firmware and boot with "
                               "intel_iommu=on iommu=pt (AMD: amd_iommu=on)",
                               "no IOMMU groups under %s/kernel/iommu_groups", hc->sysfs->path);
        return verdict(r, HOST_CHECK_PASS, NULL, "%zu IOMMU groups under %s/kernel/iommu_groups", n,
                       hc->sysfs->path);
}

/* VFs that NVIDIA's driver registered with VFIO (vendor VFIO): they carry vfio-dev/. */
static int count_vfio_registered(HostCheck *hc, size_t *ret)
{
        size_t n = 0;
        for (size_t i = 0; hc->host && i < hc->host->n_vfs; i++) {
                _cleanup_free_ char *rel = NULL;
                if (strprintf(&rel, "bus/pci/devices/%s/vfio-dev", hc->host->vfs[i].address) < 0)
                        return -ENOMEM;
                n += root_exists(hc->sysfs, rel) > 0;
        }
        *ret = n;
        return 0;
}

/* Appends the item to *list, after sep unless it is the first; 0 or -ENOMEM. */
_printf_(3, 4) static int list_add_sep(char **list, const char *sep, const char *fmt, ...)
{
        _cleanup_free_ char *item = NULL;
        va_list ap;

        va_start(ap, fmt);
        int k = format_va(&item, fmt, ap);
        va_end(ap);
        if (k < 0 || strextend(list, "%s%s", *list ? sep : "", item) < 0)
                return -ENOMEM;
        return 0;
}

#define list_add(list, ...) list_add_sep(list, ", ", __VA_ARGS__)

static int check_vfio(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_free_ char *found = NULL, *missing = NULL;
        size_t registered = 0;
        int k;

        if (!hc->sysfs)
                return root_unusable(r, "sysfs_root", hc->config->sysfs_root, hc->sysfs_error);
        if (!hc->dev)
                return root_unusable(r, "dev_root", hc->config->dev_root, hc->dev_error);

        k = list_add(root_exists(hc->sysfs, "module/vfio") > 0 ? &found : &missing, "module vfio");
        /* The PCI side: vfio_pci_core, or the vendor driver's own registration with VFIO. */
        if (k >= 0 && root_exists(hc->sysfs, "module/vfio_pci_core") > 0)
                k = list_add(&found, "module vfio_pci_core");
        else if (k >= 0 && root_exists(hc->sysfs, "module/nvidia_vgpu_vfio") > 0)
                k = list_add(&found, "module nvidia_vgpu_vfio");
        else if (k >= 0 && (k = count_vfio_registered(hc, &registered)) >= 0)
                k = registered > 0
                        ? list_add(&found, "nvidia's VFIO registration on %zu VFs", registered)
                        : list_add(&missing, "module vfio_pci_core or nvidia's VFIO registration");
        if (k >= 0)
                k = list_add(root_exists(hc->dev, "vfio/vfio") > 0 ? &found : &missing,
                             "%s/vfio/vfio", hc->dev->path);
        if (k < 0)
                return k;

        if (missing)
                return verdict(r, HOST_CHECK_FAIL,
                               "load vfio_pci (modprobe vfio_pci loads vfio and vfio_pci_core)",
                               "missing %s%s%s", missing, found ? "; found " : "",
                               found ? found : "");
        return verdict(r, HOST_CHECK_PASS, NULL, "%s", found);
}

/* ---- GPUs: framework, SR-IOV, driver (DISC, HEALTH-30, GEN-11) ----------------------------- */

static size_t count_vfs_of(const GpuHost *h, const char *pf)
{
        size_t n = 0;
        for (size_t i = 0; i < h->n_vfs; i++)
                n += streq(h->vfs[i].parent, pf);
        return n;
}

static int check_framework(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_free_ char *gpus = NULL, *notes = NULL;
        const GpuHost *h = hc->host;
        size_t unreadable = 0, n_warnings = strv_length(h ? h->warnings : NULL);

        if (!hc->sysfs)
                return root_unusable(r, "sysfs_root", hc->config->sysfs_root, hc->sysfs_error);
        if (!h)
                return verdict(r, HOST_CHECK_FAIL, "`vgpud inventory` shows what discovery reads",
                               "%s", hc->discover_error);
        if (h->framework == GPU_FRAMEWORK_NONE)
                return verdict(r, HOST_CHECK_FAIL,
                               "install the NVIDIA vGPU Manager and enable SR-IOV on the GPUs "
                               "before vgpud starts (the host preparation unit)",
                               "framework none: no vGPU VFs under %s", hc->sysfs->path);

        for (size_t i = 0; i < h->n_gpus; i++)
                if (list_add(&gpus, "%s %s %zu VFs", h->gpus[i].address, h->gpus[i].model,
                             count_vfs_of(h, h->gpus[i].address)) < 0)
                        return -ENOMEM;
        for (size_t i = 0; i < h->n_vfs; i++)
                unreadable += !gpu_vf_is_readable(&h->vfs[i]);

        if ((unreadable && list_add(&notes, "%zu VFs unreadable", unreadable) < 0) ||
            (n_warnings && list_add(&notes, "%zu discovery warnings", n_warnings) < 0))
                return -ENOMEM;
        return verdict(r, notes ? HOST_CHECK_WARN : HOST_CHECK_PASS,
                       notes ? "`vgpud inventory` names them and says why" : NULL,
                       "%s: %zu GPU%s, %zu VF%s (%s)%s%s", gpu_framework_to_string(h->framework),
                       h->n_gpus, h->n_gpus == 1 ? "" : "s", h->n_vfs, h->n_vfs == 1 ? "" : "s",
                       gpus ? gpus : "none", notes ? "; " : "", notes ? notes : "");
}

typedef struct SriovScan {
        char *enabled;  /* "<pf> <n> of <total> VFs, ..." */
        char *disabled; /* the same for sriov_numvfs 0 */
        size_t n_pfs;
} SriovScan;

static void sriov_scan_done(SriovScan *s)
{
        free(s->enabled);
        free(s->disabled);
}

/* <sysfs_root>/bus/pci/devices/<dev>/<attr>, relative to the root. */
static int pci_attr_path(const char *dev, const char *attr, char **ret)
{
        return strprintf(ret, "bus/pci/devices/%s/%s", dev, attr) < 0 ? -ENOMEM : 0;
}

/* An NVIDIA SR-IOV PF: vendor 0x10de, sriov_totalvfs, no physfn. 1 yes, 0 no, -ENOMEM. */
static int is_nvidia_pf(const Root *sysfs, const char *dev)
{
        _cleanup_free_ char *vendor_rel = NULL, *vendor = NULL, *physfn = NULL, *total = NULL;

        if (pci_attr_path(dev, "vendor", &vendor_rel) < 0 ||
            pci_attr_path(dev, "physfn", &physfn) < 0 ||
            pci_attr_path(dev, "sriov_totalvfs", &total) < 0)
                return -ENOMEM;
        int k = root_read_attr(sysfs, vendor_rel, PCI_ATTR_MAX, &vendor);
        if (k < 0)
                return k == -ENOMEM ? k : 0; /* not a device we can judge, and not ours */
        return streq(vendor, NVIDIA_VENDOR) && root_exists(sysfs, physfn) == 0 &&
               root_exists(sysfs, total) > 0;
}

static int read_pci_count(const Root *sysfs, const char *dev, const char *attr, uint64_t *ret)
{
        _cleanup_free_ char *rel = NULL, *value = NULL;
        if (pci_attr_path(dev, attr, &rel) < 0)
                return -ENOMEM;
        int k = root_read_attr(sysfs, rel, PCI_ATTR_MAX, &value);
        if (k < 0)
                return k;
        return parse_uint64(value, ret);
}

static int scan_sriov(const Root *sysfs, SriovScan *s, char **error)
{
        _cleanup_strv_free_ char **devices = NULL;

        int k = root_list_dir(sysfs, "bus/pci/devices", &devices);
        if (k == -ENOENT)
                return 0;
        if (k < 0)
                return error_set(error, k, "read %s/bus/pci/devices: %s", sysfs->path,
                                 strerror(-k));
        for (char **d = devices; *d; d++) {
                uint64_t on, total;
                k = is_nvidia_pf(sysfs, *d);
                if (k <= 0) {
                        if (k < 0)
                                return error_set_oom(error);
                        continue;
                }
                s->n_pfs++;
                if ((k = read_pci_count(sysfs, *d, "sriov_numvfs", &on)) < 0 ||
                    (k = read_pci_count(sysfs, *d, "sriov_totalvfs", &total)) < 0)
                        return error_set(error, k, "read SR-IOV state of %s: %s", *d, strerror(-k));
                if (list_add(on > 0 ? &s->enabled : &s->disabled,
                             "%s %" PRIu64 " of %" PRIu64 " VFs", *d, on, total) < 0)
                        return error_set_oom(error);
        }
        return 0;
}

static int check_sriov(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_(sriov_scan_done) SriovScan scan = {};
        _cleanup_free_ char *error = NULL;

        if (!hc->sysfs)
                return root_unusable(r, "sysfs_root", hc->config->sysfs_root, hc->sysfs_error);
        int k = scan_sriov(hc->sysfs, &scan, &error);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return verdict(r, HOST_CHECK_FAIL, "set sysfs_root to the sysfs mount (/sys)", "%s",
                               error);
        if (scan.disabled)
                return verdict(r, HOST_CHECK_FAIL,
                               "enable SR-IOV before vgpud starts: /usr/lib/nvidia/sriov-manage "
                               "-e <pf> in the host preparation unit (OPS-9)",
                               "SR-IOV disabled on %s%s%s", scan.disabled,
                               scan.enabled ? "; enabled on " : "",
                               scan.enabled ? scan.enabled : "");
        if (scan.n_pfs > 0)
                return verdict(r, HOST_CHECK_PASS, NULL, "SR-IOV enabled on every NVIDIA GPU: %s",
                               scan.enabled);
        /* Pre-Ampere cards carry their mdevs on the GPU itself, without SR-IOV. */
        if (hc->host && hc->host->framework == GPU_FRAMEWORK_MDEV)
                return verdict(r, HOST_CHECK_PASS, NULL,
                               "no NVIDIA GPU with SR-IOV; the mdev parents are the GPUs");
        return verdict(r, HOST_CHECK_FAIL,
                       "vgpud needs NVIDIA GPUs with SR-IOV and their vGPU Manager driver",
                       "no NVIDIA GPU with SR-IOV under %s/bus/pci/devices", hc->sysfs->path);
}

static bool is_printable(const char *s)
{
        for (; *s; s++)
                if (!isprint((unsigned char)*s))
                        return false;
        return true;
}

static int check_driver(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_free_ char *version = NULL;
        unsigned branch;

        if (!hc->sysfs)
                return root_unusable(r, "sysfs_root", hc->config->sysfs_root, hc->sysfs_error);
        int k =
            root_read_attr(hc->sysfs, "module/nvidia/version", GPU_DRIVER_VERSION_MAX, &version);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOENT)
                return verdict(
                    r, HOST_CHECK_FAIL,
                    "install the NVIDIA vGPU Manager (R550 or later) and load its driver",
                    "no NVIDIA driver: %s/module/nvidia/version does not exist", hc->sysfs->path);
        if (k < 0)
                return verdict(r, HOST_CHECK_FAIL, "see the error",
                               "read %s/module/nvidia/version: %s", hc->sysfs->path, strerror(-k));
        if (!is_printable(version) || host_check_parse_driver_branch(version, &branch) < 0)
                return verdict(r, HOST_CHECK_FAIL, "reinstall the NVIDIA vGPU Manager",
                               "%s/module/nvidia/version holds no driver version", hc->sysfs->path);

        bool vendor_vfio = hc->host && hc->host->framework == GPU_FRAMEWORK_VENDOR_VFIO;
        if (vendor_vfio && branch < HOST_CHECK_VENDOR_VFIO_MIN_BRANCH)
                return verdict(r, HOST_CHECK_FAIL,
                               "install the NVIDIA vGPU Manager R550 or later (GEN-11)",
                               "driver %s (R%u): vendor VFIO needs R%u or later", version, branch,
                               HOST_CHECK_VENDOR_VFIO_MIN_BRANCH);
        return verdict(r, HOST_CHECK_PASS, NULL, "driver %s (R%u)", version, branch);
}

/* ---- NVML (NVML-2, NVML-3a, NVML-7) -------------------------------------------------------- */

typedef struct NvmlRound {
        HostCheckResult *result;
        int k;
        bool done;
} NvmlRound;

static int nvml_gpu_line(const NvmlAnswer *a, const NvmlGpuAnswer *g, char **list, bool *ret_error)
{
        if (g->fallback == NVML_FALLBACK_ERROR) {
                *ret_error = true;
                return list_add_sep(list, "; ", "%s %s", g->pf, g->error ? g->error : "error");
        }
        if (g->fallback == NVML_FALLBACK_EQUAL_SIZE || g->mode == NVML_MODE_EQUAL)
                return list_add_sep(list, "; ", "%s equal-size", g->pf);
        if (g->mode == NVML_MODE_MIXED && a->placement_list_version > 0)
                return list_add_sep(list, "; ", "%s mixed-size, placement list v%u", g->pf,
                                    a->placement_list_version);
        if (g->mode == NVML_MODE_MIXED)
                return list_add_sep(list, "; ", "%s mixed-size, no placement list answered", g->pf);
        return list_add_sep(list, "; ", "%s mode unknown", g->pf);
}

static int nvml_decide(NvmlClient *c, const NvmlAnswer *a, HostCheckResult *r)
{
        _cleanup_free_ char *gpus = NULL;
        const char *driver = nvml_client_get_driver_version(c);
        bool gpu_error = false;

        if (a->host_fallback == NVML_FALLBACK_TIMEOUT || a->host_fallback == NVML_FALLBACK_STUCK)
                return verdict(r, HOST_CHECK_FAIL,
                               "check the driver with nvidia-smi; a hung driver needs the "
                               "runbook's recovery",
                               "NVML did not answer: %s",
                               a->host_error ? a->host_error : "no reason");
        if (!nvml_client_is_initialised(c))
                return verdict(r, HOST_CHECK_FAIL,
                               "install the vGPU Manager's libnvidia-ml.so.1 or point nvml_library "
                               "at it",
                               "NVML did not load: %s",
                               a->host_error ? a->host_error : "no reason");
        if (a->host_fallback != NVML_FALLBACK_NONE)
                return verdict(r, HOST_CHECK_FAIL, "check the driver with nvidia-smi",
                               "NVML (driver %s) fails for the host: %s: %s",
                               driver ? driver : "unknown",
                               nvml_fallback_to_string(a->host_fallback),
                               a->host_error ? a->host_error : "no reason");
        for (size_t i = 0; i < a->n_gpus; i++)
                if (nvml_gpu_line(a, &a->gpus[i], &gpus, &gpu_error) < 0)
                        return -ENOMEM;
        return verdict(r, gpu_error ? HOST_CHECK_WARN : HOST_CHECK_PASS,
                       gpu_error ? "placement falls back to the sysfs lists on that GPU (NVML-11); "
                                   "check it with nvidia-smi"
                                 : NULL,
                       "driver %s; %s", driver ? driver : "unknown",
                       gpus ? gpus : "no GPU to ask about");
}

static void nvml_answered(NvmlClient *c, const NvmlAnswer *a, void *userdata)
{
        NvmlRound *round = userdata;
        round->k = nvml_decide(c, a, round->result);
        round->done = true;
}

static int nvml_request(const GpuHost *h, NvmlGpuRequest **ret, size_t *ret_n)
{
        size_t n = h ? h->n_gpus : 0;
        NvmlGpuRequest *gpus = n > 0 ? calloc(n, sizeof *gpus) : NULL;
        if (n > 0 && !gpus)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                snprintf(gpus[i].pf, sizeof gpus[i].pf, "%s", h->gpus[i].address);
                /* What a refresh asks (NVML-14): the mode decides, placements show the version. */
                gpus[i].query_mode = gpus[i].query_catalog = gpus[i].query_placements = true;
        }
        *ret = gpus;
        *ret_n = n;
        return 0;
}

static int check_nvml(HostCheck *hc, HostCheckResult *r)
{
        const Config *c = hc->config;
        _cleanup_free_ NvmlGpuRequest *gpus = NULL;
        size_t n_gpus;

        if (!c->nvml_library[0])
                return verdict(r, HOST_CHECK_WARN,
                               "set nvml_library (libnvidia-ml.so.1) so that mixed-size GPUs "
                               "place from NVML (PLACE-4)",
                               "NVML disabled: nvml_library is empty");

        /* NVML-9's deadline, shortened to what the run has left. */
        nsec_t now = now_monotonic(), timeout = c->gpu.nvml_timeout;
        nsec_t left =
            hc->setup->deadline > now + NVML_RESERVE ? hc->setup->deadline - now - NVML_RESERVE : 0;
        if (left < timeout)
                timeout = left > NVML_TIMEOUT_MIN ? left : NVML_TIMEOUT_MIN;

        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_nvml_client_ NvmlClient *client = NULL;
        NvmlClientConfig config = {.library = c->nvml_library, .timeout = timeout};
        NvmlRound round = {.result = r};
        int k;
        if ((k = sd_event_new(&event)) < 0 || (k = nvml_client_new(&config, &client)) < 0 ||
            (k = nvml_client_attach_event(client, event)) < 0 ||
            (k = nvml_request(hc->host, &gpus, &n_gpus)) < 0)
                return k == -ENOMEM ? k
                                    : verdict(r, HOST_CHECK_FAIL, "see the error",
                                              "start the NVML client: %s", strerror(-k));

        NvmlRequest req = {.init = true, .gpus = gpus, .n_gpus = n_gpus};
        if ((k = nvml_client_query(client, &req, nvml_answered, &round)) < 0)
                return k;
        while (!round.done && (now = now_monotonic()) < hc->setup->deadline)
                if ((k = sd_event_run(event, (hc->setup->deadline - now) / NSEC_PER_USEC)) < 0)
                        return verdict(r, HOST_CHECK_FAIL, "see the error", "wait for NVML: %s",
                                       strerror(-k));
        if (!round.done)
                return verdict(r, HOST_CHECK_FAIL, "check the driver with nvidia-smi",
                               "NVML did not answer in time");
        return round.k;
}

/* ---- QEMU and the helpers ------------------------------------------------------------------ */

static int check_qemu(HostCheck *hc, HostCheckResult *r)
{
        const char *qemu = hc->config->qemu_binary;
        char *argv[] = {(char *)qemu, (char *)"-device", (char *)"help", NULL};
        _cleanup_free_ char *output = NULL, *error = NULL, *missing = NULL;
        int status;

        nsec_t deadline = now_monotonic() + QEMU_TIMEOUT;
        if (deadline > hc->setup->deadline)
                deadline = hc->setup->deadline;
        SpawnRequest helper = SPAWN_REQUEST_INIT;
        helper.argv = argv;
        int k = spawn_run_helper(&helper, deadline, QEMU_HELP_MAX, &output, &status, &error);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return verdict(r, HOST_CHECK_FAIL,
                               k == -ENOENT || k == -EACCES
                                   ? "install QEMU (Debian: qemu-system-x86) or set qemu_binary"
                                   : "run it by hand to see why",
                               "%s", error);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return verdict(r, HOST_CHECK_FAIL, "run it by hand to see why",
                               "%s -device help %s %d", qemu,
                               WIFEXITED(status) ? "exited with status" : "was killed by signal",
                               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));

        for (size_t i = 0; i < ELEMENTSOF(qemu_devices); i++)
                if (!host_check_qemu_lists_device(output, qemu_devices[i]) &&
                    list_add(&missing, "%s", qemu_devices[i]) < 0)
                        return -ENOMEM;
        if (missing)
                return verdict(r, HOST_CHECK_FAIL,
                               "install a QEMU built with VFIO and virtio (Debian: "
                               "qemu-system-x86)",
                               "%s -device help lacks %s", qemu, missing);
        return verdict(r, HOST_CHECK_PASS, NULL, "%s knows %s, %s and %s", qemu, qemu_devices[0],
                       qemu_devices[1], qemu_devices[2]);
}

/*
 * A helper of a feature this build does not have yet: its absence is worth a warning, not a
 * failure, until the configuration names it.
 */
static int check_future_helper(HostCheckResult *r, const char *path, const char *needed_for,
                               const char *remedy)
{
        struct stat st;
        if (stat(path, &st) < 0) {
                int k = negative_errno();
                return verdict(r, HOST_CHECK_WARN, remedy,
                               "%s: %s; not needed yet (%s, which this build does not have)", path,
                               strerror(-k), needed_for);
        }
        if (!S_ISREG(st.st_mode) || access(path, X_OK) < 0)
                return verdict(r, HOST_CHECK_WARN, remedy,
                               "%s is no executable file; not needed yet (%s, which this build "
                               "does not have)",
                               path, needed_for);
        return verdict(r, HOST_CHECK_PASS, NULL, "%s present (for %s)", path, needed_for);
}

static int check_qemu_img(HostCheck *hc, HostCheckResult *r)
{
        return check_future_helper(r, QEMU_IMG_BINARY, "images and volumes",
                                   "install qemu-utils before images and volumes are used");
}

/* NET-6: the NAT network's DHCP and DNS; without NAT no VM needs it. */
static int check_dnsmasq(HostCheck *hc, HostCheckResult *r)
{
        const char *path = hc->config->network.dnsmasq_binary;
        struct stat st;
        bool usable = stat(path, &st) >= 0 && S_ISREG(st.st_mode) && access(path, X_OK) >= 0;
        if (usable)
                return verdict(r, HOST_CHECK_PASS, NULL, "%s present (for NAT networking)", path);
        if (!hc->config->network.nat.enabled)
                return verdict(r, HOST_CHECK_WARN, "install dnsmasq-base before enabling NAT",
                               "%s: not usable; not needed yet (NAT networking, which "
                               "network.nat.enabled turns off)",
                               path);
        return verdict(r, HOST_CHECK_FAIL, "install dnsmasq-base (or set network.dnsmasq_binary)",
                       "%s is no executable file; the NAT network's DHCP and DNS need it (NET-6)",
                       path);
}

static int check_tun(HostCheck *hc, HostCheckResult *r)
{
        if (!hc->dev)
                return root_unusable(r, "dev_root", hc->config->dev_root, hc->dev_error);
        int k = probe_device(hc->dev, "net/tun");
        /* NET-3: every nat or bridge NIC is a TAP; a host that gives VMs none needs no tun. */
        const ConfigNetwork *n = &hc->config->network;
        bool nics = n->nat.enabled || (n->bridges && n->bridges[0]) ||
                    config_network_default_mode(hc->config) != CONFIG_NETWORK_MODE_NONE;
        if (k < 0 && nics)
                return verdict(r, HOST_CHECK_FAIL, "load tun (modprobe tun)",
                               "%s/net/tun: %s; every VM network interface is a TAP (NET-3)",
                               hc->dev->path, strerror(-k));
        if (k < 0)
                return verdict(r, HOST_CHECK_WARN, "load tun (modprobe tun)",
                               "%s/net/tun: %s; not needed while VMs get no network interface "
                               "(network.nat.enabled false, no network.bridges)",
                               hc->dev->path, strerror(-k));
        return verdict(r, HOST_CHECK_PASS, NULL, "%s/net/tun opens read-write", hc->dev->path);
}

/* ---- the data directory -------------------------------------------------------------------- */

static const char *filesystem_name(const struct statfs *s)
{
        static const struct {
                __fsword_t magic;
                const char *name;
        } names[] = {
            {EXT4_SUPER_MAGIC, "ext4"},   {XFS_SUPER_MAGIC, "xfs"},
            {BTRFS_SUPER_MAGIC, "btrfs"}, {TMPFS_MAGIC, "tmpfs"},
            {NFS_SUPER_MAGIC, "nfs"},     {OVERLAYFS_SUPER_MAGIC, "overlay"},
            {FUSE_SUPER_MAGIC, "fuse"},
        };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (s->f_type == names[i].magic)
                        return names[i].name;
        return NULL;
}

/* Filesystems whose regular files take O_DIRECT on every kernel vgpud supports (GEN-11). */
static bool filesystem_has_odirect(const struct statfs *s)
{
        return s->f_type == EXT4_SUPER_MAGIC || s->f_type == XFS_SUPER_MAGIC ||
               s->f_type == BTRFS_SUPER_MAGIC;
}

/*
 * O_DIRECT without writing: a directory cannot be opened with O_DIRECT on most filesystems
 * whatever its files allow, and creating a file to try would be a write. So an existing regular
 * file below dir, on the same filesystem, is opened O_RDONLY|O_DIRECT (nothing is read). The
 * search is breadth-first and bounded in entries and depth. 1 opened, 0 no file to try, -errno
 * from the open (-EINVAL: the filesystem refuses O_DIRECT).
 */
static int probe_odirect(const char *dir, dev_t dev)
{
        _cleanup_strv_free_ char **queue = NULL;
        size_t seen = 0;

        if (strv_push(&queue, dir) < 0)
                return -ENOMEM;
        for (size_t head = 0; queue[head] && seen < DATA_DIR_PROBE_ENTRIES; head++) {
                size_t depth = 0;
                for (const char *p = queue[head] + strlen(dir); *p; p++)
                        depth += *p == '/';
                _cleanup_closedir_ DIR *d = NULL;
                if (opendir_at(AT_FDCWD, queue[head], O_NOFOLLOW, &d) < 0)
                        continue;
                struct dirent *de;
                while (seen < DATA_DIR_PROBE_ENTRIES && readdir_next(d, &de) > 0) {
                        struct stat st;
                        seen++;
                        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                            st.st_dev != dev)
                                continue;
                        if (S_ISREG(st.st_mode)) {
                                _cleanup_close_ int fd =
                                    openat(dirfd(d), de->d_name,
                                           O_RDONLY | O_DIRECT | O_NOFOLLOW | O_NONBLOCK |
                                               O_CLOEXEC | O_NOCTTY);
                                if (fd >= 0)
                                        return 1;
                                if (errno == EINVAL)
                                        return -EINVAL;
                                continue; /* unreadable to us; another file may tell */
                        }
                        _cleanup_free_ char *sub = NULL;
                        if (S_ISDIR(st.st_mode) && depth < DATA_DIR_PROBE_DEPTH &&
                            (strprintf(&sub, "%s/%s", queue[head], de->d_name) < 0 ||
                             strv_push(&queue, sub) < 0))
                                return -ENOMEM;
                }
        }
        return 0;
}

/*
 * data_dir, or the nearest directory above it when it does not exist yet (the unit creates it
 * at its first start): the filesystem it is or will be on.
 */
static int data_dir_or_parent(const char *data_dir, char **ret, struct stat *ret_st)
{
        _cleanup_free_ char *path = strdup(data_dir);
        if (!path)
                return -ENOMEM;
        for (;;) {
                if (stat(path, ret_st) >= 0) {
                        *ret = TAKE_PTR(path);
                        return 0;
                }
                if (errno != ENOENT || streq(path, "/"))
                        return negative_errno();
                char *slash = strrchr(path, '/');
                if (slash == path)
                        slash[1] = '\0';
                else
                        *slash = '\0';
        }
}

static int check_data_dir(HostCheck *hc, HostCheckResult *r)
{
        const char *data_dir = hc->config->data_dir;
        _cleanup_free_ char *dir = NULL, *missing = NULL;
        struct stat st;
        struct statfs fs;

        int k = data_dir_or_parent(data_dir, &dir, &st);
        if (k == -ENOMEM)
                return k;
        if (k < 0 || statfs(dir, &fs) < 0) {
                k = k < 0 ? k : negative_errno();
                return verdict(r, HOST_CHECK_FAIL, "see the error", "data_dir %s: %s", data_dir,
                               strerror(-k));
        }
        if (!S_ISDIR(st.st_mode))
                return verdict(r, HOST_CHECK_FAIL, "point data_dir at a directory",
                               "data_dir %s is no directory", dir);
        if (!streq(dir, data_dir) &&
            strprintf(&missing, "%s does not exist yet (the unit creates it); ", data_dir) < 0)
                return -ENOMEM;

        const char *name = filesystem_name(&fs);
        char magic[32];
        snprintf(magic, sizeof magic, "0x%jx", (uintmax_t)fs.f_type);
        const char *prefix = missing ? missing : "";
        const char *remedy = "put data_dir on ext4 or XFS: QEMU opens VM disks with O_DIRECT";
        const char *unit = missing ? "start vgpud through its unit, which creates it "
                                     "(StateDirectory=vgpud)"
                                   : NULL;

        k = probe_odirect(dir, st.st_dev);
        if (k == -ENOMEM)
                return k;
        if (k == -EINVAL)
                return verdict(r, HOST_CHECK_FAIL, remedy,
                               "%s%s: the %s filesystem refuses O_DIRECT", prefix, dir,
                               name ? name : magic);
        if (k > 0)
                return verdict(r, missing ? HOST_CHECK_WARN : HOST_CHECK_PASS, unit,
                               "%s%s: %s, a file opens with O_DIRECT", prefix, dir,
                               name ? name : magic);
        if (filesystem_has_odirect(&fs))
                return verdict(r, missing ? HOST_CHECK_WARN : HOST_CHECK_PASS, unit,
                               "%s%s: %s, which supports O_DIRECT", prefix, dir, name);
        return verdict(r, HOST_CHECK_WARN, remedy,
                       "%s%s: %s, no file in it to try O_DIRECT on and not a filesystem known to "
                       "support it",
                       prefix, dir, name ? name : magic);
}

/* "12.3 GiB" */
static char *format_bytes(uint64_t b, char buf[static 32])
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        double v = (double)b;
        size_t u = 0;
        while (v >= 1024 && u + 1 < ELEMENTSOF(units)) {
                v /= 1024;
                u++;
        }
        snprintf(buf, 32, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
        return buf;
}

static int check_free_space(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_free_ char *dir = NULL;
        struct stat st;
        struct statvfs vfs;
        char avail_text[32], total_text[32];

        int k = data_dir_or_parent(hc->config->data_dir, &dir, &st);
        if (k == -ENOMEM)
                return k;
        if (k < 0 || statvfs(dir, &vfs) < 0) {
                k = k < 0 ? k : negative_errno();
                return verdict(r, HOST_CHECK_FAIL, "see the error", "data_dir %s: %s",
                               hc->config->data_dir, strerror(-k));
        }
        uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (total == 0)
                return verdict(r, HOST_CHECK_WARN, "put data_dir on a disk filesystem",
                               "%s: the filesystem reports no size", dir);

        /* storage.min_free (CFG-3) is not a key yet: its default stands in. */
        unsigned percent = (unsigned)(avail * 100 / total);
        bool low = avail * 100 < total * HOST_CHECK_MIN_FREE_PERCENT;
        return verdict(r, low ? HOST_CHECK_FAIL : HOST_CHECK_PASS,
                       low ? "free space on it, or move data_dir to a larger filesystem" : NULL,
                       "%s: %s free of %s (%u%%; at least %u%% needed)", dir,
                       format_bytes(avail, avail_text), format_bytes(total, total_text), percent,
                       HOST_CHECK_MIN_FREE_PERCENT);
}

/* ---- runtime_dir and the lock (VMM-15, CFG-9) ---------------------------------------------- */

static int check_runtime_dir(HostCheck *hc, HostCheckResult *r)
{
        const char *dir = hc->config->runtime_dir;
        if (config_runtime_dir_is_valid(dir))
                return verdict(r, HOST_CHECK_PASS, NULL,
                               "%s: socket paths below it fit (at most %d bytes, no whitespace or "
                               "control characters)",
                               dir, CONFIG_RUNTIME_DIR_MAX);
        return verdict(r, HOST_CHECK_FAIL, "choose a shorter runtime_dir (default /run/vgpud)",
                       "runtime_dir is %zu bytes or holds whitespace or control characters; VM "
                       "socket paths need at most %d bytes without them (VMM-15)",
                       strlen(dir), CONFIG_RUNTIME_DIR_MAX);
}

/*
 * CFG-9 without taking the lock: a probe with flock() would hold it for a moment, and a vgpud
 * starting in that moment would exit. The kernel lists every lock in /proc/locks by device
 * and inode, so the lock file is looked up there.
 */
static int check_lock(HostCheck *hc, HostCheckResult *r)
{
        _cleanup_free_ char *path = NULL, *locks = NULL;
        struct stat st;
        pid_t pid;

        if (strprintf(&path, "%s/%s",
                      streq(hc->config->runtime_dir, "/") ? "" : hc->config->runtime_dir,
                      CONFIG_LOCK_FILE) < 0)
                return -ENOMEM;
        if (lstat(path, &st) < 0) {
                int k = negative_errno();
                if (k == -ENOENT)
                        return verdict(r, HOST_CHECK_PASS, NULL, "no vgpud holds %s (no such file)",
                                       path);
                return verdict(r, HOST_CHECK_FAIL, "see the error", "%s: %s", path, strerror(-k));
        }
        if (!hc->proc)
                return root_unusable(r, "proc_root", hc->config->proc_root, hc->proc_error);
        int k = root_read_file(hc->proc, "locks", LOCKS_MAX, &locks, NULL);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return verdict(r, HOST_CHECK_WARN, "set proc_root to the proc mount (/proc)",
                               "cannot tell who holds %s: read %s/locks: %s", path, hc->proc->path,
                               strerror(-k));
        k = host_check_find_flock(locks, st.st_dev, st.st_ino, &pid);
        if (k < 0)
                return k;
        if (k == 0)
                return verdict(r, HOST_CHECK_PASS, NULL, "no vgpud holds %s", path);
        char holder[32] = "";
        if (pid > 0)
                snprintf(holder, sizeof holder, " (pid %d)", (int)pid);
        return verdict(r, HOST_CHECK_FAIL,
                       "stop that vgpud first (systemctl stop vgpud) if this configuration is to "
                       "replace it",
                       "another vgpud holds %s%s: a second one would not start", path, holder);
}

/* ---- the run ------------------------------------------------------------------------------- */

const char *const host_check_names[HOST_CHECK_COUNT] = {
    "config",    "secret", "cpu",      "kvm",        "iommu",       "vfio",
    "framework", "sriov",  "driver",   "nvml",       "qemu",        "qemu-img",
    "dnsmasq",   "tun",    "data-dir", "free-space", "runtime-dir", "lock",
};

static const CheckFunc checks[HOST_CHECK_COUNT] = {
    check_config,     check_secret,      check_cpu,     check_kvm,    check_iommu,
    check_vfio,       check_framework,   check_sriov,   check_driver, check_nvml,
    check_qemu,       check_qemu_img,    check_dnsmasq, check_tun,    check_data_dir,
    check_free_space, check_runtime_dir, check_lock,
};

static void host_check_done(HostCheck *hc)
{
        root_free(hc->sysfs);
        root_free(hc->dev);
        root_free(hc->proc);
        gpu_host_free(hc->host);
        free(hc->discover_error);
}

static int open_root(const char *path, Root **ret, int *ret_error)
{
        int k = root_open(path, ret);
        if (k == -ENOMEM)
                return k;
        *ret_error = k < 0 ? k : 0;
        return 0;
}

int host_check_run(const HostCheckSetup *setup, HostCheckReport report, void *userdata)
{
        _cleanup_(host_check_done) HostCheck hc = {.setup = setup, .config = setup->config};
        const Config *c = setup->config;
        int k;

        if ((k = open_root(c->sysfs_root, &hc.sysfs, &hc.sysfs_error)) < 0 ||
            (k = open_root(c->dev_root, &hc.dev, &hc.dev_error)) < 0 ||
            (k = open_root(c->proc_root, &hc.proc, &hc.proc_error)) < 0)
                return k;
        /* Discovery as the daemon's first pass runs it, without NVML (it has its own check). */
        if (hc.sysfs && (k = gpu_discover(hc.sysfs, NULL, &hc.host, &hc.discover_error)) == -ENOMEM)
                return k;

        for (size_t i = 0; i < HOST_CHECK_COUNT; i++) {
                HostCheckResult r = {.check = host_check_names[i]};
                k = checks[i](&hc, &r);
                if (k < 0) {
                        host_check_result_done(&r);
                        return k;
                }
                report(&r, userdata);
        }
        return 0;
}
