/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "testlib.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define TEST_WAIT_SLICE (20 * NSEC_PER_MSEC)
#define TEST_READ_MAX ((size_t)4 << 20)

/* ---- waiting on the loop ------------------------------------------------------------------- */

nsec_t test_now(void)
{
        return mono_clock_now(&mono_clock_system);
}

TestWait test_wait_begin(sd_event *event, nsec_t timeout)
{
        return (TestWait){.event = event, .deadline = test_now() + timeout};
}

int test_wait_step(TestWait *w)
{
        nsec_t now = test_now();
        if (now >= w->deadline)
                return -ETIMEDOUT;
        nsec_t slice = w->deadline - now < TEST_WAIT_SLICE ? w->deadline - now : TEST_WAIT_SLICE;
        int r = sd_event_run(w->event, slice / NSEC_PER_USEC);
        return r < 0 ? r : 0;
}

/* ---- an injected clock --------------------------------------------------------------------- */

static nsec_t test_clock_now(void *userdata)
{
        return test_clock_get(userdata);
}

void test_clock_init(TestClock *c, nsec_t start)
{
        atomic_store(&c->now, start);
        c->clock = (MonoClock){.now = test_clock_now, .userdata = c};
}

nsec_t test_clock_get(TestClock *c)
{
        return atomic_load(&c->now);
}

void test_clock_set(TestClock *c, nsec_t t)
{
        atomic_store(&c->now, t);
}

void test_clock_advance(TestClock *c, nsec_t d)
{
        atomic_fetch_add(&c->now, d);
}

/* ---- temporary trees ----------------------------------------------------------------------- */

int test_tree_new(const char *prefix, TestTree **ret)
{
        const char *tmp = getenv("TMPDIR");
        _cleanup_free_ TestTree *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->fd = -1;
        int r = strprintf(&t->dir, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
        if (r < 0)
                return r;
        if (!mkdtemp(t->dir)) {
                r = negative_errno();
                free(t->dir);
                return r;
        }
        t->fd = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (t->fd < 0) {
                r = negative_errno();
                (void)rmdir(t->dir);
                free(t->dir);
                return r;
        }
        *ret = TAKE_PTR(t);
        return 0;
}

TestTree *test_tree_free(TestTree *t)
{
        if (!t)
                return NULL;
        if (t->dir)
                (void)test_remove_tree_at(AT_FDCWD, t->dir);
        closep(&t->fd);
        free(t->dir);
        free(t);
        return NULL;
}

char *test_tree_path(const TestTree *t, const char *fmt, ...)
{
        _cleanup_free_ char *rel = NULL;
        char *path = NULL;
        va_list ap;

        va_start(ap, fmt);
        int k = vasprintf(&rel, fmt, ap);
        va_end(ap);
        if (k < 0 || strprintf(&path, "%s/%s", t->dir, rel) < 0)
                return NULL;
        return path;
}

static int mkdirs_upto(int dirfd, const char *rel, bool last)
{
        char buf[PATH_MAX];
        if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf)
                return -ENAMETOOLONG;
        for (char *p = buf;; p++) {
                char *slash = strchr(p, '/');
                if (!slash && !last)
                        return 0;
                if (slash)
                        *slash = 0;
                if (*buf && mkdirat(dirfd, buf, 0755) < 0 && errno != EEXIST)
                        return negative_errno();
                if (!slash)
                        return 0;
                *slash = '/';
                p = slash;
        }
}

int test_mkdirs_at(int dirfd, const char *rel)
{
        return mkdirs_upto(dirfd, rel, true);
}

int test_mkparents_at(int dirfd, const char *rel)
{
        return mkdirs_upto(dirfd, rel, false);
}

