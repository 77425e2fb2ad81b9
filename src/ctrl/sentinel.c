/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The sentinel (ctrl.h, SENT-1, SENT-2, SENT-3, SENT-4, SENT-5, SENT-6, SENT-7, SENT-8, SENT-9,
 * SENT-10, SENT-11, SENT-12): a tick timer, a queue of targets per tick, and the checks, each a
 * non-blocking AF_UNIX connection to a VMM's agent.sock with an io source and a deadline timer on
 * the loop. Reports go to the health store; their completions may outlive the sentinel, so a report
 * holds no pointer into it once it is freed.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctrl.h"

static const char *const result_names[_SENTINEL_RESULT_MAX] = {
    [SENTINEL_RESULT_OK] = "ok",
    [SENTINEL_RESULT_FAILED] = "failed",
    [SENTINEL_RESULT_UNKNOWN] = "unknown",
    [SENTINEL_RESULT_RPC_ERROR] = "rpc_error",
    [SENTINEL_RESULT_UNSUPPORTED_AGENT] = "unsupported_agent",
    [SENTINEL_RESULT_LIST_ERROR] = "list_error",
};

const char *sentinel_result_to_string(SentinelResult r)
{
        return r < _SENTINEL_RESULT_MAX ? result_names[r] : "unknown";
}

/* A reply line fits this at first; a longer one grows the buffer up to SENTINEL_LINE_MAX. */
#define SENTINEL_LINE_START 4096
/* sd-event's default would let a timeout fire up to 250 ms late (PERF-5's margin is 500 ms). */
#define SENTINEL_TIMER_ACCURACY_USEC 10000

/* What a tick captured about one instance (SENT-2). */
typedef struct Target {
        char id[INSTANCE_ID_LEN + 1];
        char vf[PCI_ADDRESS_STRLEN];
        char claimed_at[TIMESTAMP_STRLEN];
        char *socket; /* agent.sock */
} Target;

typedef struct Check {
        Sentinel *sentinel;
        Target target;
        uint64_t request_id;
        uint64_t round;
        int fd;
        sd_event_source *io, *timer;
        bool connecting;
        char *out;
        size_t out_len, out_sent;
        char *in;
        size_t in_len, in_cap;
        bool discarding; /* inside a line longer than the buffer */
} Check;

/* A report waiting on the health store; sentinel is NULL once the sentinel is gone. */
typedef struct Report {
        Sentinel *sentinel;
        struct Report *next, *prev;
        bool failure;
        char vf[PCI_ADDRESS_STRLEN];
        char id[INSTANCE_ID_LEN + 1];
        char *message; /* sanitised, for the log; NULL: absent */
} Report;

struct Sentinel {
        SentinelConfig config;
        sd_event *event;
        sd_event_source *tick;
        bool started;
        uint64_t next_id; /* SENT-4's request ids */

        Check **open; /* the open checks (at most config.concurrency) */
        size_t n_open;
        Target *queue; /* this tick's targets not started yet */
        size_t n_queue, queue_next;
        bool round_open;      /* a tick's round is being worked through */
        uint64_t round;       /* the current round's number */
        size_t round_pending; /* its checks still open */
        nsec_t round_started; /* CLOCK_MONOTONIC */

        bool starting;   /* start_queued() runs: a finish inside it starts nothing */
        Report *reports; /* waiting on the store */
        SentinelStats stats;
};

/* ---- pure parts ---------------------------------------------------------------------------- */

