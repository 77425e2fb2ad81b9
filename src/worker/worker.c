/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "worker.h"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#define WORKER_STUCK_MESSAGE "an earlier call is stuck past its deadline"

static nsec_t system_now(void *userdata)
{
        (void)userdata;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

const MonoClock mono_clock_system = {.now = system_now};

nsec_t mono_clock_now(const MonoClock *c)
{
        return c->now(c->userdata);
}

typedef enum JobState {
        JOB_QUEUED,
        JOB_RUNNING,   /* inside run(), within its deadline */
        JOB_ABANDONED, /* inside run(), past its deadline; its completion already ran */
        JOB_ENDED,     /* run() returned, or the pool ended the job */
} JobState;

typedef struct Job Job;
struct Job {
        Job *prev, *next; /* membership of one of the pool's lists */
        Job *notice_next; /* a dispatch-local list of completions to run */

        char *key;
        nsec_t timeout, deadline;
        WorkerRunFunc run;
        WorkerDoneFunc done;
        void *data;
        void (*free_data)(void *data);
        void *userdata;

        JobState state;
        int r;       /* run()'s result */
        char *error; /* run()'s message */

        /* A completion the pool decided on (timeout, stuck): no data is handed over. */
        int notice_r;
        char *notice_error;
        bool notice_frees_job; /* the job ends with this notice (it never ran) */
};

typedef struct JobList {
        Job *head, *tail;
} JobList;

static void job_list_append(JobList *l, Job *j)
{
        j->prev = l->tail;
        j->next = NULL;
        if (l->tail)
                l->tail->next = j;
        else
                l->head = j;
        l->tail = j;
}

static void job_list_remove(JobList *l, Job *j)
{
        if (j->prev)
                j->prev->next = j->next;
        else
                l->head = j->next;
        if (j->next)
                j->next->prev = j->prev;
        else
                l->tail = j->prev;
        j->prev = j->next = NULL;
}

static JobList job_list_take(JobList *l)
{
        JobList taken = *l;
        *l = (JobList){};
        return taken;
}

/* Frees the job and its data: only once nothing can use the data any more. */
static void job_free(Job *j)
{
        if (!j)
                return;
        if (j->free_data)
                j->free_data(j->data);
        free(j->key);
        free(j->error);
        free(j->notice_error);
        free(j);
}

static void job_list_free(JobList *l)
{
        while (l->head) {
                Job *j = l->head;
                job_list_remove(l, j);
                job_free(j);
        }
}

typedef struct Thread Thread;
struct Thread {
        Thread *next;
        WorkerPool *pool;
        pthread_t tid;
        Job *job;      /* the call this thread is inside, if any */
        bool exited;   /* left its loop; joinable at once */
        bool detached; /* the pool was freed while it was inside a call */
};

struct WorkerPool {
        /* Set at creation, then read-only. */
        WorkerPoolConfig config;
        const MonoClock *clock;
        bool system_clock;

        /* Owned by the owner's thread. */
        int epoll_fd, event_fd, timer_fd;
        sd_event_source *event_source;
        nsec_t armed_deadline;

        pthread_mutex_t lock;
        pthread_cond_t wake;      /* workers: work may be runnable, or shut down */
        pthread_cond_t idle_cond; /* worker_pool_wait_idle(): a call ended */

        /* Everything below is guarded by lock. */
        JobList queue;   /* JOB_QUEUED, in submission order */
        JobList running; /* JOB_RUNNING and JOB_ABANDONED */
        JobList done;    /* ended in time: completions to run */
        JobList late;    /* abandoned calls that returned: data to free, recovered() to call */
        Thread *threads;
        unsigned alive; /* threads that have not left their loop */
        unsigned stuck; /* JOB_ABANDONED jobs */
        unsigned refs;  /* the owner, plus each detached thread */
        bool shutdown;
        /* Bumped with every change of stuck, under the lock (PERF-1). */
        uint64_t generation;
};

static void pool_destroy(WorkerPool *p)
{
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->wake);
        pthread_cond_destroy(&p->idle_cond);
        free(p);
}

