/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for src/sysfs: a Root over a fixture tree built in a temporary directory. Setup
 * builds the tree and opens the Root; teardown frees it and removes the tree, also when an
 * assertion failed. No test touches the real /sys.
 */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "base/base.h"
#include "sysfs/sysfs.h"
#include "testlib.h"

typedef struct Fixture {
        char path[PATH_MAX];
        int dirfd;
        Root *root;
} Fixture;

static int put_file(int dirfd, const char *name, const char *content)
{
        _cleanup_close_ int fd =
            openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return negative_errno();
        return write_all(fd, content, strlen(content));
}

static int put_sized_file(int dirfd, const char *name, size_t size)
{
        _cleanup_free_ char *data = malloc(size + 1);
        if (!data)
                return -ENOMEM;
        memset(data, 'x', size);
        data[size] = 0;
        return put_file(dirfd, name, data);
}

/*
 * The tree, shaped like the parts of sysfs the daemon reads:
 *   attr "value\n", attr2 "two\n\n", noline "abc", newline "\n", empty "", big (4097 bytes),
 *   writeme "", devices/0000:e3:00.4/, bus/pci/devices/0000:e3:00.4 -> the device (relative),
 *   links with odd targets, a dangling link, a loop, list/ (five names), many/ (40 names),
 *   emptydir/.
 */
static int build_tree(int d)
{
        static const char *const dirs[] = {
            "devices",  "devices/0000:e3:00.4", "bus", "bus/pci", "bus/pci/devices", "list", "many",
            "emptydir",
        };
        static const struct {
                const char *target, *name;
        } links[] = {
            {"../../../devices/0000:e3:00.4", "bus/pci/devices/0000:e3:00.4"},
            {"../foo/", "link-slash"},
            {"../foo//", "link-slashes"},
            {"..", "link-dotdot"},
            {"./", "link-dot"},
            {"/", "link-root"},
            {"/sys/devices/pci0000:00/0000:00:01.0", "link-absolute"},
            {"plain", "link-plain"},
            {"nowhere", "dangling"},
            {"loop", "loop"},
        };
        static const struct {
                const char *name, *content;
        } files[] = {
            {"attr", "value\n"},  {"attr2", "two\n\n"},
            {"noline", "abc"},    {"newline", "\n"},
            {"crlf", "v\r\n"},    {"empty", ""},
            {"writeme", ""},      {"devices/0000:e3:00.4/vendor", "0x10de\n"},
            {"list/b", ""},       {"list/a", ""},
            {"list/c10", ""},     {"list/c2", ""},
            {"list/.hidden", ""},
        };
        int r;

        for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
                if (mkdirat(d, dirs[i], 0755) < 0)
                        return negative_errno();
        for (size_t i = 0; i < ELEMENTSOF(links); i++)
                if (symlinkat(links[i].target, d, links[i].name) < 0)
                        return negative_errno();
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                r = put_file(d, files[i].name, files[i].content);
                if (r < 0)
                        return r;
        }
        r = put_sized_file(d, "big", 4097);
        if (r < 0)
                return r;
        /* Created in descending order so that the listing must really sort. */
        for (int i = 39; i >= 0; i--) {
                char name[32];
                snprintf(name, sizeof name, "many/vf%02d", i);
                r = put_file(d, name, "");
                if (r < 0)
                        return r;
        }
        return 0;
}

static int fixture_setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        if (!f)
                return -1;
        const char *tmp = getenv("TMPDIR");
        snprintf(f->path, sizeof f->path, "%s/vgpud-test-sysfs.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(f->path)) {
                free(f);
                return -1;
        }
        f->dirfd = open(f->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (f->dirfd < 0 || build_tree(f->dirfd) < 0 || root_open(f->path, &f->root) < 0) {
                if (f->dirfd >= 0)
                        close(f->dirfd);
                (void)test_remove_tree_at(AT_FDCWD, f->path);
                free(f);
                return -1;
        }
        *state = f;
        return 0;
}

