/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * probe: asks the NVIDIA driver whether it came up, by running `nvidia-smi -L` (AGENT-9, AGENT-10,
 * AGENT-11).
 *
 * At most one probe process exists at any time: an attempt is SIGKILLed after kill_after, and
 * the next one starts only retry_after after the previous one was reaped, however long that
 * takes (a process stuck in the driver's ioctl cannot die until the driver lets it). The agent
 * learns of the exit by SIGCHLD on its signalfd and reaps with waitpid(pid, WNOHANG): no
 * pidfd, so guest kernels older than 5.3 work.
 *
 * Driven by the agent's poll loop like the kmsg watcher: poll probe_fd() (the child's output)
 * for POLLIN, wake by probe_deadline(), call probe_on_sigchld() on SIGCHLD; every call takes
 * the time, so tests set it by hand.
 *
 * Promises:
 *  - without the binary the probe is disabled after one notice;
 *  - each attempt gets stdin /dev/null, the default signal dispositions and an empty mask, the
 *    environment PATH=PROBE_PATH only, and a pipe for stdout and stderr; the first 4 KiB of
 *    that output are logged when the attempt fails;
 *  - exit status 0 ends the probe with PROBE_RESULT_OK; a failure never reports anything
 *    but itself (AGENT-11: a failed probe never sets `failed`);
 *  - retries stop when the next one would start later than give_up_after after the first
 *    attempt began, with "GPU init probe gave up after <d>" (GEN-12).
 */

#include <stdbool.h>
#include <sys/types.h>

#include "base/base.h"

#define PROBE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define PROBE_OUTPUT_MAX 4096

typedef enum ProbeState {
        PROBE_IDLE,    /* not started */
        PROBE_RUNNING, /* a child exists (it may have been killed, not yet reaped) */
        PROBE_WAITING, /* reaped a failure; the next attempt is due at retry_at */
        PROBE_SUCCEEDED,
        PROBE_GAVE_UP,
        PROBE_DISABLED, /* no binary */
} ProbeState;

typedef enum ProbeResult {
        PROBE_RESULT_NONE,
        PROBE_RESULT_OK,
} ProbeResult;

typedef struct Probe {
        char *binary; /* the --nvidia-smi path, or NULL to search PROBE_PATH */
        nsec_t kill_after, retry_after, give_up_after;

        ProbeState state;
        char *resolved; /* the binary that runs */
        pid_t pid;
        int out_fd;
        bool killed;
        nsec_t began;      /* the first attempt */
        nsec_t started;    /* this attempt */
        nsec_t retry_at;   /* PROBE_WAITING */
        unsigned attempts; /* started so far */
        size_t out_len;
        size_t out_dropped;
        char out[PROBE_OUTPUT_MAX];
} Probe;

/* binary may be NULL (search PROBE_PATH); -ENOMEM. */
int probe_init(Probe *p, const char *binary, nsec_t kill_after, nsec_t retry_after,
               nsec_t give_up_after);
/* Kills and reaps a child still running (blocking: only at exit), closes the pipe. */
void probe_done(Probe *p);

/* Finds the binary and runs the first attempt. */
void probe_start(Probe *p, nsec_t now);

/* The child's output pipe to poll for POLLIN, or -1. */
int probe_fd(const Probe *p);
/* Reads what the child wrote (keeping the first PROBE_OUTPUT_MAX bytes). */
void probe_on_output(Probe *p);
/* When probe_on_timer() wants to run (the kill, or the retry), or NSEC_INFINITY. */
nsec_t probe_deadline(const Probe *p);
void probe_on_timer(Probe *p, nsec_t now);
/* A SIGCHLD arrived: reaps the child if it has exited. PROBE_RESULT_OK when it succeeded. */
ProbeResult probe_on_sigchld(Probe *p, nsec_t now);

/* Where binary (or nvidia-smi on PROBE_PATH) is, as an executable file; -ENOENT, -ENOMEM. */
int probe_find_binary(const char *binary, char **ret);
