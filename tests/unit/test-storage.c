/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * storage/: the parser of `qemu-img info --output=json` on captures made with the real qemu-img
 * (tests/data/qemu-img/), DISK-3's refusals, the format probe, qemu-img run for real and as a
 * misbehaving stand-in, the confinement of import sources, and the image store's load-time
 * repairs and one import end to end on a loop. Hostile images through the API are in
 * tests/api/test-images.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "storage/storage.h"
#include "testlib.h"

#define QEMU_IMG "/usr/bin/qemu-img"
#define TIB (UINT64_C(1) << 40)

static char *read_capture(const char *name, size_t *ret_size)
{
        const char *data = getenv("VGPUD_TEST_DATA");
        assert_non_null(data);
        _cleanup_free_ char *path = NULL;
        assert_true(strprintf(&path, "%s/qemu-img/%s", data, name) >= 0);
        char *text = NULL;
        assert_int_equal(read_file_at(AT_FDCWD, path, 1 << 20, &text, ret_size), 0);
        return text;
}

/* Parses a capture and runs DISK-3's check on it: the check's result, its message. */
static int check_capture(const char *name, const char *probed, QemuImgInfo *ret, char **error)
{
        size_t size = 0;
        _cleanup_free_ char *text = read_capture(name, &size);
        int r = qemu_img_info_parse(text, size, ret, error);
        if (r < 0)
                return r;
        return qemu_img_info_check(ret, probed, 2 * TIB, error);
}

/* DISK-3 */
static void test_info_raw_and_qcow2(void **state)
{
        _cleanup_(qemu_img_info_done) QemuImgInfo raw = {0}, qcow2 = {0};
        _cleanup_free_ char *error = NULL;

        assert_int_equal(check_capture("info-raw.json", "raw", &raw, &error), 0);
        assert_string_equal(raw.format, "raw");
        assert_int_equal(raw.virtual_size, 16 << 20);
        assert_null(raw.backing);
        assert_false(raw.encrypted);

        assert_int_equal(check_capture("info-qcow2.json", "qcow2", &qcow2, &error), 0);
        assert_string_equal(qcow2.format, "qcow2");
        assert_int_equal(qcow2.virtual_size, 64 << 20);
        assert_true(qcow2.actual_size > 0);
        assert_null(qcow2.data_file);
        assert_false(qcow2.corrupt);
        assert_null(error);
}

