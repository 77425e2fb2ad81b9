/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A running VMM on the event loop (vmm.h): the exit watch (VMM-4), readiness (VMM-5), the
 * graceful stop (VMM-9) and the termination ladder (VMM-10, VMM-11, VMM-12, VMM-13).
 *
 * One operation runs at a time: a readiness wait, or a stop (which may start with QMP and always
 * ends in the ladder unless the process exits first). `phase` says where it is; one timer serves
 * every wait of the phase. Results are not handed to the caller from where they arise but from a
 * deferred source, in a fixed order (readiness, stop, then the exit), so that a done function
 * never runs inside the call that started the work and a caller may free the Vmm in any of its
 * callbacks.
 */
#include "vmm.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#include "vmm-internal.h"

/* How long a hang-up during readiness waits for the exit that may explain it. */
#define VMM_EXIT_LINGER (500 * NSEC_PER_MSEC)

/* How often a child without a pidfd (VMM-14) is asked whether it has exited. */
#define VMM_EXIT_POLL (20 * NSEC_PER_MSEC)

typedef enum VmmPhase {
        PHASE_IDLE,
        PHASE_READY_CONNECT, /* connecting, greeting, qmp_capabilities */
        PHASE_READY_STATUS,  /* query-status */
        PHASE_READY_KVM,     /* query-kvm */
        PHASE_READY_LINGER,  /* QMP hung up: waiting a moment for the exit that explains it */
        PHASE_STOP_CONNECT,  /* one connect attempt, greeting, qmp_capabilities */
        PHASE_STOP_POWERDOWN,
        PHASE_STOP_GRACE, /* system_powerdown accepted: waiting graceful_timeout */
        PHASE_STOP_QUIT,
        PHASE_STOP_QUIT_WAIT, /* quit accepted: VMM_QUIT_TIMEOUT */
        PHASE_LADDER_TERM,    /* SIGTERM sent: vfio_term_grace */
        PHASE_LADDER_KILL,    /* SIGKILL sent: VMM_KILL_WAIT */
        PHASE_LADDER_GROUP,   /* SIGKILL sent to the process group: VMM_KILL_WAIT */
} VmmPhase;

/* An operation's done function, and its result while it waits to be delivered. */
typedef struct VmmOp {
        bool active;   /* running */
        bool finished; /* done, result not delivered yet */
        VmmDoneFunc done;
        void *userdata;
        int r;
        char *error;
} VmmOp;

struct Vmm {
        unsigned n_ref; /* the owner's, and one per dispatch in progress */
        bool freed;

        pid_t pid;
        int pidfd;
        bool is_child;
        uint64_t start_time;
        char *qmp_socket;
        bool has_vfio;
        nsec_t vfio_term_grace;
        nsec_t vfio_init_window;
        void (*exited_cb)(Vmm *v, const VmmExit *exit, void *userdata);
        void (*forced_kill)(Vmm *v, bool in_grace, void *userdata);
        void (*signalled)(Vmm *v, int sig, bool group, const char *reason, void *userdata);
        void *userdata;

        sd_event *event;
        sd_event_source *exit_source, *timer, *notify;
        VmmQmp *qmp;

        VmmPhase phase;
        bool query_kvm;
        nsec_t graceful_timeout;
        VmmOp ready, stop;
        int linger_r; /* PHASE_READY_LINGER: the failure to report if no exit comes */
        char *linger_error;

        bool exited;       /* seen by the exit watch */
        bool exit_pending; /* the exited callback is still to run */
        VmmExit exit;
        bool sent_sigkill;
        const char *ladder_reason; /* why the ladder started: a literal */
};

/* ---- life cycle ---------------------------------------------------------------------------- */

static void vmm_release(Vmm *v)
{
        v->qmp = vmm_qmp_free(v->qmp);
        v->exit_source = sd_event_source_disable_unref(v->exit_source);
        v->timer = sd_event_source_disable_unref(v->timer);
        v->notify = sd_event_source_disable_unref(v->notify);
        closep(&v->pidfd);
        v->pidfd = -1;
}

