/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The worker pool and the NVML slot: completions posted to the owner, deadlines, uncertain keys,
 * the 16-extra-thread limit, per-key serialisation. Jobs block on gates the test opens; time is
 * an injected clock, except where the pool's own timer is under test. Each pool is attached to
 * the test's sd-event loop, which the test runs until what it waits for has happened; with an
 * injected clock the test dispatches by hand right after moving the clock, and checks how many
 * completions that ran.
 *
 * The spawn primitive (decision 13, VMM-3) runs real children: /bin/sh reporting what it got
 * (descriptors, environment, session, signal state, limits), and helpers past their deadline.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testlib.h"
#include "worker/worker.h"

/* ---- helpers ------------------------------------------------------------------------------- */

/* A gate that blocking jobs wait on until the test opens it. */
typedef struct Gate {
        pthread_mutex_t m;
        pthread_cond_t c;
        bool open;
} Gate;

static void gate_init(Gate *g)
{
        pthread_mutex_init(&g->m, NULL);
        pthread_cond_init(&g->c, NULL);
        g->open = false;
}

static void gate_open(Gate *g)
{
        pthread_mutex_lock(&g->m);
        g->open = true;
        pthread_cond_broadcast(&g->c);
        pthread_mutex_unlock(&g->m);
}

static void gate_destroy(Gate *g)
{
        pthread_mutex_destroy(&g->m);
        pthread_cond_destroy(&g->c);
}

/* Shared counters of one test. */
typedef struct Board {
        atomic_int entered;   /* run() calls started */
        atomic_int freed;     /* free_data() calls */
        atomic_int active[4]; /* per key index: calls inside run() now */
        atomic_int max_active[4];
        atomic_int recovered;
        int last_recovered_r;
        char last_recovered_key[32];
        /* completions, in order */
        int n_done;
        int done_r[64];
        int done_id[64];
        bool done_had_data[64];
        char done_error[64][128];
        pthread_t owner;
        bool wrong_thread;
} Board;

typedef struct TJob {
        Board *board;
        Gate *gate; /* NULL: return at once */
        int id;
        int key_index; /* -1: no key */
        int result;
        const char *message;
        atomic_bool entered;
} TJob;

static int tjob_run(void *data, char **error)
{
        TJob *t = data;
        Board *b = t->board;

        atomic_store(&t->entered, true);
        atomic_fetch_add(&b->entered, 1);
        if (t->key_index >= 0) {
                int now = atomic_fetch_add(&b->active[t->key_index], 1) + 1;
                int max = atomic_load(&b->max_active[t->key_index]);
                while (now > max &&
                       !atomic_compare_exchange_weak(&b->max_active[t->key_index], &max, now))
                        ;
        }
        if (t->gate) {
                pthread_mutex_lock(&t->gate->m);
                while (!t->gate->open)
                        pthread_cond_wait(&t->gate->c, &t->gate->m);
                pthread_mutex_unlock(&t->gate->m);
        }
        if (t->key_index >= 0)
                atomic_fetch_sub(&b->active[t->key_index], 1);
        if (t->message)
                *error = strdup(t->message);
        return t->result;
}

static void tjob_done(int r, void *data, const char *error, void *userdata)
{
        Board *b = userdata;
        if (!pthread_equal(pthread_self(), b->owner))
                b->wrong_thread = true;
        assert_true(b->n_done < 64);
        int i = b->n_done++;
        b->done_r[i] = r;
        b->done_had_data[i] = data != NULL;
        b->done_id[i] = data ? ((TJob *)data)->id : -1;
        snprintf(b->done_error[i], sizeof b->done_error[i], "%s", error ? error : "(null)");
}

static void tjob_free(void *data)
{
        TJob *t = data;
        atomic_fetch_add(&t->board->freed, 1);
        free(t);
}

static void on_recovered(const char *key, int r, void *userdata)
{
        Board *b = userdata;
        b->last_recovered_r = r;
        snprintf(b->last_recovered_key, sizeof b->last_recovered_key, "%s", key ? key : "(null)");
        atomic_fetch_add(&b->recovered, 1);
}

static const char *const keys[] = {"0000:e3:00.4", "0000:e3:00.5", "0000:e3:00.6", "0000:e3:00.7"};

static int submit(WorkerPool *p, Board *b, Gate *g, int id, int key_index, nsec_t timeout,
                  int result, const char *message, TJob **ret_job, char **error)
{
        TJob *t = calloc(1, sizeof *t);
        assert_non_null(t);
        *t = (TJob){.board = b,
                    .gate = g,
                    .id = id,
                    .key_index = key_index,
                    .result = result,
                    .message = message};
        WorkerJob job = {
            .key = key_index >= 0 ? keys[key_index] : NULL,
            .timeout = timeout,
            .run = tjob_run,
            .done = tjob_done,
            .data = t,
            .free_data = tjob_free,
            .userdata = b,
        };
        int r = worker_pool_submit(p, &job, error);
        if (r < 0) {
                free(t);
                return r;
        }
        if (ret_job)
                *ret_job = t;
        return r;
}

#define WAIT_LIMIT (10 * NSEC_PER_SEC)

/*
 * Runs the loop until cond holds (bounded by WAIT_LIMIT of real time). Threads report through
 * the pool's source, so this waits for events, not for a fixed time.
 */
