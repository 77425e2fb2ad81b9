/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpu-sim: mounts a simulated NVIDIA vGPU host (SPEC §14) with libfuse3.
 *
 *   DIR/sys, DIR/dev   the tree of tree.c, backed by the model of model.c
 *   DIR/data           a pass-through to a backing directory (crash-safe writes work)
 *   DIR/.sim           ctl, state.json, forbidden-writes, qemu/<name>
 *
 * This file only maps FUSE operations onto the model and applies injected faults; every rule
 * lives in model.c. One mutex guards the model; faults that delay or hang wait outside it, so
 * a hung file never blocks the others (the loop is multithreaded).
 */
#define FUSE_USE_VERSION 312

#include "model.h"
#include "tree.h"

#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#define CTL_MAX_BYTES 4096
#define WAIT_SLICE_MS 50 /* how often a delayed or hung operation checks for shutdown */

typedef enum HandleKind {
        HANDLE_TREE,
        HANDLE_DATA,
        HANDLE_CTL,
        HANDLE_STATE,
        HANDLE_FORBIDDEN,
        HANDLE_QEMU,
} HandleKind;

typedef struct Handle Handle;
struct Handle {
        HandleKind kind;
        int fd;       /* HANDLE_DATA: the backing file or directory */
        SimNode node; /* HANDLE_TREE */
        char *name;   /* HANDLE_QEMU */
        bool counted; /* holds an open count on (gpu, vf) */
        bool writing; /* holds a write span on (gpu, vf) */
        size_t gpu, vf;
        char *content; /* what reads return, refreshed by a read at offset 0 */
        size_t size;
        char *result; /* HANDLE_CTL: the result of this handle's last command */
        Handle *prev, *next;
};

typedef struct Sim {
        pthread_mutex_t lock;
        pthread_cond_t changed; /* clear-faults happened */
        SimHost *host;
        SimTree *tree;
        int data_fd;
        char *data_path;
        bool data_owned; /* created here, removed at exit */
        char *last_result;
        Handle *handles; /* every open handle, freed at exit if the kernel never released it */
        struct fuse *fuse;
        struct timespec started; /* CLOCK_REALTIME at start: the time of every sysfs node */
        uint64_t started_ms;     /* CLOCK_MONOTONIC at the same moment, in ms */
        /*
         * state.json's mtime: moved forward (strictly) by every store and every control command
         * other than the NVML query markers, so the fake NVML library can keep its parsed model
         * until something its answers could see has changed.
         */
        struct timespec state_changed;
} Sim;

/* ---- small helpers --------------------------------------------------------------------------- */

static uint64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static Sim *sim_get(void)
{
        return fuse_get_context()->private_data;
}

static void unlockp(pthread_mutex_t **m)
{
        if (*m)
                pthread_mutex_unlock(*m);
}

#define _cleanup_unlock_ _cleanup_(unlockp)

static pthread_mutex_t *lock_sim(Sim *s)
{
        pthread_mutex_lock(&s->lock);
        return &s->lock;
}

/* Holds the model lock until the end of the enclosing block. */
#define LOCK_SCOPE(s) _cleanup_unlock_ _unused_ pthread_mutex_t *_scope_lock = lock_sim(s)

static bool sim_stopping(Sim *s)
{
        return fuse_session_exited(fuse_get_session(s->fuse));
}

typedef enum Area {
        AREA_ROOT,
        AREA_TREE, /* sys/, dev/ */
        AREA_DATA,
        AREA_SIM_DIR,
        AREA_SIM_CTL,
        AREA_SIM_STATE,
        AREA_SIM_FORBIDDEN,
        AREA_SIM_QEMU_DIR,
        AREA_SIM_QEMU_FILE,
        AREA_NONE,
} Area;

/* Classifies a FUSE path; *ret_rel is the path inside the area ("." for data/ itself). */
static Area classify(const char *path, const char **ret_rel)
{
        /* hard_remove: an operation on an open file that was unlinked or renamed over has no
         * path. Only its handle can answer for it. */
        if (!path) {
                *ret_rel = NULL;
                return AREA_NONE;
        }
        const char *p = path[0] == '/' ? path + 1 : path, *rest;

        *ret_rel = p;
        if (!*p)
                return AREA_ROOT;
        if (streq(p, "sys") || streq(p, "dev") || startswith(p, "sys/") || startswith(p, "dev/"))
                return AREA_TREE;
        if (streq(p, "data")) {
                *ret_rel = ".";
                return AREA_DATA;
        }
        if ((rest = startswith(p, "data/"))) {
                *ret_rel = rest;
                return AREA_DATA;
        }
        if (streq(p, ".sim"))
                return AREA_SIM_DIR;
        if (streq(p, ".sim/ctl"))
                return AREA_SIM_CTL;
        if (streq(p, ".sim/state.json"))
                return AREA_SIM_STATE;
        if (streq(p, ".sim/forbidden-writes"))
                return AREA_SIM_FORBIDDEN;
        if (streq(p, ".sim/qemu"))
                return AREA_SIM_QEMU_DIR;
        if ((rest = startswith(p, ".sim/qemu/")) && *rest && !strchr(rest, '/')) {
                *ret_rel = rest;
                return AREA_SIM_QEMU_FILE;
        }
        return AREA_NONE;
}

