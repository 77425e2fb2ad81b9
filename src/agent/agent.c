/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "agent/agent.h"

#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sys/signalfd.h>

#include "agent/guest.h"
#include "config.h"

void agent_options_init(AgentOptions *o)
{
        *o = (AgentOptions){
            .serial = AGENT_DEFAULT_SERIAL,
            .gpu_watch = GPU_WATCH_AUTO,
            .kmsg = AGENT_DEFAULT_KMSG,
            .pci_root = AGENT_DEFAULT_PCI_ROOT,
            .nvidia_smi = NULL,
            .probe_kill_after = 30 * NSEC_PER_SEC,
            .probe_retry_after = 15 * NSEC_PER_SEC,
            .probe_give_up_after = 10 * NSEC_PER_MIN,
            .kmsg_reopen_after = 60 * NSEC_PER_SEC,
            .dev_root = AGENT_DEFAULT_DEV_ROOT,
        };
}

const char *agent_usage(void)
{
        return "Usage: vgpu-agent [OPTIONS]\n"
               "\n"
               "Watches the guest's NVIDIA driver and answers the host over virtio-serial.\n"
               "\n"
               "  --serial PATH              the port (default " AGENT_DEFAULT_SERIAL ")\n"
               "  --gpu-watch auto|on|off    watch the GPU's init (default auto)\n"
               "  --kmsg PATH                the kernel log (default " AGENT_DEFAULT_KMSG ")\n"
               "  --pci-root PATH            the sysfs root (default " AGENT_DEFAULT_PCI_ROOT ")\n"
               "  --nvidia-smi PATH          the probe binary (default: nvidia-smi on PATH)\n"
               "  --probe-kill-after D       kill a probe attempt after D (default 30s)\n"
               "  --probe-retry-after D      retry a failed probe after D (default 15s)\n"
               "  --probe-give-up-after D    stop retrying D after the first (default 10m)\n"
               "  --kmsg-reopen-after D      retry opening the kernel log after D (default 60s)\n"
               "  --version                  print the version and exit\n"
               "  --help                     print this text and exit\n";
}

enum {
        ARG_SERIAL = 0x100,
        ARG_GPU_WATCH,
        ARG_KMSG,
        ARG_PCI_ROOT,
        ARG_NVIDIA_SMI,
        ARG_PROBE_KILL_AFTER,
        ARG_PROBE_RETRY_AFTER,
        ARG_PROBE_GIVE_UP_AFTER,
        ARG_KMSG_REOPEN_AFTER,
        ARG_VERSION,
        ARG_HELP,
};

static int parse_duration_arg(const char *name, const char *value, nsec_t *ret, char **error)
{
        int r = parse_duration(value, ret);
        if (r < 0) {
                _cleanup_free_ char *v = escape_text(value, strlen(value), 64, ESCAPE_QUOTE);
                return error_set(error, -EINVAL, "--%s: invalid duration %s (like 30s, 1m30s)",
                                 name, v ? v : "");
        }
        return 0;
}

static int parse_path_arg(const char *name, const char *value, const char **ret, char **error)
{
        if (!*value)
                return error_set(error, -EINVAL, "--%s: empty path", name);
        *ret = value;
        return 0;
}