static void vmm_unref(Vmm *v)
{
        if (--v->n_ref > 0)
                return;
        vmm_release(v);
        sd_event_unref(v->event);
        free(v->ready.error);
        free(v->stop.error);
        free(v->linger_error);
        free(v->qmp_socket);
        free(v);
}

Vmm *vmm_free(Vmm *v)
{
        if (!v)
                return NULL;
        /* Called from one of our callbacks, the dispatch that called it still holds a
         * reference: it sees freed and touches nothing more. */
        v->freed = true;
        vmm_release(v);
        vmm_unref(v);
        return NULL;
}

int vmm_new(const VmmConfig *config, Vmm **ret)
{
        /* Without a pidfd only a child can be signalled safely: its pid is not reused. */
        if (config->pid <= 0 || (config->pidfd < 0 && !config->is_child))
                return -EINVAL;

        Vmm *v = calloc(1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        *v = (Vmm){
            .n_ref = 1,
            .pid = config->pid,
            .pidfd = -1,
            .is_child = config->is_child,
            .start_time = config->start_time,
            .has_vfio = config->has_vfio,
            .vfio_term_grace = config->vfio_term_grace,
            .vfio_init_window = config->vfio_init_window,
            .exited_cb = config->exited,
            .forced_kill = config->forced_kill,
            .signalled = config->signalled,
            .userdata = config->userdata,
        };
        if (config->qmp_socket) {
                v->qmp_socket = strdup(config->qmp_socket);
                if (!v->qmp_socket) {
                        vmm_free(v);
                        return -ENOMEM;
                }
        }
        v->pidfd = config->pidfd;
        *ret = v;
        return 0;
}

pid_t vmm_pid(const Vmm *v)
{
        return v->pid;
}

bool vmm_has_exited(const Vmm *v)
{
        return v->exited;
}

bool vmm_in_init_window(const Vmm *v)
{
        struct timespec ts;
        long ticks = sysconf(_SC_CLK_TCK);
        if (ticks <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts) < 0)
                return true; /* cannot tell: the warning's worse case */
        nsec_t now = (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
        /* start_time counts clock ticks since boot, CLOCK_BOOTTIME's origin. */
        nsec_t start = v->start_time / (uint64_t)ticks * NSEC_PER_SEC +
                       v->start_time % (uint64_t)ticks * NSEC_PER_SEC / (uint64_t)ticks;
        return now < start || now - start < v->vfio_init_window;
}

/* ---- delivering results -------------------------------------------------------------------- */

static void schedule_notify(Vmm *v)
{
        if (v->notify)
                (void)sd_event_source_set_enabled(v->notify, SD_EVENT_ONESHOT);
}

/* The operation is over; its done function runs from the notify source. */
static void op_finish(Vmm *v, VmmOp *op, int r, const char *error)
{
        if (!op->active)
                return;
        op->active = false;
        op->finished = true;
        op->r = r;
        free(op->error);
        op->error = NULL;
        if (r < 0)
                op->error = strdup(error ? error : strerror(-r));
        schedule_notify(v);
}

/* Runs a finished operation's done function. false: the Vmm was freed by it. */
static bool op_deliver(Vmm *v, VmmOp *op)
{
        if (!op->finished)
                return true;
        VmmDoneFunc done = op->done;
        void *userdata = op->userdata;
        int r = op->r;
        _cleanup_free_ char *error = TAKE_PTR(op->error);
        op->finished = false;
        if (done)
                done(v, r, r < 0 ? (error ? error : ERROR_OUT_OF_MEMORY) : NULL, userdata);
        return !v->freed;
}

static int on_notify(sd_event_source *s, void *userdata)
{
        Vmm *v = userdata;

        v->n_ref++;
        if (op_deliver(v, &v->ready) && op_deliver(v, &v->stop) && v->exit_pending) {
                v->exit_pending = false;
                if (v->exited_cb)
                        v->exited_cb(v, &v->exit, v->userdata);
        }
        vmm_unref(v);
        return 0;
}

/* ---- timers -------------------------------------------------------------------------------- */

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata);