#define WAIT_UNTIL(f, cond) TEST_WAIT_UNTIL_LIMIT((f)->event, WAIT_LIMIT, cond)

/* Waits (bounded) until a job has entered its call; no dispatching needed. */
static void wait_entered(const atomic_int *counter, int n)
{
        nsec_t until = test_now() + WAIT_LIMIT;
        while (atomic_load(counter) < n) {
                assert_true(test_now() < until);
                sched_yield();
        }
}

/* ---- the fixture --------------------------------------------------------------------------- */

/* What every test starts from: a board, an injected clock, two closed gates and a loop. */
typedef struct Fixture {
        Board b;
        TestClock fc;
        Gate g[2];
        sd_event *event;
        WorkerPool *p;
} Fixture;

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        f->b.owner = pthread_self();
        test_clock_init(&f->fc, 1000 * NSEC_PER_SEC);
        gate_init(&f->g[0]);
        gate_init(&f->g[1]);
        assert_int_equal(sd_event_new(&f->event), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        worker_pool_free(f->p);
        gate_destroy(&f->g[0]);
        gate_destroy(&f->g[1]);
        sd_event_unref(f->event);
        free(f);
        return 0;
}

/* Starts the pool of cfg, on the fixture's clock when fake, attached to the loop. */
static WorkerPool *start_pool(Fixture *f, WorkerPoolConfig cfg, bool fake, bool recovered)
{
        if (fake)
                cfg.clock = &f->fc.clock;
        if (recovered) {
                cfg.recovered = on_recovered;
                cfg.userdata = &f->b;
        }
        assert_int_equal(worker_pool_new(&cfg, &f->p), 0);
        assert_int_equal(worker_pool_attach_event(f->p, f->event), 0);
        return f->p;
}

/* ---- tests --------------------------------------------------------------------------------- */

/*
 * GEN-2: results post back through the pool's source and complete on the owner's thread, and
 * done() always hears why a job failed: a run() that fails without a message gets strerror(-r)
 * from the pool, one that succeeds hands done() no message even if it stored one.
 */
static void test_completions_posted(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, false, false);
        assert_int_equal(worker_pool_get_thread_count(p), 4);

        assert_int_equal(submit(p, b, NULL, 1, -1, 0, 7, NULL, NULL, NULL), 0);
        assert_int_equal(
            submit(p, b, NULL, 2, 0, 30 * NSEC_PER_SEC, -EIO, "read VF: I/O error", NULL, NULL), 0);
        assert_int_equal(submit(p, b, NULL, 3, 1, 0, -ENODEV, NULL, NULL, NULL), 0);
        assert_int_equal(submit(p, b, NULL, 4, 2, 0, 0, "stray text", NULL, NULL), 0);

        /* Bounded: the source wakes the loop as soon as a job ends; 10 s means it never did. */
        assert_int_equal(sd_event_run(f->event, TEST_USEC(10 * NSEC_PER_SEC)), 1);
        WAIT_UNTIL(f, b->n_done == 4);
        assert_false(b->wrong_thread);
        for (int i = 0; i < 4; i++) {
                assert_true(b->done_had_data[i]);
                switch (b->done_id[i]) {
                case 1:
                        assert_int_equal(b->done_r[i], 7);
                        assert_string_equal(b->done_error[i], "(null)");
                        break;
                case 2:
                        assert_int_equal(b->done_r[i], -EIO);
                        assert_string_equal(b->done_error[i], "read VF: I/O error");
                        break;
                case 3:
                        assert_int_equal(b->done_r[i], -ENODEV);
                        assert_string_equal(b->done_error[i], strerror(ENODEV));
                        break;
                default:
                        assert_int_equal(b->done_id[i], 4);
                        assert_int_equal(b->done_r[i], 0);
                        assert_string_equal(b->done_error[i], "(null)");
                        break;
                }
        }
        assert_int_equal(atomic_load(&b->freed), 4);
        /* Nothing left: dispatching again runs nothing and the source is quiet. */
        assert_int_equal(worker_pool_dispatch_completions(p), 0);
        assert_int_equal(sd_event_run(f->event, 0), 0);
}

/* GEN-4: a call past its deadline is abandoned with `timed out after <d>`; its key is uncertain
 * until the call returns; one thread is added per stuck call and leaves when it returns. */