int agent_parse_args(int argc, char **argv, AgentOptions *o, AgentArgs *ret, char **error)
{
        static const struct option longopts[] = {
            {"serial", required_argument, NULL, ARG_SERIAL},
            {"gpu-watch", required_argument, NULL, ARG_GPU_WATCH},
            {"kmsg", required_argument, NULL, ARG_KMSG},
            {"pci-root", required_argument, NULL, ARG_PCI_ROOT},
            {"nvidia-smi", required_argument, NULL, ARG_NVIDIA_SMI},
            {"probe-kill-after", required_argument, NULL, ARG_PROBE_KILL_AFTER},
            {"probe-retry-after", required_argument, NULL, ARG_PROBE_RETRY_AFTER},
            {"probe-give-up-after", required_argument, NULL, ARG_PROBE_GIVE_UP_AFTER},
            {"kmsg-reopen-after", required_argument, NULL, ARG_KMSG_REOPEN_AFTER},
            {"version", no_argument, NULL, ARG_VERSION},
            {"help", no_argument, NULL, ARG_HELP},
            {},
        };
        AgentOptions opts = *o;
        AgentArgs what = AGENT_ARGS_RUN;
        int c, r = 0;

        optind = 0; /* glibc: start over, so that tests can parse more than once */
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":", longopts, NULL)) >= 0) {
                switch (c) {
                case ARG_SERIAL:
                        r = parse_path_arg("serial", optarg, &opts.serial, error);
                        break;
                case ARG_GPU_WATCH:
                        if (streq(optarg, "auto"))
                                opts.gpu_watch = GPU_WATCH_AUTO;
                        else if (streq(optarg, "on"))
                                opts.gpu_watch = GPU_WATCH_ON;
                        else if (streq(optarg, "off"))
                                opts.gpu_watch = GPU_WATCH_OFF;
                        else {
                                _cleanup_free_ char *v =
                                    escape_text(optarg, strlen(optarg), 64, ESCAPE_QUOTE);
                                r = error_set(error, -EINVAL,
                                              "--gpu-watch: %s is not auto, on or off", v ? v : "");
                        }
                        break;
                case ARG_KMSG:
                        r = parse_path_arg("kmsg", optarg, &opts.kmsg, error);
                        break;
                case ARG_PCI_ROOT:
                        r = parse_path_arg("pci-root", optarg, &opts.pci_root, error);
                        break;
                case ARG_NVIDIA_SMI:
                        r = parse_path_arg("nvidia-smi", optarg, &opts.nvidia_smi, error);
                        break;
                case ARG_PROBE_KILL_AFTER:
                        r = parse_duration_arg("probe-kill-after", optarg, &opts.probe_kill_after,
                                               error);
                        break;
                case ARG_PROBE_RETRY_AFTER:
                        r = parse_duration_arg("probe-retry-after", optarg, &opts.probe_retry_after,
                                               error);
                        break;
                case ARG_PROBE_GIVE_UP_AFTER:
                        r = parse_duration_arg("probe-give-up-after", optarg,
                                               &opts.probe_give_up_after, error);
                        break;
                case ARG_KMSG_REOPEN_AFTER:
                        r = parse_duration_arg("kmsg-reopen-after", optarg, &opts.kmsg_reopen_after,
                                               error);
                        break;
                case ARG_VERSION:
                        what = AGENT_ARGS_VERSION;
                        break;
                case ARG_HELP:
                        what = AGENT_ARGS_HELP;
                        break;
                case ':':
                        r = error_set(error, -EINVAL, "%s needs a value", argv[optind - 1]);
                        break;
                default: {
                        const char *bad = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
                        _cleanup_free_ char *v = escape_text(bad, strlen(bad), 64, ESCAPE_QUOTE);
                        r = error_set(error, -EINVAL, "unknown option %s", v ? v : "");
                        break;
                }
                }
                if (r < 0)
                        return r;
        }
        if (optind < argc) {
                _cleanup_free_ char *v =
                    escape_text(argv[optind], strlen(argv[optind]), 64, ESCAPE_QUOTE);
                return error_set(error, -EINVAL, "unexpected argument %s", v ? v : "");
        }

        *o = opts;
        *ret = what;
        return 0;
}

/* ---- the agent ----------------------------------------------------------------------------- */

static nsec_t agent_clock_monotonic(void *userdata)
{
        return agent_now();
}

static nsec_t agent_clock(const Agent *a)
{
        return a->clock(a->clock_userdata);
}

void agent_set_clock(Agent *a, AgentClockFn clock, void *userdata)
{
        a->clock = clock;
        a->clock_userdata = userdata;
}

nsec_t agent_now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

static nsec_t add_sat(nsec_t a, nsec_t b)
{
        return a > NSEC_INFINITY - b ? NSEC_INFINITY : a + b;
}

static void agent_on_match(void *userdata, const char *message)
{
        Agent *a = userdata;
        int r = gpu_state_record_failure(&a->gpu, message);
        if (r < 0)
                log_error_errno(r, "record GPU init failure: %m");
}