/*
 * From the real clock, not from the loop's cached time of its last wake-up, which may lie well
 * before a call from outside the loop: every wait lasts at least what VMM-9 and VMM-10 say.
 */
static int arm_timer(Vmm *v, nsec_t after)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t when =
            (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u + after / NSEC_PER_USEC;
        if (!v->timer)
                return sd_event_add_time(v->event, &v->timer, CLOCK_MONOTONIC, when, 1000, on_timer,
                                         v);
        int r = sd_event_source_set_time(v->timer, when);
        if (r >= 0)
                r = sd_event_source_set_enabled(v->timer, SD_EVENT_ONESHOT);
        return r;
}

static void disarm_timer(Vmm *v)
{
        if (v->timer)
                (void)sd_event_source_set_enabled(v->timer, SD_EVENT_OFF);
}

/* ---- the exit ------------------------------------------------------------------------------ */

static void exit_text(const VmmExit *e, char **ret)
{
        char sig[16];
        int r;
        if (!e->status_known)
                r = strprintf(ret, "qemu exited before QMP was ready");
        else if (e->signal)
                r = strprintf(ret, "qemu was killed by signal %s before QMP was ready",
                              vmm_signal_name(e->signal, sig));
        else
                r = strprintf(ret, "qemu exited with status %d before QMP was ready", e->code);
        if (r < 0)
                *ret = NULL;
}

static void vmm_exited(Vmm *v, const VmmExit *e)
{
        if (v->exited)
                return;
        v->exited = true;
        v->exit = *e;
        v->qmp = vmm_qmp_free(v->qmp);
        disarm_timer(v);
        (void)sd_event_source_set_enabled(v->exit_source, SD_EVENT_OFF);

        if (v->ready.active) {
                _cleanup_free_ char *text = NULL;
                exit_text(e, &text);
                op_finish(v, &v->ready, -ESRCH, text);
        }
        /* Whatever the stop had reached, it has what it wanted. */
        op_finish(v, &v->stop, 0, NULL);
        v->phase = PHASE_IDLE;
        v->exit_pending = true;
        schedule_notify(v);
}

static int on_child(sd_event_source *s, const siginfo_t *si, void *userdata)
{
        Vmm *v = userdata;
        VmmExit e = {.status_known = true};

        if (si->si_code == CLD_EXITED)
                e.code = si->si_status;
        else
                e.signal = si->si_status; /* CLD_KILLED, CLD_DUMPED: only WEXITED is asked for */
        e.killed_by_us = v->sent_sigkill && e.signal == SIGKILL;
        vmm_exited(v, &e);
        return 0; /* sd-event reaps the child when this returns */
}

/* A child without a pidfd (VMM-14): waitid() by pid, which also reaps it. */
static int on_exit_poll(sd_event_source *s, uint64_t usec, void *userdata)
{
        Vmm *v = userdata;
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)v->pid, &si, WEXITED | WNOHANG) < 0 || si.si_pid != v->pid) {
                (void)sd_event_source_set_time_relative(s, VMM_EXIT_POLL / NSEC_PER_USEC);
                (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                return 0;
        }
        VmmExit e = {.status_known = true};
        if (si.si_code == CLD_EXITED)
                e.code = si.si_status;
        else
                e.signal = si.si_status;
        e.killed_by_us = v->sent_sigkill && e.signal == SIGKILL;
        vmm_exited(v, &e);
        return 0;
}

static int on_pidfd(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        Vmm *v = userdata;
        /* Not our child: someone else reaps it, and its status is theirs (VMM-4). */
        VmmExit e = {.status_known = false, .killed_by_us = v->sent_sigkill};
        vmm_exited(v, &e);
        return 0;
}