/* DISK-3, REL-12: each hostile capture is refused with its reason. */
static void test_info_refusals(void **state)
{
        const struct {
                const char *capture, *probed, *why;
        } cases[] = {
            {"info-backing.json", "qcow2", "image has a backing file \"base.qcow2\""},
            {"info-data-file.json", "qcow2", "image has an external data file \"data.raw\""},
            {"info-qcow2-encrypted.json", "qcow2", "image is encrypted"},
            {"info-luks.json", "luks", "image format luks is not accepted: only raw and qcow2"},
            {"info-vmdk.json", "vmdk", "image format vmdk is not accepted: only raw and qcow2"},
            /* qemu-img reading as raw what the probe called qcow2 is no raw image either */
            {"info-raw.json", "qcow2", "qemu-img reads the image as raw, not as qcow2"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(qemu_img_info_done) QemuImgInfo info = {0};
                _cleanup_free_ char *error = NULL;
                assert_int_equal(check_capture(cases[i].capture, cases[i].probed, &info, &error),
                                 -EINVAL);
                if (!startswith(error, cases[i].why))
                        fail_msg("%s: %s", cases[i].capture, error);
        }

        /* Over storage.max_image_size. */
        _cleanup_(qemu_img_info_done) QemuImgInfo info = {0};
        _cleanup_free_ char *error = NULL, *text = NULL;
        size_t size = 0;
        text = read_capture("info-qcow2.json", &size);
        assert_int_equal(qemu_img_info_parse(text, size, &info, &error), 0);
        assert_int_equal(qemu_img_info_check(&info, "qcow2", (64 << 20) - 1, &error), -EINVAL);
        assert_string_equal(error, "image virtual size 67108864 bytes exceeds "
                                   "storage.max_image_size (67108863 bytes)");
}

/* GEN-5: the parser is strict. */
static void test_info_strict(void **state)
{
        const struct {
                const char *json, *why;
        } cases[] = {
            {"[]", "qemu-img info: not a JSON object"},
            {"{\"virtual-size\": 1, \"virtual-size\": 2}", "qemu-img info: not JSON: "},
            {"{\"virtual-size\": 1, \"filename\": \"x\", \"format\": \"raw\", \"extra\": 1}",
             "qemu-img info: unknown key \"extra\""},
            {"{\"virtual-size\": \"1\", \"filename\": \"x\", \"format\": \"raw\"}",
             "qemu-img info: virtual-size must be an integer"},
            {"{\"filename\": \"x\", \"format\": \"raw\"}",
             "qemu-img info: virtual-size is required"},
            {"{\"virtual-size\": -1, \"filename\": \"x\", \"format\": \"raw\"}",
             "qemu-img info: negative size"},
            {"{\"virtual-size\": 1, \"filename\": \"x\", \"format\": \"qcow2\", "
             "\"format-specific\": {\"type\": \"qcow2\", \"data\": {\"data-file\": 7}}}",
             "qemu-img info: format-specific.data.data-file must be a string"},
            {"{\"virtual-size\": 1, \"filename\": \"x\", \"format\": \"qcow2\", "
             "\"format-specific\": {\"type\": \"qcow2\", \"data\": {\"new-thing\": 1}}}",
             "qemu-img info: unknown key \"format-specific.data.new-thing\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                QemuImgInfo info = {0};
                _cleanup_free_ char *error = NULL;
                assert_true(
                    qemu_img_info_parse(cases[i].json, strlen(cases[i].json), &info, &error) < 0);
                if (!startswith(error, cases[i].why))
                        fail_msg("%s: %s", cases[i].json, error);
        }

        /* A backing chain (--backing-chain prints an array): vgpud never asks for one. */
        QemuImgInfo info = {0};
        _cleanup_free_ char *error = NULL, *text = NULL;
        size_t size = 0;
        text = read_capture("info-backing-chain.json", &size);
        assert_int_equal(qemu_img_info_parse(text, size, &info, &error), -EINVAL);
        assert_string_equal(error, "qemu-img info: not a JSON object");

        /* Oversize output is an error, never cut short. */
        _cleanup_free_ char *big = malloc(QEMU_IMG_INFO_MAX + 2);
        memset(big, ' ', QEMU_IMG_INFO_MAX + 1);
        big[QEMU_IMG_INFO_MAX + 1] = 0;
        free(error);
        error = NULL;
        assert_int_equal(qemu_img_info_parse(big, QEMU_IMG_INFO_MAX + 1, &info, &error), -EFBIG);
}

/* ---- files made for real ------------------------------------------------------------------- */

typedef struct Fixture {
        TestTree *tree;
} Fixture;

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        if (!f || test_tree_new("test-storage", &f->tree) < 0)
                return -1;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        test_tree_free(f->tree);
        free(f);
        return 0;
}

/* Runs a shell line in the tree's directory; fails the test unless it exits 0. */
static void sh(Fixture *f, const char *fmt, ...) _printf_(2, 3);
static void sh(Fixture *f, const char *fmt, ...)
{
        _cleanup_free_ char *line = NULL, *script = NULL, *out = NULL, *error = NULL;
        va_list ap;
        va_start(ap, fmt);
        assert_true(vasprintf(&line, fmt, ap) >= 0);
        va_end(ap);
        assert_true(strprintf(&script, "cd '%s' && %s", f->tree->dir, line) >= 0);
        char *argv[] = {(char *)"/bin/sh", (char *)"-c", script, NULL};
        SpawnRequest req = SPAWN_REQUEST_INIT;
        req.argv = argv;
        int status = -1;
        if (spawn_run_helper(&req, test_now() + 60 * NSEC_PER_SEC, 4096, &out, &status, &error) < 0)
                fail_msg("%s: %s", line, error);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail_msg("%s: status %d: %s", line, status, out);
}

static int open_in(Fixture *f, const char *name)
{
        int fd = openat(f->tree->fd, name, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        return fd;
}

static const char *probe(Fixture *f, const char *name)
{
        _cleanup_close_ int fd = open_in(f, name);
        _cleanup_free_ char *error = NULL;
        const char *format = NULL;
        assert_int_equal(storage_probe_format(fd, &format, &error), 0);
        return format;
}

/* DISK-3: the format is probed from the magic, never guessed by qemu-img. */
static void test_probe(void **state)
{
        Fixture *f = *state;
        sh(f, QEMU_IMG
           " create -q -f qcow2 a.qcow2 1M && " QEMU_IMG " create -q -f raw a.raw 1M"
           " && " QEMU_IMG " create -q -f vmdk a.vmdk 1M && " QEMU_IMG
           " create -q -f vpc -o subformat=fixed a.vpc 1M && " QEMU_IMG
           " create -q -f luks --object secret,id=s,data=x -o key-secret=s a.luks 1M && " QEMU_IMG
           " create -q -f qed a.qed 1M && " QEMU_IMG " create -q -f vdi a.vdi 1M && " QEMU_IMG
           " create -q -f vhdx a.vhdx 1M && printf '' > empty");
        assert_string_equal(probe(f, "a.qcow2"), "qcow2");
        assert_string_equal(probe(f, "a.raw"), "raw");
        assert_string_equal(probe(f, "a.vmdk"), "vmdk");
        assert_string_equal(probe(f, "a.vpc"), "vpc"); /* its footer only, at the end */
        assert_string_equal(probe(f, "a.luks"), "luks");
        assert_string_equal(probe(f, "a.qed"), "qed");
        assert_string_equal(probe(f, "a.vdi"), "vdi");
        assert_string_equal(probe(f, "a.vhdx"), "vhdx");
        assert_string_equal(probe(f, "empty"), "raw");
}

/* DISK-3: qemu-img info for real, through the passed descriptor; a truncated qcow2 (REL-12). */
static void test_info_real(void **state)
{
        Fixture *f = *state;
        sh(f, QEMU_IMG " create -q -f qcow2 a.qcow2 3M && head -c 100 a.qcow2 > cut.qcow2");
        _cleanup_close_ int fd = open_in(f, "a.qcow2");
        _cleanup_(qemu_img_info_done) QemuImgInfo info = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            qemu_img_info(QEMU_IMG, fd, "qcow2", test_now() + 60 * NSEC_PER_SEC, &info, &error), 0);
        assert_string_equal(info.format, "qcow2");
        assert_int_equal(info.virtual_size, 3 << 20);

        _cleanup_close_ int cut = open_in(f, "cut.qcow2");
        QemuImgInfo none = {0};
        assert_int_equal(
            qemu_img_info(QEMU_IMG, cut, "qcow2", test_now() + 60 * NSEC_PER_SEC, &none, &error),
            -EIO);
        if (!startswith(error, "qemu-img info exited with status 1: "))
                fail_msg("%s", error);

        /* Only raw and qcow2 are ever named to qemu-img. */
        free(error);
        error = NULL;
        assert_int_equal(
            qemu_img_info(QEMU_IMG, fd, "vmdk", test_now() + NSEC_PER_SEC, &none, &error), -EINVAL);
}

/* DISK-3: a qemu-img that hangs is killed at the deadline; one that crashes is named so. */
static void test_info_misbehaving(void **state)
{
        Fixture *f = *state;
        sh(f, "printf '#!/bin/sh\\nexec sleep 60\\n' > hang && printf '#!/bin/sh\\nkill -SEGV "
              "$$\\n' > crash && printf '#!/bin/sh\\nyes | head -c 300000\\n' > chatty && "
              "chmod +x hang crash chatty && printf x > a.raw");
        _cleanup_close_ int fd = open_in(f, "a.raw");
        _cleanup_free_ char *hang = test_tree_path(f->tree, "hang");
        _cleanup_free_ char *crash = test_tree_path(f->tree, "crash");
        _cleanup_free_ char *chatty = test_tree_path(f->tree, "chatty");
        QemuImgInfo info = {0};
        _cleanup_free_ char *error = NULL;

        nsec_t begun = test_now();
        assert_int_equal(qemu_img_info(hang, fd, "raw", begun + 300 * NSEC_PER_MSEC, &info, &error),
                         -ETIME);
        assert_true(test_now() - begun < 10 * NSEC_PER_SEC);
        assert_non_null(strstr(error, "did not finish in time"));

        free(error);
        error = NULL;
        assert_int_equal(
            qemu_img_info(crash, fd, "raw", test_now() + 10 * NSEC_PER_SEC, &info, &error), -EIO);
        assert_string_equal(error, "qemu-img info killed by signal 11");

        free(error);
        error = NULL;
        assert_int_equal(
            qemu_img_info(chatty, fd, "raw", test_now() + 10 * NSEC_PER_SEC, &info, &error),
            -EFBIG);
}

typedef struct Seen {
        unsigned last, calls;
} Seen;

static void on_progress(unsigned permille, void *userdata)
{
        Seen *s = userdata;
        assert_true(permille >= s->last);
        s->last = permille;
        s->calls++;
}

/* DISK-3: the conversion, with progress streamed as qemu-img prints it. */
static void test_convert(void **state)
{
        Fixture *f = *state;
        sh(f, "head -c 4194304 /dev/urandom > a.raw && " QEMU_IMG
              " create -q -f qcow2 -b a.raw -F raw b.qcow2 && touch out.qcow2");
        _cleanup_close_ int fd = open_in(f, "a.raw");
        _cleanup_free_ char *target = test_tree_path(f->tree, "out.qcow2");
        _cleanup_free_ char *error = NULL;
        Seen seen = {0};
        assert_int_equal(qemu_img_convert(QEMU_IMG, fd, "raw", target,
                                          test_now() + 60 * NSEC_PER_SEC, on_progress, &seen,
                                          &error),
                         0);
        assert_int_equal(seen.last, 1000);
        assert_true(seen.calls >= 2);
        sh(f, QEMU_IMG " compare -q -f raw -F qcow2 a.raw out.qcow2");

        /* With backing: null, a qcow2 whose header names a backing file converts without it:
         * the backing file's bytes never reach the target. */
        _cleanup_close_ int b = open_in(f, "b.qcow2");
        assert_int_equal(qemu_img_convert(QEMU_IMG, b, "qcow2", target,
                                          test_now() + 60 * NSEC_PER_SEC, NULL, NULL, &error),
                         0);
        sh(f, "! " QEMU_IMG " compare -q -f raw -F qcow2 a.raw out.qcow2 && " QEMU_IMG
              " info -f qcow2 out.qcow2 | grep -vq backing");

        /* A failure names qemu-img's own reason, after all its progress. */
        _cleanup_free_ char *bad = test_tree_path(f->tree, "no/such/dir/out.qcow2");
        assert_int_equal(qemu_img_convert(QEMU_IMG, fd, "raw", bad, test_now() + 60 * NSEC_PER_SEC,
                                          NULL, NULL, &error),
                         -EIO);
        if (!startswith(error, "qemu-img convert exited with status 1: qemu-img: ") ||
            !strstr(error, "No such file or directory"))
                fail_msg("%s", error);
}

/* INST-6, DISK-2, REL-12: import sources are confined as boot files are. */
static void test_open_source(void **state)
{
        Fixture *f = *state;
        sh(f, "mkdir -p import outside && printf x > outside/secret && printf y > import/ok && "
              "ln -s ../outside/secret import/link && mkfifo import/fifo");
        _cleanup_free_ char *dir = test_tree_path(f->tree, "import");
        char *dirs[] = {dir, NULL};
        const struct {
                const char *rel, *why;
        } cases[] = {
            {"import/link", "not under image_dirs"},
            {"import/fifo", "not a regular file"},
            {"outside/secret", "not under image_dirs"},
            {"import/../outside/secret", "must be an absolute path without . or .. components"},
            {"import/missing", "No such file or directory"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *path = test_tree_path(f->tree, "%s", cases[i].rel);
                _cleanup_free_ char *error = NULL, *want = NULL;
                assert_int_equal(storage_open_source("source", path, dirs, &error), -EINVAL);
                assert_true(strprintf(&want, "source %s: %s", path, cases[i].why) >= 0);
                assert_string_equal(error, want);
        }
        _cleanup_free_ char *ok = test_tree_path(f->tree, "import/ok");
        _cleanup_free_ char *error = NULL;
        int fd = storage_open_source("source", ok, dirs, &error);
        assert_true(fd >= 0);
        close(fd);
}

/* ---- the store ------------------------------------------------------------------------------ */

typedef struct Store {
        sd_event *event;
        WorkerPool *disk, *helper;
        ImageStore *store;
        char *import_dir;
        char *dirs[2]; /* image_dirs, borrowed by the store as from the Config */
} Store;

static void store_open(Fixture *f, Store *s)
{
        _cleanup_free_ char *error = NULL;
        s->import_dir = test_tree_path(f->tree, "import");
        assert_int_equal(sd_event_new(&s->event), 0);
        assert_int_equal(worker_pool_new(&WORKER_POOL_CONFIG_DISK, &s->disk), 0);
        assert_int_equal(worker_pool_new(&WORKER_POOL_CONFIG_HELPER, &s->helper), 0);
        assert_int_equal(worker_pool_attach_event(s->disk, s->event), 0);
        assert_int_equal(worker_pool_attach_event(s->helper, s->event), 0);
        s->dirs[0] = s->import_dir;
        ImageStoreConfig c = {.data_dir_fd = f->tree->fd,
                              .data_dir = f->tree->dir,
                              .image_dirs = s->dirs,
                              .qemu_img = QEMU_IMG,
                              .max_image_size = 2 * TIB,
                              .disk_pool = s->disk,
                              .helper_pool = s->helper};
        if (image_store_new(&c, &s->store, &error) < 0)
                fail_msg("%s", error);
}

static void store_close(Store *s)
{
        s->store = image_store_free(s->store);
        assert_int_equal(worker_pool_wait_idle(s->helper, 30 * NSEC_PER_SEC), 0);
        s->helper = worker_pool_free(s->helper);
        s->disk = worker_pool_free(s->disk);
        s->event = sd_event_unref(s->event);
        freep(&s->import_dir);
}

typedef struct Answer {
        bool done;
        int r;
        StorageFailure failure;
} Answer;

static void on_done(int r, StorageFailure failure, const char *error, const Image *image,
                    void *userdata)
{
        Answer *a = userdata;
        a->done = true;
        a->r = r;
        a->failure = failure;
}

static const Image *import_and_wait(Store *s, const char *name, const char *source,
                                    const char *sha256)
{
        Answer a = {0};
        StorageFailure failure = STORAGE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        if (image_store_import(s->store, name, source, sha256, on_done, &a, &failure, &error) < 0)
                fail_msg("import %s: %s", name, error);
        TEST_WAIT_UNTIL(s->event, a.done);
        assert_int_equal(a.r, 0);
        TEST_WAIT_UNTIL(s->event, image_store_get(s->store, name)->state != IMAGE_STATE_IMPORTING);
        return image_store_get(s->store, name);
}

/* DISK-1, DISK-2, DISK-3: an import to ready, a digest mismatch to failed without a file. */
static void test_store_import(void **state)
{
        Fixture *f = *state;
        Store s = {0};
        sh(f, "mkdir -p import && head -c 1048576 /dev/zero > import/a.raw");
        store_open(f, &s);
        _cleanup_free_ char *source = test_tree_path(f->tree, "import/a.raw");
        /* sha256 of 1 MiB of zeros */
        const char *zeros = "30e14955ebf1352266dc2ff8067e68104607e750abb9d3b36582b8af909fcb58";
        const Image *i = import_and_wait(&s, "base", source, zeros);
        assert_int_equal(i->state, IMAGE_STATE_READY);
        assert_string_equal(i->format, "raw");
        assert_string_equal(i->sha256, zeros);
        assert_int_equal(i->virtual_size, 1 << 20);
        struct stat st;
        assert_int_equal(fstatat(f->tree->fd, "images/base/disk.qcow2", &st, 0), 0);
        assert_int_equal(st.st_mode & 0777, 0444);

        const char *wrong = "0000000000000000000000000000000000000000000000000000000000000000";
        i = import_and_wait(&s, "wrong", source, wrong);
        assert_int_equal(i->state, IMAGE_STATE_FAILED);
        if (!startswith(i->error, "sha256 mismatch: expected 0000"))
                fail_msg("%s", i->error);
        assert_int_equal(fstatat(f->tree->fd, "images/wrong/disk.qcow2", &st, 0), -1);
        assert_int_equal(fstatat(f->tree->fd, "images/wrong/disk.qcow2.tmp", &st, 0), -1);

        /* A name once taken answers 409 until deleted. */
        Answer a = {0};
        StorageFailure failure = STORAGE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            image_store_import(s.store, "base", source, NULL, on_done, &a, &failure, &error),
            -EEXIST);
        assert_int_equal(failure, STORAGE_FAILURE_ALREADY_EXISTS);

        /* DISK-4: deleted through .deleted-<name>. */
        assert_int_equal(image_store_delete(s.store, "base", on_done, &a, &failure, &error), 0);
        TEST_WAIT_UNTIL(s.event, a.done);
        assert_int_equal(a.r, 0);
        assert_null(image_store_get(s.store, "base"));
        assert_int_equal(fstatat(f->tree->fd, "images/base", &st, 0), -1);
        store_close(&s);
}

/* DISK-11, REL-12: a restart fails an interrupted import and removes its leftovers. */
static void test_store_restart(void **state)
{
        Fixture *f = *state;
        Store s = {0};
        sh(f, "mkdir -p images/cut images/.deleted-old/x && printf partial > "
              "images/cut/disk.qcow2.tmp && printf '{\"version\": 1, \"name\": \"cut\", \"state\": "
              "\"importing\", \"source\": \"/srv/a.raw\", \"created_at\": "
              "\"2026-01-02T03:04:05Z\"}\\n' > images/cut/image.json && mkdir images/bad && "
              "printf '{\"version\": 1, \"name\": \"bad\", \"extra\": 1}' > images/bad/image.json");
        store_open(f, &s);
        const Image *i = image_store_get(s.store, "cut");
        assert_non_null(i);
        assert_int_equal(i->state, IMAGE_STATE_FAILED);
        assert_string_equal(i->error, "interrupted by daemon restart");
        assert_null(image_store_get(s.store, "bad")); /* logged and left for the operator */
        struct stat st;
        assert_int_equal(fstatat(f->tree->fd, "images/cut/disk.qcow2.tmp", &st, 0), -1);
        assert_int_equal(fstatat(f->tree->fd, "images/.deleted-old", &st, 0), -1);
        store_close(&s);

        /* The failure is on disk: the next start reads it as it is. */
        store_open(f, &s);
        i = image_store_get(s.store, "cut");
        assert_int_equal(i->state, IMAGE_STATE_FAILED);
        assert_string_equal(i->error, "interrupted by daemon restart");
        store_close(&s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_info_raw_and_qcow2),
            cmocka_unit_test(test_info_refusals),
            cmocka_unit_test(test_info_strict),
            cmocka_unit_test_setup_teardown(test_probe, setup, teardown),
            cmocka_unit_test_setup_teardown(test_info_real, setup, teardown),
            cmocka_unit_test_setup_teardown(test_info_misbehaving, setup, teardown),
            cmocka_unit_test_setup_teardown(test_convert, setup, teardown),
            cmocka_unit_test_setup_teardown(test_open_source, setup, teardown),
            cmocka_unit_test_setup_teardown(test_store_import, setup, teardown),
            cmocka_unit_test_setup_teardown(test_store_restart, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
