/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Manager's life: start-up in GEN-10's order, the event loop with its signals, timers and
 * service-manager notifications (OPS-2, through notify/, which never waits), and the bounded
 * shutdown of OPS-3.
 */
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>

#include "build-info.h"
#include "config.h"
#include "manager.h"

nsec_t manager_now(void)
{
        return mono_clock_now(&mono_clock_system);
}

int manager_arm_timer(Manager *m, sd_event_source **source, nsec_t interval,
                      sd_event_time_handler_t handler)
{
        uint64_t usec = interval / NSEC_PER_USEC;
        int r;

        if (*source) {
                r = sd_event_source_set_time_relative(*source, usec);
                if (r >= 0)
                        r = sd_event_source_set_enabled(*source, SD_EVENT_ONESHOT);
        } else
                r = sd_event_add_time_relative(m->event, source, CLOCK_MONOTONIC, usec,
                                               0 /* default accuracy */, handler, m);
        if (r < 0)
                log_error_errno(r, "arm timer: %m");
        return r;
}

/* ---- event sources --------------------------------------------------------------------------- */

static void on_nvml_refreshed(NvmlClient *c, void *userdata)
{
        Manager *m = userdata;
        reconciler_nvml_refreshed(m->reconciler);
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
        Manager *m = userdata;
        if (si->ssi_signo == SIGHUP) {
                /* CFG-8: the configuration is read once; SIGHUP reloads the health store. */
                manager_health_reload(m);
                return 0;
        }
        log_line(LOG_LEVEL_NOTICE, 0, "stopping", "signal", strsignal((int)si->ssi_signo), NULL);
        manager_stop(m, 0);
        return 0;
}

static int on_reconcile_timer(sd_event_source *s, uint64_t usec, void *userdata)
{
        Manager *m = userdata;
        int r = reconciler_start(m->reconciler, false);
        if (r < 0)
                log_error_errno(r, "start reconcile pass: %m");
        return manager_arm_timer(m, &m->reconcile_timer, m->config.gpu.reconcile_interval,
                                 on_reconcile_timer);
}

/* ---- listeners ------------------------------------------------------------------------------- */

static int start_listeners(Manager *m)
{
        size_t n_routes;
        const HttpRoute *routes = api_routes(&n_routes);
        _cleanup_free_ char *error = NULL;
        HttpServerConfig hc = {
            .listen = m->config.listen,
            .unix_socket = m->config.unix_socket,
            .unix_socket_mode = m->config.unix_socket_mode,
            .routes = routes,
            .n_routes = n_routes,
            .secret = m->jwt_secret,
            .userdata = &m->api,
        };

        int r = http_server_new(m->event, &hc, &m->http, &error);
        if (r < 0) {
                log_kv(LOG_LEVEL_ERR, 0, "%s", error);
                return r;
        }
        m->api.http = m->http;

        char tcp[HTTP_ADDRESS_STRLEN] = "";
        HttpAddress a;
        if (http_server_get_tcp_address(m->http, &a) >= 0)
                http_address_format(&a, tcp);
        log_line(LOG_LEVEL_INFO, 0, "listening", "tcp", *tcp ? tcp : NULL, "unix",
                 *m->config.unix_socket ? m->config.unix_socket : NULL, NULL);
        return 0;
}

/* ---- phases ---------------------------------------------------------------------------------- */

static void startup_mark(Manager *m, ManagerStartup phase)
{
        m->startup[phase] = manager_now();
}

/* The time from one GEN-10 phase's end to the next one's, as GEN-12 writes it. */
static const char *startup_took(const Manager *m, ManagerStartup from, ManagerStartup to,
                                char buf[static DURATION_STRLEN])
{
        return format_duration(m->startup[to] - m->startup[from], buf);
}

/*
 * One debug line with how long each of GEN-10's phases took, from cmd_daemon() to READY=1
 * (PERF-6's start-up figure also counts the exec and the loader before it).
 */