static void test_deadline_abandons_call(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, true, true);

        TJob *stuck = NULL;
        assert_int_equal(
            submit(p, b, &f->g[0], 1, 0, 30 * NSEC_PER_SEC, 0, "late message", &stuck, NULL), 0);
        wait_entered(&b->entered, 1);

        nsec_t d;
        assert_int_equal(worker_pool_get_next_deadline(p, &d), 1);
        assert_true(d == 1030 * NSEC_PER_SEC);

        /* One nanosecond early: nothing happens. */
        test_clock_advance(&f->fc, 30 * NSEC_PER_SEC - 1);
        assert_int_equal(worker_pool_dispatch_completions(p), 0);
        assert_false(worker_pool_key_is_uncertain(p, keys[0]));

        test_clock_advance(&f->fc, 1);
        assert_int_equal(worker_pool_dispatch_completions(p), 1);
        assert_int_equal(b->done_r[0], -ETIMEDOUT);
        assert_false(b->done_had_data[0]);
        assert_string_equal(b->done_error[0], "timed out after 30s");
        assert_true(worker_pool_key_is_uncertain(p, keys[0]));
        assert_false(worker_pool_key_is_uncertain(p, keys[1]));
        assert_int_equal(worker_pool_get_stuck_count(p), 1);
        assert_int_equal(worker_pool_get_thread_count(p), 5);
        assert_int_equal(worker_pool_get_next_deadline(p, &d), 0);
        assert_int_equal(atomic_load(&b->freed), 0); /* the call still holds its data */

        /* Other keys still run while the call hangs. */
        assert_int_equal(submit(p, b, NULL, 2, 1, 30 * NSEC_PER_SEC, 0, NULL, NULL, NULL), 0);
        /* The same key waits for the stuck call (DEV-11). */
        TJob *same = NULL;
        assert_int_equal(submit(p, b, NULL, 3, 0, 300 * NSEC_PER_SEC, 5, NULL, &same, NULL), 0);
        WAIT_UNTIL(f, b->n_done == 2);
        assert_int_equal(b->done_id[1], 2);
        assert_false(atomic_load(&same->entered));

        /* The call returns: its result is discarded, the key is certain, the extra thread goes. */
        gate_open(&f->g[0]);
        WAIT_UNTIL(f, atomic_load(&b->recovered) == 1 && b->n_done == 3 &&
                          worker_pool_get_thread_count(p) == 4);
        assert_int_equal(b->last_recovered_r, 0);
        assert_string_equal(b->last_recovered_key, keys[0]);
        assert_false(worker_pool_key_is_uncertain(p, keys[0]));
        assert_int_equal(worker_pool_get_stuck_count(p), 0);
        assert_int_equal(b->done_id[2], 3);
        assert_int_equal(b->done_r[2], 5);
        assert_int_equal(atomic_load(&b->freed), 3);
        for (int i = 0; i < b->n_done; i++)
                assert_string_not_equal(b->done_error[i], "late message");
        assert_false(b->wrong_thread);
}

/* GEN-4: a job whose deadline passes while it waits fails without running; nothing becomes
 * uncertain. Deadlines render per GEN-12. */
static void test_deadline_while_queued(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, true, false);

        TJob *first = NULL, *second = NULL;
        assert_int_equal(submit(p, b, &f->g[0], 1, 2, 60 * NSEC_PER_SEC, 0, NULL, &first, NULL), 0);
        wait_entered(&b->entered, 1);
        assert_int_equal(submit(p, b, NULL, 2, 2, 90 * NSEC_PER_SEC, 0, NULL, &second, NULL), 0);
        test_clock_advance(&f->fc, 90 * NSEC_PER_SEC);
        /* Both due in one dispatch: the running one is abandoned, the queued one never ran. */
        assert_int_equal(worker_pool_dispatch_completions(p), 2);
        assert_int_equal(b->done_r[0], -ETIMEDOUT);
        assert_string_equal(b->done_error[0], "timed out after 1m0s");
        assert_int_equal(b->done_r[1], -ETIMEDOUT);
        assert_string_equal(b->done_error[1], "timed out after 1m30s");
        assert_int_equal(atomic_load(&b->freed), 1); /* the queued one, at once */
        assert_int_equal(worker_pool_get_stuck_count(p), 1);

        gate_open(&f->g[0]);
        WAIT_UNTIL(f, worker_pool_get_stuck_count(p) == 0 && atomic_load(&b->freed) == 2);
        assert_int_equal(atomic_load(&b->entered), 1);

        /* Only a queued job past its deadline: no stuck call. */
        assert_int_equal(submit(p, b, &f->g[1], 3, 1, 10 * NSEC_PER_SEC, 0, NULL, NULL, NULL), 0);
        wait_entered(&b->entered, 2);
        assert_int_equal(submit(p, b, NULL, 4, 1, 1500 * NSEC_PER_MSEC, 0, NULL, NULL, NULL), 0);
        test_clock_advance(&f->fc, 1500 * NSEC_PER_MSEC);
        assert_int_equal(worker_pool_dispatch_completions(p), 1);
        assert_int_equal(b->done_r[2], -ETIMEDOUT);
        assert_string_equal(b->done_error[2], "timed out after 1.5s");
        assert_false(worker_pool_key_is_uncertain(p, keys[1]));
        assert_int_equal(worker_pool_get_stuck_count(p), 0);
        gate_open(&f->g[1]);
        WAIT_UNTIL(f, b->n_done == 4);
        assert_int_equal(b->done_id[3], 3);
        assert_int_equal(b->done_r[3], 0);
        assert_int_equal(atomic_load(&b->entered), 2);
}