static int fixture_teardown(void **state)
{
        Fixture *f = *state;
        root_free(f->root);
        close(f->dirfd);
        (void)test_remove_tree_at(AT_FDCWD, f->path);
        free(f);
        return 0;
}

#define fixture_test(fn) cmocka_unit_test_setup_teardown(fn, fixture_setup, fixture_teardown)

static Root *const sentinel_root = (Root *)&sentinel_root;

/* GEN-1 */
static void test_root_open(void **state)
{
        Fixture *f = *state;
        Root *r = sentinel_root;

        assert_int_equal(root_open(NULL, &r), -EINVAL);
        assert_int_equal(root_open("", &r), -EINVAL);
        assert_int_equal(root_open("sys", &r), -EINVAL);
        assert_int_equal(root_open("./sys", &r), -EINVAL);
        assert_int_equal(root_open("../sys", &r), -EINVAL);
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/missing", f->path);
        assert_int_equal(root_open(path, &r), -ENOENT);
        snprintf(path, sizeof path, "%s/attr", f->path);
        assert_int_equal(root_open(path, &r), -ENOTDIR);
        assert_ptr_equal(r, sentinel_root);

        snprintf(path, sizeof path, "%s/devices", f->path);
        assert_int_equal(root_open(path, &r), 0);
        assert_true(r->fd >= 0);
        assert_string_equal(r->path, path);
        assert_true(fcntl(r->fd, F_GETFD) & FD_CLOEXEC);
        _cleanup_free_ char *vendor = NULL;
        assert_int_equal(root_read_attr(r, "0000:e3:00.4/vendor", 64, &vendor), 0);
        assert_string_equal(vendor, "0x10de");
        assert_null(root_free(r));
        assert_null(root_free(NULL));
}

/* GEN-1, GEN-5 */
static void test_root_check_path(void **state)
{
        static const char *const good[] = {
            "attr",         "a/b",         "bus/pci/devices/0000:e3:00.4",
            "a/b/",         "..a",         "a..",
            ".hidden",      "a/.hidden/b", "a//b",
            "...",          "a/...",       "0000:e3:00.4",
            "a/b.c/d..e/f", "a.b/c",
        };
        static const char *const bad[] = {
            "",     "/",          "/etc/passwd", "//x",   ".",      "..",          "./",
            "../",  "./a",        "../a",        "a/.",   "a/..",   "a/./b",       "a/../b",
            "a/..", "a/b/../../", "a//../b",     "a/.//", "/a/b/c", "a/b/c/../..",
        };
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                assert_int_equal(root_check_path(good[i]), 0);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                int r = root_check_path(bad[i]);
                if (r != -EINVAL)
                        fprintf(stderr, "root_check_path(\"%s\") = %d\n", bad[i], r);
                assert_int_equal(r, -EINVAL);
        }
        assert_int_equal(root_check_path(NULL), -EINVAL);
}

/* GEN-1: every entry point refuses a path that could leave the root, before any access */
static void test_root_refuses_escapes(void **state)
{
        Fixture *f = *state;
        static const char *const bad[] = {"",        "/etc/passwd",     "..",
                                          "../attr", "devices/../attr", "./attr"};

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char *s = (char *)"untouched";
                char **v = (char **)&s;
                DIR *d = (DIR *)&s;
                size_t size = 12345;
                assert_int_equal(root_read_file(f->root, bad[i], 64, &s, &size), -EINVAL);
                assert_int_equal(root_read_attr(f->root, bad[i], 64, &s), -EINVAL);
                assert_int_equal(root_write_attr(f->root, bad[i], "1"), -EINVAL);
                assert_int_equal(root_readlink(f->root, bad[i], &s), -EINVAL);
                assert_int_equal(root_readlink_basename(f->root, bad[i], &s), -EINVAL);
                assert_int_equal(root_opendir(f->root, bad[i], &d), -EINVAL);
                assert_int_equal(root_list_dir(f->root, bad[i], &v), -EINVAL);
                assert_int_equal(root_exists(f->root, bad[i]), -EINVAL);
                assert_string_equal(s, "untouched");
                assert_ptr_equal(v, (char **)&s);
                assert_ptr_equal(d, (DIR *)&s);
                assert_int_equal(size, 12345);
        }
        /* the attribute the escapes aimed at was not written */
        _cleanup_free_ char *attr = NULL;
        assert_int_equal(root_read_file(f->root, "attr", 64, &attr, NULL), 0);
        assert_string_equal(attr, "value\n");
}