static void notify_owner_locked(WorkerPool *p)
{
        if (p->shutdown)
                return; /* the descriptors are closed or about to be */
        uint64_t one = 1;
        /* EAGAIN means the counter is already non-zero: the owner wakes anyway. */
        (void)!write(p->event_fd, &one, sizeof one);
}

static unsigned wanted_threads_locked(const WorkerPool *p)
{
        unsigned extra = p->stuck < p->config.max_extra ? p->stuck : p->config.max_extra;
        return p->config.threads + extra;
}

static bool key_busy_locked(const WorkerPool *p, const char *key)
{
        if (!key)
                return false;
        for (const Job *j = p->running.head; j; j = j->next)
                if (streq_ptr(j->key, key))
                        return true;
        return false;
}

/* The first queued job whose key is free. */
static Job *pick_job_locked(WorkerPool *p)
{
        for (Job *j = p->queue.head; j; j = j->next) {
                if (!key_busy_locked(p, j->key))
                        return j;
        }
        return NULL;
}

static void thread_exit_locked(Thread *self, bool *ret_last)
{
        WorkerPool *p = self->pool;

        self->exited = true;
        p->alive--;
        *ret_last = false;
        if (self->detached) {
                /* Nobody joins a detached thread: take its record out and drop its reference. */
                for (Thread **t = &p->threads; *t; t = &(*t)->next)
                        if (*t == self) {
                                *t = self->next;
                                break;
                        }
                free(self);
                *ret_last = --p->refs == 0;
        }
        pthread_cond_broadcast(&p->idle_cond);
}

static void *thread_main(void *arg)
{
        Thread *self = arg;
        WorkerPool *p = self->pool;
        bool last = false;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                if (p->shutdown || p->alive > wanted_threads_locked(p))
                        break;
                Job *j = pick_job_locked(p);
                if (!j) {
                        pthread_cond_wait(&p->wake, &p->lock);
                        continue;
                }
                job_list_remove(&p->queue, j);
                job_list_append(&p->running, j);
                j->state = JOB_RUNNING;
                self->job = j;
                pthread_mutex_unlock(&p->lock);

                char *error = NULL;
                int r = j->run(j->data, &error);

                pthread_mutex_lock(&p->lock);
                self->job = NULL;
                job_list_remove(&p->running, j);
                j->r = r;
                j->error = error;
                bool was_abandoned = j->state == JOB_ABANDONED;
                j->state = JOB_ENDED;
                if (was_abandoned) {
                        p->stuck--;
                        p->generation++;
                }
                /* Its key is free now, and some other call may have ended the wait. */
                pthread_cond_broadcast(&p->wake);
                pthread_cond_broadcast(&p->idle_cond);
                if (p->shutdown) {
                        /* The owner is gone: nobody dispatches any more, so clean up here. */
                        pthread_mutex_unlock(&p->lock);
                        job_free(j);
                        pthread_mutex_lock(&p->lock);
                        continue;
                }
                job_list_append(was_abandoned ? &p->late : &p->done, j);
                notify_owner_locked(p);
        }
        thread_exit_locked(self, &last);
        /* An exiting surplus thread leaves a record to join: tell the owner to reap it. */
        notify_owner_locked(p);
        pthread_mutex_unlock(&p->lock);
        if (last)
                pool_destroy(p);
        return NULL;
}

/* Starts threads until as many run as the stuck calls call for. */
static int ensure_threads_locked(WorkerPool *p)
{
        while (p->alive < wanted_threads_locked(p)) {
                Thread *t = calloc(1, sizeof *t);
                if (!t)
                        return -ENOMEM;
                t->pool = p;

                /* Workers take no signals: the loop thread handles them all (VMM-4). */
                sigset_t all, saved;
                sigfillset(&all);
                pthread_sigmask(SIG_SETMASK, &all, &saved);
                int r = pthread_create(&t->tid, NULL, thread_main, t);
                pthread_sigmask(SIG_SETMASK, &saved, NULL);
                if (r != 0) {
                        free(t);
                        return -r;
                }
                t->next = p->threads;
                p->threads = t;
                p->alive++;
        }
        return 0;
}