/* The tree, rebuilt if an mdev appeared or vanished since it was built. Call with the lock. */
static int sim_tree(Sim *s, const SimTree **ret)
{
        if (s->tree->layout_generation != s->host->layout_generation) {
                SimTree *t;
                int r = sim_tree_build(s->host, &t);
                if (r < 0)
                        return r;
                sim_tree_free(s->tree);
                s->tree = t;
        }
        *ret = s->tree;
        return 0;
}

/* Marks a change of the model for state.json's mtime. Call with the lock. */
static void state_touch(Sim *s)
{
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        /* Strictly later than the last mark, even within one clock tick or if the clock stepped. */
        if (now.tv_sec < s->state_changed.tv_sec ||
            (now.tv_sec == s->state_changed.tv_sec && now.tv_nsec <= s->state_changed.tv_nsec)) {
                now = s->state_changed;
                if (++now.tv_nsec == 1000000000) {
                        now.tv_sec++;
                        now.tv_nsec = 0;
                }
        }
        s->state_changed = now;
}

/* ---- faults ---------------------------------------------------------------------------------- */

/* Waits until the delay passed, or (hang) until clear-faults; -EIO when unmounting. */
static int fault_wait(Sim *s, const SimFaultAction *a, uint64_t clears)
{
        LOCK_SCOPE(s);
        uint64_t deadline = now_ms() + a->delay_ms;
        int r;

        /* Counted in state.json, so a test can see that an operation is really held. */
        s->host->operations_delayed++;
        for (;;) {
                uint64_t now = now_ms();
                if (sim_stopping(s))
                        r = -EIO;
                else if (a->kind == SIM_FAULT_DELAY && now >= deadline)
                        r = 0;
                else if (a->kind == SIM_FAULT_HANG && s->host->fault_clears != clears)
                        r = 0;
                else
                        r = 1;
                if (r <= 0) {
                        s->host->operations_delayed--;
                        return r;
                }
                uint64_t slice = WAIT_SLICE_MS;
                if (a->kind == SIM_FAULT_DELAY && deadline - now < slice)
                        slice = deadline - now;
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t ns = (uint64_t)ts.tv_nsec + slice * 1000000;
                ts.tv_sec += (time_t)(ns / 1000000000);
                ts.tv_nsec = (long)(ns % 1000000000);
                pthread_cond_timedwait(&s->changed, &s->lock, &ts);
        }
}

/*
 * Applies the first matching fault (SIM-14) to an operation under sys/, dev/ or data/: an
 * errno fails it, a delay or hang postpones it. Returns 0 to go on, or -errno.
 */
static int fault_check(Sim *s, SimFaultOp op, const char *path)
{
        if (!path)
                return 0; /* an unlinked open file: no glob names it */
        const char *p = path[0] == '/' ? path + 1 : path;
        _cleanup_strv_free_ char **aliases = NULL;
        SimFaultAction action;
        uint64_t clears;

        if (!startswith(p, "sys/") && !startswith(p, "dev/") && !startswith(p, "data/") &&
            !streq(p, "data"))
                return 0;
        int r = sim_path_aliases(p, &aliases);
        if (r < 0)
                return r;
        {
                LOCK_SCOPE(s);
                r = sim_host_take_fault(s->host, op, p, aliases, &action);
                clears = s->host->fault_clears;
        }
        if (r <= 0)
                return r;
        if (action.kind == SIM_FAULT_ERRNO)
                return -action.error;
        return fault_wait(s, &action, clears);
}

/* ---- handles --------------------------------------------------------------------------------- */

static int handle_new(Sim *s, HandleKind kind, Handle **ret)
{
        Handle *h = calloc(1, sizeof(Handle));
        if (!h)
                return -ENOMEM;
        h->kind = kind;
        h->fd = -1;
        LOCK_SCOPE(s);
        h->next = s->handles;
        if (s->handles)
                s->handles->prev = h;
        s->handles = h;
        *ret = h;
        return 0;
}

/*
 * Whether the handle's VF is still the one it counted on: an SR-IOV cycle cleared the old VF's
 * counts, and a VF brought back by `on` must not lose spans it never had. Call with the lock.
 */
static bool handle_vf_present(Sim *s, const Handle *h)
{
        return !sim_node_vf_gone(s->host, &h->node);
}

/* Gives back what the handle holds in the model and frees it. Call with the lock. */
static void handle_free_locked(Sim *s, Handle *h)
{
        if (h->writing && handle_vf_present(s, h))
                sim_vf_write_end(s->host, h->gpu, h->vf);
        if (h->counted && handle_vf_present(s, h))
                sim_vf_close(s->host, h->gpu, h->vf, now_ms());
        if (h->prev)
                h->prev->next = h->next;
        else
                s->handles = h->next;
        if (h->next)
                h->next->prev = h->prev;
        if (h->fd >= 0)
                close(h->fd);
        sim_node_clear(&h->node);
        free(h->name);
        free(h->content);
        free(h->result);
        free(h);
}

static void handle_free(Sim *s, Handle *h)
{
        LOCK_SCOPE(s);
        handle_free_locked(s, h);
}