int vmm_attach_event(Vmm *v, sd_event *event)
{
        int r;

        if (v->event)
                return -EBUSY;
        r = sd_event_add_defer(event, &v->notify, on_notify, v);
        if (r >= 0)
                r = sd_event_source_set_enabled(v->notify, SD_EVENT_OFF);
        if (r >= 0) {
                if (v->pidfd < 0)
                        r = sd_event_add_time_relative(event, &v->exit_source, CLOCK_MONOTONIC,
                                                       VMM_EXIT_POLL / NSEC_PER_USEC, 1000,
                                                       on_exit_poll, v);
                else if (v->is_child)
                        r = sd_event_add_child_pidfd(event, &v->exit_source, v->pidfd, WEXITED,
                                                     on_child, v);
                else
                        r = sd_event_add_io(event, &v->exit_source, v->pidfd, EPOLLIN, on_pidfd, v);
        }
        if (r < 0) {
                v->exit_source = sd_event_source_disable_unref(v->exit_source);
                v->notify = sd_event_source_disable_unref(v->notify);
                return r;
        }
        v->event = sd_event_ref(event);
        return 0;
}

/* ---- the ladder (VMM-10, VMM-11, VMM-12, VMM-13) -------------------------------------------- */

static void ladder_fail(Vmm *v)
{
        _cleanup_free_ char *text = NULL;
        if (strprintf(&text, "hypervisor pid %d did not exit after SIGKILL", (int)v->pid) < 0)
                text = NULL;
        v->phase = PHASE_IDLE;
        op_finish(v, &v->stop, -ETIMEDOUT, text);
}

/* Arms the phase's timer; a timer that cannot be had ends the stop as failed (VMM-11). */
static void ladder_wait(Vmm *v, VmmPhase phase, nsec_t wait)
{
        v->phase = phase;
        if (arm_timer(v, wait) < 0)
                ladder_fail(v);
}

/*
 * Through the pidfd; by pid only for a child without one (VMM-14), whose pid cannot be reused
 * before it is reaped, and the exit poll is what reaps it.
 */
static int send_signal(Vmm *v, int sig)
{
        if (v->pidfd >= 0)
                return vmm_pidfd_send_signal(v->pidfd, sig);
        return kill(v->pid, sig) < 0 ? negative_errno() : 0;
}

/* VMM-16: every signal sent is told to the owner, with why. */
static void signalled(Vmm *v, int sig, bool group, const char *reason)
{
        if (v->signalled)
                v->signalled(v, sig, group, reason, v->userdata);
}

/*
 * A SIGKILL, to the process (through the pidfd) or to its process group (VMM-3 made the
 * process its group's leader). Then the forced_kill callback for a VMM with VFIO (VMM-12);
 * false: the callback freed the Vmm.
 */
static bool ladder_kill(Vmm *v, bool group, const char *reason)
{
        if (!group) {
                (void)send_signal(v, SIGKILL);
                signalled(v, SIGKILL, false, reason);
        } else if (send_signal(v, 0) >= 0) {
                /* Only while the leader still runs is its pid surely the group's id. */
                (void)kill(-v->pid, SIGKILL);
                signalled(v, SIGKILL, true, reason);
        }
        v->sent_sigkill = true;
        ladder_wait(v, group ? PHASE_LADDER_GROUP : PHASE_LADDER_KILL, VMM_KILL_WAIT);

        if (v->has_vfio && v->forced_kill) {
                v->forced_kill(v, vmm_in_init_window(v), v->userdata);
                return !v->freed;
        }
        return true;
}

/*
 * Starts the ladder for reason (a literal, VMM-16's log line); never calls back but for
 * signalled (a VMM without VFIO gets no forced_kill).
 */
static void ladder_start(Vmm *v, const char *reason)
{
        v->qmp = vmm_qmp_free(v->qmp);
        v->ladder_reason = reason;
        if (v->has_vfio) {
                /* QEMU lets go of the VF cleanly on SIGTERM; a SIGKILL may wedge it. */
                (void)send_signal(v, SIGTERM);
                signalled(v, SIGTERM, false, reason);
                ladder_wait(v, PHASE_LADDER_TERM, v->vfio_term_grace);
                return;
        }
        (void)ladder_kill(v, false, reason);
}