int sentinel_format_request(uint64_t id, char **ret)
{
        char *s = NULL;
        if (asprintf(&s, "{\"execute\":\"guest-gpu-init-status\",\"id\":%" PRIu64 "}\n", id) < 0)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static SentinelResult classify_return(json_t *ret, char **ret_message)
{
        json_t *state = json_object_get(ret, "state");
        json_t *message = json_object_get(ret, "failure_message");
        if (!json_is_string(state))
                return SENTINEL_RESULT_RPC_ERROR;
        if (message && !json_is_string(message))
                return SENTINEL_RESULT_RPC_ERROR;
        /* HEALTH-12: more than the store would ever keep is no honest agent's answer. */
        if (message && json_string_length(message) > SENTINEL_MESSAGE_MAX)
                return SENTINEL_RESULT_RPC_ERROR;

        const char *st = json_string_value(state);
        if (streq(st, "ok"))
                return SENTINEL_RESULT_OK;
        if (streq(st, "unknown"))
                return SENTINEL_RESULT_UNKNOWN;
        if (!streq(st, "failed"))
                return SENTINEL_RESULT_RPC_ERROR;
        /* json_loadb() without JSON_ALLOW_NUL refused a NUL inside the message already. */
        char *copy = strdup(message ? json_string_value(message) : "");
        if (!copy)
                return SENTINEL_RESULT_RPC_ERROR;
        *ret_message = copy;
        return SENTINEL_RESULT_FAILED;
}

int sentinel_parse_reply(const char *line, size_t size, uint64_t id, SentinelResult *ret_result,
                         char **ret_message)
{
        json_error_t err;
        json_auto_t *v = json_loadb(line, size, JSON_REJECT_DUPLICATES, &err);
        /* SENT-4: the tail of an earlier reply, or anything else that is not an object. */
        if (!json_is_object(v))
                return 0;
        json_t *rid = json_object_get(v, "id");
        if (!json_is_integer(rid) || json_integer_value(rid) < 0 ||
            (uint64_t)json_integer_value(rid) != id)
                return 0;

        json_t *ret = json_object_get(v, "return");
        json_t *error = json_object_get(v, "error");
        SentinelResult result = SENTINEL_RESULT_RPC_ERROR;
        char *message = NULL;
        if (ret && !error) {
                if (json_is_object(ret))
                        result = classify_return(ret, &message);
        } else if (error && !ret) {
                json_t *class = json_is_object(error) ? json_object_get(error, "class") : NULL;
                if (json_is_string(class) && streq(json_string_value(class), "CommandNotFound"))
                        result = SENTINEL_RESULT_UNSUPPORTED_AGENT;
        }
        *ret_result = result;
        *ret_message = message;
        return 1;
}

/* ---- reports (SENT-7, SENT-8, SENT-9, SENT-10) ---------------------------------------------- */

static void report_unlink(Report *rp)
{
        Sentinel *s = rp->sentinel;
        if (!s)
                return;
        if (rp->prev)
                rp->prev->next = rp->next;
        else
                s->reports = rp->next;
        if (rp->next)
                rp->next->prev = rp->prev;
        rp->next = rp->prev = NULL;
}

static void report_free(Report *rp)
{
        if (!rp)
                return;
        report_unlink(rp);
        free(rp->message);
        free(rp);
}

static void log_failure_result(Report *rp, int r, const HealthResult *res, const char *error)
{
        Sentinel *s = rp->sentinel;
        char failures[16], threshold[16];

        if (r < 0) {
                /* SENT-9: the agent still answers failed, so the next tick retries. */
                log_line(LOG_LEVEL_ERR, r, "failed to record vGPU VF init failure", "vf", rp->vf,
                         "instance_id", rp->id, "error", error, NULL);
                return;
        }
        snprintf(failures, sizeof failures, "%u", res->failures);
        snprintf(threshold, sizeof threshold, "%u", res->threshold);
        switch (res->outcome) {
        case HEALTH_OUTCOME_QUARANTINED:
                if (s) {
                        s->stats.init_failures++;
                        s->stats.quarantines++;
                }
                log_line(LOG_LEVEL_ERR, 0, "quarantined wedged vGPU VF", "vf", rp->vf,
                         "instance_id", rp->id, "message", rp->message, "failures", failures,
                         "threshold", threshold, NULL);
                break;
        case HEALTH_OUTCOME_RECORDED:
                if (s)
                        s->stats.init_failures++;
                log_line(LOG_LEVEL_WARNING, 0,
                         "recorded vGPU VF init failure below quarantine threshold", "vf", rp->vf,
                         "instance_id", rp->id, "message", rp->message, "failures", failures,
                         "threshold", threshold, NULL);
                break;
        case HEALTH_OUTCOME_UNCHANGED:
                break;
        }
}

static void log_success_result(Report *rp, int r, const HealthResult *res, const char *error)
{
        char cleared[16];

        if (r < 0) {
                /* SENT-10: ok is terminal in the agent, so a later tick reports it again. */
                log_line(LOG_LEVEL_WARNING, r, "failed to record vGPU VF init success", "vf",
                         rp->vf, "instance_id", rp->id, "error", error, NULL);
                return;
        }
        snprintf(cleared, sizeof cleared, "%u", res->cleared);
        if (res->rescinded)
                log_line(LOG_LEVEL_NOTICE, 0,
                         "rescinded vGPU VF quarantine after successful driver init from the "
                         "triggering assignment",
                         "vf", rp->vf, "instance_id", rp->id, "cleared", cleared, NULL);
        else if (res->cleared > 0)
                log_line(LOG_LEVEL_NOTICE, 0,
                         "cleared recorded vGPU VF init failures after successful driver init",
                         "vf", rp->vf, "instance_id", rp->id, "cleared", cleared, NULL);
}

static void on_report_done(HealthStore *hs, int r, const HealthResult *res, const char *error,
                           void *userdata)
{
        Report *rp = userdata;
        if (rp->failure)
                log_failure_result(rp, r, res, error);
        else
                log_success_result(rp, r, res, error);
        report_free(rp);
}

/* The VF a claim holds now: a vendor-VFIO device's basename, an mdev's parent VF. */
static bool claim_vf(const Sentinel *s, const InstanceRecord *rec, char ret[PCI_ADDRESS_STRLEN])
{
        if (!instance_record_is_claimed(rec) || !rec->gpu.framework)
                return false;
        if (streq(rec->gpu.framework, "vendor-vfio")) {
                const char *slash = strrchr(rec->gpu.device_path, '/');
                const char *base = slash ? slash + 1 : rec->gpu.device_path;
                if (strlen(base) >= PCI_ADDRESS_STRLEN)
                        return false;
                strcpy(ret, base);
                return true;
        }
        if (streq(rec->gpu.framework, "mdev") && rec->gpu.mdev_uuid) {
                const GpuHost *h = gpu_tracker_host(s->config.tracker);
                for (size_t k = 0; h && k < h->n_mdevs; k++)
                        if (streq_ptr(h->mdevs[k].uuid, rec->gpu.mdev_uuid)) {
                                memcpy(ret, h->mdevs[k].vf, PCI_ADDRESS_STRLEN);
                                return ret[0] != 0;
                        }
        }
        return false;
}

/*
 * SENT-7: a claim that moved to another VF or another claimed_at is another assignment; a
 * released or deleted one still reports to the captured assignment.
 */
static bool assignment_changed(Sentinel *s, const Target *t)
{
        const InstanceRecord *rec = instance_manager_get(s->config.instances, t->id);
        if (!rec || !instance_record_is_claimed(rec))
                return false;
        char vf[PCI_ADDRESS_STRLEN] = "", at[TIMESTAMP_STRLEN];
        if (!claim_vf(s, rec, vf))
                return true;
        format_timestamp(rec->gpu.claimed_at, at);
        return !streq(vf, t->vf) || !streq(at, t->claimed_at);
}

static void report(Sentinel *s, const Target *t, SentinelResult result, const char *message)
{
        if (result != SENTINEL_RESULT_FAILED && result != SENTINEL_RESULT_OK)
                return; /* SENT-6: nothing to report */
        if (!s->config.health)
                return;
        bool failure = result == SENTINEL_RESULT_FAILED;
        if (assignment_changed(s, t)) {
                log_line(LOG_LEVEL_INFO, 0,
                         failure ? "vGPU sentinel skipping init failure: assignment changed "
                                   "during poll"
                                 : "vGPU sentinel skipping init success: assignment changed "
                                   "during poll",
                         "vf", t->vf, "instance_id", t->id, NULL);
                return;
        }

        Report *rp = calloc(1, sizeof *rp);
        if (!rp) {
                log_error("out of memory reporting a vGPU init result");
                return;
        }
        rp->failure = failure;
        memcpy(rp->vf, t->vf, sizeof rp->vf);
        memcpy(rp->id, t->id, sizeof rp->id);
        /* HEALTH-12's sanitising before logging, as the store does before recording. */
        if (failure && health_sanitize_reason(message, &rp->message) < 0) {
                log_error("out of memory reporting a vGPU init result");
                free(rp);
                return;
        }

        HealthRequest req = {
            .kind = failure ? HEALTH_REQUEST_FAILURE : HEALTH_REQUEST_SUCCESS,
            .vf_address = t->vf,
            .instance_id = t->id,
            .assigned_at = t->claimed_at,
            .text = failure ? message : NULL,
        };
        HealthResult res = {0};
        _cleanup_free_ char *error = NULL;
        rp->sentinel = s;
        rp->next = s->reports;
        if (s->reports)
                s->reports->prev = rp;
        s->reports = rp;
        int r = health_store_submit(s->config.health, &req, on_report_done, rp, &res, &error);
        if (r == 1)
                return; /* on_report_done() runs when its write completes */
        on_report_done(s->config.health, r, &res, error, rp);
}

/* ---- checks (SENT-4, SENT-5, SENT-6) -------------------------------------------------------- */

static void start_queued(Sentinel *s);

static void check_free(Check *c)
{
        if (!c)
                return;
        sd_event_source_disable_unref(c->io);
        sd_event_source_disable_unref(c->timer);
        closep(&c->fd);
        free(c->target.socket);
        free(c->out);
        free(c->in);
        free(c);
}

static void check_finish(Check *c, SentinelResult result, const char *message, const char *why)
{
        Sentinel *s = c->sentinel;

        for (size_t k = 0; k < s->n_open; k++)
                if (s->open[k] == c) {
                        s->open[k] = s->open[--s->n_open];
                        break;
                }
        s->stats.checks[result]++;
        if (c->round == s->round && s->round_pending > 0)
                s->round_pending--;
        if (why)
                log_line(LOG_LEVEL_DEBUG, 0, "vGPU sentinel check failed", "instance_id",
                         c->target.id, "vf", c->target.vf, "error", why, NULL);
        report(s, &c->target, result, message);
        check_free(c);
        if (!s->starting)
                start_queued(s);
}

/* Whole lines in c->in: each is this check's reply or discarded. Returns true when finished. */
static bool check_consume(Check *c)
{
        size_t start = 0;
        bool done = false;
        SentinelResult result = SENTINEL_RESULT_RPC_ERROR;
        _cleanup_free_ char *message = NULL;

        while (!done) {
                char *nl = memchr(c->in + start, '\n', c->in_len - start);
                if (!nl)
                        break;
                size_t len = (size_t)(nl - (c->in + start));
                if (c->discarding)
                        c->discarding = false;
                else if (sentinel_parse_reply(c->in + start, len, c->request_id, &result,
                                              &message) > 0)
                        done = true;
                start += len + 1;
        }
        if (done) {
                check_finish(c, result, message,
                             result == SENTINEL_RESULT_RPC_ERROR ? "malformed reply" : NULL);
                return true;
        }
        memmove(c->in, c->in + start, c->in_len - start);
        c->in_len -= start;
        if (c->in_len == SENTINEL_LINE_MAX) {
                /*
                 * A line this long is nobody's honest reply; it may be a stale one, though,
                 * so it is skipped like one rather than failing the check.
                 */
                c->discarding = true;
                c->in_len = 0;
        }
        return false;
}

static int check_update_events(Check *c)
{
        uint32_t events = EPOLLIN | EPOLLRDHUP;
        if (c->connecting || c->out_sent < c->out_len)
                events |= EPOLLOUT;
        return sd_event_source_set_io_events(c->io, events);
}

/* Writes what is left of the request; < 0 on an error. */
static int check_send(Check *c)
{
        while (c->out_sent < c->out_len) {
                ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        return negative_errno();
                }
                c->out_sent += (size_t)n;
        }
        return check_update_events(c);
}