/* GEN-5 */
static void test_root_read_file(void **state)
{
        Fixture *f = *state;
        char *s = NULL;
        size_t size = 0;

        assert_int_equal(root_read_file(f->root, "attr", 6, &s, &size), 0); /* exactly max */
        assert_string_equal(s, "value\n");
        assert_int_equal(size, 6);
        free(s);

        s = (char *)"untouched";
        size = 12345;
        assert_int_equal(root_read_file(f->root, "attr", 5, &s, &size), -EFBIG); /* max + 1 */
        assert_int_equal(root_read_file(f->root, "big", 4096, &s, &size), -EFBIG);
        assert_int_equal(root_read_file(f->root, "missing", 64, &s, &size), -ENOENT);
        assert_int_equal(root_read_file(f->root, "devices", 64, &s, &size), -EISDIR);
        assert_int_equal(root_read_file(f->root, "dangling", 64, &s, &size), -ENOENT);
        assert_string_equal(s, "untouched");
        assert_int_equal(size, 12345);

        s = NULL;
        assert_int_equal(root_read_file(f->root, "big", 4097, &s, &size), 0);
        assert_int_equal(size, 4097);
        assert_int_equal(strlen(s), 4097);
        free(s);

        s = NULL;
        assert_int_equal(root_read_file(f->root, "empty", 0, &s, NULL), 0);
        assert_string_equal(s, "");
        free(s);

        /* links below the root are followed, as sysfs needs */
        s = NULL;
        assert_int_equal(
            root_read_file(f->root, "bus/pci/devices/0000:e3:00.4/vendor", 64, &s, &size), 0);
        assert_string_equal(s, "0x10de\n");
        free(s);
}

/* GEN-5 */
static void test_root_read_attr(void **state)
{
        Fixture *f = *state;
        static const struct {
                const char *name, *value;
        } cases[] = {
            {"attr", "value"}, {"attr2", "two\n"}, {"noline", "abc"},
            {"newline", ""},   {"crlf", "v\r"},    {"empty", ""},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *s = NULL;
                assert_int_equal(root_read_attr(f->root, cases[i].name, 64, &s), 0);
                assert_string_equal(s, cases[i].value);
                free(s);
        }

        /* the bound counts the newline */
        char *s = (char *)"untouched";
        assert_int_equal(root_read_attr(f->root, "attr", 5, &s), -EFBIG);
        assert_int_equal(root_read_attr(f->root, "missing", 64, &s), -ENOENT);
        assert_string_equal(s, "untouched");
        s = NULL;
        assert_int_equal(root_read_attr(f->root, "attr", 6, &s), 0);
        assert_string_equal(s, "value");
        free(s);
}