int test_put_at(int dirfd, const char *content, const char *rel)
{
        int r = test_mkparents_at(dirfd, rel);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = openat(dirfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return negative_errno();
        return write_all(fd, content, strlen(content));
}

int test_tree_vput(TestTree *t, const char *content, const char *fmt, va_list ap)
{
        char rel[PATH_MAX];
        if (vsnprintf(rel, sizeof rel, fmt, ap) >= (int)sizeof rel)
                return -ENAMETOOLONG;
        return test_put_at(t->fd, content, rel);
}

int test_tree_put(TestTree *t, const char *content, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = test_tree_vput(t, content, fmt, ap);
        va_end(ap);
        return r;
}

int test_tree_vlink(TestTree *t, const char *target, const char *fmt, va_list ap)
{
        char rel[PATH_MAX];
        if (vsnprintf(rel, sizeof rel, fmt, ap) >= (int)sizeof rel)
                return -ENAMETOOLONG;
        int r = test_mkparents_at(t->fd, rel);
        if (r < 0)
                return r;
        return symlinkat(target, t->fd, rel) < 0 ? negative_errno() : 0;
}

int test_tree_link(TestTree *t, const char *target, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = test_tree_vlink(t, target, fmt, ap);
        va_end(ap);
        return r;
}

int test_remove_tree_at(int parent, const char *name)
{
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return unlinkat(parent, name, 0) < 0 ? negative_errno() : 0;
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                int r = negative_errno();
                close(fd);
                return r;
        }
        /* A tree a test made read-only (an unwritable data dir) must still go. */
        (void)fchmod(fd, 0700);
        int r = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (!streq(de->d_name, ".") && !streq(de->d_name, "..")) {
                        int k = test_remove_tree_at(dirfd(d), de->d_name);
                        if (k < 0 && r == 0)
                                r = k;
                }
        if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && r == 0)
                r = negative_errno();
        return r;
}

/* ---- log capture --------------------------------------------------------------------------- */

int test_log_start(TestLog *l)
{
        *l = (TestLog){};
        l->stream = open_memstream(&l->buf, &l->size);
        if (!l->stream)
                return negative_errno();
        log_set_stream(l->stream);
        return 0;
}

const char *test_log_text(TestLog *l)
{
        if (!l->stream)
                return "";
        fflush(l->stream);
        return l->buf ? l->buf + l->seen : "";
}

void test_log_clear(TestLog *l)
{
        if (!l->stream)
                return;
        fflush(l->stream);
        l->seen = l->size;
}

void test_log_stop(TestLog *l)
{
        if (l->stream) {
                log_set_stream(NULL);
                fclose(l->stream);
        }
        free(l->buf);
        *l = (TestLog){};
}

/* ---- the vgpu-sim client ------------------------------------------------------------------- */

int test_sim_open(TestSim **ret)
{
        const char *mnt = getenv("VGPU_SIM_MOUNT");
        char real[PATH_MAX];
        if (!mnt || !*mnt || !realpath(mnt, real))
                return -EINVAL;
        _cleanup_free_ TestSim *s = calloc(1, sizeof *s);
        if (!s || !(s->mnt = strdup(real)))
                return -ENOMEM;
        *ret = TAKE_PTR(s);
        return 0;
}

TestSim *test_sim_free(TestSim *s)
{
        if (s) {
                free(s->mnt);
                free(s);
        }
        return NULL;
}

char *test_sim_vpath(const TestSim *s, const char *fmt, va_list ap)
{
        _cleanup_free_ char *rel = NULL;
        char *path = NULL;
        if (vasprintf(&rel, fmt, ap) < 0 || strprintf(&path, "%s/%s", s->mnt, rel) < 0)
                return NULL;
        return path;
}

char *test_sim_path(const TestSim *s, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *path = test_sim_vpath(s, fmt, ap);
        va_end(ap);
        return path;
}

int test_write_once(const char *path, const char *value)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = write(fd, value, strlen(value));
        if (n < 0)
                return negative_errno();
        return (size_t)n == strlen(value) ? 0 : -EIO;
}

int test_read_file(const char *path, char **ret)
{
        return read_file_at(AT_FDCWD, path, TEST_READ_MAX, ret, NULL);
}