static Handle *handle_of(struct fuse_file_info *fi)
{
        return fi ? (Handle *)(uintptr_t)fi->fh : NULL;
}

/* ---- attributes and listings ----------------------------------------------------------------- */

static void fill_stat(Sim *s, struct stat *st, mode_t type, mode_t perm, off_t size)
{
        memset(st, 0, sizeof(*st));
        st->st_mode = type | perm;
        st->st_nlink = type == S_IFDIR ? 2 : 1;
        st->st_uid = getuid();
        st->st_gid = getgid();
        st->st_size = size;
        st->st_atim = st->st_mtim = st->st_ctim = s->started;
}

/*
 * An mdev's nodes show its creation time (SIM-6), which the model keeps on the monotonic
 * clock (moved back by `age`); the wall clock at the simulator's start anchors it, so REC-8's
 * comparison with the time of day sees the age the test asked for.
 */
static void mdev_times(Sim *s, struct stat *st, int64_t birth_ms)
{
        int64_t ms = (int64_t)s->started.tv_sec * 1000 + s->started.tv_nsec / 1000000 +
                     (birth_ms - (int64_t)s->started_ms);
        struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                              .tv_nsec = (long)(ms % 1000) * 1000000};
        if (ts.tv_nsec < 0) {
                ts.tv_sec--;
                ts.tv_nsec += 1000000000;
        }
        st->st_atim = st->st_mtim = st->st_ctim = ts;
}

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        const char *rel;
        Handle *h = handle_of(fi);

        if (!path && h && h->kind == HANDLE_DATA && h->fd >= 0)
                return fstat(h->fd, st) < 0 ? negative_errno() : 0;
        switch (classify(path, &rel)) {
        case AREA_ROOT:
        case AREA_SIM_DIR:
        case AREA_SIM_QEMU_DIR:
                fill_stat(s, st, S_IFDIR, 0755, 0);
                return 0;
        case AREA_SIM_CTL:
                fill_stat(s, st, S_IFREG, 0600, 0);
                return 0;
        case AREA_SIM_STATE: {
                fill_stat(s, st, S_IFREG, 0444, 0);
                LOCK_SCOPE(s);
                st->st_mtim = st->st_ctim = s->state_changed;
                return 0;
        }
        case AREA_SIM_FORBIDDEN:
                fill_stat(s, st, S_IFREG, 0444, 0);
                return 0;
        case AREA_SIM_QEMU_FILE: {
                LOCK_SCOPE(s);
                if (!sim_host_find_qemu(s->host, rel))
                        return -ENOENT;
                fill_stat(s, st, S_IFREG, 0444, 0);
                return 0;
        }
        case AREA_DATA:
                if (h && h->kind == HANDLE_DATA && h->fd >= 0)
                        return fstat(h->fd, st) < 0 ? negative_errno() : 0;
                return fstatat(s->data_fd, rel, st, AT_SYMLINK_NOFOLLOW) < 0 ? negative_errno() : 0;
        case AREA_TREE: {
                LOCK_SCOPE(s);
                const SimTree *t;
                int r = sim_tree(s, &t);
                if (r < 0)
                        return r;
                const SimNode *n = sim_tree_lookup(t, rel);
                if (!n)
                        return -ENOENT;
                if (n->kind == SIM_NODE_DIR)
                        fill_stat(s, st, S_IFDIR, n->mode, 0);
                else if (n->kind == SIM_NODE_LINK)
                        fill_stat(s, st, S_IFLNK, n->mode, (off_t)strlen(n->target));
                else /* sysfs attributes claim a page whatever they hold (SIM-12) */
                        fill_stat(s, st, S_IFREG, n->mode, startswith(rel, "sys/") ? 4096 : 0);
                int64_t birth;
                if (n->uuid[0] && sim_mdev_birth_ms(s->host, n->uuid, &birth) >= 0)
                        mdev_times(s, st, birth);
                return 0;
        }
        default:
                return -ENOENT;
        }
}

static int op_readlink(const char *path, char *buf, size_t size)
{
        Sim *s = sim_get();
        const char *rel;

        if (size == 0)
                return -EINVAL;
        int r = fault_check(s, SIM_FAULT_READ, path);
        if (r < 0)
                return r;
        switch (classify(path, &rel)) {
        case AREA_DATA: {
                ssize_t n = readlinkat(s->data_fd, rel, buf, size - 1);
                if (n < 0)
                        return negative_errno();
                buf[n] = 0;
                return 0;
        }
        case AREA_TREE: {
                LOCK_SCOPE(s);
                const SimTree *t;
                if ((r = sim_tree(s, &t)) < 0)
                        return r;
                const SimNode *n = sim_tree_lookup(t, rel);
                if (!n)
                        return -ENOENT;
                if (n->kind != SIM_NODE_LINK)
                        return -EINVAL;
                snprintf(buf, size, "%s", n->target);
                return 0;
        }
        default:
                return -EINVAL;
        }
}

static int fill_names(void *buf, fuse_fill_dir_t filler, char *const *names)
{
        filler(buf, ".", NULL, 0, 0);
        filler(buf, "..", NULL, 0, 0);
        for (size_t i = 0; names && names[i]; i++)
                if (filler(buf, names[i], NULL, 0, 0))
                        return -ENOMEM;
        return 0;
}