static void log_startup_phases(const Manager *m)
{
        char t[_MANAGER_STARTUP_MAX][DURATION_STRLEN], total[DURATION_STRLEN];

        if (log_get_max_level() < LOG_LEVEL_DEBUG || m->startup[MANAGER_STARTUP_BEGIN] == 0)
                return;
        for (ManagerStartup i = MANAGER_STARTUP_BEGIN + 1; i < _MANAGER_STARTUP_MAX; i++)
                startup_took(m, i - 1, i, t[i]);
        startup_took(m, MANAGER_STARTUP_BEGIN, MANAGER_STARTUP_READY, total);
        log_line(LOG_LEVEL_DEBUG, 0, "start-up phases", "config", t[MANAGER_STARTUP_CONFIGURED],
                 "roots", t[MANAGER_STARTUP_ROOTS], "loop", t[MANAGER_STARTUP_LOOP], "health",
                 t[MANAGER_STARTUP_HEALTH], "records", t[MANAGER_STARTUP_RECORDS], "discovery_nvml",
                 t[MANAGER_STARTUP_FILLED], "listeners", t[MANAGER_STARTUP_LISTENING], "first_pass",
                 t[MANAGER_STARTUP_READY], "total", total, NULL);
}

static void become_ready(Manager *m)
{
        const GpuHost *h = gpu_tracker_host(m->tracker);

        startup_mark(m, MANAGER_STARTUP_READY);
        log_startup_phases(m);
        m->phase = MANAGER_PHASE_RUNNING;
        m->api.ready = true;
        (void)notifier_ready(m->notifier);
        (void)notifier_status(m->notifier, "serving");
        log_line(LOG_LEVEL_INFO, 0, "vgpud ready", "gpus",
                 h ? (h->n_gpus ? "present" : "none") : "unknown", NULL);
        manager_check_placement(m);
        /* INST-21: the actions that wait on a VMM start as ordinary operations now. */
        instance_manager_start_recovery(m->instances);

        /* GEN-10: timers start after READY=1. */
        (void)manager_arm_timer(m, &m->reconcile_timer, m->config.gpu.reconcile_interval,
                                on_reconcile_timer);
        (void)manager_arm_timer(m, &m->health_poll_timer, HEALTH_POLL_INTERVAL,
                                manager_on_health_poll);
}

void manager_check_placement(Manager *m)
{
        _cleanup_free_ char *reason = NULL;
        if (api_placement_disabled_reason(&m->api, &reason) < 0)
                return;
        if (streq_ptr(reason, m->logged_disabled))
                return;
        if (reason)
                log_line(LOG_LEVEL_WARNING, 0, "vGPU placement disabled", "reason", reason, NULL);
        else
                log_line(LOG_LEVEL_NOTICE, 0, "vGPU placement enabled", NULL);
        free(m->logged_disabled);
        m->logged_disabled = TAKE_PTR(reason);
        if (m->phase == MANAGER_PHASE_RUNNING)
                (void)notifier_status(m->notifier, "serving%s%s",
                                      m->logged_disabled ? "; placement disabled: " : "",
                                      m->logged_disabled ? m->logged_disabled : "");
}

/* The Reconciler's pass_done: GEN-10's phases move on as passes end. */
static void on_pass_done(void *userdata, bool startup)
{
        Manager *m = userdata;
        int r;

        /* PERF-6: a pass allocates its discovery tables and fd scan and frees them again; give
         * the freed pages back so that an idle host's footprint is its state, not its peaks. */
        (void)malloc_trim(0);
        manager_check_placement(m);
        switch (m->phase) {
        case MANAGER_PHASE_STARTING:
                startup_mark(m, MANAGER_STARTUP_FILLED);
                /* GEN-10: listeners after the NVML cache fill, then the first pass. */
                if (start_listeners(m) < 0) {
                        manager_stop(m, 1);
                        return;
                }
                startup_mark(m, MANAGER_STARTUP_LISTENING);
                m->phase = MANAGER_PHASE_RECONCILING;
                (void)notifier_status(m->notifier, "running the first reconcile pass");
                r = reconciler_start(m->reconciler, false);
                if (r < 0) {
                        log_error_errno(r, "start reconcile pass: %m");
                        manager_stop(m, 1);
                }
                return;
        case MANAGER_PHASE_RECONCILING:
                become_ready(m);
                /* SENT-1: the sentinel starts after the first reconcile pass. */
                r = sentinel_start(m->sentinel);
                if (r < 0)
                        log_error_errno(r, "start the vGPU sentinel: %m");
                /* FLEET-5: Placement hears of the host once its first pass has settled it. */
                manager_fleet_start(m);
                break;
        case MANAGER_PHASE_RUNNING:
                break;
        case MANAGER_PHASE_STOPPING:
                manager_maybe_finish_stop(m);
                return;
        }
}

