/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * fake-qemu: the stand-in VMM of the integration tests (SPEC SIM-15).
 *
 * It is started by vgpud exactly as QEMU would be (VMM-1), holds the VF's VFIO group node open
 * the way QEMU 7.2 does (DEV-12), answers QMP like QEMU (VMM-5, VMM-20), and plays the guest
 * agent on the agent chardev (AGENT-14, AGENT-15, AGENT-16). The simulator controls it per instance
 * name through `DIR/.sim/qemu/<name>` (SIM-14).
 *
 * What other tests may rely on (each a line of the console log, prefix "fake-qemu: "):
 *
 *   fake-qemu: started name=<name> pid=<pid> vf=<vf|none> flags=<a,b|none> gpu=<ok|wedged|none>
 *   fake-qemu: qmp command <name>               every QMP input; "(invalid)" when it names none
 *   fake-qemu: qmp command <name> unanswered (hang-qmp)
 *   fake-qemu: signal SIG<NAME> pid=<sender> action=<exit|ignore>   every signal received
 *   fake-qemu: nic net0 tap=<name> mac=<mac> vhost=<on|off>   the TAP it holds (NET-3)
 *   fake-qemu: device_del <path> held (hold-devices)          DISK-8's busy guest
 *   fake-qemu: exit-early after <ms>ms
 *   fake-qemu: agent reply not written within 5000ms; dropped    AGENT-17's write timeout
 *   fake-qemu: exit status=<n> reason=<why>
 *
 * With a console socket (CONS-1), the console stands in for a guest's serial line with echo on:
 * every byte a client sends is written back to it and appended to the log, as a guest's tty
 * echoes what is typed; the lines above go to the client as well as to the log. While no client
 * is connected the output goes to the log only, as QEMU's wait=off sockets do.
 *
 * SIGTERM, SIGINT and SIGHUP exit 0 (SIGTERM not with ignore-sigterm); other catchable signals
 * are only logged. QMP lines end in "\r\n" like QEMU's; agent lines are compact and end in "\n".
 * Each socket serves one client at a time, as QEMU's socket chardevs do. Setup failures (argv,
 * flags file, state.json, VFIO node, boot files) exit 1 with one error line on stderr.
 *
 * Promises of the pieces below:
 *  - fq_args_parse() accepts the argv of VMM-1 and nothing else; every failure has a message
 *    naming the option;
 *  - the protocol functions are pure: one request line in, one reply object out, no I/O;
 *  - every parser here is strict and bounded (GEN-5, GEN-6).
 */

#include <jansson.h>

#include "base/base.h"

/* Longest request line accepted on either socket, without its newline (AGENT-17). */
#define FQ_LINE_MAX 65536

/* How long an agent reply may wait to be written before it is dropped (AGENT-17). */
#define FQ_AGENT_WRITE_TIMEOUT (5 * NSEC_PER_SEC)

/* The virtio-serial port name vgpud gives the agent channel (VMM-1). */
#define FQ_AGENT_PORT_NAME "org.vgpud.agent.0"

/* What fake-qemu reports as the guest agent's version (AGENT-15). */

/* ---- command line (fake-qemu-args.c) ------------------------------------------------------- */

/* A -blockdev node of the command line with its device (for the block layer's start). */
typedef struct FqArgsDrive {
        char node[32];
        char port[16]; /* the pcie-root-port its device sits on, or "" for the root bus */
        int set, fd;
        bool read_only;
} FqArgsDrive;

#define FQ_ARGS_DRIVES_MAX 16