static int readdir_data(Sim *s, Handle *h, const char *rel, void *buf, fuse_fill_dir_t filler)
{
        int fd = h && h->fd >= 0 ? fcntl(h->fd, F_DUPFD_CLOEXEC, 3)
                                 : openat(s->data_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        DIR *d = fdopendir(fd);
        if (!d) {
                int r = negative_errno();
                close(fd);
                return r;
        }
        _cleanup_closedir_ DIR *dir = d;
        rewinddir(dir);
        for (struct dirent *de; (errno = 0, de = readdir(dir));)
                if (filler(buf, de->d_name, NULL, 0, 0))
                        return -ENOMEM;
        return errno ? negative_errno() : 0;
}

static int op_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t offset,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
        Sim *s = sim_get();
        const char *rel;
        _cleanup_strv_free_ char **names = NULL;
        int r;

        if ((r = fault_check(s, SIM_FAULT_READ, path)) < 0)
                return r;
        switch (classify(path, &rel)) {
        case AREA_ROOT: {
                static char *const top[] = {"sys", "dev", "data", ".sim", NULL};
                return fill_names(buf, filler, top);
        }
        case AREA_SIM_DIR: {
                static char *const sim[] = {"ctl", "state.json", "forbidden-writes", "qemu", NULL};
                return fill_names(buf, filler, sim);
        }
        case AREA_SIM_QEMU_DIR: {
                {
                        LOCK_SCOPE(s);
                        for (size_t i = 0; r >= 0 && i < s->host->n_qemu; i++)
                                r = strv_push(&names, s->host->qemu[i].name);
                }
                return r < 0 ? r : fill_names(buf, filler, names);
        }
        case AREA_DATA:
                return readdir_data(s, handle_of(fi), rel, buf, filler);
        case AREA_TREE: {
                {
                        LOCK_SCOPE(s);
                        const SimTree *t;
                        if ((r = sim_tree(s, &t)) < 0 || (r = sim_tree_list(t, rel, &names)) < 0)
                                return r;
                }
                return fill_names(buf, filler, names);
        }
        default:
                return -ENOENT;
        }
}

static int op_opendir(const char *path, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        const char *rel;
        struct stat st;
        Handle *h;
        int r;

        if ((r = fault_check(s, SIM_FAULT_OPEN, path)) < 0)
                return r;
        if (classify(path, &rel) != AREA_DATA) {
                if ((r = op_getattr(path, &st, NULL)) < 0)
                        return r;
                return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
        }
        /* data/ keeps the directory open, so fsyncdir reaches the backing directory. */
        int fd = openat(s->data_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        if ((r = handle_new(s, HANDLE_DATA, &h)) < 0) {
                close(fd);
                return r;
        }
        h->fd = fd;
        fi->fh = (uintptr_t)h;
        return 0;
}

static int op_releasedir(const char *path, struct fuse_file_info *fi)
{
        Handle *h = handle_of(fi);
        if (h)
                handle_free(sim_get(), h);
        return 0;
}

/* ---- opening files --------------------------------------------------------------------------- */

static bool wants_read(int flags)
{
        return (flags & O_ACCMODE) != O_WRONLY;
}

static bool wants_write(int flags)
{
        return (flags & O_ACCMODE) != O_RDONLY;
}

static int open_tree(Sim *s, const char *rel, struct fuse_file_info *fi)
{
        _cleanup_unlock_ _unused_ pthread_mutex_t *l = NULL;
        const SimTree *t;
        Handle *h;
        int r;

        if ((r = handle_new(s, HANDLE_TREE, &h)) < 0)
                return r;
        l = lock_sim(s);
        if ((r = sim_tree(s, &t)) < 0) {
                handle_free_locked(s, h);
                return r;
        }
        const SimNode *n = sim_tree_lookup(t, rel);
        r = !n ? -ENOENT : n->kind == SIM_NODE_DIR ? -EISDIR : 0;
        /* Like kernfs: no show method, no reading; no store method, no writing. */
        if (r >= 0 && ((wants_read(fi->flags) && !sim_attr_readable(n->attr)) ||
                       (wants_write(fi->flags) && !sim_attr_writable(n->attr))))
                r = -EACCES;
        if (r >= 0)
                r = sim_node_copy(n, &h->node);
        if (r < 0) {
                handle_free_locked(s, h);
                return r;
        }

        size_t g, v;
        if (sim_node_vf(s->host, n, &g, &v) >= 0) {
                h->gpu = g;
                h->vf = v;
                if (n->attr == SIM_ATTR_VFIO_NODE) {
                        sim_vf_open(s->host, g, v);
                        h->counted = true;
                } else if (wants_write(fi->flags)) {
                        sim_vf_write_begin(s->host, g, v);
                        h->writing = true;
                }
        }
        fi->fh = (uintptr_t)h;
        fi->direct_io = 1;
        return 0;
}

static int open_sim(Sim *s, Area area, const char *rel, struct fuse_file_info *fi)
{
        static const HandleKind kinds[] = {
            [AREA_SIM_CTL] = HANDLE_CTL,
            [AREA_SIM_STATE] = HANDLE_STATE,
            [AREA_SIM_FORBIDDEN] = HANDLE_FORBIDDEN,
            [AREA_SIM_QEMU_FILE] = HANDLE_QEMU,
        };
        Handle *h;

        if (area != AREA_SIM_CTL && wants_write(fi->flags))
                return -EACCES;
        if (area == AREA_SIM_QEMU_FILE) {
                LOCK_SCOPE(s);
                if (!sim_host_find_qemu(s->host, rel))
                        return -ENOENT;
        }
        int r = handle_new(s, kinds[area], &h);
        if (r < 0)
                return r;
        if (area == AREA_SIM_QEMU_FILE && !(h->name = strdup(rel))) {
                handle_free(s, h);
                return -ENOMEM;
        }
        fi->fh = (uintptr_t)h;
        fi->direct_io = 1;
        return 0;
}

static int open_data(Sim *s, const char *rel, int flags, mode_t mode, struct fuse_file_info *fi)
{
        Handle *h;
        int fd = openat(s->data_fd, rel, flags | O_CLOEXEC | O_NOCTTY, mode);
        if (fd < 0)
                return negative_errno();
        int r = handle_new(s, HANDLE_DATA, &h);
        if (r < 0) {
                close(fd);
                return r;
        }
        h->fd = fd;
        fi->fh = (uintptr_t)h;
        return 0;
}

static int op_open(const char *path, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        const char *rel;
        int r;

        if ((r = fault_check(s, SIM_FAULT_OPEN, path)) < 0)
                return r;
        Area area = classify(path, &rel);
        switch (area) {
        case AREA_TREE:
                return open_tree(s, rel, fi);
        case AREA_DATA:
                return open_data(s, rel, fi->flags, 0, fi);
        case AREA_SIM_CTL:
        case AREA_SIM_STATE:
        case AREA_SIM_FORBIDDEN:
        case AREA_SIM_QEMU_FILE:
                return open_sim(s, area, rel, fi);
        case AREA_NONE:
                return -ENOENT;
        default:
                return -EISDIR;
        }
}

static int op_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        const char *rel;
        int r;

        if ((r = fault_check(s, SIM_FAULT_OPEN, path)) < 0)
                return r;
        if (classify(path, &rel) != AREA_DATA)
                return -EACCES;
        return open_data(s, rel, fi->flags | O_CREAT, mode, fi);
}