int agent_new(const AgentOptions *o, Agent **ret, char **error)
{
        _cleanup_(agent_freep) Agent *a = calloc(1, sizeof *a);
        if (!a)
                return error_set_oom(error);
        a->options = *o;
        a->clock = agent_clock_monotonic;
        a->signal_fd = -1;
        a->port_fd = -1;
        a->gpu = (GpuState)GPU_STATE_INIT;
        conn_init(&a->conn);
        a->kmsg.fd = -1;
        a->probe.out_fd = -1;

        if (kmsg_watcher_init(&a->kmsg, o->kmsg, o->kmsg_reopen_after, agent_on_match, a) < 0 ||
            probe_init(&a->probe, o->nvidia_smi, o->probe_kill_after, o->probe_retry_after,
                       o->probe_give_up_after) < 0)
                return error_set_oom(error);

        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &mask, &a->saved_mask) < 0)
                return error_set(error, negative_errno(), "block signals: %m");
        a->mask_saved = true;
        a->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (a->signal_fd < 0)
                return error_set(error, negative_errno(), "signalfd: %m");

        /* A host that goes away while a reply is written must not end the agent. */
        signal(SIGPIPE, SIG_IGN);

        *ret = TAKE_PTR(a);
        return 0;
}

Agent *agent_free(Agent *a)
{
        if (!a)
                return NULL;
        probe_done(&a->probe);
        kmsg_watcher_done(&a->kmsg);
        gpu_state_done(&a->gpu);
        conn_done(&a->conn);
        if (a->port_fd >= 0)
                close(a->port_fd);
        free(a->port_path);
        if (a->signal_fd >= 0)
                close(a->signal_fd);
        if (a->mask_saved)
                sigprocmask(SIG_SETMASK, &a->saved_mask, NULL);
        free(a);
        return NULL;
}

void agent_set_port_fd(Agent *a, int fd)
{
        if (a->port_fd >= 0)
                close(a->port_fd);
        a->port_fd = fd;
}