typedef struct FqArgs {
        char *name;           /* -name guest=<name> */
        char *qmp_socket;     /* the socket chardev behind -mon ...,mode=control */
        char *agent_socket;   /* the socket chardev behind the org.vgpud.agent.0 port */
        char *console_socket; /* the socket chardev behind -serial (CONS-1); NULL for a file */
        char *console_log;    /* its logfile, or the file chardev behind -serial */
        char *sysfsdev;       /* -device vfio-pci,sysfsdev=...; NULL for a GPU-less VM */
        char *kernel;         /* -kernel, -initrd, -append: NULL when absent */
        char *initrd;
        char *append;
        /* -blockdev nodes, each resolved to a device and an fd set of the right access mode */
        size_t n_readonly_drives, n_writable_drives;
        FqArgsDrive drives[FQ_ARGS_DRIVES_MAX];
        size_t n_drives;
        char ports[FQ_ARGS_DRIVES_MAX][16]; /* -device pcie-root-port ids, in order */
        size_t n_ports;
        size_t n_nics;  /* tap netdevs, each on an open descriptor and used by a virtio-net-pci */
        int nic_fd;     /* the first NIC's tap fd= (NET-3), -1 without a NIC */
        bool nic_vhost; /* its vhost=on */
        char *nic_mac;  /* its virtio-net-pci mac= */
        bool accel_kvm; /* -accel kvm given */
        bool accel_tcg; /* -accel tcg given */
        uint32_t vcpus;
        uint64_t memory_mb;
} FqArgs;

void fq_args_done(FqArgs *a);

/*
 * SIM-15: the TAP vgpud passes as fd must be a TAP (TUNGETIFF) named "vgt" and the first 12
 * characters of the instance id, which is the name of the QMP socket's directory (INST-1). On
 * success *ret_name is the TAP's name. -EBADFD (not a TAP), -EINVAL (another name).
 */
int fq_check_tap(int fd, const char *qmp_socket, char ret_name[static 16], char **error);

/*
 * Parses argv (argv[0] is skipped). QEMU's rules for option values apply: elements separated
 * by ",", a doubled ",," standing for one literal comma (VMM-2). On failure *error names the
 * option and what is wrong with it.
 */
int fq_args_parse(int argc, char *const *argv, FqArgs *ret, char **error);

/* ---- control flags and simulator state (fake-qemu-proto.c) -------------------------------- */

typedef struct FqFlags {
        bool hold_devices; /* device_del is accepted and DEVICE_DELETED never comes (DISK-8) */
        bool ignore_sigterm;
        bool hang_qmp;
        bool silent_agent;
        bool exit_early;
        uint64_t exit_early_ms;
} FqFlags;

#define FQ_FLAGS_FILE_MAX 4096
#define FQ_EXIT_EARLY_MS_MAX UINT64_C(86400000) /* one day: anything longer is a typo */

/* Parses `.sim/qemu/<name>`: one flag per line, empty lines ignored, anything else refused. */
int fq_flags_parse(const char *text, FqFlags *ret, char **error);

/* Renders the set flags as "a,b,c" ("none" when there are none), for the console log. */
int fq_flags_format(const FqFlags *f, char **ret);

/*
 * Whether vgpu-sim's state.json (parsed, an object) marks VF `vf` as wedged (SIM-14). This is
 * the only place that knows how the simulator represents a wedge.
 */
int fq_state_vf_is_wedged(const json_t *state, const char *vf, bool *ret, char **error);

/* The guest driver's message for a VF wedged at boot (SIM-15). */
int fq_wedged_message(const char *vf, char **ret);

/* ---- QMP (fake-qemu-proto.c) --------------------------------------------------------------- */

/* ---- the block layer over QMP (fake-qemu-block.c; DISK-8) ----------------------------------- */

#define FQ_BLOCK_NODES_MAX 32

typedef struct FqFdSet {
        int id, fd;
        bool from_argv; /* -add-fd's: the descriptor is the command line's, never closed here */
} FqFdSet;

typedef struct FqBlockNode {
        char name[32];
        int set;
        bool read_only;
        bool has_device;
        bool unplugging;      /* device_del accepted, the guest has not released it */
        char device_id[32];   /* "" for a device without an id */
        char device_path[64]; /* its QOM path */
        char serial[64];
        char port[16]; /* the root port its device is on, "" for the root bus */
} FqBlockNode;