/* ---- reading and writing --------------------------------------------------------------------- */

/* Fills h->content with what a read of this handle shows now. Call with the lock. */
static int refresh_content(Sim *s, Handle *h)
{
        char *text = NULL;
        int r;

        switch (h->kind) {
        case HANDLE_TREE:
                r = sim_node_read(s->host, &h->node, &text);
                break;
        case HANDLE_STATE:
                r = sim_host_to_json(s->host, &text);
                break;
        case HANDLE_FORBIDDEN:
                r = 0;
                for (char **f = s->host->forbidden_writes; r >= 0 && f && *f; f++)
                        r = strextend(&text, "%s\n", *f);
                if (r >= 0 && !text)
                        r = strprintf(&text, "%s", "");
                break;
        case HANDLE_QEMU: {
                const SimQemu *q = sim_host_find_qemu(s->host, h->name);
                r = 0;
                for (char **f = q ? q->flags : NULL; r >= 0 && f && *f; f++)
                        r = strextend(&text, "%s\n", *f);
                if (r >= 0 && !text)
                        r = strprintf(&text, "%s", "");
                break;
        }
        case HANDLE_CTL:
                r = strprintf(&text, "%s",
                              h->result        ? h->result
                              : s->last_result ? s->last_result
                                               : "");
                break;
        default:
                return -EINVAL;
        }
        if (r < 0) {
                free(text);
                return r;
        }
        free(h->content);
        h->content = text;
        h->size = strlen(text);
        return 0;
}

static int op_read(const char *path, char *buf, size_t size, off_t offset,
                   struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        Handle *h = handle_of(fi);
        int r;

        if (!h)
                return -EBADF;
        if ((r = fault_check(s, SIM_FAULT_READ, path)) < 0)
                return r;
        if (h->kind == HANDLE_DATA) {
                ssize_t n = pread(h->fd, buf, size, offset);
                return n < 0 ? negative_errno() : (int)n;
        }
        {
                /* Like seq_file: a read from the start shows the current state. */
                LOCK_SCOPE(s);
                if ((offset == 0 || !h->content) && (r = refresh_content(s, h)) < 0)
                        return r;
        }
        if ((size_t)offset >= h->size)
                return 0;
        size_t n = h->size - (size_t)offset < size ? h->size - (size_t)offset : size;
        memcpy(buf, h->content + offset, n);
        return (int)n;
}