/* GEN-4: one extra thread per stuck call, at most 16; then new work fails at once. */
static void test_exhaustion(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, true, true);

        /* Four at a time: each round fills the free threads, then their deadline passes. */
        for (int round = 0; round < 4; round++) {
                for (int i = 0; i < 4; i++)
                        assert_int_equal(submit(p, b, &f->g[0], round * 4 + i, -1, NSEC_PER_SEC, 0,
                                                NULL, NULL, NULL),
                                         0);
                wait_entered(&b->entered, (round + 1) * 4);
                test_clock_advance(&f->fc, NSEC_PER_SEC);
                assert_int_equal(worker_pool_dispatch_completions(p), 4);
                assert_int_equal(worker_pool_get_stuck_count(p), (unsigned)(round + 1) * 4);
                assert_int_equal(worker_pool_get_thread_count(p), 4 + (unsigned)(round + 1) * 4);
        }

        _cleanup_free_ char *error = NULL;
        assert_int_equal(submit(p, b, NULL, 99, -1, NSEC_PER_SEC, 0, NULL, NULL, &error), -EAGAIN);
        assert_string_equal(error, "sysfs worker pool exhausted (16 calls stuck)");
        _cleanup_free_ char *reason = NULL;
        assert_int_equal(worker_pool_check_accepting(p, &reason), -EAGAIN);
        assert_string_equal(reason, "sysfs worker pool exhausted (16 calls stuck)");
        assert_int_equal(worker_pool_get_thread_count(p), 20);

        gate_open(&f->g[0]);
        WAIT_UNTIL(f, atomic_load(&b->recovered) == 16 && worker_pool_get_thread_count(p) == 4);
        assert_int_equal(worker_pool_check_accepting(p, NULL), 0);
        assert_int_equal(submit(p, b, NULL, 100, -1, NSEC_PER_SEC, 3, NULL, NULL, NULL), 0);
        WAIT_UNTIL(f, b->n_done == 17);
        assert_int_equal(b->done_r[16], 3);
        assert_int_equal(atomic_load(&b->freed), 17);
}

/* DEV-11: jobs with one key never overlap, and run in submission order; other keys do not
 * wait for them. */
static void test_key_serialisation(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        Gate *g_first = &f->g[0], *g_other = &f->g[1];
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, false, false);

        TJob *k1 = NULL, *k2 = NULL, *k3 = NULL, *l1 = NULL;
        assert_int_equal(submit(p, b, g_first, 1, 0, 0, 0, NULL, &k1, NULL), 0);
        assert_int_equal(submit(p, b, NULL, 2, 0, 0, 0, NULL, &k2, NULL), 0);
        assert_int_equal(submit(p, b, NULL, 3, 0, 0, 0, NULL, &k3, NULL), 0);
        assert_int_equal(submit(p, b, g_other, 4, 1, 0, 0, NULL, &l1, NULL), 0);

        /* Threads take the first runnable job: the other key was queued after k2 and k3, so
         * once it runs, they were passed over because their key was busy. */
        wait_entered(&b->entered, 2);
        assert_true(atomic_load(&k1->entered));
        assert_true(atomic_load(&l1->entered));
        assert_false(atomic_load(&k2->entered));
        assert_false(atomic_load(&k3->entered));

        gate_open(g_other);
        WAIT_UNTIL(f, b->n_done == 1);
        assert_int_equal(b->done_id[0], 4);
        assert_false(atomic_load(&k2->entered));

        gate_open(g_first);
        WAIT_UNTIL(f, b->n_done == 4);
        assert_int_equal(b->done_id[1], 1);
        assert_int_equal(b->done_id[2], 2);
        assert_int_equal(b->done_id[3], 3);
        assert_int_equal(atomic_load(&b->max_active[0]), 1);

        /* Many jobs on two keys at once: never more than one inside per key. */
        for (int i = 0; i < 40; i++)
                assert_int_equal(submit(p, b, NULL, 10 + i, i % 2 ? 2 : 3, 0, 0, NULL, NULL, NULL),
                                 0);
        WAIT_UNTIL(f, b->n_done == 44);
        assert_int_equal(atomic_load(&b->max_active[2]), 1);
        assert_int_equal(atomic_load(&b->max_active[3]), 1);
        int last2 = 0, last3 = 0;
        for (int i = 4; i < 44; i++) {
                int *last = (b->done_id[i] - 10) % 2 ? &last2 : &last3;
                assert_true(b->done_id[i] > *last);
                *last = b->done_id[i];
        }
}

/* NVML-9, NVML-10: the slot runs one job at a time; a hung call costs one timeout, the jobs
 * queued behind it fail with "stuck" at once without entering, new ones fail at once, and the
 * late result is discarded. */