/* Joins threads that left their loop; the owner's thread only. */
static void reap_threads(WorkerPool *p)
{
        Thread *exited = NULL;

        pthread_mutex_lock(&p->lock);
        for (Thread **t = &p->threads; *t;) {
                if ((*t)->exited && !(*t)->detached) {
                        Thread *e = *t;
                        *t = e->next;
                        e->next = exited;
                        exited = e;
                } else
                        t = &(*t)->next;
        }
        pthread_mutex_unlock(&p->lock);

        while (exited) {
                Thread *e = exited;
                exited = e->next;
                pthread_join(e->tid, NULL);
                free(e);
        }
}

static nsec_t next_deadline_locked(const WorkerPool *p)
{
        nsec_t d = NSEC_INFINITY;
        for (const Job *j = p->queue.head; j; j = j->next)
                if (j->deadline < d)
                        d = j->deadline;
        for (const Job *j = p->running.head; j; j = j->next)
                if (j->state == JOB_RUNNING && j->deadline < d)
                        d = j->deadline;
        return d;
}

/* Points the descriptor's timer at the earliest deadline (system clock only). */
static void arm_timer(WorkerPool *p)
{
        if (!p->system_clock)
                return;

        pthread_mutex_lock(&p->lock);
        nsec_t d = next_deadline_locked(p);
        pthread_mutex_unlock(&p->lock);
        if (d == p->armed_deadline)
                return;

        struct itimerspec its = {};
        if (d != NSEC_INFINITY) {
                /* 0 would disarm the timer: a deadline at the epoch is already due anyway. */
                nsec_t at = d > 0 ? d : 1;
                its.it_value.tv_sec = (time_t)(at / NSEC_PER_SEC);
                its.it_value.tv_nsec = (long)(at % NSEC_PER_SEC);
        }
        if (timerfd_settime(p->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
                p->armed_deadline = d;
}

int worker_pool_new(const WorkerPoolConfig *config, WorkerPool **ret)
{
        if (!config || config->threads == 0 || (config->single_slot && config->max_extra > 0) ||
            (config->single_slot && config->threads != 1))
                return -EINVAL;

        _cleanup_free_ WorkerPool *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->config = *config;
        p->clock = config->clock ? config->clock : &mono_clock_system;
        p->system_clock = p->clock == &mono_clock_system;
        p->armed_deadline = NSEC_INFINITY;
        p->refs = 1;
        p->epoll_fd = p->event_fd = p->timer_fd = -1;

        _cleanup_close_ int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (epoll_fd < 0)
                return negative_errno();
        _cleanup_close_ int event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (event_fd < 0)
                return negative_errno();
        _cleanup_close_ int timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (timer_fd < 0)
                return negative_errno();
        struct epoll_event ev = {.events = EPOLLIN};
        ev.data.fd = event_fd;
        if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, event_fd, &ev) < 0)
                return negative_errno();
        ev.data.fd = timer_fd;
        if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_fd, &ev) < 0)
                return negative_errno();

        pthread_condattr_t attr;
        int r = pthread_condattr_init(&attr);
        if (r != 0)
                return -r;
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        r = pthread_cond_init(&p->idle_cond, &attr);
        pthread_condattr_destroy(&attr);
        if (r != 0)
                return -r;
        r = pthread_cond_init(&p->wake, NULL);
        if (r != 0) {
                pthread_cond_destroy(&p->idle_cond);
                return -r;
        }
        r = pthread_mutex_init(&p->lock, NULL);
        if (r != 0) {
                pthread_cond_destroy(&p->idle_cond);
                pthread_cond_destroy(&p->wake);
                return -r;
        }

        p->epoll_fd = TAKE_FD(epoll_fd);
        p->event_fd = TAKE_FD(event_fd);
        p->timer_fd = TAKE_FD(timer_fd);

        pthread_mutex_lock(&p->lock);
        r = ensure_threads_locked(p);
        pthread_mutex_unlock(&p->lock);
        if (r < 0) {
                worker_pool_free(TAKE_PTR(p));
                return r;
        }
        *ret = TAKE_PTR(p);
        return 0;
}