static int write_ctl(Sim *s, Handle *h, const char *buf, size_t size)
{
        _cleanup_free_ char *command = NULL, *error = NULL, *result = NULL;

        if (size > CTL_MAX_BYTES)
                return -EFBIG;
        command = strndup(buf, size);
        if (!command)
                return -ENOMEM;
        strchomp(command);

        LOCK_SCOPE(s);
        int r = sim_host_ctl(s->host, command, &error);
        if (r >= 0)
                pthread_cond_broadcast(&s->changed);
        /* The query markers change only what no NVML answer shows (state_changed). */
        if (r >= 0 && !startswith(command, "nvml query-"))
                state_touch(s);
        const char *name = r < 0 ? sim_errno_to_string(-r) : NULL;
        int k = r >= 0 ? strprintf(&result, "ok\n")
                       : strprintf(&result, "%s: %s\n", name ? name : "error",
                                   error ? error : strerror(-r));
        if (k >= 0) {
                if (!sim_ctl_is_internal(command)) {
                        free(s->last_result);
                        s->last_result = strdup(result);
                }
                free(h->result);
                h->result = TAKE_PTR(result);
        }
        return r < 0 ? r : (int)size;
}

static int op_write(const char *path, const char *buf, size_t size, off_t offset,
                    struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        Handle *h = handle_of(fi);
        int r;

        if (!h)
                return -EBADF;
        if ((r = fault_check(s, SIM_FAULT_WRITE, path)) < 0)
                return r;
        switch (h->kind) {
        case HANDLE_DATA: {
                ssize_t n = pwrite(h->fd, buf, size, offset);
                return n < 0 ? negative_errno() : (int)n;
        }
        case HANDLE_CTL:
                return write_ctl(s, h, buf, size);
        case HANDLE_TREE: {
                /* Each write() is one store, whatever the offset, as in sysfs. */
                LOCK_SCOPE(s);
                r = sim_node_write(s->host, &h->node, buf, size, now_ms());
                state_touch(s);
                return r < 0 ? r : (int)size;
        }
        default:
                return -EACCES;
        }
}

static int op_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        Handle *h = handle_of(fi);
        const char *rel;

        switch (classify(path, &rel)) {
        case AREA_DATA:
                if (h && h->fd >= 0)
                        return ftruncate(h->fd, size) < 0 ? negative_errno() : 0;
                {
                        _cleanup_close_ int fd =
                            openat(s->data_fd, rel, O_WRONLY | O_CLOEXEC | O_NOCTTY);
                        if (fd < 0)
                                return negative_errno();
                        return ftruncate(fd, size) < 0 ? negative_errno() : 0;
                }
        case AREA_SIM_CTL:
                return 0;
        case AREA_TREE: {
                /* `echo 1150 > current_vgpu_type` truncates first; sysfs ignores that. */
                LOCK_SCOPE(s);
                const SimTree *t;
                int r = sim_tree(s, &t);
                if (r < 0)
                        return r;
                const SimNode *n = sim_tree_lookup(t, rel);
                if (!n)
                        return -ENOENT;
                return n->kind == SIM_NODE_FILE && sim_attr_writable(n->attr) ? 0 : -EACCES;
        }
        default:
                return -EACCES;
        }
}

/* The write span of DEV-11 ends at close(): flush is synchronous with it, release is not. */
static int op_flush(const char *path, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        Handle *h = handle_of(fi);

        if (h && h->writing) {
                LOCK_SCOPE(s);
                if (handle_vf_present(s, h))
                        sim_vf_write_end(s->host, h->gpu, h->vf);
                h->writing = false;
        }
        return 0;
}

static int op_release(const char *path, struct fuse_file_info *fi)
{
        Handle *h = handle_of(fi);
        if (h)
                handle_free(sim_get(), h);
        return 0;
}

static int op_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        Handle *h = handle_of(fi);
        int r;

        if ((r = fault_check(s, SIM_FAULT_FSYNC, path)) < 0)
                return r;
        if (h && h->kind == HANDLE_DATA && h->fd >= 0) {
                r = datasync ? fdatasync(h->fd) : fsync(h->fd);
                return r < 0 ? negative_errno() : 0;
        }
        return 0;
}

/* ---- data/ namespace operations -------------------------------------------------------------- */

static int data_rel(const char *path, const char **ret)
{
        return classify(path, ret) == AREA_DATA ? 0 : -EACCES;
}

static int op_mkdir(const char *path, mode_t mode)
{
        Sim *s = sim_get();
        const char *rel;
        int r;

        /* Creating a name counts as an open for fault injection. */
        if ((r = data_rel(path, &rel)) < 0 || (r = fault_check(s, SIM_FAULT_OPEN, path)) < 0)
                return r;
        return mkdirat(s->data_fd, rel, mode) < 0 ? negative_errno() : 0;
}

static int op_unlink(const char *path)
{
        const char *rel;
        int r = data_rel(path, &rel);
        if (r < 0)
                return r;
        return unlinkat(sim_get()->data_fd, rel, 0) < 0 ? negative_errno() : 0;
}

static int op_rmdir(const char *path)
{
        const char *rel;
        int r = data_rel(path, &rel);
        if (r < 0)
                return r;
        return unlinkat(sim_get()->data_fd, rel, AT_REMOVEDIR) < 0 ? negative_errno() : 0;
}