static void test_slot_timeout_then_stuck(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_NVML, true, true);
        assert_int_equal(worker_pool_get_thread_count(p), 1);

        assert_int_equal(submit(p, b, &f->g[0], 1, -1, 5 * NSEC_PER_SEC, 42, "late", NULL, NULL),
                         0);
        wait_entered(&b->entered, 1);
        TJob *queued[5];
        for (int i = 0; i < 5; i++) {
                test_clock_advance(&f->fc, 100 * NSEC_PER_MSEC);
                assert_int_equal(
                    submit(p, b, NULL, 10 + i, -1, 5 * NSEC_PER_SEC, 0, NULL, &queued[i], NULL), 0);
        }
        test_clock_advance(&f->fc, 4500 * NSEC_PER_MSEC); /* 5 s after the first was queued */
        assert_int_equal(worker_pool_dispatch_completions(p), 6);
        assert_int_equal(b->done_r[0], -ETIMEDOUT);
        assert_string_equal(b->done_error[0], "timed out after 5s");
        for (int i = 1; i < 6; i++) {
                assert_int_equal(b->done_r[i], -EBUSY);
                assert_int_equal(b->done_id[i], -1);
                assert_string_equal(b->done_error[i], "an earlier call is stuck past its deadline");
        }
        assert_int_equal(atomic_load(&b->entered), 1);
        assert_int_equal(worker_pool_get_stuck_count(p), 1);
        assert_int_equal(worker_pool_get_thread_count(p), 1);

        _cleanup_free_ char *error = NULL;
        assert_int_equal(submit(p, b, NULL, 20, -1, 5 * NSEC_PER_SEC, 0, NULL, NULL, &error),
                         -EBUSY);
        assert_string_equal(error, "an earlier call is stuck past its deadline");
        assert_int_equal(worker_pool_check_accepting(p, NULL), -EBUSY);

        gate_open(&f->g[0]);
        WAIT_UNTIL(f, atomic_load(&b->recovered) == 1);
        assert_int_equal(b->last_recovered_r, 42);
        assert_string_equal(b->last_recovered_key, "(null)");
        assert_int_equal(b->n_done, 6); /* the late result reached no completion */
        assert_int_equal(atomic_load(&b->freed), 6);

        assert_int_equal(submit(p, b, NULL, 30, -1, 5 * NSEC_PER_SEC, 1, NULL, NULL, NULL), 0);
        WAIT_UNTIL(f, b->n_done == 7);
        assert_int_equal(b->done_id[6], 30);
        assert_int_equal(b->done_r[6], 1);
}

/* NVML-9: a slot job whose deadline passes in the queue fails without entering; the running
 * call, still within its own deadline, is not disturbed. */
static void test_slot_queued_deadline(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_NVML, true, false);

        assert_int_equal(submit(p, b, &f->g[0], 1, -1, 10 * NSEC_PER_SEC, 0, NULL, NULL, NULL), 0);
        wait_entered(&b->entered, 1);
        TJob *waiting = NULL;
        assert_int_equal(submit(p, b, NULL, 2, -1, 2 * NSEC_PER_SEC, 0, NULL, &waiting, NULL), 0);
        assert_int_equal(submit(p, b, NULL, 3, -1, 10 * NSEC_PER_SEC, 0, NULL, NULL, NULL), 0);
        test_clock_advance(&f->fc, 2 * NSEC_PER_SEC);
        assert_int_equal(worker_pool_dispatch_completions(p), 1);
        assert_int_equal(b->done_r[0], -ETIMEDOUT);
        assert_string_equal(b->done_error[0], "timed out after 2s");
        assert_int_equal(worker_pool_get_stuck_count(p), 0);

        gate_open(&f->g[0]);
        WAIT_UNTIL(f, b->n_done == 3);
        assert_int_equal(b->done_id[1], 1);
        assert_int_equal(b->done_id[2], 3);
        assert_int_equal(atomic_load(&b->entered), 2);
}

/* GEN-4: with the system clock, the pool's own timer wakes the loop at the deadline. */
static void test_descriptor_timer(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, false, false);

        assert_int_equal(submit(p, b, &f->g[0], 1, 3, 50 * NSEC_PER_MSEC, 0, NULL, NULL, NULL), 0);
        /* Bounded: the timer fires after 50 ms; 10 s means it never did. */
        assert_int_equal(sd_event_run(f->event, TEST_USEC(10 * NSEC_PER_SEC)), 1);
        WAIT_UNTIL(f, b->n_done == 1);
        assert_int_equal(b->done_r[0], -ETIMEDOUT);
        assert_string_equal(b->done_error[0], "timed out after 50ms");
        assert_true(worker_pool_key_is_uncertain(p, keys[3]));

        gate_open(&f->g[0]);
        WAIT_UNTIL(f, !worker_pool_key_is_uncertain(p, keys[3]) &&
                          worker_pool_get_thread_count(p) == 4);
        assert_int_equal(worker_pool_wait_idle(p, 10 * NSEC_PER_SEC), 0);
}

/* GEN-4: freeing the pool never waits on a hung call; the call frees its data when it returns. */
static void test_free_with_stuck_call(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, true, false);

        assert_int_equal(submit(p, b, &f->g[0], 1, 0, NSEC_PER_SEC, 0, NULL, NULL, NULL), 0);
        wait_entered(&b->entered, 1);
        test_clock_advance(&f->fc, NSEC_PER_SEC);
        assert_int_equal(worker_pool_dispatch_completions(p), 1);
        assert_int_equal(worker_pool_wait_idle(p, 10 * NSEC_PER_MSEC), -ETIMEDOUT);
        /* Queued work and undispatched results are dropped without completions. */
        assert_int_equal(submit(p, b, NULL, 2, 0, 0, 0, NULL, NULL, NULL), 0);
        f->p = worker_pool_free(p);
        assert_int_equal(atomic_load(&b->freed), 1);
        assert_int_equal(b->n_done, 1);

        gate_open(&f->g[0]);
        wait_entered(&b->freed, 2);
}

