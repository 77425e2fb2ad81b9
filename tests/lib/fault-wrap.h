/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * File-call fault injection for the C tests, through the linker's --wrap: a test program links
 * fault_wrap_dep and wraps the calls in fault_wrap_link_args (tests/lib/meson.build), arms one
 * fault (a call, a path suffix, an errno, how many times) and sees each wrapped call through an
 * observer of its own, which is how it records the steps of a crash-safe write. Nothing is armed
 * or observed at start; the wrappers are global by nature, so a test's teardown disarms.
 */
#include <limits.h>
#include <stdbool.h>

typedef enum FaultCall {
        FAULT_NONE,
        FAULT_MKDIRAT,
        FAULT_OPENAT,
        FAULT_FSTATAT,
        FAULT_WRITE,
        FAULT_FSYNC,
        FAULT_CLOSE,
        FAULT_RENAMEAT,
        FAULT_UNLINKAT,
        /* Not wrapped here: for a test's own wrapper that calls fault_hit() (openat_beneath). */
        FAULT_OPEN_BENEATH,
} FaultCall;

/*
 * Fails the next `times` calls of `call` (-1: every one) whose path ends in match — for the
 * descriptor calls (write, fsync, close), the path the descriptor names — with error.
 */
void fault_arm(FaultCall call, const char *match, int error, int times);
void fault_disarm(void);
/* How many calls the armed fault has failed. */
int fault_hits(void);

/* True, with errno set, when the armed fault takes this call (then counted). */
bool fault_hit(FaultCall call, const char *path);

/*
 * Sees every wrapped call before its fault is decided: path is the call's (the old path of a
 * rename), or for the descriptor calls the descriptor's target, NULL when it cannot be read;
 * flags are openat's, else 0. NULL stops observing.
 */
typedef void (*FaultObserver)(FaultCall call, const char *path, int flags);
void fault_observe(FaultObserver observer);

/* The path fd names (/proc/self/fd), into buf; false when it cannot be read. */
bool fault_fd_target(int fd, char buf[static PATH_MAX]);
