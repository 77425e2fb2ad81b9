/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * testlib: the helpers the C tests and benchmarks share (ARCHITECTURE.md decision 10: test
 * helpers live once, here).
 *
 *  - waiting: the parts under test are attached to an sd-event loop, as the daemon attaches
 *    them (decision 2); a test runs that loop with sd_event_run() until a condition holds,
 *    bounded in real time, never for a fixed time;
 *  - an injected monotonic clock that tests move by hand;
 *  - temporary trees (fixture sysfs, /proc and /dev roots) and their removal;
 *  - log capture;
 *  - the vgpu-sim client: paths under the mount, control-file commands, state.json;
 *  - a stand-in VMM: a child that holds a node open until told to exit.
 *
 * Functions return >= 0 or -errno, and never fail a test themselves, so that benchmarks can use
 * them; cmocka tests assert on the results (TEST_WAIT_UNTIL does that for them).
 */

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "base/base.h"
#include "worker/worker.h"

/* ---- waiting on the loop ------------------------------------------------------------------- */

#define TEST_WAIT_LIMIT (30 * NSEC_PER_SEC)

/* sd-event counts microseconds. */
#define TEST_USEC(nsec) ((uint64_t)(nsec) / NSEC_PER_USEC)

/* Real CLOCK_MONOTONIC time. */
nsec_t test_now(void);

typedef struct TestWait {
        sd_event *event;
        nsec_t deadline; /* CLOCK_MONOTONIC */
} TestWait;

TestWait test_wait_begin(sd_event *event, nsec_t timeout);

/*
 * One turn of the loop: waits for its sources at most 20 ms (never past the deadline) and
 * dispatches what is due. 0; -ETIMEDOUT once the deadline has passed; or sd_event_run()'s error.
 * The 20 ms bound lets a condition that no source reports (a thread's progress) be seen too.
 */
int test_wait_step(TestWait *w);

/* For cmocka tests: runs event until cond (an expression) holds, or fails the test. */
#define TEST_WAIT_UNTIL_LIMIT(event, limit, cond)                                  \
        do {                                                                       \
                TestWait _tw = test_wait_begin((event), (limit));                  \
                while (!(cond)) {                                                  \
                        int _tr = test_wait_step(&_tw);                            \
                        if (_tr < 0)                                               \
                                fail_msg("%s: %s", #cond,                          \
                                         _tr == -ETIMEDOUT ? "not reached in time" \
                                                           : strerror(-_tr));      \
                }                                                                  \
        } while (0)
#define TEST_WAIT_UNTIL(event, cond) TEST_WAIT_UNTIL_LIMIT(event, TEST_WAIT_LIMIT, cond)

/* ---- an injected clock --------------------------------------------------------------------- */

/*
 * A MonoClock (worker.h) that only moves when the test moves it; readable from any thread. The
 * parts built with it check their deadlines when they dispatch, and the loop cannot see such a
 * clock move: after moving it, a test runs the part's dispatch function once (see its header).
 */
typedef struct TestClock {
        _Atomic nsec_t now;
        MonoClock clock;
} TestClock;

void test_clock_init(TestClock *c, nsec_t start);
nsec_t test_clock_get(TestClock *c);
void test_clock_set(TestClock *c, nsec_t t);
void test_clock_advance(TestClock *c, nsec_t d);

/* ---- temporary trees ----------------------------------------------------------------------- */

/*
 * A fresh directory under $TMPDIR (or /tmp) named <prefix>-XXXXXX, with a descriptor on it. The
 * writers below take paths relative to it and create missing parent directories.
 */
typedef struct TestTree {
        char *dir;
        int fd;
} TestTree;

int test_tree_new(const char *prefix, TestTree **ret);
/* Removes the whole tree from disk and frees it; accepts NULL, returns NULL. */
TestTree *test_tree_free(TestTree *t);
static inline void test_tree_freep(TestTree **t)
{
        test_tree_free(*t);
}
#define _cleanup_test_tree_ _cleanup_(test_tree_freep)

/* "<dir>/<rel>", malloc'd; NULL on ENOMEM. */
char *test_tree_path(const TestTree *t, const char *fmt, ...) _printf_(2, 3);

/* mkdir -p of rel under the tree's directory fd. */
int test_mkdirs_at(int dirfd, const char *rel);
/* The parent directories of rel. */
int test_mkparents_at(int dirfd, const char *rel);

/* Writes content to rel (created or truncated, mode 0644). */
int test_put_at(int dirfd, const char *content, const char *rel);
int test_tree_vput(TestTree *t, const char *content, const char *fmt, va_list ap) _printf_(3, 0);
int test_tree_put(TestTree *t, const char *content, const char *fmt, ...) _printf_(3, 4);
/* A symlink at rel pointing to target. */
int test_tree_vlink(TestTree *t, const char *target, const char *fmt, va_list ap) _printf_(3, 0);
int test_tree_link(TestTree *t, const char *target, const char *fmt, ...) _printf_(3, 4);