/* Attaching: once only; freeing the pool takes its source off the loop. */
static void test_attach_event(void **state)
{
        Fixture *f = *state;
        WorkerPool *p = start_pool(f, WORKER_POOL_CONFIG_SYSFS, false, false);
        assert_int_equal(worker_pool_attach_event(p, f->event), -EBUSY);
        assert_int_equal(worker_pool_attach_event(NULL, f->event), -EINVAL);
        f->p = worker_pool_free(p);
        assert_int_equal(sd_event_run(f->event, 0), 0);
}

/* GEN-7: refused arguments. */
static void test_invalid(void **state)
{
        WorkerPool *p = NULL;
        WorkerPoolConfig cfg = {.threads = 0};
        assert_int_equal(worker_pool_new(&cfg, &p), -EINVAL);
        cfg = WORKER_POOL_CONFIG_NVML;
        cfg.max_extra = 1;
        assert_int_equal(worker_pool_new(&cfg, &p), -EINVAL);
        cfg = WORKER_POOL_CONFIG_NVML;
        cfg.threads = 2;
        assert_int_equal(worker_pool_new(&cfg, &p), -EINVAL);
        assert_null(p);

        cfg = WORKER_POOL_CONFIG_SYSFS;
        assert_int_equal(worker_pool_new(&cfg, &p), 0);
        _cleanup_free_ char *error = NULL;
        WorkerJob job = {.key = "x"};
        assert_int_equal(worker_pool_submit(p, &job, &error), -EINVAL);
        assert_string_equal(error, "worker job without a function");
        nsec_t d = 7;
        assert_int_equal(worker_pool_get_next_deadline(p, &d), 0);
        assert_true(d == 7);
        assert_int_equal(worker_pool_wait_idle(p, NSEC_PER_SEC), 0);
        worker_pool_free(p);
        worker_pool_free(NULL);
}

/*
 * GEN-2, GEN-4: pools by kind, with the daemon's own configurations. Helper jobs that hang hold
 * only helper threads: a record write on the disk pool completes while they hang, and again
 * once they are abandoned and the helper pool refuses new work. A helper job needs a deadline.
 */
static void test_helper_pool_never_delays_a_write(void **state)
{
        Fixture *f = *state;
        Board *b = &f->b;
        WorkerPool *helpers = start_pool(f, WORKER_POOL_CONFIG_HELPER, false, false);
        _cleanup_worker_pool_ WorkerPool *disk = NULL;
        WorkerPoolConfig dc = WORKER_POOL_CONFIG_DISK;
        assert_int_equal(worker_pool_new(&dc, &disk), 0);
        assert_int_equal(worker_pool_attach_event(disk, f->event), 0);

        _cleanup_free_ char *error = NULL;
        assert_int_equal(submit(helpers, b, NULL, 1, -1, 0, 0, NULL, NULL, &error), -EINVAL);
        assert_string_equal(error, "helper worker job without a deadline");

        /* Every helper thread hangs in a call, and one more job waits behind them. */
        for (int id = 1; id <= WORKER_POOL_HELPER_THREADS + 1; id++)
                assert_int_equal(
                    submit(helpers, b, &f->g[0], id, -1, 2 * NSEC_PER_SEC, 0, NULL, NULL, NULL), 0);
        wait_entered(&b->entered, WORKER_POOL_HELPER_THREADS);

        /* The write completes first, while the helpers still hang. */
        assert_int_equal(submit(disk, b, NULL, 10, -1, 0, 0, NULL, NULL, NULL), 0);
        WAIT_UNTIL(f, b->n_done >= 1);
        assert_int_equal(b->done_id[0], 10);
        assert_int_equal(b->done_r[0], 0);

        /* The helpers are abandoned at their deadline; the pool is exhausted with 2 stuck. */
        WAIT_UNTIL(f, worker_pool_get_stuck_count(helpers) == WORKER_POOL_HELPER_MAX_EXTRA &&
                          b->n_done == 1 + WORKER_POOL_HELPER_THREADS + 1);
        for (int i = 1; i < b->n_done; i++)
                assert_int_equal(b->done_r[i], -ETIMEDOUT);
        free(error);
        error = NULL;
        assert_int_equal(submit(helpers, b, NULL, 20, -1, NSEC_PER_SEC, 0, NULL, NULL, &error),
                         -EAGAIN);
        assert_string_equal(error, "helper worker pool exhausted (2 calls stuck)");

        /* Writes still go through at once. */
        assert_int_equal(submit(disk, b, NULL, 11, -1, 0, 0, NULL, NULL, NULL), 0);
        int before = b->n_done;
        WAIT_UNTIL(f, b->n_done == before + 1);
        assert_int_equal(b->done_id[before], 11);

        gate_open(&f->g[0]);
        WAIT_UNTIL(f, worker_pool_get_stuck_count(helpers) == 0);
        assert_int_equal(worker_pool_wait_idle(helpers, 10 * NSEC_PER_SEC), 0);
}

/* ---- the spawn primitive ------------------------------------------------------------------ */

/* Runs sh -c script as a helper with req's other fields; its output, and exit status 0. */
static char *run_sh(SpawnRequest req, const char *script)
{
        char *argv[] = {(char *)"/bin/sh", (char *)"-c", (char *)script, NULL};
        _cleanup_free_ char *error = NULL;
        char *out = NULL;
        int status = -1;
        req.argv = argv;
        if (spawn_run_helper(&req, test_now() + 10 * NSEC_PER_SEC, 4096, &out, &status, &error) < 0)
                fail_msg("%s: %s", script, error);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("%s: status %d, output %s", script, status, out);
        return out;
}