/* ---- shutdown (OPS-3) ------------------------------------------------------------------------ */

static int on_shutdown_timeout(sd_event_source *s, uint64_t usec, void *userdata)
{
        Manager *m = userdata;
        char grace[DURATION_STRLEN];
        log_line(LOG_LEVEL_WARNING, 0, "stopping without waiting further for in-flight operations",
                 "waited", format_duration(MANAGER_SHUTDOWN_GRACE, grace), NULL);
        return sd_event_exit(m->event, m->exit_status);
}

void manager_maybe_finish_stop(Manager *m)
{
        if (m->phase != MANAGER_PHASE_STOPPING)
                return;
        /* In-flight operations have reached disk and every waiting client has its answer. */
        if (m->health_writing || (m->health && health_store_write_pending(m->health)) ||
            m->api.n_suspended > 0 ||
            (m->instances && !instance_manager_is_settled(m->instances)) ||
            !fleet_sync_is_idle(m->fleet))
                return;
        (void)sd_event_exit(m->event, m->exit_status);
}

void manager_stop(Manager *m, int status)
{
        if (m->phase == MANAGER_PHASE_STOPPING)
                return;
        m->phase = MANAGER_PHASE_STOPPING;
        m->exit_status = status;
        m->api.stopping = true;
        (void)notifier_stopping(m->notifier);
        (void)notifier_status(m->notifier, "stopping");
        if (m->http)
                http_server_stop_listening(m->http);

        sd_event_source_disable_unref(m->reconcile_timer);
        sd_event_source_disable_unref(m->health_poll_timer);
        m->reconcile_timer = m->health_poll_timer = NULL;
        sentinel_stop(m->sentinel);
        /* FLEET-4: every PF drained in Placement while vgpud is down (short timeouts). */
        fleet_sync_stop(m->fleet);

        if (manager_arm_timer(m, &m->shutdown_timer, MANAGER_SHUTDOWN_GRACE, on_shutdown_timeout) <
            0) {
                (void)sd_event_exit(m->event, status);
                return;
        }
        manager_maybe_finish_stop(m);
}

/* ---- start-up -------------------------------------------------------------------------------- */

int manager_new(Manager **ret)
{
        Manager *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->lock_fd = m->data_dir_fd = m->instances_dirfd = -1;
        *ret = m;
        return 0;
}

static int block_signals(void)
{
        sigset_t ss;
        /* VMM-4: blocked before any thread exists, so every thread inherits the mask. */
        if (sigemptyset(&ss) < 0 || sigaddset(&ss, SIGTERM) < 0 || sigaddset(&ss, SIGINT) < 0 ||
            sigaddset(&ss, SIGHUP) < 0 || sigaddset(&ss, SIGCHLD) < 0)
                return -EINVAL;
        int r = pthread_sigmask(SIG_BLOCK, &ss, NULL);
        return r > 0 ? -r : 0;
}