typedef struct FqBlock {
        FqFdSet sets[FQ_BLOCK_NODES_MAX];
        size_t n_sets;
        int next_set;
        FqBlockNode nodes[FQ_BLOCK_NODES_MAX];
        size_t n_nodes;
        size_t n_anon; /* devices without an id so far: /machine/peripheral-anon/device[n] */
        char ports[FQ_ARGS_DRIVES_MAX][16]; /* pcie-root-port ids (DISK-8's hotplug slots) */
        size_t n_ports;
        int received_fd; /* the last descriptor QMP received (SCM_RIGHTS), for add-fd; or -1 */
} FqBlock;

/* A node of the command line, with its device and its -add-fd set. */
int fq_block_add_boot_drive(FqBlock *b, const char *node, const char *port, int set, int fd,
                            bool read_only);
/* A pcie-root-port of the command line. */
int fq_block_add_port(FqBlock *b, const char *id);
/* Closes what add-fd took. */
void fq_block_done(FqBlock *b);
/* add-fd, blockdev-add, device_add, device_del, blockdev-del, query-block, query-pci. */
bool fq_block_handles(const char *command);
/*
 * One of those commands, as QEMU 7.2 checks and answers it; events to send after the reply
 * (DEVICE_DELETED unless hold_devices) are appended to events. NULL on ENOMEM.
 */
json_t *fq_block_answer(FqBlock *b, const char *command, const json_t *args, bool hold_devices,
                        json_t *events);

typedef struct FqQmpSession {
        bool negotiated; /* qmp_capabilities has been accepted on this connection */
        FqBlock *block;  /* the process's block layer; NULL: the block commands are unknown */
        bool hold_devices;
        json_t *events; /* an array: events to send after the reply of the line just answered */
} FqQmpSession;

typedef enum FqQmpAction {
        FQ_QMP_ACTION_NONE,
        FQ_QMP_ACTION_POWERDOWN, /* system_powerdown accepted: the guest powers off */
        FQ_QMP_ACTION_QUIT,      /* quit accepted: QEMU exits */
} FqQmpAction;

/* The greeting QEMU sends on every new QMP connection (VMM-20). */
json_t *fq_qmp_greeting(void);

/*
 * Answers one QMP input line the way QEMU 7.2 does. QMP answers every input, so on success
 * *ret_reply is always an object (a "return" or an "error"). *ret_command is the command name
 * when the input named one (NULL otherwise), for the console log.
 */
int fq_qmp_answer(FqQmpSession *s, const char *line, size_t size, json_t **ret_reply,
                  char **ret_command, FqQmpAction *ret_action);

/* QMP skips white space between requests (the agent protocol only skips empty lines). */
bool fq_qmp_line_is_blank(const char *line, size_t size);

/* The command name of a QMP input line, or NULL when it names none (hang-qmp still logs). */
int fq_qmp_peek_command(const char *line, size_t size, char **ret);

/* An event with a QEMU-style timestamp; data may be NULL and is stolen otherwise. */
json_t *fq_qmp_event(const char *name, json_t *data);

/* QEMU's error for a QMP input line over FQ_LINE_MAX bytes; NULL on ENOMEM. */
json_t *fq_qmp_overlong_reply(void);

/* ---- guest agent (fake-qemu-proto.c) ------------------------------------------------------- */

/*
 * Answers one agent request line (AGENT-14, AGENT-15, AGENT-16) as the real agent does, for a guest
 * whose GPU initialised (failure_message NULL) or failed with that message: *ret is the reply line
 * with its "\n", or NULL for a blank line. -ENOMEM.
 */
int fq_agent_answer(const char *failure_message, const char *line, size_t size, char **ret);

/* AGENT-17's reply to an over-long line, "\n" included; NULL on ENOMEM. */
char *fq_agent_overlong_line(void);

/* Makes s safe for one console log line: non-printable bytes become '?', long text is cut. */
int fq_sanitize(const char *s, size_t max, char **ret);