/* Helpers: one pipe for stdout and stderr, stdin at EOF, PATH only; the cap; the deadline */
static void test_helper_output_and_deadline(void **state)
{
        _cleanup_free_ char *out = NULL, *error = NULL;
        int status = -1;
        SpawnRequest req = SPAWN_REQUEST_INIT;

        char *echo[] = {(char *)"/bin/sh", (char *)"-c",
                        (char *)"echo out; echo err >&2; cat; env | grep -v '^PWD=' | "
                                "grep -vc '^PATH=' ; exit 3",
                        NULL};
        req.argv = echo;
        assert_int_equal(
            spawn_run_helper(&req, test_now() + 5 * NSEC_PER_SEC, 1024, &out, &status, &error), 0);
        assert_string_equal(out, "out\nerr\n0\n");
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 3);

        /* Output beyond the cap is read and dropped, so the child finishes. */
        free(out);
        out = NULL;
        char *big[] = {(char *)"/bin/sh", (char *)"-c",
                       (char *)"head -c 100000 /dev/zero | tr '\\0' x", NULL};
        req.argv = big;
        assert_int_equal(
            spawn_run_helper(&req, test_now() + 5 * NSEC_PER_SEC, 10, &out, &status, &error), 0);
        assert_string_equal(out, "xxxxxxxxxx");
        assert_int_equal(WEXITSTATUS(status), 0);

        /* A child past the deadline is killed, with its group. */
        free(out);
        out = NULL;
        char *slow[] = {(char *)"/bin/sh", (char *)"-c", (char *)"sleep 30 & sleep 30", NULL};
        req.argv = slow;
        nsec_t begun = test_now();
        assert_int_equal(
            spawn_run_helper(&req, begun + 200 * NSEC_PER_MSEC, 1024, &out, &status, &error),
            -ETIME);
        assert_true(test_now() - begun < 5 * NSEC_PER_SEC);
        assert_non_null(strstr(error, "did not finish in time"));
        assert_null(out);

        free(error);
        error = NULL;
        char *missing[] = {(char *)"/nonexistent/qemu", NULL};
        req.argv = missing;
        assert_int_equal(
            spawn_run_helper(&req, test_now() + NSEC_PER_SEC, 1024, &out, &status, &error),
            -ENOENT);
        assert_string_equal(error, "run /nonexistent/qemu: No such file or directory");
}

/* VMM-3: passed descriptors at 3.. in order, every other one closed, whatever their numbers here */
/* Streamed output: each piece reaches on_output as it arrives, beyond the kept cap too (DISK-2's
 * progress from `qemu-img convert -p`). */
typedef struct Streamed {
        char text[256];
        size_t size;
        unsigned calls;
} Streamed;

static void on_streamed(const char *data, size_t size, void *userdata)
{
        Streamed *s = userdata;
        size_t room = sizeof s->text - 1 - s->size;
        size_t n = size < room ? size : room;
        memcpy(s->text + s->size, data, n);
        s->size += n;
        s->calls++;
}

