/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * vmm-internal: what vmm.c, vmm-qmp.c, vmm-spawn.c and vmm-liveness.c share and nobody else
 * uses: the pidfd system calls and the QMP session on the event loop.
 */

#include <jansson.h>
#include <signal.h>
#include <sys/syscall.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "base/base.h"

/* ---- pidfds (VMM-4) ------------------------------------------------------------------------ */

/* Called through syscall(), so that nothing depends on how a libc wraps them. */
static inline int vmm_pidfd_open(pid_t pid)
{
        long fd = syscall(SYS_pidfd_open, pid, 0);
        return fd < 0 ? negative_errno() : (int)fd;
}

static inline int vmm_pidfd_send_signal(int pidfd, int sig)
{
        return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0 ? negative_errno() : 0;
}

/* "SIGKILL" for SIGKILL; a number without a name reads "SIG<n>". */
const char *vmm_signal_name(int sig, char buf[static 16]);

/* ---- the QMP session on the loop (vmm-qmp.c; VMM-5, VMM-6, VMM-20) ------------------------- */

/*
 * One connection to a QMP socket. vmm_qmp_connect() starts it: a non-blocking connect tried
 * every VMM_QMP_CONNECT_INTERVAL until connect_timeout has passed (0: one attempt only), the
 * greeting within VMM_QMP_GREETING_TIMEOUT, then qmp_capabilities; then the ready function runs
 * once. Commands are queued with vmm_qmp_execute() and answered in order, each reply within
 * VMM_QMP_COMMAND_TIMEOUT of the one before; events go to the event handler, if any.
 *
 * Callbacks run from the session's own sources, never from inside the call that queued the
 * work. A callback may free the session; nothing runs after that. When the session fails
 * (the peer hangs up, a line is malformed or too long, a reply is late), every queued command
 * fails with the reason, and the session is dead: later commands fail with -ENOTCONN at once.
 */
typedef struct VmmQmp VmmQmp;

/*
 * r >= 0: value is the command's "return" value (borrowed, valid during the call; NULL for the
 * ready function). r < 0: error is the text, valid during the call:
 *   `QMP not ready after <d>`                       no connection before the deadline
 *   `connect <path>: <err>`                          a single attempt failed, or a lasting error
 *   `QMP greeting not received within 5s`, `QMP connection closed before the greeting`
 *   `qmp <command>: <class>: <desc>`                 an error reply (r is -EREMOTEIO)
 *   `qmp <command>: no reply within 5s`, `qmp <command>: connection closed`,
 *   `qmp <command>: <what is wrong with the line>`
 */
typedef void (*VmmQmpFunc)(VmmQmp *q, int r, json_t *value, const char *error, void *userdata);

int vmm_qmp_connect(sd_event *event, const char *path, nsec_t connect_timeout, VmmQmpFunc ready,
                    void *userdata, VmmQmp **ret);
/* -ENOTCONN when the session is dead or not negotiated yet; -ENOMEM. */
int vmm_qmp_execute(VmmQmp *q, const char *command, VmmQmpFunc done, void *userdata);
/*
 * The same with "arguments" (NULL: none; referenced, not stolen) and a descriptor (-1: none)
 * passed with the command's line as SCM_RIGHTS, as QEMU's add-fd and getfd want it; the session
 * sends its own copy. -EBUSY while another command's descriptor is still unsent.
 */
int vmm_qmp_execute_with(VmmQmp *q, const char *command, json_t *arguments, int fd, VmmQmpFunc done,
                         void *userdata);
/*
 * Events of a negotiated session go to on_event (data is the event's "data", borrowed, or
 * NULL); without a handler they are skipped. The handler may free the session.
 */
typedef void (*VmmQmpEventFunc)(VmmQmp *q, const char *event, json_t *data, void *userdata);
void vmm_qmp_set_event_handler(VmmQmp *q, VmmQmpEventFunc on_event, void *userdata);
/* Whether the session is negotiated and has not failed. */
bool vmm_qmp_is_alive(const VmmQmp *q);
/* Closes the connection and every source; queued commands are dropped without their callback. */
VmmQmp *vmm_qmp_free(VmmQmp *q);
DEFINE_TRIVIAL_CLEANUP_FUNC(VmmQmp *, vmm_qmp_free);