/* ---- readiness (VMM-5) --------------------------------------------------------------------- */

static void ready_finish(Vmm *v, int r, const char *error)
{
        v->qmp = vmm_qmp_free(v->qmp);
        v->phase = PHASE_IDLE;
        op_finish(v, &v->ready, r, error);
}

/*
 * A QEMU that fails at start-up closes its sockets on the way out, a moment before its exit
 * can be seen: a hang-up during readiness waits VMM_EXIT_LINGER for the exit, so that the
 * failure reads as VMM-5 says (`qemu exited with status <n> before QMP was ready`) rather
 * than as a lost connection.
 */
static void ready_fail(Vmm *v, int r, const char *error)
{
        if (r != -ECONNRESET && r != -EPIPE) {
                ready_finish(v, r, error);
                return;
        }
        v->qmp = vmm_qmp_free(v->qmp);
        free(v->linger_error);
        v->linger_error = error ? strdup(error) : NULL;
        v->linger_r = r;
        v->phase = PHASE_READY_LINGER;
        if (arm_timer(v, VMM_EXIT_LINGER) < 0)
                ready_finish(v, r, error);
}

static void on_ready_kvm(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        Vmm *v = userdata;
        if (r < 0) {
                ready_fail(v, r, error);
                return;
        }
        json_t *enabled = json_object_get(value, "enabled");
        if (!json_is_boolean(enabled)) {
                ready_finish(v, -EBADMSG, "qmp query-kvm: reply has no \"enabled\" boolean");
                return;
        }
        ready_finish(v, json_is_true(enabled) ? 1 : 0, NULL);
}

static void on_ready_status(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        Vmm *v = userdata;
        if (r < 0) {
                ready_fail(v, r, error);
                return;
        }

        const char *status = json_string_value(json_object_get(value, "status"));
        if (!status) {
                ready_finish(v, -EBADMSG, "qmp query-status: reply has no \"status\" string");
                return;
        }
        if (!streq(status, "running")) {
                _cleanup_free_ char *shown = escape_text(status, strlen(status), 64, ESCAPE_QUOTE);
                _cleanup_free_ char *text = NULL;
                if (!shown || strprintf(&text, "qmp query-status: status is %s, not \"running\"",
                                        shown) < 0) {
                        ready_finish(v, -ENOMEM, NULL);
                        return;
                }
                ready_finish(v, -EIO, text);
                return;
        }
        if (!v->query_kvm) {
                ready_finish(v, 0, NULL);
                return;
        }
        v->phase = PHASE_READY_KVM;
        r = vmm_qmp_execute(q, "query-kvm", on_ready_kvm, v);
        if (r < 0)
                ready_finish(v, r, NULL);
}

static void on_ready_connected(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        Vmm *v = userdata;
        if (r < 0) {
                ready_fail(v, r, error);
                return;
        }
        v->phase = PHASE_READY_STATUS;
        r = vmm_qmp_execute(q, "query-status", on_ready_status, v);
        if (r < 0)
                ready_finish(v, r, NULL);
}

int vmm_wait_ready(Vmm *v, nsec_t boot_timeout, bool query_kvm, VmmDoneFunc done, void *userdata)
{
        if (!v->event || !v->qmp_socket)
                return -EINVAL;
        if (v->ready.active || v->ready.finished || v->stop.active)
                return -EBUSY;

        v->ready = (VmmOp){.active = true, .done = done, .userdata = userdata};
        if (v->exited) {
                _cleanup_free_ char *text = NULL;
                exit_text(&v->exit, &text);
                op_finish(v, &v->ready, -ESRCH, text);
                return 0;
        }

        v->query_kvm = query_kvm;
        v->phase = PHASE_READY_CONNECT;
        int r =
            vmm_qmp_connect(v->event, v->qmp_socket, boot_timeout, on_ready_connected, v, &v->qmp);
        if (r < 0) {
                v->ready = (VmmOp){0};
                v->phase = PHASE_IDLE;
                return r;
        }
        return 0;
}