WorkerPool *worker_pool_free(WorkerPool *p)
{
        if (!p)
                return NULL;

        Thread *joinable = NULL;
        JobList queue, done, late;

        pthread_mutex_lock(&p->lock);
        p->shutdown = true;
        queue = job_list_take(&p->queue);
        done = job_list_take(&p->done);
        late = job_list_take(&p->late);
        for (Thread **t = &p->threads; *t;) {
                Thread *th = *t;
                if (th->job && !th->exited) {
                        /* Inside a call that may never return: let it go on alone. */
                        th->detached = true;
                        pthread_detach(th->tid);
                        p->refs++;
                        t = &th->next;
                } else {
                        *t = th->next;
                        th->next = joinable;
                        joinable = th;
                }
        }
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);

        while (joinable) {
                Thread *t = joinable;
                joinable = t->next;
                pthread_join(t->tid, NULL);
                free(t);
        }

        job_list_free(&queue);
        job_list_free(&done);
        job_list_free(&late);
        sd_event_source_disable_unref(p->event_source);
        closep(&p->epoll_fd);
        closep(&p->event_fd);
        closep(&p->timer_fd);

        pthread_mutex_lock(&p->lock);
        bool last = --p->refs == 0;
        pthread_mutex_unlock(&p->lock);
        if (last)
                pool_destroy(p);
        return NULL;
}

static int refusal_locked(const WorkerPool *p, char **error)
{
        if (p->config.single_slot && p->stuck > 0)
                return error_set(error, -EBUSY, "%s", WORKER_STUCK_MESSAGE);
        if (!p->config.single_slot && p->stuck > 0 && p->stuck >= p->config.max_extra)
                return error_set(error, -EAGAIN, "%s worker pool exhausted (%u calls stuck)",
                                 p->config.name ? p->config.name : "sysfs", p->config.max_extra);
        return 0;
}

int worker_pool_check_accepting(WorkerPool *p, char **error)
{
        pthread_mutex_lock(&p->lock);
        int r = refusal_locked(p, error);
        pthread_mutex_unlock(&p->lock);
        return r;
}

int worker_pool_submit(WorkerPool *p, const WorkerJob *job, char **error)
{
        if (!job || !job->run)
                return error_set(error, -EINVAL, "worker job without a function");
        if (p->config.require_timeout && job->timeout == 0)
                return error_set(error, -EINVAL, "%s worker job without a deadline",
                                 p->config.name ? p->config.name : "worker");

        _cleanup_free_ Job *j = calloc(1, sizeof *j);
        if (!j)
                return error_set_oom(error);
        if (job->key) {
                j->key = strdup(job->key);
                if (!j->key)
                        return error_set_oom(error);
        }
        j->timeout = job->timeout;
        nsec_t now = mono_clock_now(p->clock);
        j->deadline = job->timeout == 0 || now > NSEC_INFINITY - job->timeout ? NSEC_INFINITY
                                                                              : now + job->timeout;
        j->run = job->run;
        j->done = job->done;
        j->data = job->data;
        j->free_data = job->free_data;
        j->userdata = job->userdata;
        j->state = JOB_QUEUED;

        pthread_mutex_lock(&p->lock);
        int r = refusal_locked(p, error);
        if (r >= 0) {
                r = ensure_threads_locked(p);
                if (r < 0 && p->alive > 0)
                        r = 0; /* fewer threads than wanted still run the job */
                if (r < 0)
                        (void)error_set(error, r, "start worker thread: %s", strerror(-r));
        }
        if (r < 0) {
                pthread_mutex_unlock(&p->lock);
                free(j->key);
                return r;
        }
        job_list_append(&p->queue, TAKE_PTR(j));
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);

        arm_timer(p);
        return 0;
}

