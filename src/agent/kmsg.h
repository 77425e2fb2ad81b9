/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * kmsg: the guest kernel log watcher (AGENT-6, AGENT-7, AGENT-8).
 *
 * The matcher decides whether one kmsg record reports the NVIDIA driver's init failure. It is
 * the host's reason to quarantine a VF, so it believes only what the kernel itself logged: the
 * record's facility must be the kernel's (user space can write to /dev/kmsg, but the kernel
 * gives such records the user facility), the message must begin with the driver's "NVRM:"
 * prefix, and a dictionary continuation line never counts. It uses no regex.
 *
 * The watcher reads the kmsg path without blocking and hands every matching message to a
 * callback. It is driven by the agent's poll loop: the loop polls kmsg_watcher_fd() for POLLIN,
 * wakes by kmsg_watcher_deadline(), and calls the functions below with the time it read; the
 * watcher itself never reads a clock, so tests drive its timings by hand.
 *
 * Promises:
 *  - the first open reads from the start of the ring; every reopen seeks to the end first;
 *  - an open failure is logged and retried after reopen_after (AGENT-7);
 *  - read results as AGENT-8: EAGAIN waits, EPIPE continues on the same descriptor, EINVAL
 *    reopens at the end, EOF ends the watch, any other error closes and reopens after 5 s;
 *  - input that is a stream rather than one record per read (a FIFO or a file standing in for
 *    /dev/kmsg) is cut into lines; a line longer than the buffer is skipped whole.
 */

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

#define KMSG_BUFFER_SIZE 16384 /* AGENT-8: a kmsg record is at most 8 KiB */
#define KMSG_ERROR_REOPEN_AFTER (5 * NSEC_PER_SEC)

/*
 * One record's first line, without its newline (n bytes, need not be NUL-terminated). 1 with
 * *ret_message (malloc'd: the trimmed message, control and non-ASCII bytes escaped as \xNN) when
 * it reports the driver's init failure, 0 when it does not, -ENOMEM.
 */
int kmsg_record_match(const char *line, size_t n, char **ret_message);

typedef enum KmsgWatchState {
        KMSG_WATCH_IDLE,    /* not started */
        KMSG_WATCH_OPEN,    /* fd valid, waiting for or reading records */
        KMSG_WATCH_WAITING, /* closed, reopening at reopen_at */
        KMSG_WATCH_ENDED,   /* EOF: the watch is over */
} KmsgWatchState;

typedef void (*KmsgMatchFn)(void *userdata, const char *message);

typedef struct KmsgWatcher {
        char *path;
        nsec_t reopen_after; /* after an open failure (AGENT-7) */
        KmsgMatchFn on_match;
        void *userdata;

        KmsgWatchState state;
        int fd;
        bool opened_once; /* the next open is a reopen: seek to the end */
        nsec_t reopen_at; /* KMSG_WATCH_WAITING */
        bool discarding;  /* skipping the rest of an over-long line */
        size_t len;       /* bytes of an unfinished line kept in buf */
        unsigned long long matches, records, overruns;
        char buf[KMSG_BUFFER_SIZE];
} KmsgWatcher;

/* Sets the watcher up, idle; -ENOMEM. */
int kmsg_watcher_init(KmsgWatcher *w, const char *path, nsec_t reopen_after, KmsgMatchFn on_match,
                      void *userdata);
void kmsg_watcher_done(KmsgWatcher *w);

/* Opens the path for the first time (or schedules the retry). */
void kmsg_watcher_start(KmsgWatcher *w, nsec_t now);

/* The descriptor to poll for POLLIN, or -1. */
int kmsg_watcher_fd(const KmsgWatcher *w);
/* When kmsg_watcher_on_timer() wants to run, or NSEC_INFINITY. */
nsec_t kmsg_watcher_deadline(const KmsgWatcher *w);
/* Reopens when the retry is due. */
void kmsg_watcher_on_timer(KmsgWatcher *w, nsec_t now);
/*
 * The descriptor polled readable (or hung up): reads what is there, at most a few buffers at a
 * time so that the loop stays responsive while a long file is read.
 */
void kmsg_watcher_on_readable(KmsgWatcher *w, nsec_t now);