/* GEN-1 */
static void test_root_readlink(void **state)
{
        Fixture *f = *state;
        static const struct {
                const char *name, *target, *basename;
        } cases[] = {
            {"bus/pci/devices/0000:e3:00.4", "../../../devices/0000:e3:00.4", "0000:e3:00.4"},
            {"link-slash", "../foo/", "foo"},
            {"link-slashes", "../foo//", "foo"},
            {"link-absolute", "/sys/devices/pci0000:00/0000:00:01.0", "0000:00:01.0"},
            {"link-plain", "plain", "plain"},
            {"dangling", "nowhere", "nowhere"},
            {"loop", "loop", "loop"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *s = NULL;
                assert_int_equal(root_readlink(f->root, cases[i].name, &s), 0);
                assert_string_equal(s, cases[i].target); /* as stored, relative stays relative */
                free(s);
                s = NULL;
                assert_int_equal(root_readlink_basename(f->root, cases[i].name, &s), 0);
                assert_string_equal(s, cases[i].basename);
                free(s);
        }

        /* targets without a usable last component */
        static const char *const no_basename[] = {"link-dotdot", "link-dot", "link-root"};
        for (size_t i = 0; i < ELEMENTSOF(no_basename); i++) {
                char *s = (char *)"untouched";
                assert_int_equal(root_readlink_basename(f->root, no_basename[i], &s), -EINVAL);
                assert_string_equal(s, "untouched");
        }

        char *s = (char *)"untouched";
        assert_int_equal(root_readlink(f->root, "attr", &s), -EINVAL); /* not a link */
        assert_int_equal(root_readlink(f->root, "missing", &s), -ENOENT);
        assert_int_equal(root_readlink_basename(f->root, "attr", &s), -EINVAL);
        assert_int_equal(root_readlink_basename(f->root, "missing", &s), -ENOENT);
        assert_string_equal(s, "untouched");
}

static void assert_listing(Fixture *f, const char *rel, const char *const *expected, size_t n)
{
        _cleanup_strv_free_ char **names = NULL;
        assert_int_equal(root_list_dir(f->root, rel, &names), 0);
        assert_non_null(names);
        assert_int_equal(strv_length(names), n);
        for (size_t i = 0; i < n; i++)
                assert_string_equal(names[i], expected[i]);
        assert_null(names[n]);
}

/* GEN-5: directory listings are sorted with strcmp, without "." and ".." */
static void test_root_list_dir(void **state)
{
        Fixture *f = *state;

        static const char *const list[] = {".hidden", "a", "b", "c10", "c2"};
        assert_listing(f, "list", list, ELEMENTSOF(list));
        assert_listing(f, "list/", list, ELEMENTSOF(list));
        assert_listing(f, "emptydir", NULL, 0);

        char many_names[40][8];
        const char *many[40];
        for (int i = 0; i < 40; i++) {
                snprintf(many_names[i], sizeof many_names[i], "vf%02d", i);
                many[i] = many_names[i];
        }
        assert_listing(f, "many", many, 40);

        /* through a link below the root */
        static const char *const dev[] = {"vendor"};
        assert_listing(f, "bus/pci/devices/0000:e3:00.4", dev, 1);

        char **v = (char **)&f;
        assert_int_equal(root_list_dir(f->root, "missing", &v), -ENOENT);
        assert_int_equal(root_list_dir(f->root, "attr", &v), -ENOTDIR);
        assert_int_equal(root_list_dir(f->root, "dangling", &v), -ENOENT);
        assert_ptr_equal(v, (char **)&f);

        DIR *d = NULL;
        assert_int_equal(root_opendir(f->root, "list", &d), 0);
        assert_non_null(d);
        assert_true(fcntl(dirfd(d), F_GETFD) & FD_CLOEXEC);
        closedir(d);
        d = (DIR *)&f;
        assert_int_equal(root_opendir(f->root, "attr", &d), -ENOTDIR);
        assert_ptr_equal(d, (DIR *)&f);
}

/* GEN-1 */
static void test_root_exists(void **state)
{
        Fixture *f = *state;

        assert_int_equal(root_exists(f->root, "attr"), 1);
        assert_int_equal(root_exists(f->root, "devices"), 1);
        assert_int_equal(root_exists(f->root, "devices/0000:e3:00.4/vendor"), 1);
        assert_int_equal(root_exists(f->root, "bus/pci/devices/0000:e3:00.4"), 1);
        assert_int_equal(root_exists(f->root, "bus/pci/devices/0000:e3:00.4/vendor"), 1);
        assert_int_equal(root_exists(f->root, "dangling"), 1); /* the link itself exists */
        assert_int_equal(root_exists(f->root, "missing"), 0);
        assert_int_equal(root_exists(f->root, "devices/missing"), 0);
        assert_int_equal(root_exists(f->root, "missing/deeper"), 0);
        assert_int_equal(root_exists(f->root, "attr/child"), 0);      /* ENOTDIR */
        assert_int_equal(root_exists(f->root, "dangling/child"), 0);  /* ENOENT */
        assert_int_equal(root_exists(f->root, "loop/child"), -ELOOP); /* other errors pass */

        char longname[NAME_MAX + 2];
        memset(longname, 'n', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        assert_int_equal(root_exists(f->root, longname), -ENAMETOOLONG);
}

static void assert_file_is(Fixture *f, const char *name, const char *expected)
{
        _cleanup_free_ char *s = NULL;
        assert_int_equal(read_file_at(f->dirfd, name, 4096, &s, NULL), 0);
        assert_string_equal(s, expected);
}

/* GEN-1: one write of exactly the value, no newline added, nothing created */
static void test_root_write_attr(void **state)
{
        Fixture *f = *state;

        assert_int_equal(root_write_attr(f->root, "writeme", "1"), 0);
        assert_file_is(f, "writeme", "1");

        /* sysfs attributes are not truncated by the kernel, so neither are they here */
        assert_int_equal(root_write_attr(f->root, "noline", "X"), 0);
        assert_file_is(f, "noline", "Xbc");

        assert_int_equal(root_write_attr(f->root, "empty", "nvidia-558\n"), 0);
        assert_file_is(f, "empty", "nvidia-558\n");

        assert_int_equal(root_write_attr(f->root, "bus/pci/devices/0000:e3:00.4/vendor", "0x0000"),
                         0);
        assert_file_is(f, "devices/0000:e3:00.4/vendor", "0x0000\n");

        assert_int_equal(root_write_attr(f->root, "missing", "1"), -ENOENT);
        assert_int_equal(root_exists(f->root, "missing"), 0);
        assert_int_equal(root_write_attr(f->root, "devices", "1"), -EISDIR);
        assert_int_equal(root_write_attr(f->root, "dangling", "1"), -ENOENT);
        assert_int_equal(root_exists(f->root, "nowhere"), 0);

        /* a FIFO shows the value arrives in one piece */
        assert_int_equal(mkfifoat(f->dirfd, "fifo", 0600), 0);
        _cleanup_close_ int rd = openat(f->dirfd, "fifo", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        assert_true(rd >= 0);
        assert_int_equal(root_write_attr(f->root, "fifo", "0000:e3:00.4"), 0);
        char buf[64];
        ssize_t n = read(rd, buf, sizeof buf);
        assert_int_equal(n, 12);
        assert_memory_equal(buf, "0000:e3:00.4", 12);
}

/* GEN-4: a job keeps its own copy of a root, usable after the original is gone */
static void test_root_dup(void **state)
{
        Fixture *f = *state;
        Root *copy = NULL;
        assert_int_equal(root_dup(f->root, &copy), 0);
        assert_non_null(copy);
        assert_true(copy->fd >= 0);
        assert_int_not_equal(copy->fd, f->root->fd);
        assert_string_equal(copy->path, f->root->path);
        assert_ptr_not_equal(copy->path, f->root->path);

        f->root = root_free(f->root);
        char *value = NULL;
        assert_int_equal(root_read_attr(copy, "attr", 64, &value), 0);
        assert_string_equal(value, "value");
        free(value);
        /* The teardown frees the fixture's root: hand it the copy. */
        f->root = copy;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            fixture_test(test_root_open),
            cmocka_unit_test(test_root_check_path),
            fixture_test(test_root_refuses_escapes),
            fixture_test(test_root_read_file),
            fixture_test(test_root_read_attr),
            fixture_test(test_root_readlink),
            fixture_test(test_root_list_dir),
            fixture_test(test_root_exists),
            fixture_test(test_root_write_attr),
            fixture_test(test_root_dup),
        };
        return cmocka_run_group_tests_name("sysfs", tests, NULL, NULL);
}