static int on_check_io(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
        Check *c = userdata;
        char why[128];
        int r;

        if (c->connecting) {
                int err = 0;
                socklen_t len = sizeof err;
                if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                        err = errno;
                if (err != 0) {
                        snprintf(why, sizeof why, "connect: %s", strerror(err));
                        check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
                        return 0;
                }
                if (!(revents & (EPOLLOUT | EPOLLIN | EPOLLHUP | EPOLLERR)))
                        return 0;
                c->connecting = false;
        }
        if (c->out_sent < c->out_len) {
                r = check_send(c);
                if (r < 0) {
                        snprintf(why, sizeof why, "send: %s", strerror(-r));
                        check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
                        return 0;
                }
        }

        for (;;) {
                /* Replies are small: the buffer grows only for a long line, up to the cap. */
                if (c->in_len == c->in_cap) {
                        size_t cap =
                            c->in_cap * 2 < SENTINEL_LINE_MAX ? c->in_cap * 2 : SENTINEL_LINE_MAX;
                        char *in = realloc(c->in, cap);
                        if (!in) {
                                check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, "out of memory");
                                return 0;
                        }
                        c->in = in;
                        c->in_cap = cap;
                }
                ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        snprintf(why, sizeof why, "recv: %s", strerror(errno));
                        check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
                        return 0;
                }
                if (n == 0) {
                        check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL,
                                     "connection closed before the reply");
                        return 0;
                }
                c->in_len += (size_t)n;
                if (check_consume(c))
                        return 0;
        }
        if (revents & (EPOLLHUP | EPOLLERR)) {
                check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL,
                             "connection closed before the reply");
                return 0;
        }
        r = check_update_events(c);
        if (r < 0) {
                snprintf(why, sizeof why, "poll: %s", strerror(-r));
                check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
        }
        return 0;
}

