/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the notify module (OPS-2, ARCHITECTURE.md decision 1): against a service
 * manager's socket that nobody reads, no call waits; READY=1 and STOPPING=1 arrive once the
 * socket drains, STATUS= only with its latest text; the watchdog is pinged from the loop.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "notify/notify.h"
#include "testlib.h"

typedef struct Fixture {
        TestTree *tree;
        char *path;
        int manager; /* the service manager's end, read only when the test says so */
        sd_event *event;
        Notifier *n;
} Fixture;

static int bind_manager(const char *name, bool abstract)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        assert_true(fd >= 0);
        size_t len = strlen(name);
        assert_true(len + 1 < sizeof sa.sun_path);
        memcpy(sa.sun_path + abstract, name, len);
        socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sl), 0);
        return fd;
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(test_tree_new("vgpud-notify", &f->tree), 0);
        f->path = test_tree_path(f->tree, "notify");
        f->manager = bind_manager(f->path, false);
        assert_int_equal(setenv("NOTIFY_SOCKET", f->path, 1), 0);
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
        assert_int_equal(sd_event_new(&f->event), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        notifier_free(f->n);
        sd_event_unref(f->event);
        closep(&f->manager);
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
        free(f->path);
        test_tree_free(f->tree);
        free(f);
        return 0;
}

/* Reads every datagram queued at the manager's end, concatenated. */
static char *drain(Fixture *f, unsigned *ret_n)
{
        char *all = strdup("");
        unsigned n = 0;
        for (;;) {
                char buf[4096];
                ssize_t k = recv(f->manager, buf, sizeof buf - 1, MSG_DONTWAIT);
                if (k < 0) {
                        assert_int_equal(errno, EAGAIN);
                        break;
                }
                buf[k] = 0;
                char *grown = NULL;
                assert_int_equal(strprintf(&grown, "%s%s|", all, buf), 0);
                free(all);
                all = grown;
                n++;
        }
        if (ret_n)
                *ret_n = n;
        return all;
}

/* OPS-2: with an unread socket nothing waits; READY=1 survives and STATUS= coalesces */
static void test_full_socket_never_blocks(void **state)
{
        Fixture *f = *state;
        assert_int_equal(notifier_new(&f->n), 0);
        assert_int_equal(notifier_attach_event(f->n, f->event), 0);

        /* Fill the manager's queue (ten datagrams by default, fewer if the buffer is small). */
        for (unsigned i = 0; i < 64; i++)
                assert_true(notifier_status(f->n, "filler %u", i) >= 0);
        assert_true(notifier_is_pending(f->n));
        /* Each call returns at once; what cannot go out waits, folded. */
        assert_true(notifier_ready(f->n) >= 0);
        for (unsigned i = 0; i < 1000; i++)
                assert_true(notifier_status(f->n, "status %u\nsecond line", i) >= 0);
        assert_true(notifier_is_pending(f->n));

        unsigned n_first;
        _cleanup_free_ char *first = drain(f, &n_first);
        assert_true(n_first >= 1);
        assert_null(strstr(first, "READY=1")); /* not sent yet: the queue was full */

        TEST_WAIT_UNTIL(f->event, !notifier_is_pending(f->n));
        unsigned n_then;
        _cleanup_free_ char *then = drain(f, &n_then);
        assert_int_equal(n_then, 1); /* one datagram for everything that waited */
        assert_string_equal(then, "READY=1\nSTATUS=status 999 second line\n|");
}

/* OPS-3: STOPPING=1 is never dropped either */
static void test_stopping_survives(void **state)
{
        Fixture *f = *state;
        assert_int_equal(notifier_new(&f->n), 0);
        for (unsigned i = 0; i < 64; i++)
                assert_true(notifier_status(f->n, "filler %u", i) >= 0);
        assert_true(notifier_stopping(f->n) >= 0);
        assert_true(notifier_is_pending(f->n));
        free(drain(f, NULL));
        /* Attached only now: the wait for room starts with what is pending. */
        assert_int_equal(notifier_attach_event(f->n, f->event), 0);
        assert_int_equal(notifier_attach_event(f->n, f->event), -EBUSY);
        TEST_WAIT_UNTIL(f->event, !notifier_is_pending(f->n));
        _cleanup_free_ char *then = drain(f, NULL);
        assert_non_null(strstr(then, "STOPPING=1\n"));
}