static int open_roots(Manager *m, char **error)
{
        int r = root_open(m->config.sysfs_root, &m->sysfs);
        if (r < 0)
                return error_set(error, r, "sysfs_root %s: %s", m->config.sysfs_root, strerror(-r));
        r = root_open(m->config.proc_root, &m->proc);
        if (r < 0)
                return error_set(error, r, "proc_root %s: %s", m->config.proc_root, strerror(-r));
        m->data_dir_fd = open(m->config.data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (m->data_dir_fd < 0) {
                r = negative_errno();
                return error_set(error, r, "data_dir %s: %s", m->config.data_dir, strerror(-r));
        }
        return 0;
}

static int setup_loop(Manager *m)
{
        static const int signals[] = {SIGTERM, SIGINT, SIGHUP};

        int r = sd_event_new(&m->event);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(signals); i++) {
                r = sd_event_add_signal(m->event, &m->signal_sources[i], signals[i], on_signal, m);
                if (r < 0)
                        return r;
        }
        /* OPS-2: READY=1, STATUS=, STOPPING=1 and WATCHDOG=1 from the loop, never waited on. */
        r = notifier_new(&m->notifier);
        if (r == -EINVAL) {
                log_warning("NOTIFY_SOCKET is neither a path nor \"@name\": not notifying");
                unsetenv("NOTIFY_SOCKET");
                r = notifier_new(&m->notifier);
        }
        if (r >= 0)
                r = notifier_attach_event(m->notifier, m->event);
        if (r < 0)
                return r;

        /* PERF-6: the workers only wait on sysfs and allocate little; one malloc arena for the
         * whole daemon instead of one per thread that ever called malloc. */
        (void)mallopt(M_ARENA_MAX, 1);
        WorkerPoolConfig wc = WORKER_POOL_CONFIG_SYSFS;
        r = worker_pool_new(&wc, &m->workers);
        if (r < 0)
                return r;
        r = worker_pool_attach_event(m->workers, m->event);
        if (r < 0)
                return r;

        NvmlClientConfig nc = {
            .library = m->config.nvml_library,
            .timeout = m->config.gpu.nvml_timeout,
            .refreshed = on_nvml_refreshed,
            .userdata = m,
        };
        r = nvml_client_new(&nc, &m->nvml);
        if (r >= 0)
                r = nvml_client_attach_event(m->nvml, m->event);
        if (r < 0)
                return r;

        GpuNvml seam;
        nvml_client_fill_gpu_seam(m->nvml, &seam);
        GpuTrackerConfig tc = {
            .sysfs = m->sysfs,
            .pool = m->workers,
            .nvml = &seam,
            .timeout = m->config.gpu.sysfs_timeout,
        };
        return gpu_tracker_new(&tc, &m->tracker);
}

static int setup_reconciler(Manager *m)
{
        ReconcilerConfig rc = {
            .tracker = m->tracker,
            .pool = m->workers,
            .nvml = m->nvml,
            .health = m->health,
            .proc = m->proc,
            .sysfs = m->sysfs,
            .dev_root = m->config.dev_root,
            .sysfs_timeout = m->config.gpu.sysfs_timeout,
            .instances = m->instances,
            .ops = m->device_ops,
            .gate = m->write_gate,
            .volumes = m->volumes,
            .pass_done = on_pass_done,
            .userdata = m,
        };
        int r = reconciler_new(&rc, &m->reconciler);
        if (r < 0)
                return r;
        m->api.reconciler = m->reconciler;

        const ConfigGpu *g = &m->config.gpu;
        SentinelConfig sc = {
            .instances = m->instances,
            .tracker = m->tracker,
            .health = m->health,
            .interval = g->sentinel_interval,
            .timeout = g->sentinel_timeout,
            .concurrency = g->sentinel_concurrency,
            .mdev = g->sentinel_mdev,
        };
        r = sentinel_new(&sc, &m->sentinel);
        if (r >= 0)
                r = sentinel_attach_event(m->sentinel, m->event);
        if (r >= 0)
                m->api.sentinel = m->sentinel;
        return r;
}