static int on_check_timeout(sd_event_source *src, uint64_t usec, void *userdata)
{
        Check *c = userdata;
        check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, "timed out");
        return 0;
}

/*
 * Connects; the check is then open (in s->open) or already counted as an rpc_error. Unix
 * sockets connect at once or fail; a listener whose backlog is full fails with EAGAIN, which is
 * a connect failure, not a connect in progress.
 */
static void check_start(Sentinel *s, Target *t)
{
        Check *c = calloc(1, sizeof *c);
        char why[160];
        int r;

        if (!c) {
                s->stats.checks[SENTINEL_RESULT_RPC_ERROR]++;
                free(t->socket);
                return;
        }
        c->sentinel = s;
        c->target = *t;
        t->socket = NULL;
        c->fd = -1;
        c->request_id = ++s->next_id;
        c->round = s->round;
        s->round_pending++;
        /* Open first, so check_finish() always finds it. */
        s->open[s->n_open++] = c;

        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(c->target.socket) >= sizeof sa.sun_path) {
                check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, "socket path too long");
                return;
        }
        strcpy(sa.sun_path, c->target.socket);

        r = sentinel_format_request(c->request_id, &c->out);
        if (r >= 0) {
                c->out_len = strlen(c->out);
                c->in_cap = SENTINEL_LINE_START;
                c->in = malloc(c->in_cap);
                if (!c->in)
                        r = -ENOMEM;
        }
        if (r >= 0) {
                c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (c->fd < 0)
                        r = negative_errno();
        }
        if (r < 0) {
                snprintf(why, sizeof why, "set up: %s", strerror(-r));
                check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
                return;
        }
        /* SENT-4: the deadline counts from the connect. */
        r = sd_event_add_time_relative(s->event, &c->timer, CLOCK_MONOTONIC,
                                       s->config.timeout / NSEC_PER_USEC,
                                       SENTINEL_TIMER_ACCURACY_USEC, on_check_timeout, c);
        if (r >= 0)
                r = sd_event_add_io(s->event, &c->io, c->fd, EPOLLIN | EPOLLOUT, on_check_io, c);
        if (r < 0) {
                snprintf(why, sizeof why, "watch: %s", strerror(-r));
                check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
                return;
        }

        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                if (errno != EINPROGRESS) {
                        snprintf(why, sizeof why, "connect: %s", strerror(errno));
                        check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
                        return;
                }
                c->connecting = true;
                (void)check_update_events(c);
                return;
        }
        r = check_send(c);
        if (r < 0) {
                snprintf(why, sizeof why, "send: %s", strerror(-r));
                check_finish(c, SENTINEL_RESULT_RPC_ERROR, NULL, why);
        }
}

