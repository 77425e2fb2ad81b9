/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * worker: blocking work off the event loop (GEN-2, GEN-3, GEN-4, NVML-9, NVML-10).
 *
 * A WorkerPool runs jobs on its own threads and posts each result back to its owner, the one
 * thread that created it (the event loop). Every function below is called on that thread only;
 * completions run there too, never on a worker.
 *
 * Driving: the owner attaches the pool to its sd-event loop (worker_pool_attach_event()). The
 * pool's source wakes the loop when a completion is ready or the earliest deadline has passed
 * (a timer on CLOCK_MONOTONIC). A pool built with an injected clock (tests) checks deadlines
 * against that clock whenever it dispatches; the loop cannot see such a clock move, so after
 * moving it the test calls worker_pool_dispatch_completions() itself.
 *
 * Two kinds of pool, one engine:
 *
 *  - the sysfs pool (GEN-2, GEN-4): 4 threads. A call still running at its deadline is
 *    abandoned: its completion runs with -ETIMEDOUT and `timed out after <d>`, its key becomes
 *    uncertain until the call returns, and the pool adds one thread per stuck call, at most 16.
 *    With 16 calls stuck, new work fails at once with -EAGAIN and
 *    `sysfs worker pool exhausted (16 calls stuck)`.
 *
 *  - the NVML slot (NVML-9, NVML-10): 1 thread, one job at a time. A call still running at its
 *    deadline is abandoned with -ETIMEDOUT and the slot is stuck: every queued job fails at once
 *    with -EBUSY, and until the call returns so does every new one; the late result is
 *    discarded.
 *
 *  - the disk pool (GEN-2): 2 threads for record writes, spawns, path checks and console
 *    reads. It runs nothing that can hang on hardware or on a helper program, so a record write
 *    waits for nothing but other short file work.
 *
 *  - the helper pool (GEN-2, GEN-4, decision 13): 2 threads, at most 2 extra, for helper
 *    programs (spawn_run_helper(): qemu-img, dnsmasq) and file copies. Every job has a deadline;
 *    one past it is abandoned like a stuck sysfs call, so a slow helper holds a helper thread,
 *    never a disk thread. With 2 calls stuck, new work fails at once with -EAGAIN and
 *    `helper worker pool exhausted (2 calls stuck)`.
 *
 * In all of them, a job's deadline counts from its submission, so time spent queued counts, and a
 * job whose deadline passes while it waits fails with -ETIMEDOUT without ever running.
 *
 * Jobs that share a key (a VF address) never overlap: a later one waits until the earlier one
 * has returned, even when the earlier one was abandoned (DEV-11).
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "base/base.h"

/* ---- a monotonic clock that tests can replace ---------------------------------------------- */

typedef struct MonoClock {
        nsec_t (*now)(void *userdata); /* must be callable from any thread */
        void *userdata;
} MonoClock;

/* CLOCK_MONOTONIC. */
extern const MonoClock mono_clock_system;
nsec_t mono_clock_now(const MonoClock *c);

/* ---- jobs ---------------------------------------------------------------------------------- */

/*
 * Runs on a worker thread. Returns >= 0 or -errno; on failure it stores a malloc'd message in
 * *error (which starts out NULL), as any function taking `char **error` does. One that returns
 * < 0 without a message still gets one: the pool hands done() strerror(-r) for it.
 */
typedef int (*WorkerRunFunc)(void *data, char **error);

/*
 * Runs on the owner's thread with the job's result r and message, valid only during the call.
 * When r < 0, error is never NULL: run()'s message, the pool's own (`timed out after <d>`,
 * `an earlier call is stuck past its deadline`) or, when there is none, strerror(-r); when
 * r >= 0 it is NULL. So a done() never needs a fallback text. data is the job's data when
 * run() returned in time, and NULL when the pool ended the job itself (r is -ETIMEDOUT or
 * -EBUSY): an abandoned run() may still be using its data then.
 */
typedef void (*WorkerDoneFunc)(int r, void *data, const char *error, void *userdata);

