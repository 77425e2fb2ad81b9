/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * notify: the service manager's notification socket, never waited on (OPS-2, ARCHITECTURE.md
 * decision 1).
 *
 * sd_notify() sends on a blocking socket: once the manager's queue is full (an unread socket
 * holds ten datagrams by default), the sender sits in sendmsg() and with it the whole event
 * loop. A Notifier sends without blocking instead. What it could not send waits and goes out
 * when the socket is writable again, folded into one datagram: READY=1 and STOPPING=1 are never
 * dropped, STATUS= keeps only its latest text, WATCHDOG=1 is sent at most once per wait.
 * The watchdog (WATCHDOG_USEC, WATCHDOG_PID) is pinged from the loop at half its interval.
 *
 * Without NOTIFY_SOCKET (not run by a service manager) every call succeeds and does nothing.
 * Promises: functions return >= 0 or -errno; nothing here waits on the socket.
 */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "base/base.h"

typedef struct Notifier Notifier;

/*
 * From the environment of the process: NOTIFY_SOCKET (a path, or "@name" in the abstract
 * namespace), WATCHDOG_USEC and WATCHDOG_PID. A malformed NOTIFY_SOCKET fails with -EINVAL.
 */
int notifier_new(Notifier **ret);
Notifier *notifier_free(Notifier *n);
DEFINE_TRIVIAL_CLEANUP_FUNC(Notifier *, notifier_free);

/* Adds the socket's writability source and the watchdog timer. -EBUSY if attached already. */
int notifier_attach_event(Notifier *n, sd_event *event);

/* Queues READY=1 / STOPPING=1 (never dropped) and sends what can be sent now. */
int notifier_ready(Notifier *n);
int notifier_stopping(Notifier *n);

/* STATUS=<printf>: replaces a status not yet sent. */
int notifier_status(Notifier *n, const char *fmt, ...) _printf_(2, 3);

/* The watchdog interval the manager asked for, 0 when none. */
nsec_t notifier_watchdog_interval(const Notifier *n);

/* Messages waiting for the socket to drain (tests). */
bool notifier_is_pending(const Notifier *n);