static bool target_is_open(const Sentinel *s, const char *id)
{
        for (size_t k = 0; k < s->n_open; k++)
                if (streq(s->open[k]->target.id, id))
                        return true;
        return false;
}

static bool is_target(const Sentinel *s, const InstanceRecord *rec);

/* A target queued a while ago is still one, with the assignment it was captured with. */
static bool still_target(const Sentinel *s, const Target *t)
{
        const InstanceRecord *rec = instance_manager_get(s->config.instances, t->id);
        char vf[PCI_ADDRESS_STRLEN] = "", at[TIMESTAMP_STRLEN];
        if (!rec || !is_target(s, rec) || !claim_vf(s, rec, vf))
                return false;
        format_timestamp(rec->gpu.claimed_at, at);
        return streq(vf, t->vf) && streq(at, t->claimed_at);
}

/*
 * A round (one tick's targets, every check ended) is over: one debug line with its duration,
 * which SENT-5 bounds by ceil(unresponsive / concurrency) timeouts (PERF-5 reads it).
 */
static void log_round(Sentinel *s)
{
        char took[DURATION_STRLEN], targets[16], open[16];
        s->round_open = false;
        format_duration(mono_clock_now(&mono_clock_system) - s->round_started, took);
        snprintf(targets, sizeof targets, "%zu", s->n_queue);
        snprintf(open, sizeof open, "%zu", s->round_pending);
        log_line(LOG_LEVEL_DEBUG, 0, "vGPU sentinel round done", "duration", took, "targets",
                 targets, "unfinished", s->round_pending ? open : NULL, NULL);
}