int test_sim_vctl(const TestSim *s, const char *fmt, va_list ap)
{
        _cleanup_free_ char *command = NULL, *path = test_sim_path(s, ".sim/ctl");
        if (!path || vasprintf(&command, fmt, ap) < 0)
                return -ENOMEM;
        return test_write_once(path, command);
}

int test_sim_ctl(const TestSim *s, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = test_sim_vctl(s, fmt, ap);
        va_end(ap);
        return r;
}

static int read_sim_file(const TestSim *s, const char *rel, char **ret)
{
        _cleanup_free_ char *path = test_sim_path(s, "%s", rel);
        if (!path)
                return -ENOMEM;
        return test_read_file(path, ret);
}

int test_sim_ctl_result(const TestSim *s, char **ret)
{
        return read_sim_file(s, ".sim/ctl", ret);
}

int test_sim_forbidden_writes(const TestSim *s, char **ret)
{
        return read_sim_file(s, ".sim/forbidden-writes", ret);
}

int test_sim_state(const TestSim *s, json_t **ret)
{
        _cleanup_free_ char *text = NULL;
        int r = read_sim_file(s, ".sim/state.json", &text);
        if (r < 0)
                return r;
        json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
        if (!j)
                return -EBADMSG;
        *ret = j;
        return 0;
}

json_t *test_sim_state_vf(json_t *state, const char *vf)
{
        size_t i, k;
        json_t *gpu, *v;

        json_array_foreach (json_object_get(state, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, v) {
                        if (streq_ptr(json_string_value(json_object_get(v, "address")), vf))
                                return v;
                }
        }
        return NULL;
}

int test_sim_vf_int(const TestSim *s, const char *vf, const char *key, json_int_t *ret)
{
        json_auto_t *state = NULL;
        int r = test_sim_state(s, &state);
        if (r < 0)
                return r;
        json_t *v = test_sim_state_vf(state, vf);
        if (!v)
                return -ENOENT;
        json_t *n = json_object_get(v, key);
        if (!json_is_integer(n))
                return -EINVAL;
        *ret = json_integer_value(n);
        return 0;
}

int test_sim_vf_mdev(const TestSim *s, const char *vf, char ret[static 37])
{
        json_auto_t *state = NULL;
        int r = test_sim_state(s, &state);
        if (r < 0)
                return r;
        json_t *v = test_sim_state_vf(state, vf);
        if (!v)
                return -ENOENT;
        json_t *m = json_object_get(v, "mdev");
        const char *uuid = json_is_object(m) ? json_string_value(json_object_get(m, "uuid")) : "";
        if (!uuid || strlen(uuid) > 36)
                return -EINVAL;
        snprintf(ret, 37, "%s", uuid);
        return 0;
}