/* ---- stop (VMM-9) -------------------------------------------------------------------------- */

static void on_stop_quit(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        Vmm *v = userdata;
        if (r < 0) {
                ladder_start(v, "qmp quit failed");
                return;
        }
        v->phase = PHASE_STOP_QUIT_WAIT;
        if (arm_timer(v, VMM_QUIT_TIMEOUT) < 0)
                ladder_start(v, "no timer for the wait after quit");
}

static void stop_quit(Vmm *v)
{
        v->phase = PHASE_STOP_QUIT;
        if (!vmm_qmp_is_alive(v->qmp) || vmm_qmp_execute(v->qmp, "quit", on_stop_quit, v) < 0)
                ladder_start(v, "QMP lost before quit");
}

static void on_stop_powerdown(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        Vmm *v = userdata;
        if (r == -EREMOTEIO) {
                /* QEMU answers but refuses: quit is the next way out. */
                stop_quit(v);
                return;
        }
        if (r < 0) {
                ladder_start(v, "qmp system_powerdown failed");
                return;
        }
        v->phase = PHASE_STOP_GRACE;
        if (arm_timer(v, v->graceful_timeout) < 0)
                stop_quit(v);
}

static void on_stop_connected(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        Vmm *v = userdata;
        if (r < 0) {
                /* VMM-9: an unreachable QMP goes straight to the ladder. */
                ladder_start(v, "QMP unreachable");
                return;
        }
        v->phase = PHASE_STOP_POWERDOWN;
        if (vmm_qmp_execute(q, "system_powerdown", on_stop_powerdown, v) < 0)
                ladder_start(v, "qmp system_powerdown failed");
}

int vmm_stop(Vmm *v, nsec_t graceful_timeout, VmmDoneFunc done, void *userdata)
{
        if (!v->event)
                return -EINVAL;
        if (v->stop.active || v->stop.finished)
                return -EBUSY;

        if (v->ready.active)
                ready_finish(v, -ECANCELED, "readiness wait cancelled by a stop");
        disarm_timer(v);

        v->stop = (VmmOp){.active = true, .done = done, .userdata = userdata};
        if (v->exited) {
                op_finish(v, &v->stop, 0, NULL);
                return 0;
        }

        v->graceful_timeout = graceful_timeout;
        if (graceful_timeout == 0 || !v->qmp_socket) {
                ladder_start(v, graceful_timeout == 0 ? "termination requested"
                                                      : "no QMP socket to stop it through");
                return 0;
        }
        v->phase = PHASE_STOP_CONNECT;
        if (vmm_qmp_connect(v->event, v->qmp_socket, 0, on_stop_connected, v, &v->qmp) < 0)
                ladder_start(v, "QMP unreachable");
        return 0;
}

int vmm_terminate(Vmm *v, VmmDoneFunc done, void *userdata)
{
        return vmm_stop(v, 0, done, userdata);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata)
{
        Vmm *v = userdata;

        v->n_ref++;
        switch (v->phase) {
        case PHASE_READY_LINGER: {
                _cleanup_free_ char *error = TAKE_PTR(v->linger_error);
                ready_finish(v, v->linger_r, error);
                break;
        }
        case PHASE_STOP_GRACE:
                stop_quit(v);
                break;
        case PHASE_STOP_QUIT_WAIT:
                ladder_start(v, "no exit within 5s of quit");
                break;
        case PHASE_LADDER_TERM:
                (void)ladder_kill(v, false, "no exit within gpu.vfio_term_grace of SIGTERM");
                break;
        case PHASE_LADDER_KILL:
                (void)ladder_kill(v, true, "no exit within 2s of SIGKILL");
                break;
        case PHASE_LADDER_GROUP:
                ladder_fail(v);
                break;
        default:
                break; /* the QMP phases wait on the session's own timers */
        }
        vmm_unref(v);
        return 0;
}