static void maybe_round_done(Sentinel *s)
{
        if (s->round_open && s->queue_next >= s->n_queue && s->round_pending == 0)
                log_round(s);
}

static void start_queued(Sentinel *s)
{
        s->starting = true;
        while (s->n_open < s->config.concurrency && s->queue_next < s->n_queue) {
                Target *t = &s->queue[s->queue_next++];
                /*
                 * SENT-5: a target whose previous check is open waits for its next tick; one
                 * that stopped being a target since the tick listed it is dropped.
                 */
                if (target_is_open(s, t->id) || !still_target(s, t)) {
                        free(t->socket);
                        t->socket = NULL;
                        continue;
                }
                check_start(s, t);
        }
        s->starting = false;
        maybe_round_done(s);
}

/* ---- ticks (SENT-1, SENT-2, SENT-3) --------------------------------------------------------- */

static void queue_clear(Sentinel *s)
{
        for (size_t k = s->queue_next; k < s->n_queue; k++)
                free(s->queue[k].socket);
        free(s->queue);
        s->queue = NULL;
        s->n_queue = s->queue_next = 0;
}

static void on_repair_done(HealthStore *hs, int r, const HealthResult *result, const char *error,
                           void *userdata)
{
        if (r < 0)
                log_line(LOG_LEVEL_DEBUG, r, "VF health state repair failed", "error", error, NULL);
}

static bool is_target(const Sentinel *s, const InstanceRecord *rec)
{
        if (rec->state != INSTANCE_RUNNING || !instance_record_is_claimed(rec) ||
            !rec->gpu.framework)
                return false;
        if (!streq(rec->gpu.framework, "vendor-vfio") &&
            !(s->config.mdev && streq(rec->gpu.framework, "mdev")))
                return false;
        if (!rec->hypervisor.agent_socket ||
            !instance_manager_vmm_is_watched(s->config.instances, rec->id))
                return false;
        /* A stat of the runtime directory (tmpfs), never of the data or sysfs trees. */
        struct stat st;
        return stat(rec->hypervisor.agent_socket, &st) >= 0 && S_ISSOCK(st.st_mode);
}