typedef struct WorkerJob {
        const char *key; /* jobs with equal keys never overlap; NULL for none; copied */
        nsec_t timeout;  /* from submission; 0 for no deadline */
        WorkerRunFunc run;
        WorkerDoneFunc done; /* may be NULL */
        void *data;          /* handed to run() and done() */
        /*
         * Frees data once nothing uses it any more: after done(), or after an abandoned run()
         * finally returns. Called on the owner's thread, except for a call still running when
         * the pool is freed, whose data is freed by its own thread when it returns. May be NULL.
         */
        void (*free_data)(void *data);
        void *userdata; /* handed to done() only */
} WorkerJob;

/*
 * Called on the owner's thread when an abandoned call returns at last: its key (NULL when it
 * had none) is certain again, and r is what the call returned (its result is otherwise
 * discarded).
 */
typedef void (*WorkerRecoveredFunc)(const char *key, int r, void *userdata);

typedef struct WorkerPoolConfig {
        const char *name;       /* for messages: `<name> worker pool exhausted`; NULL: "sysfs" */
        unsigned threads;       /* threads that always run (>= 1) */
        bool require_timeout;   /* a job without a deadline is refused (-EINVAL) */
        unsigned max_extra;     /* one thread added per stuck call, at most this many */
        bool single_slot;       /* the NVML slot: a stuck call fails every job until it returns */
        const MonoClock *clock; /* NULL for mono_clock_system */
        WorkerRecoveredFunc recovered; /* may be NULL */
        void *userdata;                /* for recovered() */
} WorkerPoolConfig;

#define WORKER_POOL_THREADS 4
#define WORKER_POOL_MAX_EXTRA 16

#define WORKER_POOL_CONFIG_SYSFS \
        ((WorkerPoolConfig){.threads = WORKER_POOL_THREADS, .max_extra = WORKER_POOL_MAX_EXTRA})
#define WORKER_POOL_CONFIG_NVML ((WorkerPoolConfig){.threads = 1, .single_slot = true})
#define WORKER_POOL_CONFIG_DISK ((WorkerPoolConfig){.name = "disk", .threads = 2})
#define WORKER_POOL_HELPER_THREADS 2
#define WORKER_POOL_HELPER_MAX_EXTRA 2
#define WORKER_POOL_CONFIG_HELPER                                      \
        ((WorkerPoolConfig){.name = "helper",                          \
                            .threads = WORKER_POOL_HELPER_THREADS,     \
                            .max_extra = WORKER_POOL_HELPER_MAX_EXTRA, \
                            .require_timeout = true})

typedef struct WorkerPool WorkerPool;

/* Starts the threads. -EINVAL for a config without threads, or a slot with extra threads. */
int worker_pool_new(const WorkerPoolConfig *config, WorkerPool **ret);

/*
 * Stops the pool without running any completion. Queued jobs are dropped (their data freed);
 * idle threads are joined; a thread still inside a call is detached and frees its job's data
 * and the last of the pool's memory when the call returns, so freeing never waits on a hung
 * call. Returns NULL.
 */