static void test_helper_streamed_output(void **state)
{
        _cleanup_free_ char *out = NULL, *error = NULL;
        Streamed seen = {.size = 0};
        int status = -1;
        SpawnRequest req = SPAWN_REQUEST_INIT;
        char *argv[] = {(char *)"/bin/sh", (char *)"-c",
                        (char *)"printf '(10.00/100%%)\r'; printf '(100.00/100%%)\r'", NULL};
        req.argv = argv;
        req.on_output = on_streamed;
        req.output_userdata = &seen;
        assert_int_equal(
            spawn_run_helper(&req, test_now() + 5 * NSEC_PER_SEC, 4, &out, &status, &error), 0);
        assert_string_equal(seen.text, "(10.00/100%)\r(100.00/100%)\r");
        assert_true(seen.calls >= 1);
        assert_string_equal(out, "(10.");
        assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_spawn_passed_fds(void **state)
{
        int p1[2], p2[2];
        assert_int_equal(pipe2(p1, O_CLOEXEC), 0);
        assert_int_equal(pipe2(p2, O_CLOEXEC), 0);
        /* A descriptor this process leaks without close-on-exec must not reach the child. */
        int leaked = dup(p1[0]);
        assert_true(leaked >= 0);
        assert_int_equal(write(p1[1], "one", 3), 3);
        assert_int_equal(write(p2[1], "two", 3), 3);
        closep(&p1[1]);
        closep(&p2[1]);

        /* Reversed on purpose: p2's read end goes to 3 and p1's to 4. */
        const int fds[] = {p2[0], p1[0]};
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.fds = fds;
        req.n_fds = ELEMENTSOF(fds);
        _cleanup_free_ char *out =
            run_sh(req, "cat <&3; echo; cat <&4; echo; ls /proc/self/fd | sort -n | tr '\\n' ' '");
        /* ls's own directory descriptor shows up as the next free number. */
        assert_string_equal(out, "two\none\n0 1 2 3 4 5 ");
        close(leaked);
        close(p1[0]);
        close(p2[0]);
}

/* VMM-3: the environment is exactly the request's, or PATH alone */
static void test_spawn_environment(void **state)
{
        SpawnRequest req = SPAWN_REQUEST_INIT;
        assert_int_equal(setenv("VGPUD_TEST_SECRET", "x", 1), 0);
        _cleanup_free_ char *plain = run_sh(req, "env | grep -v '^PWD=' | sort | tr '\\n' ' '");
        assert_string_equal(plain, SPAWN_PATH_ENV " ");

        char *const env[] = {(char *)"A=1", (char *)"PATH=/bin", NULL};
        req.envp = env;
        _cleanup_free_ char *given = run_sh(req, "env | grep -v '^PWD=' | sort | tr '\\n' ' '");
        assert_string_equal(given, "A=1 PATH=/bin ");
        unsetenv("VGPUD_TEST_SECRET");
}

/* VMM-3: its own session, an empty signal mask, no ignored signal */
static void test_spawn_session_and_signals(void **state)
{
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGHUP);
        assert_int_equal(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
        struct sigaction ign = {.sa_handler = SIG_IGN}, old_int;
        assert_int_equal(sigaction(SIGINT, &ign, &old_int), 0);

        SpawnRequest req = SPAWN_REQUEST_INIT;
        /* Field 6 of stat is the session; sh's own pid is $$. */
        _cleanup_free_ char *out = run_sh(
            req, "set -- $(cut -d')' -f2 /proc/$$/stat); [ \"$4\" = $$ ] && echo own-session; "
                 "grep -E '^Sig(Blk|Ign):' /proc/$$/status | tr -s '\\t' ' '");
        assert_string_equal(out, "own-session\nSigBlk: 0000000000000000\n"
                                 "SigIgn: 0000000000000000\n");

        assert_int_equal(sigaction(SIGINT, &old_int, NULL), 0);
        assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
}

/* Helpers run under the limits the request names; the rest stay the daemon's */
static void test_spawn_limits(void **state)
{
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.limits = (SpawnLimits){.as_bytes = UINT64_C(1) << 30, .cpu_seconds = 7, .nofile = 64};
        _cleanup_free_ char *out = run_sh(req, "ulimit -v; ulimit -t; ulimit -n");
        assert_string_equal(out, "1048576\n7\n64\n");

        /* A lower CPU priority, so that a long helper yields to the loop (PERF-8). */
        req.limits = (SpawnLimits){.nice = 10};
        _cleanup_free_ char *niced = run_sh(req, "cut -d' ' -f19 /proc/self/stat");
        assert_int_equal(strtol(niced, NULL, 10), 10 + getpriority(PRIO_PROCESS, 0));

        /* A helper that outgrows its address space fails, not the daemon. */
        _cleanup_free_ char *error = NULL, *big = NULL;
        char *argv[] = {(char *)"/bin/sh", (char *)"-c",
                        (char *)"sleep 0.1; head -c 64000000 /dev/zero | tr '\\0' x > /dev/null; "
                                "x=$(head -c 64000000 /dev/zero | tr '\\0' x); echo survived",
                        NULL};
        int status;
        req.argv = argv;
        req.limits = (SpawnLimits){.as_bytes = UINT64_C(32) << 20};
        assert_int_equal(
            spawn_run_helper(&req, test_now() + 10 * NSEC_PER_SEC, 4096, &big, &status, &error), 0);
        assert_null(strstr(big, "survived"));
}

/* VMM-4: a pidfd on the started child, which stays unreaped until its owner waits */
static void test_spawn_start_pidfd(void **state)
{
        char *argv[] = {(char *)"/bin/sh", (char *)"-c", (char *)"exit 5", NULL};
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.argv = argv;
        SpawnedChild c;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(spawn_start(&req, &c, &error), 0);
        assert_true(c.pidfd >= 0);
        assert_int_equal(c.pidfd_error, 0);
        siginfo_t si = {0};
        assert_int_equal(waitid(P_PIDFD, (id_t)c.pidfd, &si, WEXITED), 0);
        assert_int_equal(si.si_pid, c.pid);
        assert_int_equal(si.si_status, 5);
        close(c.pidfd);

        char *none[] = {NULL};
        req.argv = none;
        assert_int_equal(spawn_start(&req, &c, &error), -EINVAL);
        assert_string_equal(error, "spawn: empty command line");
}

int main(void)
{
#define T(t) cmocka_unit_test_setup_teardown(t, setup, teardown)
        const struct CMUnitTest tests[] = {
            T(test_completions_posted),
            T(test_deadline_abandons_call),
            T(test_deadline_while_queued),
            T(test_free_with_stuck_call),
            T(test_exhaustion),
            T(test_key_serialisation),
            T(test_slot_timeout_then_stuck),
            T(test_slot_queued_deadline),
            T(test_descriptor_timer),
            T(test_attach_event),
            cmocka_unit_test(test_invalid),
            T(test_helper_pool_never_delays_a_write),
            cmocka_unit_test(test_helper_output_and_deadline),
            cmocka_unit_test(test_helper_streamed_output),
            cmocka_unit_test(test_spawn_passed_fds),
            cmocka_unit_test(test_spawn_environment),
            cmocka_unit_test(test_spawn_session_and_signals),
            cmocka_unit_test(test_spawn_limits),
            cmocka_unit_test(test_spawn_start_pidfd),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