static void tick_run(Sentinel *s)
{
        _cleanup_free_ char *error = NULL;

        s->stats.ticks++;
        /* SENT-1, HEALTH-21: one repair per tick, before the checks. */
        if (s->config.health) {
                int r = health_store_submit(s->config.health,
                                            &(HealthRequest){.kind = HEALTH_REQUEST_REPAIR},
                                            on_repair_done, s, NULL, &error);
                if (r < 0)
                        log_line(LOG_LEVEL_DEBUG, r, "VF health state repair failed", "error",
                                 error, NULL);
        }

        /*
         * SENT-3: without a current VF table an mdev's VF, and whether the host's claims are
         * what it holds, cannot be told: no reports from a stale picture.
         */
        if (!gpu_tracker_host(s->config.tracker) || gpu_tracker_error(s->config.tracker)) {
                s->stats.checks[SENTINEL_RESULT_LIST_ERROR]++;
                return;
        }

        /*
         * SENT-5: while the last tick's targets are still being worked through (more
         * unresponsive ones than the concurrency allows in one timeout), this tick adds no
         * round of its own, so every target is checked once before any is checked again.
         */
        if (s->queue_next < s->n_queue) {
                log_line(LOG_LEVEL_DEBUG, 0, "vGPU sentinel tick still running; no new round",
                         NULL);
                return;
        }
        /* The last round's checks still open were skipped above; its line says so. */
        if (s->round_open)
                log_round(s);
        queue_clear(s);
        s->round_open = true;
        s->round++;
        s->round_pending = 0;
        s->round_started = mono_clock_now(&mono_clock_system);
        const InstanceRecord *const *list = NULL;
        size_t n = instance_manager_list(s->config.instances, &list);
        s->queue = n ? calloc(n, sizeof *s->queue) : NULL;
        if (n && !s->queue) {
                log_error("out of memory listing vGPU sentinel targets");
                return;
        }
        for (size_t k = 0; k < n; k++) {
                const InstanceRecord *rec = list[k];
                Target *t = &s->queue[s->n_queue];
                if (!is_target(s, rec) || target_is_open(s, rec->id) || !claim_vf(s, rec, t->vf))
                        continue;
                memcpy(t->id, rec->id, sizeof t->id);
                format_timestamp(rec->gpu.claimed_at, t->claimed_at);
                t->socket = strdup(rec->hypervisor.agent_socket);
                if (!t->socket) {
                        log_error("out of memory listing vGPU sentinel targets");
                        break;
                }
                s->n_queue++;
        }
        start_queued(s);
}

static int arm_tick(Sentinel *s, nsec_t after)
{
        int r = sd_event_source_set_time_relative(s->tick, after / NSEC_PER_USEC);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->tick, SD_EVENT_ONESHOT);
        if (r < 0)
                log_error_errno(r, "arm the vGPU sentinel timer: %m");
        return r;
}

static int on_tick(sd_event_source *src, uint64_t usec, void *userdata)
{
        Sentinel *s = userdata;
        /* Every interval from this tick's start, however long its checks take (SENT-5). */
        (void)arm_tick(s, s->config.interval);
        tick_run(s);
        return 0;
}

/* ---- life ---------------------------------------------------------------------------------- */

int sentinel_new(const SentinelConfig *config, Sentinel **ret)
{
        if (!config->instances || !config->tracker || config->concurrency == 0 ||
            config->interval == 0 || config->timeout == 0)
                return -EINVAL;
        Sentinel *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->config = *config;
        s->open = calloc(config->concurrency, sizeof *s->open);
        if (!s->open) {
                free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

Sentinel *sentinel_free(Sentinel *s)
{
        if (!s)
                return NULL;
        /* The store may complete these later: they log and stop counting. */
        for (Report *rp = s->reports, *next; rp; rp = next) {
                next = rp->next;
                rp->sentinel = NULL;
                rp->next = rp->prev = NULL;
        }
        for (size_t k = 0; k < s->n_open; k++)
                check_free(s->open[k]);
        free(s->open);
        queue_clear(s);
        sd_event_source_disable_unref(s->tick);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

int sentinel_attach_event(Sentinel *s, sd_event *event)
{
        if (s->event)
                return -EBUSY;
        int r = sd_event_add_time_relative(event, &s->tick, CLOCK_MONOTONIC, 0, 0, on_tick, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->tick, SD_EVENT_OFF);
        if (r < 0) {
                s->tick = sd_event_source_disable_unref(s->tick);
                return r;
        }
        s->event = sd_event_ref(event);
        return 0;
}

int sentinel_start(Sentinel *s)
{
        if (!s->event)
                return -ENXIO;
        if (s->started)
                return 0;
        s->started = true;
        return arm_tick(s, 0);
}

void sentinel_stop(Sentinel *s)
{
        if (!s || !s->tick)
                return;
        s->started = false;
        (void)sd_event_source_set_enabled(s->tick, SD_EVENT_OFF);
        queue_clear(s);
}

const SentinelStats *sentinel_get_stats(const Sentinel *s)
{
        return &s->stats;
}

unsigned sentinel_open_checks(const Sentinel *s)
{
        return (unsigned)s->n_open;
}
