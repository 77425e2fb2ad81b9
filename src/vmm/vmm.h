/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * vmm: QEMU as vgpud runs it (SPEC §7, VMM-1, VMM-2, VMM-3, VMM-4, VMM-5, VMM-6, VMM-7, VMM-8,
 * VMM-9, VMM-10, VMM-11, VMM-12, VMM-13, VMM-14, VMM-15, VMM-16, VMM-17, VMM-18, VMM-19, VMM-20).
 *
 * Three layers, bottom up.
 *
 * Pure functions (vmm-argv.c, vmm-parse.c): the QEMU command as data and its one renderer to
 * VMM-1's argv with VMM-2's comma rule and JSON -blockdev nodes, and the strict parsers of what the
 * kernel and QEMU tell vgpud: /proc/<pid>/stat, /proc/net/unix and QMP messages (GEN-5, REL-5: each
 * has a fuzz target).
 *
 * Blocking primitives for worker threads (vmm-spawn.c, vmm-liveness.c): QEMU started through
 * worker/'s spawn primitive with VMM-3's exact environment, session, signal state and
 * descriptors, a pidfd opened at once (VMM-4); the boot id; the liveness verdict of VMM-16, VMM-17,
 * VMM-18, VMM-19 from a stored identity.
 *
 * A running VMM on the event loop (vmm.c, vmm-qmp.c): a Vmm watches its process through the
 * pidfd (a child with sd_event_add_child_pidfd, which reaps it; an adopted VMM with an EPOLLIN
 * IO source, its exit status unknown), runs QMP sessions on the loop (readiness VMM-5, graceful
 * stop VMM-9), and the termination ladder (VMM-10, VMM-11, VMM-12, VMM-13, VMM-14). Nothing on the
 * loop blocks: sockets are non-blocking, every wait is a timer.
 *
 * Promises: functions return >= 0 or -errno; out-parameters are written only on success; a
 * function that takes `char **error` sets it on every failure (the SPEC text where SPEC gives
 * one); callbacks run on the loop, never from inside the call that started the work; this
 * module logs nothing (its callers do, with the instance's context).
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "base/base.h"
#include "config/config.h"
#include "sysfs/sysfs.h"
#include "vfio/vfio.h"

/* ---- the command line (VMM-1, VMM-2; vmm-argv.c) ------------------------------------------- */

/* The virtio-serial port name of the agent channel (VMM-1, AGENT-1). */
#define VMM_AGENT_PORT_NAME "org.vgpud.agent.0"

/*
 * The command as data (decision 12). VmmCommand names every part of VMM-1's command line; one
 * renderer, vmm_command_argv(), writes it in VMM-1's order whatever order the parts were added
 * in, so a new part (a volume, a NIC) is a new entry here, never a new string in a caller.
 * Strings are borrowed: they must outlive the rendering. Descriptors are vgpud's own; QEMU gets
 * them at fixed numbers (VMM-3): every NIC's TAP and vhost-net first (3 and 4 for the one NIC of
 * NET-3), then the kernel, the initrd and the drives in their order. vmm_command_passed_fds()
 * lists them in that order and the argv names them by those numbers.
 */
#define VMM_PASSED_FD_FIRST 3
#define VMM_CHARDEVS_MAX 8
#define VMM_DRIVES_MAX 16 /* root, 8 volumes (DISK-1), boot.disk, seed, with room to spare */
#define VMM_NICS_MAX 2
#define VMM_PASSED_FDS_MAX (2 * VMM_NICS_MAX + 2 + VMM_DRIVES_MAX)

/*
 * DISK-8: q35's root bus takes no hot-plugged device, so a disk that may come and go sits on a
 * PCIe root port of its own: hp0, hp1, ... (chassis 1, 2, ...), one per volume an instance may
 * hold, rendered before the drives.
 */
#define VMM_HOTPLUG_PORTS_MAX 8

/* "hp<index>", for index < VMM_HOTPLUG_PORTS_MAX; NULL past it. */
const char *vmm_hotplug_port(size_t index);

/* The ids VMM-1 gives its fixed parts. */
#define VMM_CHARDEV_QMP "qmp"
#define VMM_CHARDEV_AGENT "agent0"
#define VMM_CHARDEV_CONSOLE "console0"

typedef enum VmmChardevKind {
        VMM_CHARDEV_SOCKET,
        VMM_CHARDEV_FILE,
} VmmChardevKind;

typedef struct VmmChardev {
        const char *id;
        VmmChardevKind kind;
        const char *path;
        /* socket: listen (server=on) and never block the start on a client (wait=off). */
        bool server;
        /* socket: a copy of what the guest writes, appended to this file (CONS-1); or NULL. */
        const char *logfile;
        /* file: append=on, so a restart keeps what the last boot wrote. */
        bool append;
} VmmChardev;

typedef enum VmmDriveFormat {
        VMM_DRIVE_RAW,
        VMM_DRIVE_QCOW2,
} VmmDriveFormat;

typedef enum VmmDriveDevice {
        VMM_DRIVE_VIRTIO_BLK, /* virtio-blk-pci */
        VMM_DRIVE_IDE_CD,     /* ide-cd (the cloud-init seed, SEED-2) */
} VmmDriveDevice;

/*
 * One -add-fd/-blockdev/-device triple. The file is a passed descriptor in an fd set of its own
 * (numbered like the descriptor), opened read-only or read-write to match read_only: QEMU takes
 * from a set only a descriptor of the access mode the node asks for. The format is always named,
 * never probed (DISK-9).
 */
typedef struct VmmDrive {
        const char *node_name; /* QEMU's node-name rules: a letter, then [A-Za-z0-9._-], < 32 */
        VmmDriveFormat format;
        bool read_only;
        int fd;
        bool cache_direct;        /* DISK-9: cache.direct=on where the file system has O_DIRECT */
        bool discard_unmap;       /* DISK-9: discard=unmap */
        bool detect_zeroes_unmap; /* DISK-9: detect-zeroes=unmap (needs discard_unmap) */
        VmmDriveDevice device;
        uint32_t bootindex; /* virtio-blk: 0 for none */
        const char *serial; /* virtio-blk: the guest-visible serial, or NULL */
        /* ide-cd: the IDE bus ("ide.1"), required; virtio-blk: a hotplug port (vmm_hotplug_port())
         * of the command, or NULL for the root bus */
        const char *bus;
} VmmDrive;

/* -netdev tap on a TAP vgpud opened (NET-3), with vhost-net when it opened too. */
typedef struct VmmNic {
        const char *id; /* the netdev's id */
        int tap_fd;
        int vhost_fd;    /* -1: no vhost */
        const char *mac; /* "52:54:00:xx:xx:xx", lowercase */
} VmmNic;

typedef struct VmmCommand {
        const char *qemu_binary;
        const char *name; /* the instance name (INST-4) */
        const char *machine;
        ConfigQemuAccel accel;
        const char *cpu;
        uint32_t vcpus;
        uint64_t memory_mb;

        VmmChardev chardevs[VMM_CHARDEVS_MAX];
        size_t n_chardevs;
        /* The consumers of the chardevs, by id; each chardev has exactly one consumer. */
        const char *monitor_chardev; /* -mon chardev=<id>,mode=control */
        const char *agent_chardev;   /* the virtio-serial port VMM_AGENT_PORT_NAME (AGENT-1) */
        const char *serial_chardev;  /* -serial chardev:<id> */

        /* Direct kernel boot (INST-6): -1 when absent; initrd and cmdline only with a kernel. */
        int kernel_fd;
        int initrd_fd;
        const char *cmdline;

        VmmDrive
            drives[VMM_DRIVES_MAX]; /* rendered in this order: root, volumes, boot.disk, seed */
        size_t n_drives;
        uint32_t n_hotplug_ports; /* DISK-8: at most VMM_HOTPLUG_PORTS_MAX */
        VmmNic nics[VMM_NICS_MAX];
        size_t n_nics;
        const char *vfio_sysfsdev; /* gpu.device_path (VF or mdev); NULL without a vGPU */
} VmmCommand;

/*
 * An empty command with VMM-1's fixed choices (q35, cpu max) and no descriptors; the caller
 * fills in the binary, name, accel, size and parts.
 */
VmmCommand vmm_command_init(void);

/*
 * VMM-1's three channels: the QMP socket under -mon, the agent socket behind the virtio-serial
 * port, and the console. console_log is a file chardev appended to; a console socket
 * (CONS-1) is a socket chardev with that file as its logfile, for when console_socket is given.
 * -E2BIG when the chardev table is full.
 */
int vmm_command_set_channels(VmmCommand *c, const char *qmp_socket, const char *agent_socket,
                             const char *console_socket, const char *console_log);

/* Append one part; -E2BIG when its table is full. */
int vmm_command_add_chardev(VmmCommand *c, const VmmChardev *chardev);
int vmm_command_add_drive(VmmCommand *c, const VmmDrive *drive);
int vmm_command_add_nic(VmmCommand *c, const VmmNic *nic);

/*
 * The argv of VMM-1 (NULL-terminated, strv_free() it). Commas are doubled inside keyval values
 * (-name, -chardev, -device, -netdev); -kernel, -initrd and -append take their values raw
 * (VMM-2); -blockdev is QEMU's JSON syntax, where no value needs doubling. -EINVAL (and *error
 * names the part) when a required field is missing, a chardev is unknown or has no consumer, a
 * name or id breaks QEMU's rules or is used twice, a descriptor is one of the standard streams,
 * an initrd or cmdline comes without a kernel, or there is nothing to boot from; -ENOMEM.
 */
int vmm_command_argv(const VmmCommand *c, char ***ret, char **error);

/*
 * The descriptors c passes to QEMU, in the order they take from VMM_PASSED_FD_FIRST on (what
 * the argv names them); returns their number. For VmmSpawnRequest.fds.
 */
size_t vmm_command_passed_fds(const VmmCommand *c, int fds[static VMM_PASSED_FDS_MAX]);

/*
 * d's -blockdev node as QEMU's JSON (DISK-9): its format node over a file node on
 * /dev/fdset/<set>; the same object the argv renders and QMP's blockdev-add takes. -ENOMEM.
 */
int vmm_drive_blockdev_json(const VmmDrive *d, int set, json_t **ret);

/* value with every "," doubled, as QEMU's keyval syntax wants it (VMM-2). NULL on ENOMEM. */
char *vmm_keyval_escape(const char *value);

/* ---- parsers (vmm-parse.c) ----------------------------------------------------------------- */

/* /proc/<pid>/stat files are far shorter; a longer one is refused (GEN-5). */
#define VMM_PROC_STAT_MAX 4096

typedef struct VmmProcStat {
        pid_t pid;           /* field 1 */
        char state;          /* field 3: R, S, D, Z, T, t, X, x, K, W, P, I */
        pid_t ppid;          /* field 4 */
        pid_t pgrp;          /* field 5 */
        pid_t session;       /* field 6 */
        uint64_t start_time; /* field 22: clock ticks after boot */
} VmmProcStat;

/*
 * Parses one /proc/<pid>/stat. The comm field (field 2) is everything between the first "("
 * and the last ")", since a process may name itself with parentheses and spaces. At least 22
 * fields, each numeric field a plain decimal (pid-like fields may be signed where the kernel
 * prints them so), one trailing newline at most. -EBADMSG with *error saying which field.
 */
int vmm_parse_proc_stat(const char *buf, size_t size, VmmProcStat *ret, char **error);

/* /proc/net/unix of a busy host is large; past this it is refused and liveness is ambiguous. */
#define VMM_NET_UNIX_MAX (64u * 1024 * 1024)

/* The "Flags" column of a listening socket (__SO_ACCEPTCON), as /proc/net/unix prints it. */
#define VMM_NET_UNIX_FLAGS_LISTENING 0x00010000u

/*
 * Searches a /proc/net/unix text for listening entries (flags 00010000) whose path equals path
 * byte for byte (paths are printed raw; VMM-15 keeps ours free of white space). Stores up to
 * max inodes in inodes and their number in *ret_n (entries beyond max are counted but not
 * stored). The header line must be the kernel's; every entry line must have the kernel's
 * columns: "<hex>: <8 hex> <8 hex> <8 hex> <4 hex> <2 hex> <inode>[ <path>]". -EBADMSG with
 * *error naming the line for anything else.
 */
int vmm_net_unix_find_listening(const char *buf, size_t size, const char *path, uint64_t *inodes,
                                size_t max, size_t *ret_n, char **error);

/* QMP lines are at most this long, newline excluded (VMM-6). */
#define VMM_QMP_LINE_MAX (1024u * 1024)

typedef enum VmmQmpKind {
        VMM_QMP_GREETING, /* {"QMP": {...}} */
        VMM_QMP_RETURN,   /* {"return": <any>[, "id": ...]} */
        VMM_QMP_ERROR,    /* {"error": {"class": s, "desc": s}[, "id": ...]} */
        VMM_QMP_EVENT,    /* {"event": s, "timestamp": {...}[, "data": {...}]} */
} VmmQmpKind;

typedef struct VmmQmpMessage {
        VmmQmpKind kind;
        json_t *value;     /* greeting: the QMP object; return: the value; event: data or NULL */
        char *event;       /* event: its name */
        char *error_class; /* error: class and desc */
        char *error_desc;
} VmmQmpMessage;

/*
 * Parses one QMP line (without its line end; a trailing "\r" is accepted, since QEMU ends
 * lines with "\r\n"). Strict JSON (duplicate keys rejected, nesting ≤ 16, GEN-6), an object
 * with exactly one of the keys QMP, return, error, event. -EBADMSG with *error for anything
 * else, -E2BIG for a line longer than VMM_QMP_LINE_MAX.
 */
int vmm_qmp_message_parse(const char *line, size_t size, VmmQmpMessage *ret, char **error);
void vmm_qmp_message_done(VmmQmpMessage *m);

/* ---- blocking primitives for worker threads (vmm-spawn.c, vmm-liveness.c) ------------------ */

/* VMM-3: the only environment QEMU gets. */
#define VMM_SPAWN_PATH "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

typedef struct VmmSpawnRequest {
        char *const *argv;       /* vmm_command_argv()'s; argv[0] is executed as a path */
        const int *fds;          /* passed at VMM_PASSED_FD_FIRST + i (vmm_command_passed_fds) */
        size_t n_fds;            /* at most VMM_PASSED_FDS_MAX */
        int log_dirfd;           /* the instance's data directory */
        const char *log;         /* "qemu.log", opened O_APPEND|O_CREAT (0600) below log_dirfd */
        const Root *proc;        /* for start_time */
        const char *null_device; /* "/dev/null" (GEN-1's one literal); NULL for it */
} VmmSpawnRequest;

typedef struct VmmSpawned {
        pid_t pid;
        int pidfd;           /* owned by the caller; -1 with identity_error */
        uint64_t start_time; /* field 22 of the child's stat (VMM-16) */
        /*
         * false when the pidfd or the stat could not be had right after the spawn: the child
         * runs without an identity to persist and must be terminated by the ladder (VMM-14), by
         * pid while it is unreaped; start_time is then the spawn's moment, and identity_error
         * (owned by the caller; NULL when out of memory) says what failed.
         */
        bool identified;
        char *identity_error;
} VmmSpawned;

/*
 * spawn_start() (worker/) as VMM-3 says: environment VMM_SPAWN_PATH only, POSIX_SPAWN_SETSID, an
 * empty signal mask and default dispositions for every signal, stdin /dev/null, stdout and stderr
 * appended to the log (opened as INST-2a says: a FIFO or link there fails at once), the
 * request's descriptors at VMM_PASSED_FD_FIRST on, every other descriptor closed; then a pidfd
 * on the child and its start_time (VMM-4). Failures read `spawn <argv[0]>: <err>` (the log
 * cannot be opened, the binary cannot be executed). Once the child runs, the call succeeds:
 * a pidfd or stat that cannot be had is reported in identity_error, for the caller's ladder.
 */
int vmm_spawn(const VmmSpawnRequest *request, VmmSpawned *ret, char **error);

/* <proc_root>/sys/kernel/random/boot_id, validated as a lowercase UUID. */
int vmm_read_boot_id(const Root *proc, char **ret, char **error);

typedef enum VmmVerdict {
        VMM_GONE,      /* provably gone (VMM-16, VMM-17, VMM-18, VMM-19) */
        VMM_ALIVE,     /* a process matches */
        VMM_AMBIGUOUS, /* cannot tell: counts as alive for every teardown decision */
} VmmVerdict;

/* "gone", "alive", "ambiguous". */
const char *vmm_verdict_to_string(VmmVerdict v);

typedef struct VmmIdentity {
        pid_t pid;              /* 0: none recorded */
        uint64_t start_time;    /* with pid */
        const char *boot_id;    /* recorded with pid; NULL: none */
        const char *qmp_socket; /* NULL: none recorded */
} VmmIdentity;

typedef struct VmmLivenessQuery {
        const Root *proc;
        const char *boot_id; /* the current boot id (vmm_read_boot_id) */
        /*
         * qemu_binary: a stored pid whose <proc>/<pid>/exe is another file (device and inode)
         * is discarded (VMM-16). NULL skips that comparison (the unit tests of other steps).
         */
        const char *qemu_binary;
        VmmIdentity identity;
        /*
         * VMM-18's shared fd scan (REC-9); NULL: the probe walks /proc itself if step 3 is
         * reached (dev_root then names the scan's VFIO prefix). Both NULL: steps 1 and 2 only,
         * a socket still listening being ambiguous (REC-4's re-check before a release).
         */
        const VfioScan *scan;
        const char *dev_root;
} VmmLivenessQuery;

typedef struct VmmLiveness {
        VmmVerdict verdict;
        pid_t pid;           /* VMM_ALIVE: the process (the stored pid, or the socket's owner) */
        int pidfd;           /* VMM_ALIVE: a pidfd on it, owned by the caller; else -1 */
        uint64_t start_time; /* VMM_ALIVE: its start_time */
        bool zombie;         /* VMM_GONE because the stored pid is a zombie (reap if a child) */
        char *reason;        /* why (for logs): "pid 42 exited", "boot id changed", ... */
} VmmLiveness;

/*
 * VMM-16, VMM-17, VMM-18, VMM-19 in order. Step 1, with a stored pid: a pidfd is opened on it, its
 * stat parsed, its executable compared with qemu_binary, and the pidfd confirmed live with
 * pidfd_send_signal(fd, 0) (VMM-4); a different boot id, a missing process, a zombie, another
 * start_time or another executable discards the pid. An executable that is qemu_binary's
 * former file, replaced since (a package upgrade), is ambiguous: the VMM may well be ours. Step 2,
 * with a qmp_socket: /proc/net/unix's listening entries of that path; none means gone. Step 3: the
 * fd scan finds their owner (alive), or none in a complete scan (gone); an incomplete scan, an
 * unreadable or malformed /proc/net/unix, or an owner that cannot be opened is ambiguous. Step 4:
 * nothing recorded is gone. Only ENOMEM fails; every other trouble is a verdict.
 */
int vmm_liveness_probe(const VmmLivenessQuery *q, VmmLiveness *ret);
/* Frees reason and closes a pidfd still there: a caller taking the pidfd sets it to -1. */
void vmm_liveness_done(VmmLiveness *l);

/* ---- a running VMM on the loop (vmm.c, vmm-qmp.c) ------------------------------------------ */

#define VMM_QMP_CONNECT_INTERVAL (50 * NSEC_PER_MSEC) /* VMM-5 */
#define VMM_QMP_GREETING_TIMEOUT (5 * NSEC_PER_SEC)   /* VMM-5 */
#define VMM_QMP_COMMAND_TIMEOUT (5 * NSEC_PER_SEC)    /* each reply */
#define VMM_QUIT_TIMEOUT (5 * NSEC_PER_SEC)           /* VMM-9 */
#define VMM_KILL_WAIT (2 * NSEC_PER_SEC)              /* VMM-10 */

typedef struct Vmm Vmm;

typedef struct VmmExit {
        bool status_known; /* false for an adopted VMM (VMM-4) */
        int code;          /* status_known and !signal: the exit status */
        int signal;        /* status_known: the signal that killed it, else 0 */
        bool killed_by_us; /* a SIGKILL that this Vmm sent */
} VmmExit;

typedef struct VmmConfig {
        pid_t pid;
        /*
         * Taken over by vmm_new() on success. -1 only for a child whose pidfd could not be had
         * (VMM-14): it is signalled by pid, which stays its own until it is reaped, and its exit
         * is polled for with waitid().
         */
        int pidfd;
        bool is_child;       /* spawned by this process: watched with a child source */
        uint64_t start_time; /* field 22: the ladder's in_grace (VMM-13) */
        const char *qmp_socket;
        bool has_vfio;           /* a vGPU or mdev is passed through (VMM-10, VMM-12) */
        nsec_t vfio_term_grace;  /* gpu.vfio_term_grace */
        nsec_t vfio_init_window; /* gpu.vfio_init_window */
        /*
         * The process has exited (once; after any stop or ladder in flight has called its done).
         * The Vmm stays valid until freed.
         */
        void (*exited)(Vmm *v, const VmmExit *exit, void *userdata);
        /* VMM-12: a SIGKILL is being sent to a VMM with a VFIO device. */
        void (*forced_kill)(Vmm *v, bool in_grace, void *userdata);
        /*
         * VMM-16: a signal was sent to the process (group: to its process group), and why. For
         * the caller's log line; it must not free the Vmm.
         */
        void (*signalled)(Vmm *v, int sig, bool group, const char *reason, void *userdata);
        void *userdata;
} VmmConfig;

int vmm_new(const VmmConfig *config, Vmm **ret);
/* Closes the pidfd and every source; a VMM still running keeps running. */
Vmm *vmm_free(Vmm *v);
DEFINE_TRIVIAL_CLEANUP_FUNC(Vmm *, vmm_free);
#define _cleanup_vmm_ _cleanup_(vmm_freep)

/* Adds the exit watch and, later, the QMP and ladder sources to event. -EBUSY if attached. */
int vmm_attach_event(Vmm *v, sd_event *event);

pid_t vmm_pid(const Vmm *v);
bool vmm_has_exited(const Vmm *v);

/*
 * in_grace of VMM-13 now: whether CLOCK_BOOTTIME is within vfio_init_window of the process's
 * start (start_time ticks after boot), for children and adopted VMMs alike.
 */
bool vmm_in_init_window(const Vmm *v);

/* Runs once; error (r < 0) is the failure's text, valid during the call. */
typedef void (*VmmDoneFunc)(Vmm *v, int r, const char *error, void *userdata);

/*
 * VMM-5: connects to qmp_socket every 50 ms until boot_timeout from now, reads the greeting
 * within 5 s, negotiates capabilities, requires query-status "running", and with query_kvm
 * sends query-kvm (*kvm_enabled in done's r: 1 enabled, 0 disabled; 0 without query_kvm).
 * Failures: `QMP not ready after <d>`, `qmp <command>: <class>: <desc>`, `qemu exited with
 * status <n> before QMP was ready` (or `was killed by signal <SIG>`, or `exited before QMP was
 * ready` for an adopted VMM) — the caller appends qemu.log's last line (VMM-5). -EBUSY while
 * another readiness or stop runs.
 */
int vmm_wait_ready(Vmm *v, nsec_t boot_timeout, bool query_kvm, VmmDoneFunc done, void *userdata);

/*
 * VMM-9 then VMM-10: system_powerdown and a wait of graceful_timeout for the exit; then quit
 * and 5 s; then the ladder. graceful_timeout 0, or QMP unreachable, goes straight to the
 * ladder. done gets 0 once the process has exited, or -ETIMEDOUT with `hypervisor pid <n> did
 * not exit after SIGKILL` (VMM-11: the caller treats it as may be alive). A readiness wait in
 * flight is cancelled (its done gets -ECANCELED). -EBUSY while another stop runs; an exited
 * process completes at once (done still runs later).
 */
int vmm_stop(Vmm *v, nsec_t graceful_timeout, VmmDoneFunc done, void *userdata);

/* VMM-10 alone (VMM-14, INST-13): vmm_stop(v, 0, ...). */
int vmm_terminate(Vmm *v, VmmDoneFunc done, void *userdata);

/* ---- disks on a running VMM (vmm-block.c; DISK-8) ------------------------------------------ */

typedef struct VmmBlockJob VmmBlockJob;

/*
 * Runs once, on the loop, after which the job is freed (drop the pointer). error (r < 0) is the
 * text, valid during the call: `qmp <command>: <class>: <desc>` as QEMU answered, a session's
 * failure (`connect <path>: ...`, `qmp <command>: no reply within 5s`), or for a detach -EBUSY
 * with `the guest did not release the device within <d>`. nodes (a query only, r >= 0): the
 * node names of the disks that a guest device holds, NULL-terminated, borrowed.
 */
typedef void (*VmmBlockDone)(int r, const char *error, char **nodes, void *userdata);

/*
 * Hot attach on a QMP session of its own: query-pci for a hotplug port with nothing behind it
 * (-ENOSPC: none), add-fd with a copy of drive->fd (SCM_RIGHTS), blockdev-add of drive's node
 * over that fd set (vmm_drive_blockdev_json()), then device_add virtio-blk-pci on the port, with
 * id and drive the node name and drive->serial as serial. A device_add that
 * fails takes the node back with blockdev-del; its error is the answer. -EINVAL for a drive
 * that is not a virtio-blk with a serial and a descriptor.
 */
int vmm_block_attach(sd_event *event, const char *qmp_socket, const VmmDrive *drive,
                     VmmBlockDone done, void *userdata, VmmBlockJob **ret);

/*
 * Hot detach: query-block finds the device that holds node_name (one added here, or one of
 * the command line), device_del asks the guest to release it, DEVICE_DELETED for its path is
 * awaited up to release_timeout (-EBUSY past it: the device stays, and so does the node), then
 * blockdev-del closes the node. A node no device holds is only closed (and one QEMU does not
 * know is gone already: success), which is how an interrupted attach or detach is settled.
 */
int vmm_block_detach(sd_event *event, const char *qmp_socket, const char *node_name,
                     nsec_t release_timeout, VmmBlockDone done, void *userdata, VmmBlockJob **ret);

/* query-block: the nodes guest devices hold, in done's nodes. */
int vmm_block_query(sd_event *event, const char *qmp_socket, VmmBlockDone done, void *userdata,
                    VmmBlockJob **ret);

/* Cancels a job in flight: its session closes and done never runs. */
VmmBlockJob *vmm_block_job_free(VmmBlockJob *j);

/* ---- small helpers ------------------------------------------------------------------------- */

/*
 * The last non-empty line of a log file (qemu.log, VMM-5), at most 512 bytes (the line's end is
 * kept when it is longer), non-printable bytes escaped. *ret is NULL when the file is missing or
 * has no such line. Blocking: run on a worker.
 */
#define VMM_LOG_LINE_MAX 512
int vmm_log_last_line(int dirfd, const char *name, char **ret, char **error);
