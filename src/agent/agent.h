/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * agent: vgpu-agent's options and its one poll() loop (AGENT-1, AGENT-12, AGENT-19).
 *
 * The loop serves, on one thread: a signalfd (SIGTERM and SIGINT end it, SIGCHLD reaps the
 * probe), the virtio-serial port (the protocol), the kmsg watcher and the probe's output pipe,
 * and wakes for the earliest of their timers. Nothing in it blocks, so requests are answered
 * while the watcher and the probe run.
 *
 * Promises:
 *  - the port is --serial, or when that path does not exist the virtio-ports entry named
 *    org.vgpud.agent.0 opened under dev_root; while neither exists, one notice and another look
 *    every second;
 *  - a read of 0, an EIO (a tty-like port with no peer) or POLLHUP means no host is connected:
 *    the descriptor stays open, the partial request line and unwritten replies are dropped, and
 *    the port leaves the poll set for AGENT_PORT_PAUSE (no busy loop);
 *  - any other read or write error closes the port, logged once, and it is looked up again
 *    every second;
 *  - a reply not written within PROTOCOL_WRITE_TIMEOUT is dropped with the connection's buffers;
 *  - the GPU watch (kmsg watcher and probe) starts per --gpu-watch (AGENT-3); without it the
 *    state stays unknown;
 *  - the agent never writes to /dev/kmsg, opens no socket, and logs "<N>"-prefixed lines to
 *    stderr only (AGENT-2, AGENT-13).
 */

#include <signal.h>
#include <stdbool.h>

#include "agent/gpu-state.h"
#include "agent/kmsg.h"
#include "agent/probe.h"
#include "agent/protocol.h"
#include "base/base.h"

#define AGENT_DEFAULT_SERIAL "/dev/virtio-ports/org.vgpud.agent.0"
#define AGENT_DEFAULT_KMSG "/dev/kmsg"
#define AGENT_DEFAULT_PCI_ROOT "/sys"
#define AGENT_DEFAULT_DEV_ROOT "/dev"
#define AGENT_PORT_RETRY (1 * NSEC_PER_SEC)
#define AGENT_PORT_PAUSE (250 * NSEC_PER_MSEC)

typedef enum GpuWatch {
        GPU_WATCH_AUTO,
        GPU_WATCH_ON,
        GPU_WATCH_OFF,
} GpuWatch;

typedef struct AgentOptions {
        const char *serial;
        GpuWatch gpu_watch;
        const char *kmsg;
        const char *pci_root;
        const char *nvidia_smi; /* NULL: search PROBE_PATH */
        nsec_t probe_kill_after, probe_retry_after, probe_give_up_after, kmsg_reopen_after;
        /* Where a port found by name is opened: "/dev" (GEN-1 names it by --pci-root's
         * lookup); not an option, tests set it to a tree of their own. */
        const char *dev_root;
} AgentOptions;

/* The defaults of AGENT-1. */
void agent_options_init(AgentOptions *o);

typedef enum AgentArgs {
        AGENT_ARGS_RUN,
        AGENT_ARGS_VERSION,
        AGENT_ARGS_HELP,
} AgentArgs;

/*
 * Reads the command line into o (its strings point into argv). 0 with *ret what to do, or
 * -EINVAL with *error naming the bad option.
 */
int agent_parse_args(int argc, char **argv, AgentOptions *o, AgentArgs *ret, char **error);

const char *agent_usage(void);

/* The loop's clock: CLOCK_MONOTONIC (agent_now) unless a test sets its own. */
typedef nsec_t (*AgentClockFn)(void *userdata);

typedef struct Agent {
        AgentOptions options;
        AgentClockFn clock;
        void *clock_userdata;
        sigset_t saved_mask;
        bool mask_saved;
        int signal_fd;
        bool quit;

        /* the port */
        int port_fd;
        char *port_path;
        nsec_t port_retry_at;  /* port_fd < 0 */
        int port_last_error;   /* of an open, logged once until it changes */
        int port_last_failure; /* of a read or write, logged once until it changes */
        bool port_paused;      /* out of the poll set after a hang-up */
        nsec_t port_resume_at;
        Conn conn;

        /* the GPU watch */
        GpuState gpu;
        bool watching;
        KmsgWatcher kmsg;
        Probe probe;

        /* for tests and the debug log */
        unsigned long long hangups, port_failures, requests_read, write_timeouts, wakeups;
} Agent;

/* Blocks SIGTERM, SIGINT, SIGCHLD (saving the old mask) and opens the signalfd. */
int agent_new(const AgentOptions *o, Agent **ret, char **error);
/* Restores the signal mask. Accepts NULL, returns NULL. */
Agent *agent_free(Agent *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(Agent *, agent_free);

/* Serve this descriptor as the port instead of looking one up (tests); takes it over. */
void agent_set_port_fd(Agent *a, int fd);

/* Reads time from clock instead of CLOCK_MONOTONIC (tests). poll() still waits in real time,
 * at most agent_step()'s max_wait, so a test that moves its clock steps with a small one. */
void agent_set_clock(Agent *a, AgentClockFn clock, void *userdata);

/* Opens the port (or schedules the look-up) and starts the GPU watch per the options. */
void agent_start(Agent *a, nsec_t now);

/*
 * One turn of the loop: waits at most max_wait for a descriptor or a timer, and dispatches.
 * 1 when the agent should exit (SIGTERM), 0 otherwise, -errno on a failed poll().
 */
int agent_step(Agent *a, nsec_t max_wait);

/* Runs until SIGTERM; 0, or -errno on a failed poll(). */
int agent_run(Agent *a);

/* CLOCK_MONOTONIC. */
nsec_t agent_now(void);