int manager_start(Manager *m, Config *config, char **error)
{
        m->config = *config;
        *config = (Config){};
        log_set_max_level(m->config.log_level);

        int r = config_prepare_dirs(&m->config, error);
        if (r >= 0)
                r = config_lock_runtime_dir(&m->config, &m->lock_fd, error);
        if (r >= 0)
                r = open_roots(m, error);
        if (r >= 0)
                r = jwt_secret_load(m->config.jwt_secret_file, &m->jwt_secret, error);
        if (r < 0)
                return r;
        startup_mark(m, MANAGER_STARTUP_ROOTS);

        r = block_signals();
        if (r >= 0)
                r = setup_loop(m);
        if (r < 0)
                return error_set(error, r, "set up the event loop: %s", strerror(-r));
        startup_mark(m, MANAGER_STARTUP_LOOP);

        m->api = (ApiContext){
            .config = &m->config,
            .nvml = m->nvml,
            .workers = m->workers,
            .tracker = m->tracker,
            .version = VGPUD_VERSION,
            .commit = VGPUD_COMMIT,
            .schedule_repair = manager_schedule_repair,
            .userdata = m,
        };
        r = manager_health_setup(m);
        if (r < 0)
                return error_set(error, r, "set up the VF health store: %s", strerror(-r));
        startup_mark(m, MANAGER_STARTUP_HEALTH);
        r = manager_instances_setup(m, error);
        if (r < 0)
                return r;
        startup_mark(m, MANAGER_STARTUP_RECORDS);
        r = setup_reconciler(m);
        if (r < 0)
                return error_set(error, r, "set up the reconciler: %s", strerror(-r));
        return manager_fleet_setup(m, error);
}

int manager_run(Manager *m)
{
        log_line(LOG_LEVEL_INFO, 0, "vgpud starting", "version", VGPUD_VERSION, "commit",
                 VGPUD_COMMIT, NULL);
        (void)notifier_status(m->notifier, "discovering GPUs and initialising NVML");

        int r = reconciler_start(m->reconciler, true);
        if (r < 0) {
                log_error_errno(r, "start discovery: %m");
                return 1;
        }
        r = sd_event_loop(m->event);
        if (r < 0) {
                log_error_errno(r, "event loop: %m");
                return 1;
        }
        if (r == 0)
                log_line(LOG_LEVEL_INFO, 0, "vgpud stopped", NULL);
        return r;
}

/* ---- teardown -------------------------------------------------------------------------------- */

Manager *manager_free(Manager *m)
{
        if (!m)
                return NULL;

        /* Requests still waiting get their 503 before their connections close. */
        api_context_done(&m->api);
        m->http = http_server_free(m->http);
        m->api.http = NULL;

        for (size_t i = 0; i < ELEMENTSOF(m->signal_sources); i++)
                sd_event_source_disable_unref(m->signal_sources[i]);
        sd_event_source_disable_unref(m->reconcile_timer);
        sd_event_source_disable_unref(m->health_poll_timer);
        sd_event_source_disable_unref(m->shutdown_timer);
        sd_event_source_disable_unref(m->health_write_defer);
        sd_event_source_disable_unref(m->repair_defer);

        /* NVML-17: nvmlShutdown unless the NVML thread is stuck. */
        if (m->nvml)
                nvml_client_free(m->nvml);
        /*
         * A pass in flight is abandoned with its jobs: freeing the pool drops queued jobs and
         * lets a running one finish on its own (its data is its own copy).
         */
        if (m->workers)
                worker_pool_free(m->workers);
        if (m->disk_pool)
                worker_pool_free(m->disk_pool);
        if (m->helper_pool)
                worker_pool_free(m->helper_pool);
        /* Before the instance manager: its checks read the records. */
        m->sentinel = sentinel_free(m->sentinel);
        manager_fleet_free(m);
        manager_instances_free(m);
        m->reconciler = reconciler_free(m->reconciler);
        m->write_gate = write_gate_free(m->write_gate); /* after those that wait at it */
        m->tracker = gpu_tracker_free(m->tracker);

        /*
         * A health write that did not finish within the grace period still runs on a detached
         * thread with its own copy of the state; the store must outlive it, so it is left to
         * the process exit.
         */
        if (m->health && !m->health_writing)
                health_store_free(m->health);
        else if (m->health)
                keep_until_exit(m->health);

        free(m->logged_disabled);
        if (m->jwt_secret)
                jwt_secret_free(m->jwt_secret);
        root_free(m->sysfs);
        root_free(m->proc);
        closep(&m->data_dir_fd);
        closep(&m->lock_fd);
        notifier_free(m->notifier);
        sd_event_unref(m->event);
        config_done(&m->config);
        free(m);
        return NULL;
}