static int op_rename(const char *from, const char *to, unsigned int flags)
{
        Sim *s = sim_get();
        const char *rel_from, *rel_to;
        int r;

        if (classify(from, &rel_from) != AREA_DATA || classify(to, &rel_to) != AREA_DATA)
                return classify(from, &rel_from) == AREA_DATA ? -EXDEV : -EACCES;
        /* A fault matches the source or the destination. */
        if ((r = fault_check(s, SIM_FAULT_RENAME, from)) < 0 ||
            (r = fault_check(s, SIM_FAULT_RENAME, to)) < 0)
                return r;
        return renameat2(s->data_fd, rel_from, s->data_fd, rel_to, flags) < 0 ? negative_errno()
                                                                              : 0;
}

static int op_symlink(const char *target, const char *path)
{
        const char *rel;
        int r = data_rel(path, &rel);
        if (r < 0)
                return r;
        return symlinkat(target, sim_get()->data_fd, rel) < 0 ? negative_errno() : 0;
}

static int op_link(const char *from, const char *to)
{
        const char *rel_from, *rel_to;
        int r;
        if ((r = data_rel(from, &rel_from)) < 0 || (r = data_rel(to, &rel_to)) < 0)
                return r;
        int fd = sim_get()->data_fd;
        return linkat(fd, rel_from, fd, rel_to, 0) < 0 ? negative_errno() : 0;
}

static int op_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
        Handle *h = handle_of(fi);
        const char *rel;
        int r = data_rel(path, &rel);
        if (r < 0)
                return r;
        if (h && h->fd >= 0)
                return fchmod(h->fd, mode) < 0 ? negative_errno() : 0;
        return fchmodat(sim_get()->data_fd, rel, mode, 0) < 0 ? negative_errno() : 0;
}

static int op_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
        const char *rel;
        int r = data_rel(path, &rel);
        if (r < 0)
                return r;
        return fchownat(sim_get()->data_fd, rel, uid, gid, AT_SYMLINK_NOFOLLOW) < 0
                   ? negative_errno()
                   : 0;
}

static int op_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
        const char *rel;
        if (classify(path, &rel) != AREA_DATA)
                return 0; /* touching a sysfs file changes nothing */
        return utimensat(sim_get()->data_fd, rel, tv, AT_SYMLINK_NOFOLLOW) < 0 ? negative_errno()
                                                                               : 0;
}

static int op_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
        Sim *s = sim_get();
        Handle *h = handle_of(fi);
        int r;

        if ((r = fault_check(s, SIM_FAULT_FSYNC, path)) < 0)
                return r;
        if (h && h->kind == HANDLE_DATA && h->fd >= 0)
                return fsync(h->fd) < 0 ? negative_errno() : 0;
        return 0;
}

static int op_statfs(const char *path, struct statvfs *st)
{
        return fstatvfs(sim_get()->data_fd, st) < 0 ? negative_errno() : 0;
}

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
        /* Nothing may be cached: the model changes behind the kernel's back (SIM-12). */
        cfg->entry_timeout = 0;
        cfg->attr_timeout = 0;
        cfg->negative_timeout = 0;
        cfg->use_ino = 0;
        cfg->kernel_cache = 0;
        /* Open data files stay usable after unlink, as on a local file system. */
        cfg->hard_remove = 1;
        return fuse_get_context()->private_data;
}

static const struct fuse_operations sim_ops = {
    .init = op_init,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .chmod = op_chmod,
    .chown = op_chown,
    .truncate = op_truncate,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .statfs = op_statfs,
    .flush = op_flush,
    .release = op_release,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .create = op_create,
    .utimens = op_utimens,
};

/* ---- set-up and tear-down -------------------------------------------------------------------- */

/* Removes everything below parent/name and name itself; the private backing dir only. */
static int remove_tree_at(int parent, const char *name)
{
        _cleanup_closedir_ DIR *dir = NULL;
        if (opendir_at(parent, name, O_NOFOLLOW, &dir) < 0)
                return unlinkat(parent, name, 0) < 0 ? negative_errno() : 0;
        int r = 0;
        for (struct dirent *de; readdir_next(dir, &de) > 0;) {
                int k = remove_tree_at(dirfd(dir), de->d_name);
                if (k < 0 && r == 0)
                        r = k;
        }
        if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && r == 0)
                r = negative_errno();
        return r;
}

static void sim_done(Sim *s)
{
        while (s->handles)
                handle_free_locked(s, s->handles);
        if (s->data_fd >= 0)
                close(s->data_fd);
        if (s->data_owned && s->data_path) {
                int r = remove_tree_at(AT_FDCWD, s->data_path);
                if (r < 0)
                        fprintf(stderr, "vgpu-sim: remove %s: %s\n", s->data_path, strerror(-r));
        }
        free(s->data_path);
        free(s->last_result);
        sim_tree_free(s->tree);
        sim_host_free(s->host);
        pthread_cond_destroy(&s->changed);
        pthread_mutex_destroy(&s->lock);
}