static int event_or_default(sd_event *event, sd_event **ret)
{
        if (event) {
                *ret = sd_event_ref(event);
                return 0;
        }
        return sd_event_default(ret);
}

int worker_attach_io(sd_event *event, sd_event_source **slot, int fd, sd_event_io_handler_t handler,
                     void *userdata)
{
        if (*slot)
                return -EBUSY;
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        int r = event_or_default(event, &e);
        if (r < 0)
                return r;
        /* The source holds its own reference on the loop. */
        return sd_event_add_io(e, slot, fd, EPOLLIN, handler, userdata);
}

int loop_timer_add(sd_event *event, sd_event_source **slot, sd_event_time_handler_t handler,
                   void *userdata)
{
        if (*slot)
                return -EBUSY;
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        int r = event_or_default(event, &e);
        if (r < 0)
                return r;
        r = sd_event_add_time(e, slot, CLOCK_MONOTONIC, UINT64_MAX, 0, handler, userdata);
        if (r < 0)
                return r;
        (void)sd_event_source_set_enabled(*slot, SD_EVENT_OFF);
        return 0;
}

void loop_timer_arm(sd_event_source *s, nsec_t at)
{
        if (!s)
                return;
        if (at == NSEC_INFINITY) {
                (void)sd_event_source_set_enabled(s, SD_EVENT_OFF);
                return;
        }
        /* Rounded up: a timer must not run before the deadline it stands for. */
        (void)sd_event_source_set_time(s, at / 1000 + (at % 1000 != 0));
        (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

int loop_wake_add(sd_event *event, sd_event_source **slot, sd_event_handler_t handler,
                  void *userdata)
{
        if (*slot)
                return -EBUSY;
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        int r = event_or_default(event, &e);
        if (r < 0)
                return r;
        r = sd_event_add_defer(e, slot, handler, userdata);
        if (r < 0)
                return r;
        (void)sd_event_source_set_enabled(*slot, SD_EVENT_OFF);
        return 0;
}

void loop_wake(sd_event_source *s)
{
        if (s)
                (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
}

DEFINE_ATTACH_EVENT(worker_pool_attach_event, WorkerPool, event_source, epoll_fd,
                    worker_pool_dispatch_completions)

static void drain_fds(WorkerPool *p)
{
        uint64_t v;
        (void)!read(p->event_fd, &v, sizeof v);
        if (read(p->timer_fd, &v, sizeof v) == (ssize_t)sizeof v)
                p->armed_deadline = NSEC_INFINITY; /* fired: it is disarmed now */
}

/*
 * Appends a completion the pool decided on; ENOMEM leaves its message out, never the call
 * (done_message() then stands in for it).
 */
static void add_notice(Job ***tail, Job *j, int r, char *message)
{
        j->notice_r = r;
        free(j->notice_error);
        j->notice_error = message;
        j->notice_next = NULL;
        **tail = j;
        *tail = &j->notice_next;
}

/* GEN-4, GEN-12: `timed out after <d>`. */
static char *timeout_message(nsec_t timeout)
{
        char buf[DURATION_STRLEN];
        char *m = NULL;
        (void)strprintf(&m, "timed out after %s", format_duration(timeout, buf));
        return m;
}

static char *stuck_message(void)
{
        return strdup(WORKER_STUCK_MESSAGE);
}

/* What done() is told: the job's message, or the errno's text for a failure without one. */
static const char *done_message(int r, const char *error)
{
        if (r >= 0)
                return NULL;
        return error ?: strerror(-r);
}

int worker_pool_dispatch_completions(WorkerPool *p)
{
        Job *notices = NULL, **notices_tail = &notices;
        JobList done, late;
        int n = 0;

        drain_fds(p);
        reap_threads(p);

        pthread_mutex_lock(&p->lock);
        done = job_list_take(&p->done);
        late = job_list_take(&p->late);

        nsec_t now = mono_clock_now(p->clock);
        bool became_stuck = false;
        for (Job *j = p->running.head; j; j = j->next) {
                if (j->state != JOB_RUNNING || j->deadline > now)
                        continue;
                /* Past its deadline: the caller hears now; the call finishes when it may. */
                j->state = JOB_ABANDONED;
                p->stuck++;
                p->generation++;
                became_stuck = true;
                j->notice_frees_job = false;
                add_notice(&notices_tail, j, -ETIMEDOUT, timeout_message(j->timeout));
        }
        for (Job *j = p->queue.head, *next; j; j = next) {
                next = j->next;
                bool expired = j->deadline <= now;
                if (!expired && !(p->config.single_slot && p->stuck > 0))
                        continue;
                job_list_remove(&p->queue, j);
                j->state = JOB_ENDED;
                j->notice_frees_job = true;
                if (expired)
                        /* It never entered its call: nothing is uncertain. */
                        add_notice(&notices_tail, j, -ETIMEDOUT, timeout_message(j->timeout));
                else
                        add_notice(&notices_tail, j, -EBUSY, stuck_message());
        }
        if (became_stuck)
                /* One more thread per stuck call; a failure is retried at the next submit. */
                (void)ensure_threads_locked(p);
        pthread_mutex_unlock(&p->lock);

        arm_timer(p);

        while (done.head) {
                Job *j = done.head;
                job_list_remove(&done, j);
                if (j->done)
                        j->done(j->r, j->data, done_message(j->r, j->error), j->userdata);
                job_free(j);
                n++;
        }
        while (notices) {
                Job *j = notices;
                notices = j->notice_next;
                if (j->done)
                        j->done(j->notice_r, NULL, done_message(j->notice_r, j->notice_error),
                                j->userdata);
                n++;
                if (j->notice_frees_job)
                        job_free(j);
        }
        while (late.head) {
                Job *j = late.head;
                job_list_remove(&late, j);
                if (p->config.recovered)
                        p->config.recovered(j->key, j->r, p->config.userdata);
                job_free(j);
        }
        return n;
}

int worker_pool_get_next_deadline(WorkerPool *p, nsec_t *ret)
{
        pthread_mutex_lock(&p->lock);
        nsec_t d = next_deadline_locked(p);
        pthread_mutex_unlock(&p->lock);
        if (d == NSEC_INFINITY)
                return 0;
        *ret = d;
        return 1;
}

bool worker_pool_key_is_uncertain(WorkerPool *p, const char *key)
{
        bool uncertain = false;

        pthread_mutex_lock(&p->lock);
        for (const Job *j = p->running.head; j && !uncertain; j = j->next)
                uncertain = j->state == JOB_ABANDONED && streq_ptr(j->key, key);
        pthread_mutex_unlock(&p->lock);
        return uncertain;
}

unsigned worker_pool_get_stuck_count(WorkerPool *p)
{
        pthread_mutex_lock(&p->lock);
        unsigned n = p->stuck;
        pthread_mutex_unlock(&p->lock);
        return n;
}

uint64_t worker_pool_generation(WorkerPool *p)
{
        pthread_mutex_lock(&p->lock);
        uint64_t g = p->generation;
        pthread_mutex_unlock(&p->lock);
        return g;
}

unsigned worker_pool_get_thread_count(WorkerPool *p)
{
        pthread_mutex_lock(&p->lock);
        unsigned n = p->alive;
        pthread_mutex_unlock(&p->lock);
        return n;
}

int worker_pool_wait_idle(WorkerPool *p, nsec_t timeout)
{
        nsec_t until = system_now(NULL) + timeout;
        struct timespec ts = {
            .tv_sec = (time_t)(until / NSEC_PER_SEC),
            .tv_nsec = (long)(until % NSEC_PER_SEC),
        };
        int r = 0;

        pthread_mutex_lock(&p->lock);
        while (p->queue.head || p->running.head) {
                int k = pthread_cond_timedwait(&p->idle_cond, &p->lock, &ts);
                if (k == ETIMEDOUT) {
                        r = -ETIMEDOUT;
                        break;
                }
        }
        pthread_mutex_unlock(&p->lock);
        return r;
}