/* OPS-2: WATCHDOG=1 from the loop at half of WATCHDOG_USEC */
static void test_watchdog(void **state)
{
        Fixture *f = *state;
        char pid[32];
        snprintf(pid, sizeof pid, "%d", (int)getpid());
        assert_int_equal(setenv("WATCHDOG_USEC", "200000", 1), 0);
        assert_int_equal(setenv("WATCHDOG_PID", pid, 1), 0);
        assert_int_equal(notifier_new(&f->n), 0);
        assert_int_equal(notifier_watchdog_interval(f->n), 200 * NSEC_PER_MSEC);
        assert_int_equal(notifier_attach_event(f->n, f->event), 0);
        unsigned pings = 0;
        TestWait w = test_wait_begin(f->event, TEST_WAIT_LIMIT);
        while (pings < 2) {
                assert_int_equal(test_wait_step(&w), 0);
                _cleanup_free_ char *got = drain(f, NULL);
                for (const char *p = got; (p = strstr(p, "WATCHDOG=1\n")); p++)
                        pings++;
        }

        /* Another process's watchdog is not ours to ping. */
        notifier_free(f->n);
        assert_int_equal(setenv("WATCHDOG_PID", "1", 1), 0);
        assert_int_equal(notifier_new(&f->n), 0);
        assert_int_equal(notifier_watchdog_interval(f->n), 0);
}

/* The abstract namespace ("@name"), and a manager whose socket is gone */
static void test_addresses(void **state)
{
        Fixture *f = *state;
        char name[64];
        snprintf(name, sizeof name, "vgpud-notify-test-%d", (int)getpid());
        _cleanup_close_ int abstract = bind_manager(name, true);
        char env[80];
        snprintf(env, sizeof env, "@%s", name);
        assert_int_equal(setenv("NOTIFY_SOCKET", env, 1), 0);
        assert_int_equal(notifier_new(&f->n), 0);
        assert_int_equal(notifier_ready(f->n), 0);
        char buf[64] = "";
        assert_true(recv(abstract, buf, sizeof buf - 1, MSG_DONTWAIT) > 0);
        assert_string_equal(buf, "READY=1\n");
        f->n = notifier_free(f->n);

        /* Nobody listening: the message is dropped with the error, never retried forever. */
        assert_int_equal(setenv("NOTIFY_SOCKET", f->path, 1), 0);
        assert_int_equal(unlink(f->path), 0);
        assert_int_equal(notifier_new(&f->n), 0);
        assert_int_equal(notifier_ready(f->n), -ENOENT);
        assert_false(notifier_is_pending(f->n));
        f->n = notifier_free(f->n);

        static const char *const bad[] = {"relative/path", "@", "vsock:2:1"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                assert_int_equal(setenv("NOTIFY_SOCKET", bad[i], 1), 0);
                Notifier *n = (Notifier *)0x1;
                assert_int_equal(notifier_new(&n), -EINVAL);
                assert_ptr_equal(n, (Notifier *)0x1);
        }

        /* Not run by a service manager: everything succeeds and nothing waits. */
        unsetenv("NOTIFY_SOCKET");
        assert_int_equal(notifier_new(&f->n), 0);
        assert_int_equal(notifier_ready(f->n), 0);
        assert_int_equal(notifier_status(f->n, "x"), 0);
        assert_false(notifier_is_pending(f->n));
        assert_int_equal(notifier_attach_event(f->n, f->event), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_full_socket_never_blocks, setup, teardown),
            cmocka_unit_test_setup_teardown(test_stopping_survives, setup, teardown),
            cmocka_unit_test_setup_teardown(test_watchdog, setup, teardown),
            cmocka_unit_test_setup_teardown(test_addresses, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
