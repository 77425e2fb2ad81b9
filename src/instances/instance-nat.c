/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NAT network's host side kept equal to the records (NET-4, NET-6, NET-8, REL-14): a pass of
 * net_nat_sync() on the helper pool whenever the NAT instances change and on every reconcile
 * pass, one at a time (a request during a pass runs one more pass after it, from the records
 * as they are then), and dnsmasq as a supervised child: spawned through the spawn primitive
 * once its files exist, sent SIGHUP when a hosts file changed, restarted when its configuration
 * did, and restarted with backoff (1 s doubling to 30 s) when it exits.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "instances/instance-internal.h"

#define NAT_SYNC_TIMEOUT (30 * NSEC_PER_SEC)
#define DNSMASQ_BACKOFF_FIRST NSEC_PER_SEC
#define DNSMASQ_BACKOFF_MAX (30 * NSEC_PER_SEC)
/* A dnsmasq that ran this long before it exited starts again after the first backoff. */
#define DNSMASQ_STABLE (60 * NSEC_PER_SEC)
#define RESOLV_CONF "/etc/resolv.conf"

struct InstanceNat {
        InstanceManager *m;
        bool busy, again;
        char *error;           /* the last pass's failure; NULL after a pass that succeeded */
        char *records_problem; /* NET-5: why the records' addresses disagree; NULL when not */
        bool passed;           /* a pass has succeeded since start-up */
        uint64_t errors[_NET_STEP_MAX];
        char *dir; /* <runtime_dir>/network */
        /* dnsmasq */
        pid_t pid; /* 0 when none runs */
        int pidfd;
        sd_event_source *child, *timer;
        bool restart_now; /* vgpud ended it for a new configuration: no backoff, not counted */
        bool stopping;    /* the manager is going away */
        nsec_t backoff, started;
        uint64_t restarts;
};

static int pidfd_signal(int pidfd, int sig)
{
        return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0 ? negative_errno() : 0;
}