static int open_port(const char *path)
{
        int fd = open(path, O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        return fd < 0 ? negative_errno() : fd;
}

/* AGENT-1: --serial, else the port named org.vgpud.agent.0 (no udev, so no symlink). */
static void agent_open_port(Agent *a, nsec_t now)
{
        const AgentOptions *o = &a->options;
        _cleanup_free_ char *path = strdup(o->serial);
        if (!path) {
                log_error("open the virtio-serial port: out of memory");
                a->port_retry_at = add_sat(now, AGENT_PORT_RETRY);
                return;
        }

        int fd = open_port(path);
        if (fd == -ENOENT) {
                _cleanup_free_ char *entry = NULL;
                if (guest_find_port_entry(o->pci_root, &entry) >= 0) {
                        free(path);
                        path = NULL;
                        if (strprintf(&path, "%s/%s", o->dev_root, entry) < 0)
                                fd = -ENOMEM;
                        else
                                fd = open_port(path);
                }
        }

        if (fd < 0) {
                if (fd != a->port_last_error) {
                        if (fd == -ENOENT)
                                log_notice("virtio-serial port %s not found (%s, nor a "
                                           "%s/class/virtio-ports entry of that name); looking "
                                           "again every second",
                                           AGENT_PORT_NAME, o->serial, o->pci_root);
                        else
                                log_warning_errno(fd,
                                                  "open virtio-serial port %s: %m; trying again "
                                                  "every second",
                                                  path ? path : o->serial);
                        a->port_last_error = fd;
                }
                a->port_retry_at = add_sat(now, AGENT_PORT_RETRY);
                return;
        }

        log_info("serving host requests on %s", path);
        a->port_fd = fd;
        a->port_last_error = 0;
        free(a->port_path);
        a->port_path = TAKE_PTR(path);
}

static void agent_start_watch(Agent *a, nsec_t now)
{
        const AgentOptions *o = &a->options;

        switch (o->gpu_watch) {
        case GPU_WATCH_OFF:
                log_info("GPU watch off; GPU state stays unknown");
                return;
        case GPU_WATCH_AUTO: {
                int r = guest_has_nvidia_device(o->pci_root);
                if (r < 0) {
                        log_warning_errno(r,
                                          "GPU watch: read %s/bus/pci/devices: %m; GPU state "
                                          "stays unknown",
                                          o->pci_root);
                        return;
                }
                if (r == 0) {
                        log_info("GPU watch: no NVIDIA device under %s/bus/pci/devices; GPU "
                                 "state stays unknown",
                                 o->pci_root);
                        return;
                }
                break;
        }
        case GPU_WATCH_ON:
                break;
        }

        a->watching = true;
        kmsg_watcher_start(&a->kmsg, now);
        probe_start(&a->probe, now);
}

void agent_start(Agent *a, nsec_t now)
{
        log_info("vgpu-agent " VGPUD_VERSION " starting");
        if (a->port_fd < 0)
                agent_open_port(a, now);
        agent_start_watch(a, now);
}

/*
 * AGENT-19: no host is connected. Keep the descriptor; look again a little later. Only the
 * unfinished request goes: a reply waits under AGENT-17's 5 s limit, since the guest may see
 * the next host's request before the previous host's hang-up, and that reply is the new host's.
 */
static void agent_port_hangup(Agent *a, nsec_t now)
{
        if (a->conn.in_len > 0)
                log_debug("host disconnected; dropping its unfinished request");
        conn_drop_partial(&a->conn);
        a->hangups++;
        a->port_paused = true;
        a->port_resume_at = add_sat(now, AGENT_PORT_PAUSE);
}

/*
 * The port failed in a way that is not a missing host (the device went away: ENODEV, or the
 * descriptor is not a port at all): close it and look it up again every second, as at start-up.
 * Logged once per error, since a port that stays broken would otherwise log four times a second.
 */
static void agent_port_failed(Agent *a, int r, const char *action, nsec_t now)
{
        if (r != a->port_last_failure)
                log_warning_errno(r, "%s virtio-serial port %s: %m; reopening it every second",
                                  action, a->port_path ? a->port_path : "(given)");
        a->port_last_failure = r;
        a->port_failures++;
        conn_reset(&a->conn);
        close(a->port_fd);
        a->port_fd = -1;
        a->port_paused = false;
        a->port_retry_at = add_sat(now, AGENT_PORT_RETRY);
}

static bool is_hangup_error(int r)
{
        return r == -EPIPE || r == -EIO || r == -ECONNRESET;
}

static void agent_port_flush(Agent *a, nsec_t now)
{
        int r = conn_flush(&a->conn, a->port_fd);
        if (is_hangup_error(r))
                agent_port_hangup(a, now);
        else if (r < 0)
                agent_port_failed(a, r, "write to", now);
}

static void agent_port_read(Agent *a, nsec_t now)
{
        size_t room;
        char *buf = conn_read_buffer(&a->conn, &room);
        ssize_t k = read(a->port_fd, buf, room);
        int r = k < 0 ? negative_errno() : 0;
        if (r == -EINTR || r == -EAGAIN)
                return;
        /* A tty-like port (a pty in tests, a console) reports a missing peer as EIO. */
        if (k == 0 || is_hangup_error(r)) {
                agent_port_hangup(a, now);
                return;
        }
        if (r < 0) {
                agent_port_failed(a, r, "read", now);
                return;
        }

        a->requests_read++;
        r = conn_received(&a->conn, (size_t)k, &a->gpu, now);
        if (r < 0) {
                log_error_errno(r, "answer host request: %m; connection buffers reset");
                conn_reset(&a->conn);
                return;
        }
        if (conn_has_output(&a->conn))
                agent_port_flush(a, now);
}

static void agent_on_timers(Agent *a, nsec_t now)
{
        if (a->port_fd < 0 && now >= a->port_retry_at)
                agent_open_port(a, now);
        if (a->port_paused && now >= a->port_resume_at)
                a->port_paused = false;
        if (conn_has_output(&a->conn) &&
            now >= add_sat(a->conn.out_since, PROTOCOL_WRITE_TIMEOUT)) {
                char d[DURATION_STRLEN];
                log_warning("reply not written to the virtio-serial port within %s; dropped, "
                            "connection buffers reset",
                            format_duration(PROTOCOL_WRITE_TIMEOUT, d));
                a->write_timeouts++;
                conn_reset(&a->conn);
        }
        if (a->watching) {
                kmsg_watcher_on_timer(&a->kmsg, now);
                probe_on_timer(&a->probe, now);
        }
}

static nsec_t agent_next_deadline(const Agent *a)
{
        nsec_t next = NSEC_INFINITY;
#define EARLIER(t)                 \
        do {                       \
                nsec_t _t = (t);   \
                if (_t < next)     \
                        next = _t; \
        } while (0)
        if (a->port_fd < 0)
                EARLIER(a->port_retry_at);
        if (a->port_paused)
                EARLIER(a->port_resume_at);
        if (conn_has_output(&a->conn))
                EARLIER(add_sat(a->conn.out_since, PROTOCOL_WRITE_TIMEOUT));
        if (a->watching) {
                EARLIER(kmsg_watcher_deadline(&a->kmsg));
                EARLIER(probe_deadline(&a->probe));
        }
#undef EARLIER
        return next;
}

static void agent_on_signals(Agent *a, nsec_t now)
{
        struct signalfd_siginfo si;

        for (;;) {
                ssize_t k = read(a->signal_fd, &si, sizeof si);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k != (ssize_t)sizeof si)
                        return;
                switch (si.ssi_signo) {
                case SIGTERM:
                case SIGINT:
                        log_info("vgpu-agent stopping on %s",
                                 si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
                        a->quit = true;
                        break;
                case SIGCHLD:
                        /* Signals coalesce: one SIGCHLD may stand for several exits, and the
                         * probe reaps by pid, so other children are left alone. */
                        if (probe_on_sigchld(&a->probe, now) == PROBE_RESULT_OK)
                                gpu_state_record_success(&a->gpu);
                        break;
                }
        }
}

int agent_step(Agent *a, nsec_t max_wait)
{
        enum { FD_SIGNAL, FD_PORT, FD_KMSG, FD_PROBE, FD_COUNT };
        struct pollfd pfd[FD_COUNT];
        nsec_t now = agent_clock(a);

        agent_on_timers(a, now);
        if (a->quit)
                return 1;

        for (size_t i = 0; i < FD_COUNT; i++)
                pfd[i] = (struct pollfd){.fd = -1};
        pfd[FD_SIGNAL] = (struct pollfd){.fd = a->signal_fd, .events = POLLIN};
        if (a->port_fd >= 0 && !a->port_paused)
                /* Replies are written before more requests are read: order and a bound on what
                 * the agent holds come from the same rule. */
                pfd[FD_PORT] = (struct pollfd){
                    .fd = a->port_fd, .events = conn_has_output(&a->conn) ? POLLOUT : POLLIN};
        if (a->watching) {
                pfd[FD_KMSG] = (struct pollfd){.fd = kmsg_watcher_fd(&a->kmsg), .events = POLLIN};
                pfd[FD_PROBE] = (struct pollfd){.fd = probe_fd(&a->probe), .events = POLLIN};
        }

        nsec_t deadline = agent_next_deadline(a);
        nsec_t wait = deadline <= now ? 0 : deadline - now;
        if (wait > max_wait)
                wait = max_wait;
        /* Rounded up, so that a timer is never woken for early and polled again at once. */
        nsec_t ms = (wait + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC;
        int timeout = ms > INT32_MAX ? -1 : (int)ms;
        if (max_wait == NSEC_INFINITY && deadline == NSEC_INFINITY)
                timeout = -1;

        int n = poll(pfd, FD_COUNT, timeout);
        if (n < 0)
                return errno == EINTR ? 0 : negative_errno();
        a->wakeups++;
        now = agent_clock(a);

        if (pfd[FD_SIGNAL].revents)
                agent_on_signals(a, now);

        short rev = pfd[FD_PORT].revents;
        if (pfd[FD_PORT].fd >= 0 && rev) {
                if (rev & POLLNVAL)
                        agent_port_hangup(a, now);
                else if (rev & POLLIN)
                        agent_port_read(a, now);
                else if (rev & POLLOUT)
                        agent_port_flush(a, now);
                else if (rev & (POLLHUP | POLLERR))
                        agent_port_hangup(a, now);
        }

        if (pfd[FD_KMSG].fd >= 0 && pfd[FD_KMSG].revents)
                kmsg_watcher_on_readable(&a->kmsg, now);
        if (pfd[FD_PROBE].fd >= 0 && pfd[FD_PROBE].revents)
                probe_on_output(&a->probe);

        return a->quit ? 1 : 0;
}

int agent_run(Agent *a)
{
        for (;;) {
                int r = agent_step(a, NSEC_INFINITY);
                if (r < 0)
                        return log_error_errno(r, "poll: %m");
                if (r > 0)
                        return 0;
        }
}