WorkerPool *worker_pool_free(WorkerPool *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(WorkerPool *, worker_pool_free);
#define _cleanup_worker_pool_ _cleanup_(worker_pool_freep)

/*
 * Queues a job. On success the pool owns job->data; on failure the caller keeps it, no
 * completion runs, and *error says why: -EAGAIN `sysfs worker pool exhausted (<n> calls stuck)`
 * (sysfs pool, max_extra calls stuck), -EBUSY `an earlier call is stuck past its deadline`
 * (NVML slot stuck), -EINVAL (no run function), -ENOMEM, or the failure to start a thread.
 */
int worker_pool_submit(WorkerPool *p, const WorkerJob *job, char **error);

/*
 * Adds the pool's IO source to event (NULL: sd_event_default()); from then on the loop runs what
 * worker_pool_dispatch_completions() describes whenever there is something to do. -EBUSY when
 * the pool is attached already; worker_pool_free() removes the source.
 */
int worker_pool_attach_event(WorkerPool *p, sd_event *event);

/*
 * The one way onto the loop (ARCHITECTURE.md decision 2), shared by the modules that own a
 * descriptor: adds an IO source (EPOLLIN) on fd to event (NULL: sd_event_default()) and stores
 * it in *slot, which its owner drops with sd_event_source_disable_unref() when it is freed.
 * -EBUSY when *slot is set already.
 */
int worker_attach_io(sd_event *event, sd_event_source **slot, int fd, sd_event_io_handler_t handler,
                     void *userdata);

/*
 * The sources a module without a descriptor of its own gets its turns from (decision 2: one loop,
 * no private epoll or timerfd). loop_timer_add() adds a CLOCK_MONOTONIC timer, disarmed;
 * loop_timer_arm() arms it once for `at` (CLOCK_MONOTONIC nanoseconds; a time already past runs
 * at the next iteration) or disarms it with NSEC_INFINITY. loop_wake_add() adds a wake-up,
 * off; loop_wake() has the loop run it once, soon (an eventfd's job, without the descriptor).
 * Like worker_attach_io(): a NULL event is sd_event_default(), -EBUSY when *slot is set, and a
 * NULL source makes the arm and the wake no-ops, so an owner not attached yet needs no check.
 */
int loop_timer_add(sd_event *event, sd_event_source **slot, sd_event_time_handler_t handler,
                   void *userdata);
void loop_timer_arm(sd_event_source *s, nsec_t at);
int loop_wake_add(sd_event *event, sd_event_source **slot, sd_event_handler_t handler,
                  void *userdata);
void loop_wake(sd_event_source *s);

/*
 * Defines int name(Type *o, sd_event *event), a module's <module>_attach_event(): attaches
 * o->fd as o->source (worker_attach_io()), so that the loop runs turn(o) whenever the
 * descriptor is readable; -EINVAL for a NULL o.
 */
#define DEFINE_ATTACH_EVENT(name, Type, source, fd, turn)                                    \
        static int name##_on_io(sd_event_source *s, int f, uint32_t revents, void *userdata) \
        {                                                                                    \
                (void)turn(userdata);                                                        \
                return 0;                                                                    \
        }                                                                                    \
        int name(Type *o, sd_event *event)                                                   \
        {                                                                                    \
                if (!o)                                                                      \
                        return -EINVAL;                                                      \
                return worker_attach_io(event, &o->source, o->fd, name##_on_io, o);          \
        }

/*
 * One turn of the pool's source: ends jobs whose deadline has passed (by the pool's clock),
 * reaps threads that are no longer needed, and runs every ready completion, in the order the
 * jobs ended. Completions may submit new jobs but must not free the pool. Returns the number of
 * completions run. Owners leave this to the loop; only a test with an injected clock calls it,
 * right after moving the clock.
 */
int worker_pool_dispatch_completions(WorkerPool *p);

/* The earliest deadline of a queued or running job: 1 and *ret, or 0 when there is none. */
int worker_pool_get_next_deadline(WorkerPool *p, nsec_t *ret);

/* True while an abandoned call with this key has not returned (the VF is "uncertain"). */
bool worker_pool_key_is_uncertain(WorkerPool *p, const char *key);

/* Abandoned calls that have not returned yet. */
unsigned worker_pool_get_stuck_count(WorkerPool *p);

/*
 * Moves on (monotonically) whenever a call is abandoned or an abandoned call returns, i.e.
 * whenever worker_pool_key_is_uncertain() or worker_pool_check_accepting() may answer
 * differently. The abandonment is decided by the pool's turn that notices the deadline (its
 * timer), never by a reader comparing times, so a reader that saw the same value saw the same
 * answers. Any thread may read it (PERF-1: the API's rendered bodies).
 */
uint64_t worker_pool_generation(WorkerPool *p);

/* Threads currently alive (for tests and diagnostics). */
unsigned worker_pool_get_thread_count(WorkerPool *p);

/*
 * The message new work would fail with right now (-EAGAIN exhausted, -EBUSY slot stuck), or 0
 * when the pool accepts work. For `placement_disabled_reason` (GEN-4).
 */
int worker_pool_check_accepting(WorkerPool *p, char **error);

/*
 * Blocks until no job is queued or running, or until timeout (real CLOCK_MONOTONIC time)
 * passes: 0 or -ETIMEDOUT. Abandoned calls count as running. Completions are not run. Meant for
 * shutdown, where the owner waits a bounded time for a last job (NVML-17); the loop itself never
 * calls it.
 */
int worker_pool_wait_idle(WorkerPool *p, nsec_t timeout);

/* ---- the spawn primitive (decision 13; worker-spawn.c) ------------------------------------- */

/*
 * Every child of the daemon starts here: QEMU (vmm_spawn(), VMM-3) and helper programs (`qemu
 * -device help`, and next qemu-img and dnsmasq). It lives in worker/ because ARCHITECTURE.md puts
 * the helpers' spawn here, because its calls block and so run on worker threads, and because
 * worker/ sits below both vmm/ and hostcheck/, which share it. Both calls block: run them on a
 * worker (the helper pool for helpers, GEN-2).
 */

/* The environment a child gets unless the request names another (VMM-3). */
#define SPAWN_PATH_ENV "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
/* Passed descriptors sit at consecutive numbers from here (VMM-3: the TAP at 3, vhost at 4). */
#define SPAWN_PASSED_FD_FIRST 3
#define SPAWN_PASSED_FDS_MAX 32

/* Resource limits set on the child (hard and soft); 0 leaves the daemon's own. */
typedef struct SpawnLimits {
        uint64_t as_bytes;    /* RLIMIT_AS */
        uint64_t cpu_seconds; /* RLIMIT_CPU */
        uint64_t nofile;      /* RLIMIT_NOFILE */
        int nice;             /* 1..19: a lower CPU priority (setpriority), so that a long
                               * helper yields to the event loop; 0 leaves the daemon's own */
} SpawnLimits;

typedef struct SpawnRequest {
        char *const *argv; /* argv[0] is executed as a path, never looked up in PATH */
        char *const *envp; /* the child's whole environment; NULL: SPAWN_PATH_ENV alone */
        /* The standard streams, descriptors of this process: -1 is the null device for stdin and
         * stdout, stdout's descriptor for stderr. spawn_run_helper() sets all three itself. */
        int stdin_fd, stdout_fd, stderr_fd;
        const int *fds;          /* fds[i] becomes SPAWN_PASSED_FD_FIRST + i in the child */
        size_t n_fds;            /* at most SPAWN_PASSED_FDS_MAX */
        const char *null_device; /* "/dev/null" (GEN-1's one literal) when NULL */
        SpawnLimits limits;
        /* spawn_run_helper() only: each piece of output as it arrives, on the calling thread,
         * also past max_output (a long-running helper's progress, `qemu-img convert -p`). */
        void (*on_output)(const char *data, size_t size, void *userdata);
        void *output_userdata;
} SpawnRequest;

/* A request with no descriptors set yet (-1 is not a valid zero value). */
#define SPAWN_REQUEST_INIT ((SpawnRequest){.stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1})

typedef struct SpawnedChild {
        pid_t pid;
        int pidfd;       /* owned by the caller; -1 when none could be opened */
        int pidfd_error; /* -errno why not; 0 with a pidfd */
} SpawnedChild;

/*
 * posix_spawn of argv[0] with exactly the request's environment, standard streams and passed
 * descriptors (every other descriptor closed), in a session of its own (POSIX_SPAWN_SETSID), with
 * an empty signal mask and every signal at its default; its resource limits set; then a pidfd.
 * Fails (`spawn <argv[0]>: <why>`) only when no child runs. A pidfd that cannot be opened is not
 * a failure: the child runs, unreaped, so its pid is still its own, and the caller decides how
 * to end it (VMM-14).
 */
int spawn_start(const SpawnRequest *request, SpawnedChild *ret, char **error);

/*
 * A helper program to its end: spawn_start() with stdin at EOF and stdout and stderr into one
 * pipe, of which at most max_output bytes are kept (the rest is drained and dropped, so the
 * helper never blocks on it). A helper still running at deadline (CLOCK_MONOTONIC) is killed
 * with its process group and the call fails with -ETIME (`<argv[0]> did not finish in time`);
 * other failures read `run <argv[0]>: <why>`. On success *ret_output holds the output (NUL-
 * terminated) and *ret_status the wait status; the helper has been reaped either way. With
 * request->on_output, every read of the output is handed to it too, as it arrives.
 */
int spawn_run_helper(const SpawnRequest *request, nsec_t deadline, size_t max_output,
                     char **ret_output, int *ret_status, char **error);