/* Removes name under parent (AT_FDCWD: a path) with everything below it; never follows links. */
int test_remove_tree_at(int parent, const char *name);

/* ---- log capture --------------------------------------------------------------------------- */

/* The daemon's log (base.h log_*) redirected into memory while captured. */
typedef struct TestLog {
        FILE *stream;
        char *buf;
        size_t size;
        size_t seen; /* what test_log_clear() forgot */
} TestLog;

int test_log_start(TestLog *l);
/* Everything logged since the start or the last test_log_clear(); never NULL. */
const char *test_log_text(TestLog *l);
/* Forgets what was logged so far. */
void test_log_clear(TestLog *l);
/* The log goes back to stderr; the buffer is freed. Accepts a log never started. */
void test_log_stop(TestLog *l);

/* ---- the vgpu-sim client ------------------------------------------------------------------- */

/*
 * A mounted simulator. The runner scripts (tests/lib/sim.sh) set VGPU_SIM_MOUNT; its path is
 * resolved, since descriptors show resolved paths.
 */
typedef struct TestSim {
        char *mnt;
} TestSim;

/* From VGPU_SIM_MOUNT: 0, or -EINVAL when it is unset or does not resolve. */
int test_sim_open(TestSim **ret);
TestSim *test_sim_free(TestSim *s);
static inline void test_sim_freep(TestSim **s)
{
        test_sim_free(*s);
}
#define _cleanup_test_sim_ _cleanup_(test_sim_freep)

/* "<mnt>/<rel>", malloc'd; NULL on ENOMEM. */
char *test_sim_vpath(const TestSim *s, const char *fmt, va_list ap) _printf_(2, 0);
char *test_sim_path(const TestSim *s, const char *fmt, ...) _printf_(2, 3);

/*
 * Golden files (tests/data/golden/...). test_golden_check() compares got with
 * $VGPUD_TEST_DATA/<rel>: 0 when equal, 1 when not (*ret_want, when given, is the file's text),
 * -errno when the file cannot be read. With VGPUD_UPDATE_GOLDEN=1 in the environment it writes
 * got there instead and returns 0: regenerate, then review the change with git diff.
 */
int test_golden_check(const char *rel, const char *got, char **ret_want);
/* argv one argument per line; -EINVAL when an argument holds a newline (no round trip). */
int test_argv_lines(char *const *argv, char **ret);
/*
 * argv, one argument per line, against the golden file rel (test_golden_check()): NULL when they
 * match, else a malloc'd text saying what differs, for the test's failure message.
 */
char *test_golden_argv_mismatch(const char *rel, char *const *argv);

/* One write() of value on an O_WRONLY descriptor, as vgpud writes sysfs: 0 or -errno. */
int test_write_once(const char *path, const char *value);
/* A whole file, bounded (4 MiB). */
int test_read_file(const char *path, char **ret);

/* One .sim/ctl command (SIM-9). */
int test_sim_vctl(const TestSim *s, const char *fmt, va_list ap) _printf_(2, 0);
int test_sim_ctl(const TestSim *s, const char *fmt, ...) _printf_(2, 3);
/* What reading .sim/ctl shows after this process's last command. */
int test_sim_ctl_result(const TestSim *s, char **ret);
/* .sim/forbidden-writes (DEV-18, SIM-16): "" when nothing forbidden was attempted. */
int test_sim_forbidden_writes(const TestSim *s, char **ret);

/* .sim/state.json, parsed strictly. */
int test_sim_state(const TestSim *s, json_t **ret);
/* The state.json object of one VF (borrowed from state); NULL when the VF is not there. */
json_t *test_sim_state_vf(json_t *state, const char *vf);
/* An integer member of a VF's state.json object: -ENOENT without the VF, -EINVAL if no integer. */
int test_sim_vf_int(const TestSim *s, const char *vf, const char *key, json_int_t *ret);
/* The UUID of the mdev on vf, or "" when it carries none. */
int test_sim_vf_mdev(const TestSim *s, const char *vf, char ret[static 37]);

/* Writes type to a VF's current_vgpu_type through the simulator's files (a set-up step). */
int test_sim_set_type(const TestSim *s, const char *vf, uint32_t type);

/*
 * Gives every VF back: removes each mdev and writes 0 to each type, retrying (bounded by
 * timeout) while a release lags behind a holder's exit (SIM-12). 0, or the first error.
 */
int test_sim_release_all(const TestSim *s, nsec_t timeout);

/* ---- a stand-in VMM ------------------------------------------------------------------------ */

/* A child that opened a node (O_RDWR) and holds it until test_holder_end(). */
typedef struct TestHolder {
        pid_t pid;   /* 0: none */
        int control; /* the child exits when this closes */
} TestHolder;

#define TEST_HOLDER_NULL ((TestHolder){.control = -1})

/* 0 once the child holds node open; -errno (the child's open() error) otherwise. */
int test_holder_start(const char *node, TestHolder *ret);
/* The VMM exits: its descriptors close, and it is reaped. Accepts TEST_HOLDER_NULL. */
void test_holder_end(TestHolder *h);