int test_sim_set_type(const TestSim *s, const char *vf, uint32_t type)
{
        _cleanup_free_ char *path =
            test_sim_path(s, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", vf);
        char value[16];
        if (!path)
                return -ENOMEM;
        snprintf(value, sizeof value, "%" PRIu32, type);
        return test_write_once(path, value);
}

/* One pass over every VF: -EBUSY while a release lags, else 0 or the first error. */
static int release_all_once(const TestSim *s)
{
        json_auto_t *state = NULL;
        size_t i, k;
        json_t *gpu, *vf;

        int r = test_sim_state(s, &state);
        if (r < 0)
                return r;
        json_array_foreach (json_object_get(state, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf) {
                        const char *address = json_string_value(json_object_get(vf, "address"));
                        json_t *mdev = json_object_get(vf, "mdev");
                        if (json_is_object(mdev)) {
                                _cleanup_free_ char *remove =
                                    test_sim_path(s, "sys/bus/mdev/devices/%s/remove",
                                                  json_string_value(json_object_get(mdev, "uuid")));
                                r = remove ? test_write_once(remove, "1") : -ENOMEM;
                        } else if (json_integer_value(json_object_get(vf, "type")) != 0)
                                r = test_sim_set_type(s, address, 0);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int test_sim_release_all(const TestSim *s, nsec_t timeout)
{
        nsec_t deadline = test_now() + timeout;
        for (;;) {
                int r = release_all_once(s);
                if (r != -EBUSY || test_now() >= deadline)
                        return r;
                (void)poll(NULL, 0, 10); /* the lag is the simulator's own timer */
        }
}

/* ---- a stand-in VMM ------------------------------------------------------------------------ */

int test_holder_start(const char *node, TestHolder *ret)
{
        int ready[2], control[2];
        if (pipe2(ready, O_CLOEXEC) < 0)
                return negative_errno();
        if (pipe2(control, O_CLOEXEC) < 0) {
                int r = negative_errno();
                close(ready[0]);
                close(ready[1]);
                return r;
        }
        pid_t pid = fork();
        if (pid == 0) {
                close(ready[0]);
                close(control[1]);
                int fd = open(node, O_RDWR | O_CLOEXEC);
                int status = fd >= 0 ? 0 : -errno;
                (void)!write(ready[1], &status, sizeof status);
                /* Holds the node until the parent closes its end or dies. */
                char c;
                while (read(control[0], &c, 1) > 0)
                        ;
                _exit(0);
        }
        int r = pid < 0 ? negative_errno() : 0;
        close(ready[1]);
        close(control[0]);
        TestHolder h = {.pid = pid > 0 ? pid : 0, .control = control[1]};
        if (r == 0) {
                /* Bounded: the child answers at once unless the open hangs. */
                struct pollfd pfd = {.fd = ready[0], .events = POLLIN};
                int status = -ETIMEDOUT;
                if (poll(&pfd, 1, 10000) == 1 &&
                    read(ready[0], &status, sizeof status) != sizeof status)
                        status = -EIO;
                r = status;
        }
        close(ready[0]);
        if (r < 0) {
                if (h.pid > 0)
                        (void)kill(h.pid, SIGKILL);
                test_holder_end(&h);
                return r;
        }
        *ret = h;
        return 0;
}

void test_holder_end(TestHolder *h)
{
        closep(&h->control);
        h->control = -1;
        if (h->pid > 0)
                (void)waitpid(h->pid, NULL, 0);
        h->pid = 0;
}

int test_golden_check(const char *rel, const char *got, char **ret_want)
{
        const char *data = getenv("VGPUD_TEST_DATA");
        _cleanup_free_ char *path = NULL, *want = NULL;
        size_t size;
        if (!data)
                return -ENOENT;
        if (strprintf(&path, "%s/%s", data, rel) < 0)
                return -ENOMEM;
        const char *update = getenv("VGPUD_UPDATE_GOLDEN");
        if (update && streq(update, "1"))
                return write_file_atomic_at(AT_FDCWD, path, got, strlen(got), 0644, NULL);
        int r = read_file_at(AT_FDCWD, path, 1024 * 1024, &want, &size);
        if (r < 0)
                return r;
        if (streq(got, want))
                return 0;
        if (ret_want)
                *ret_want = TAKE_PTR(want);
        return 1;
}

int test_argv_lines(char *const *argv, char **ret)
{
        _cleanup_free_ char *text = strdup("");
        if (!text)
                return -ENOMEM;
        for (char *const *a = argv; *a; a++) {
                if (strchr(*a, '\n'))
                        return -EINVAL;
                if (strextend(&text, "%s\n", *a) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(text);
        return 0;
}

char *test_golden_argv_mismatch(const char *rel, char *const *argv)
{
        _cleanup_free_ char *got = NULL, *want = NULL;
        char *msg = NULL;
        int r = test_argv_lines(argv, &got);
        if (r >= 0)
                r = test_golden_check(rel, got, &want);
        if (r == 0)
                return NULL;
        if (r < 0)
                (void)strprintf(&msg, "%s: %s", rel, strerror(-r));
        else
                (void)strprintf(&msg, "%s: argv differs\n--- got ---\n%s--- want ---\n%s", rel, got,
                                want);
        return msg ? msg : strdup("out of memory");
}