static nsec_t now_mono(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

/* ---- dnsmasq, supervised (NET-6) ----------------------------------------------------------- */

static void dnsmasq_spawn(InstanceNat *n);

static int dnsmasq_timer_fired(sd_event_source *s, uint64_t usec, void *userdata)
{
        InstanceNat *n = userdata;
        n->timer = sd_event_source_unref(n->timer);
        dnsmasq_spawn(n);
        return 0;
}

static void dnsmasq_schedule(InstanceNat *n, nsec_t delay)
{
        if (n->timer || n->stopping || !n->m->event)
                return;
        int r = sd_event_add_time_relative(n->m->event, &n->timer, CLOCK_MONOTONIC,
                                           delay / NSEC_PER_USEC, 0, dnsmasq_timer_fired, n);
        if (r < 0)
                log_line(LOG_LEVEL_ERR, r, "cannot schedule dnsmasq's restart", NULL);
}

static int dnsmasq_exited(sd_event_source *s, const siginfo_t *si, void *userdata)
{
        InstanceNat *n = userdata;
        n->child = sd_event_source_unref(n->child);
        closep(&n->pidfd);
        n->pid = 0;
        if (n->stopping)
                return 0;
        if (n->restart_now) {
                n->restart_now = false;
                dnsmasq_spawn(n);
                return 0;
        }
        char status[32];
        snprintf(status, sizeof status, "%s %d", si->si_code == CLD_EXITED ? "status" : "signal",
                 si->si_status);
        if (now_mono() - n->started >= DNSMASQ_STABLE)
                n->backoff = DNSMASQ_BACKOFF_FIRST;
        char delay[DURATION_STRLEN];
        log_line(LOG_LEVEL_ERR, 0, "dnsmasq exited; restarting", "exit", status, "after",
                 format_duration(n->backoff, delay), NULL);
        n->restarts++;
        dnsmasq_schedule(n, n->backoff);
        n->backoff = n->backoff * 2 > DNSMASQ_BACKOFF_MAX ? DNSMASQ_BACKOFF_MAX : n->backoff * 2;
        return 0;
}

static void dnsmasq_spawn(InstanceNat *n)
{
        InstanceManager *m = n->m;
        if (n->pid || n->stopping || !m->event)
                return;
        _cleanup_free_ char *conf = NULL, *log = NULL;
        if (strprintf(&conf, "--conf-file=%s/" NET_DNSMASQ_CONF, n->dir) < 0 ||
            strprintf(&log, "%s/dnsmasq.log", n->dir) < 0)
                return;
        char *const argv[] = {m->config->network.dnsmasq_binary, (char *)"--keep-in-foreground",
                              conf, (char *)"--log-facility=-", NULL};
        _cleanup_close_ int out =
            open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.argv = argv;
        req.stdout_fd = out;
        req.stderr_fd = out;
        SpawnedChild child;
        _cleanup_free_ char *error = NULL;
        int r = out < 0 ? -errno : spawn_start(&req, &child, &error);
        if (r >= 0 && child.pidfd < 0) {
                /* Unwatched it would run on unseen; it is ours, unreaped, so its pid is safe. */
                (void)kill(child.pid, SIGKILL);
                (void)waitpid(child.pid, NULL, 0);
                r = child.pidfd_error;
        }
        if (r >= 0) {
                r = sd_event_add_child_pidfd(m->event, &n->child, child.pidfd, WEXITED,
                                             dnsmasq_exited, n);
                if (r < 0) {
                        (void)pidfd_signal(child.pidfd, SIGKILL);
                        (void)waitpid(child.pid, NULL, 0);
                        close(child.pidfd);
                }
        }
        if (r < 0) {
                n->errors[NET_STEP_DNSMASQ]++;
                log_line(LOG_LEVEL_ERR, r, "cannot start dnsmasq", "error",
                         error ? error : strerror(-r), NULL);
                n->restarts++;
                dnsmasq_schedule(n, n->backoff);
                n->backoff =
                    n->backoff * 2 > DNSMASQ_BACKOFF_MAX ? DNSMASQ_BACKOFF_MAX : n->backoff * 2;
                return;
        }
        (void)sd_event_source_set_child_process_own(n->child, true);
        n->pid = child.pid;
        n->pidfd = child.pidfd;
        n->started = now_mono();
        char pid[16];
        snprintf(pid, sizeof pid, "%d", (int)child.pid);
        log_line(LOG_LEVEL_INFO, 0, "dnsmasq started", "pid", pid, NULL);
}

/* ---- the pass ------------------------------------------------------------------------------ */

typedef struct NatPass {
        InstanceNat *n;
        NetNatHost host;
        NetForward *forwards;
        NetHost *hosts;
        char **strings; /* what host and hosts borrow */
        char **servers;
        char **taps;
        NetNatOutcome out;
        char *bridge, *proc_root, *dir;
        bool first; /* the first pass since start-up: a dnsmasq left by a killed vgpud goes */
} NatPass;

static void nat_pass_free(void *data)
{
        NatPass *p = data;
        free(p->forwards);
        free(p->hosts);
        strv_free(p->strings);
        strv_free(p->servers);
        strv_free(p->taps);
        free(p->bridge);
        free(p->proc_root);
        free(p->dir);
        free(p);
}

static int nat_pass_run(void *data, char **error)
{
        NatPass *p = data;
        int r = net_resolv_servers(RESOLV_CONF, &p->servers);
        if (r < 0)
                p->servers = NULL; /* no upstream servers; names under vgpud.internal still work */
        p->host.servers = p->servers;
        if (p->first && net_dnsmasq_stop_stale(p->dir, p->proc_root) > 0)
                log_line(LOG_LEVEL_NOTICE, 0, "stopped the dnsmasq a previous vgpud left", NULL);
        return net_nat_sync(&p->host, &p->out, error);
}

static void nat_pass_start(InstanceNat *n);

static void nat_pass_done(int r, void *data, const char *error, void *userdata)
{
        InstanceNat *n = userdata;
        NatPass *p = data;
        n->busy = false;
        if (r < 0) {
                NetStep step = p && p->out.failed < _NET_STEP_MAX ? p->out.failed : NET_STEP_LINK;
                n->errors[step]++;
                /* Logged when it changes, not on every pass. */
                if (!streq_ptr(n->error, error))
                        log_line(LOG_LEVEL_ERR, r, "NAT network pass failed", "step",
                                 net_step_to_string(step), "error", error, NULL);
                free(n->error);
                n->error = strdup(error ? error : strerror(-r));
        } else {
                if (n->error)
                        log_line(LOG_LEVEL_NOTICE, 0, "NAT network pass succeeded again", NULL);
                free(n->error);
                n->error = NULL;
                n->passed = true;
                if (p->out.ip_forward_set)
                        log_line(LOG_LEVEL_NOTICE, 0, "net.ipv4.ip_forward set to 1", NULL);
                if (!n->pid)
                        dnsmasq_spawn(n);
                else if (p->out.conf_changed) {
                        n->restart_now = true;
                        (void)pidfd_signal(n->pidfd, SIGTERM);
                } else if (p->out.hosts_changed)
                        (void)pidfd_signal(n->pidfd, SIGHUP);
        }
        if (n->again) {
                n->again = false;
                nat_pass_start(n);
        }
}

static int take(NatPass *p, const char *s, const char **ret)
{
        if (strv_push(&p->strings, s) < 0)
                return -ENOMEM;
        *ret = p->strings[strv_length(p->strings) - 1];
        return 0;
}

/* The records as they are now: every nat instance with an address, and its forwards. */
static int nat_pass_new(InstanceNat *n, NatPass **ret)
{
        InstanceManager *m = n->m;
        const ConfigNat *c = &m->config->network.nat;
        NatPass *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->n = n;
        p->first = !n->passed && !n->pid;
        size_t n_hosts = 0, n_forwards = 0;
        for (size_t k = 0; k < m->n_instances; k++) {
                const InstanceNetwork *w = &m->instances[k]->rec.network;
                if (w->mode == INSTANCE_NETWORK_NAT && w->ip && w->mac) {
                        n_hosts++;
                        n_forwards += w->n_ports;
                }
        }
        int r = 0;
        if ((n_hosts && !(p->hosts = calloc(n_hosts, sizeof *p->hosts))) ||
            (n_forwards && !(p->forwards = calloc(n_forwards, sizeof *p->forwards))) ||
            !(p->bridge = strdup(c->bridge)) || !(p->proc_root = strdup(m->config->proc_root)) ||
            !(p->dir = strdup(n->dir)))
                r = -ENOMEM;
        if (r >= 0)
                r = net_subnet_parse(c->subnet, &p->host.subnet);
        for (size_t k = 0; r >= 0 && k < m->n_instances; k++) {
                const InstanceRecord *rec = &m->instances[k]->rec;
                const InstanceNetwork *w = &rec->network;
                uint32_t addr;
                if (w->mode != INSTANCE_NETWORK_NAT || !w->ip || !w->mac ||
                    parse_ipv4(w->ip, &addr) < 0)
                        continue;
                char tap[IFNAMSIZ];
                if (rec->state == INSTANCE_RUNNING && net_tap_name(rec->id, tap) >= 0 &&
                    (r = strv_push(&p->taps, tap)) < 0)
                        break;
                NetHost *h = &p->hosts[p->host.n_hosts++];
                if ((r = take(p, rec->name, &h->name)) < 0 || (r = take(p, w->mac, &h->mac)) < 0 ||
                    (r = take(p, w->ip, &h->ip)) < 0)
                        break;
                for (size_t i = 0; i < w->n_ports; i++)
                        p->forwards[p->host.n_forwards++] = (NetForward){.host = w->ports[i].host,
                                                                         .guest = w->ports[i].guest,
                                                                         .udp = w->ports[i].udp,
                                                                         .guest_addr = addr};
        }
        if (r < 0) {
                nat_pass_free(p);
                return r;
        }
        p->host.bridge = p->bridge;
        p->host.isolate = c->isolate;
        p->host.forwards = p->forwards;
        p->host.hosts = p->hosts;
        p->host.proc_root = p->proc_root;
        p->host.dir = p->dir;
        p->host.taps = p->taps;
        *ret = p;
        return 0;
}

static void nat_pass_start(InstanceNat *n)
{
        NatPass *p = NULL;
        _cleanup_free_ char *error = NULL;
        int r = nat_pass_new(n, &p);
        if (r >= 0) {
                n->busy = true;
                r = worker_pool_submit(n->m->cfg.helper_pool,
                                       &(WorkerJob){.key = "network",
                                                    .timeout = NAT_SYNC_TIMEOUT,
                                                    .run = nat_pass_run,
                                                    .done = nat_pass_done,
                                                    .data = p,
                                                    .free_data = nat_pass_free,
                                                    .userdata = n},
                                       &error);
                if (r < 0) {
                        n->busy = false;
                        nat_pass_free(p);
                }
        }
        if (r < 0) {
                n->errors[NET_STEP_LINK]++;
                log_line(LOG_LEVEL_ERR, r, "cannot start a NAT network pass", "error",
                         error ? error : strerror(-r), NULL);
        }
}

/* m->nat, made on first use; NULL only without memory. */
static InstanceNat *nat_get(InstanceManager *m)
{
        if (m->nat)
                return m->nat;
        InstanceNat *n = calloc(1, sizeof *n);
        if (!n || strprintf(&n->dir, "%s/network", m->config->runtime_dir) < 0) {
                free(n);
                return NULL;
        }
        n->m = m;
        n->pidfd = -1;
        n->backoff = DNSMASQ_BACKOFF_FIRST;
        m->nat = n;
        return n;
}

const char *instance_nat_records_recheck(InstanceManager *m)
{
        static const char oom[] = "out of memory while checking the records' addresses";
        NetSubnet subnet;
        if (!m->config->network.nat.enabled ||
            net_subnet_parse(m->config->network.nat.subnet, &subnet) < 0)
                return NULL;
        InstanceNat *n = nat_get(m);
        if (!n)
                return oom;
        char *problem = NULL;
        /* Fail closed: without the memory to check, nat creates are refused. */
        if (instance_network_records_problem(m, &subnet, &problem) < 0)
                return oom;
        /* Logged when it changes: at start-up, when a pass takes in a hand-placed record, and
         * when the offending record is deleted or corrected. */
        if (problem && !streq_ptr(problem, n->records_problem))
                log_line(LOG_LEVEL_ERR, 0, "records disagree on NAT addresses; nat creates refused",
                         "reason", problem, NULL);
        else if (!problem && n->records_problem)
                log_line(LOG_LEVEL_NOTICE, 0, "records agree on NAT addresses again", NULL);
        free(n->records_problem);
        n->records_problem = problem;
        return problem;
}

void instance_nat_sync(InstanceManager *m)
{
        if (!m->config->network.nat.enabled)
                return;
        if (!nat_get(m)) {
                log_line(LOG_LEVEL_ERR, -ENOMEM, "cannot start a NAT network pass", NULL);
                return;
        }
        (void)instance_nat_records_recheck(m);
        if (m->nat->busy) {
                m->nat->again = true;
                return;
        }
        nat_pass_start(m->nat);
}

void instance_nat_count_error(InstanceManager *m, NetStep step)
{
        if (m->nat && (unsigned)step < _NET_STEP_MAX)
                m->nat->errors[step]++;
}

const char *instance_nat_error(const InstanceManager *m)
{
        return m->nat ? m->nat->error : NULL;
}

_Static_assert(sizeof(((InstanceNatStats *)0)->errors) == sizeof(((InstanceNat *)0)->errors),
               "one counter per NetStep");

void instance_nat_stats(const InstanceManager *m, InstanceNatStats *ret)
{
        *ret = (InstanceNatStats){0};
        NetSubnet subnet;
        if (m->config->network.nat.enabled &&
            net_subnet_parse(m->config->network.nat.subnet, &subnet) >= 0) {
                for (size_t k = 0; k < m->n_instances; k++) {
                        const InstanceNetwork *w = &m->instances[k]->rec.network;
                        if (w->mode == INSTANCE_NETWORK_NAT &&
                            net_subnet_holds_guest(&subnet, w->ip))
                                ret->addresses_allocated++;
                }
                uint32_t all = net_subnet_guest_count(&subnet);
                ret->addresses_free =
                    all > ret->addresses_allocated ? all - ret->addresses_allocated : 0;
        }
        if (!m->nat)
                return;
        ret->dnsmasq_up = m->nat->pid > 0;
        /* A failed pass first: it refuses every nat create, whatever the records hold. */
        ret->error = m->nat->error ? m->nat->error : m->nat->records_problem;
        ret->dnsmasq_restarts = m->nat->restarts;
        memcpy(ret->errors, m->nat->errors, sizeof ret->errors);
}

void instance_nat_free(InstanceNat *n)
{
        if (!n)
                return;
        n->stopping = true;
        if (n->pid > 0) {
                /* OPS-3: dnsmasq goes with vgpud; a restarted vgpud starts its own. */
                (void)pidfd_signal(n->pidfd, SIGTERM);
                (void)waitpid(n->pid, NULL, 0);
        }
        sd_event_source_disable_unref(n->child);
        sd_event_source_disable_unref(n->timer);
        closep(&n->pidfd);
        free(n->error);
        free(n->records_problem);
        free(n->dir);
        free(n);
}