static int sim_init(Sim *s, const char *host_file, const char *data_backing)
{
        _cleanup_free_ char *text = NULL, *error = NULL;
        size_t size;
        pthread_condattr_t attr;

        *s = (Sim){.data_fd = -1};
        pthread_mutex_init(&s->lock, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&s->changed, &attr);
        pthread_condattr_destroy(&attr);
        clock_gettime(CLOCK_REALTIME, &s->started);
        s->started_ms = now_ms();
        s->state_changed = s->started;

        int r = read_file_at(AT_FDCWD, host_file, SIM_HOST_MAX_BYTES, &text, &size);
        if (r < 0) {
                fprintf(stderr, "vgpu-sim: read host file %s: %s\n", host_file, strerror(-r));
                return r;
        }
        r = sim_host_parse_yaml(text, size, &s->host, &error);
        if (r < 0) {
                fprintf(stderr, "vgpu-sim: %s:%s\n", host_file, error ? error : strerror(-r));
                return r;
        }
        r = sim_tree_build(s->host, &s->tree);
        if (r < 0) {
                fprintf(stderr, "vgpu-sim: build sysfs tree: %s\n", strerror(-r));
                return r;
        }

        if (data_backing)
                s->data_path = strdup(data_backing);
        else {
                const char *tmp = getenv("TMPDIR");
                r = strprintf(&s->data_path, "%s/vgpu-sim-data.XXXXXX", tmp && *tmp ? tmp : "/tmp");
                if (r >= 0 && !mkdtemp(s->data_path)) {
                        fprintf(stderr, "vgpu-sim: create %s: %m\n", s->data_path);
                        return negative_errno();
                }
                s->data_owned = true;
        }
        if (!s->data_path)
                return -ENOMEM;
        s->data_fd = open(s->data_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->data_fd < 0) {
                r = negative_errno();
                fprintf(stderr, "vgpu-sim: open data backing %s: %s\n", s->data_path, strerror(-r));
                return r;
        }
        return 0;
}

static void usage(FILE *f)
{
        fputs("Usage: vgpu-sim --host HOST.yaml --mount DIR [--foreground] [--data-backing DIR]\n"
              "                [--allow-other]\n"
              "Mounts a simulated NVIDIA vGPU host (sys/, dev/, data/, .sim/) at DIR.\n",
              f);
}

static void fuse_opt_free_argsp(struct fuse_args *a)
{
        fuse_opt_free_args(a);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct fuse_loop_config *, fuse_loop_cfg_destroy);

static int run(Sim *s, const char *mount, bool foreground, bool allow_other)
{
        _cleanup_(fuse_opt_free_argsp) struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
        _cleanup_(fuse_loop_cfg_destroyp) struct fuse_loop_config *cfg = NULL;

        if (fuse_opt_add_arg(&args, "vgpu-sim") < 0 || fuse_opt_add_arg(&args, "-o") < 0 ||
            fuse_opt_add_arg(&args, allow_other ? "fsname=vgpu-sim,subtype=vgpu-sim,allow_other"
                                                : "fsname=vgpu-sim,subtype=vgpu-sim") < 0)
                return -ENOMEM;
        s->fuse = fuse_new(&args, &sim_ops, sizeof(sim_ops), s);
        if (!s->fuse)
                return -EINVAL;
        if (fuse_mount(s->fuse, mount) < 0) {
                fuse_destroy(s->fuse);
                return -EIO;
        }
        struct fuse_session *se = fuse_get_session(s->fuse);
        int r = fuse_daemonize(foreground) < 0 ? -EIO : 0;
        /*
         * A shell starts background jobs with SIGINT ignored, and libfuse leaves ignored
         * signals alone; the simulator must stop on SIGINT and SIGTERM however it was started.
         */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (r >= 0 && fuse_set_signal_handlers(se) < 0)
                r = -EIO;
        if (r >= 0) {
                cfg = fuse_loop_cfg_create();
                if (!cfg)
                        r = -ENOMEM;
        }
        if (r >= 0) {
                /* Hung operations each hold a thread; leave room for the rest to go on. */
                fuse_loop_cfg_set_max_threads(cfg, 256);
                int k = fuse_loop_mt(s->fuse, cfg);
                /* libfuse reports the signal that ended the loop; that is a clean stop. */
                if (k < 0)
                        r = k;
                fuse_remove_signal_handlers(se);
        }
        fuse_unmount(s->fuse);
        fuse_destroy(s->fuse);
        s->fuse = NULL;
        return r;
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
            {"host", required_argument, NULL, 'H'},
            {"mount", required_argument, NULL, 'm'},
            {"foreground", no_argument, NULL, 'f'},
            {"data-backing", required_argument, NULL, 'd'},
            {"allow-other", no_argument, NULL, 'a'},
            {"help", no_argument, NULL, 'h'},
            {},
        };
        const char *host = NULL, *mount = NULL, *data = NULL;
        bool foreground = false, allow_other = false;
        int c;

        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                switch (c) {
                case 'H':
                        host = optarg;
                        break;
                case 'm':
                        mount = optarg;
                        break;
                case 'f':
                        foreground = true;
                        break;
                case 'd':
                        data = optarg;
                        break;
                case 'a':
                        allow_other = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        if (!host || !mount || optind != argc) {
                usage(stderr);
                return 2;
        }

        /* Modes of files created under data/ come from the client, already masked. */
        umask(0);

        Sim s;
        int r = sim_init(&s, host, data);
        if (r >= 0) {
                r = run(&s, mount, foreground, allow_other);
                if (r < 0)
                        fprintf(stderr, "vgpu-sim: mount %s: %s\n", mount, strerror(-r));
        }
        sim_done(&s);
        return r < 0 ? 1 : 0;
}
