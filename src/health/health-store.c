/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The store: the file, its latches, its fingerprint and the group-commit queue.
 *
 * Memory is always "disk + pending requests": disk is the state last loaded or written, and
 * every accepted request that is not yet durable stays in the pending list, in order. That
 * makes the two hard cases simple. A write that fails before its rename drops exactly the
 * requests it carried and applies the others again on top of disk; a file changed by hand is
 * loaded as the new disk and the pending requests are applied again on top of it.
 *
 * Disk I/O happens in two kinds of job that an owner runs on another thread: a HealthRead
 * (stat, open, read and parse, for the 5 s check, SIGHUP and the retry of a failed load) and
 * a HealthWrite (the fingerprint check, then the write). Each copies what it needs, so the
 * store's thread only ever applies results.
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "health-internal.h"

typedef struct Fingerprint {
        bool known; /* false: treat as changed, so the next check reloads */
        bool exists;
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtim, ctim;
} Fingerprint;

/* What reading the file found (HEALTH-1, HEALTH-5), made on whichever thread read it. */
typedef struct LoadResult {
        Fingerprint fingerprint; /* taken just before the read */
        HealthState *state;      /* NULL when the load failed */
        int r;
        char *error; /* the HEALTH-5 text when r < 0 */
} LoadResult;

struct HealthRead {
        int data_dir_fd; /* borrowed from the store */
        HealthReadKind kind;
        Fingerprint expected; /* a CHECK reads only when the file differs from this */
        bool loaded;          /* the file was read: result holds what was found */
        LoadResult result;
};

typedef struct Pending {
        HealthOp *op;
        bool sticky;    /* load-time re-evaluation: kept even when its write fails (HEALTH-9) */
        bool in_flight; /* carried by the write in flight */
        HealthDone done;
        void *userdata;
        HealthResult result;
        struct Pending *next;
} Pending;

struct HealthWrite {
        int data_dir_fd; /* borrowed from the store */
        HealthState *state;
        bool sync_parent;
        Fingerprint expected; /* the file as the store last saw it (HEALTH-22) */
        bool changed;         /* it was not: nothing written, the file read into loaded */
        LoadResult loaded;

        int r;
        char *error;
        bool renamed; /* the new file is in place (success, or a failed directory fsync) */
        bool created_dir;
        bool parent_synced;
        unsigned fsyncs;
        Fingerprint fingerprint;
};

struct HealthStore {
        int data_dir_fd;
        HealthOptions options;
        HealthState *disk;
        HealthState *mem;
        Pending *pending;
        bool write_requested;
        bool writing;
        bool read_requested;
        HealthReadKind read_kind; /* while read_requested: the strongest reason asked for */
        bool reading;
        bool read_timed_out;     /* the last read did not return: mutations are refused at once */
        bool parent_sync_needed; /* an earlier fsync of data_dir failed (HEALTH-18) */
        Fingerprint fingerprint;
        char *load_error;
        char *write_error;
        int write_r;
        char *unavailable;
        uint64_t generation; /* bumped wherever mem or unavailable changes (PERF-1) */
};

#define UNAVAILABLE "VF health state unavailable"
#define CHANGED_INVALID "VF health state changed on disk and is invalid"

/* ---- fingerprint (HEALTH-22) --------------------------------------------------------------- */

static int fingerprint_read(int dirfd, const char *path, Fingerprint *ret)
{
        struct stat st;

        if (fstatat(dirfd, path, &st, 0) < 0) {
                if (errno != ENOENT && errno != ENOTDIR)
                        return negative_errno();
                *ret = (Fingerprint){.known = true};
                return 0;
        }
        *ret = (Fingerprint){
            .known = true,
            .exists = true,
            .dev = st.st_dev,
            .ino = st.st_ino,
            .size = st.st_size,
            .mtim = st.st_mtim,
            .ctim = st.st_ctim,
        };
        return 0;
}

static bool timespec_equal(struct timespec a, struct timespec b)
{
        return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static bool fingerprint_equal(const Fingerprint *a, const Fingerprint *b)
{
        if (!a->known || !b->known || a->exists != b->exists)
                return false;
        return !a->exists || (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
                              timespec_equal(a->mtim, b->mtim) && timespec_equal(a->ctim, b->ctim));
}

/* True when dirfd/path is not what expected describes (an unreadable inode counts). */
static bool file_differs(int dirfd, const Fingerprint *expected)
{
        Fingerprint now;
        return fingerprint_read(dirfd, HEALTH_FILE_PATH, &now) < 0 ||
               !fingerprint_equal(&now, expected);
}

/* Reads and parses the file; a missing one is an empty store (HEALTH-1). Any thread. */
static void load_file(int dirfd, LoadResult *ret)
{
        LoadResult res = {0};
        if (fingerprint_read(dirfd, HEALTH_FILE_PATH, &res.fingerprint) < 0)
                res.fingerprint = (Fingerprint){0};
        res.r = health_state_load_at(dirfd, HEALTH_FILE_PATH, true, &res.state, &res.error);
        if (res.r == -ENOENT) {
                free(res.error);
                res.error = NULL;
                res.r = health_state_new(&res.state);
                if (res.r < 0)
                        (void)error_set_oom(&res.error);
        }
        *ret = res;
}

static void load_result_done(LoadResult *res)
{
        res->state = health_state_free(res->state);
        free(res->error);
        res->error = NULL;
}

/* ---- latches (HEALTH-16) ------------------------------------------------------------------- */

static void unlatch(char **slot)
{
        free(*slot);
        *slot = NULL;
}

/* Set exactly while a load or a write error is latched. */
static void update_unavailable(HealthStore *s)
{
        s->generation++;
        unlatch(&s->unavailable);
        if (s->load_error)
                (void)error_set(&s->unavailable, -EAGAIN, UNAVAILABLE ": %s", s->load_error);
        else if (s->write_error)
                (void)error_set(&s->unavailable, -EAGAIN, UNAVAILABLE ": last write failed: %s",
                                s->write_error);
}

/* Never fails: error_set() keeps a message even out of memory. */
static void latch(char **slot, const char *error)
{
        (void)error_set(slot, -EIO, "%s", error);
}

/* ---- pending requests ---------------------------------------------------------------------- */

static Pending *pending_free(Pending *p)
{
        Pending *next = p->next;
        health_op_free(p->op);
        free(p);
        return next;
}

/* Memory = disk + every pending request, applied again in order. */
static int rebuild_memory(HealthStore *s)
{
        _cleanup_health_state_ HealthState *m = NULL;
        int r = health_state_copy(s->disk, &m);
        if (r < 0)
                return r;
        for (Pending *p = s->pending; p; p = p->next) {
                r = health_op_apply(m, p->op, &s->options, &p->result);
                if (r < 0)
                        return r;
        }
        health_state_free(s->mem);
        s->mem = TAKE_PTR(m);
        s->generation++;
        return 0;
}

/* Unlinks the requests that match from the pending list and returns them, in order. */
static Pending *take_pending(HealthStore *s, bool in_flight, bool include_sticky)
{
        Pending *taken = NULL, **tail = &taken, **pp = &s->pending;
        while (*pp) {
                Pending *p = *pp;
                if (p->in_flight == in_flight && (include_sticky || !p->sticky)) {
                        *pp = p->next;
                        p->next = NULL;
                        *tail = p;
                        tail = &p->next;
                } else
                        pp = &p->next;
        }
        return taken;
}

/* error is the message of a failure (r < 0), never NULL then, and NULL on success. */
static void complete(HealthStore *s, Pending *list, int r, const char *error)
{
        while (list) {
                if (list->done)
                        list->done(s, r, &list->result, error, list->userdata);
                list = pending_free(list);
        }
}

/* Completes the repairs that are not in flight: a successful load was all they asked for. */
static void complete_repairs(HealthStore *s)
{
        Pending *done = NULL, **tail = &done;
        for (Pending **pp = &s->pending; *pp;) {
                Pending *p = *pp;
                if (p->op->kind == HEALTH_REQUEST_REPAIR && !p->in_flight) {
                        *pp = p->next;
                        p->next = NULL;
                        *tail = p;
                        tail = &p->next;
                } else
                        pp = &p->next;
        }
        complete(s, done, 0, NULL);
}

/* ---- load ---------------------------------------------------------------------------------- */

/*
 * Loads the file as the new disk state and applies the pending requests on top. On failure
 * the previous memory is kept, the error latched (HEALTH-5), and queued requests are refused
 * with "<refusal>: <err>", so nothing that depended on the old file is written over the new:
 * -EAGAIN with that text in *error. Any other failure (out of memory after the load) is
 * -errno with its own text.
 */
static int store_load(HealthStore *s, LoadResult *res, const char *refusal, char **error)
{
        Fingerprint fp = res->fingerprint;
        _cleanup_health_state_ HealthState *loaded = TAKE_PTR(res->state);
        _cleanup_free_ char *err = TAKE_PTR(res->error);
        int r = res->r;
        if (r < 0) {
                latch(&s->load_error, err);
                update_unavailable(s);
                /* Remembered, so the 5 s poll does not read the same bad file again. */
                s->fingerprint = fp;

                _cleanup_free_ char *refused = NULL;
                (void)error_set(&refused, -EAGAIN, "%s: %s", refusal, s->load_error);
                complete(s, take_pending(s, false, false), -EAGAIN, refused);
                s->write_requested = false;
                (void)rebuild_memory(s);
                return error_set(error, -EAGAIN, "%s", refused);
        }

        /* Re-evaluations of the old file are superseded by the one of the new file. */
        for (Pending **pp = &s->pending; *pp;)
                if ((*pp)->sticky)
                        *pp = pending_free(*pp);
                else
                        pp = &(*pp)->next;

        loaded->breaker_floor = s->disk->breaker_floor; /* a reset in this process still holds */
        health_state_free(s->disk);
        s->disk = TAKE_PTR(loaded);
        s->fingerprint = fp;
        unlatch(&s->load_error);
        update_unavailable(s);
        if (s->read_requested && s->read_kind == HEALTH_READ_RETRY)
                s->read_requested = false; /* this load was the retry */
        /* A repair queued behind the retry is done by it, unless a write error wants a write. */
        if (!s->write_error)
                complete_repairs(s);
        /* Requests queued behind the retry are written on top of the new file. */
        if (s->pending)
                s->write_requested = true;

        /* HEALTH-8: load-time re-evaluation is a request of its own, first in line. */
        _cleanup_(health_op_freep) HealthOp *reevaluate = NULL;
        HealthResult ignored;
        r = health_op_new(&(HealthRequest){.kind = HEALTH_REQUEST_REEVALUATE},
                          clock_now(s->options.clock), &reevaluate, error);
        if (r < 0)
                return r;
        if (!health_op_is_noop(s->disk, reevaluate, &s->options, &ignored)) {
                Pending *p = calloc(1, sizeof *p);
                if (!p)
                        return error_set_oom(error);
                *p = (Pending){.op = TAKE_PTR(reevaluate), .sticky = true, .next = s->pending};
                s->pending = p;
                s->write_requested = true;
        }

        r = rebuild_memory(s);
        if (r < 0)
                return error_set(error, r, "apply VF health requests: %s", strerror(-r));
        return 0;
}

/* The start-up load, on the caller's thread. */
static int store_reload(HealthStore *s, const char *refusal, char **error)
{
        LoadResult res;
        load_file(s->data_dir_fd, &res);
        int r = store_load(s, &res, refusal, error);
        load_result_done(&res);
        return r;
}

/* ---- writing (HEALTH-18, HEALTH-19) -------------------------------------------------------- */

static int write_failed(HealthWrite *w, const char *prefix, int r)
{
        w->r = r;
        return error_set(&w->error, r, "%s: %s", prefix, strerror(-r));
}

static const char *const file_step_prefix[] = {
    [WRITE_STEP_CREATE] = "create VF health state",
    [WRITE_STEP_WRITE] = "write VF health state",
    [WRITE_STEP_SYNC] = "sync VF health state",
    [WRITE_STEP_CLOSE] = "close VF health state",
    [WRITE_STEP_RENAME] = "rename VF health state",
    [WRITE_STEP_SYNC_DIR] = "sync VF health state dir",
};

/* How many fsync() calls write_file_atomic_at made, given where it stopped. */
static unsigned file_fsyncs(int r, WriteStep step)
{
        if (r >= 0 || step == WRITE_STEP_SYNC_DIR)
                return 2;
        return step >= WRITE_STEP_SYNC ? 1 : 0;
}

int health_write_run(HealthWrite *w)
{
        /* HEALTH-22: an edit made by hand is loaded before anything is written over it. */
        if (file_differs(w->data_dir_fd, &w->expected)) {
                w->changed = true;
                load_file(w->data_dir_fd, &w->loaded);
                w->r = 0;
                return 0;
        }

        _cleanup_free_ char *buf = NULL;
        size_t size;
        /* The file as it stands is one request smaller than what is written now. */
        int r = health_state_format_sized(
            w->state, w->expected.exists ? (size_t)w->expected.size : 0, &buf, &size);
        if (r < 0)
                return write_failed(w, "format VF health state", r);

        if (mkdirat(w->data_dir_fd, HEALTH_DIR_NAME, 0755) >= 0) {
                w->created_dir = true;
                /* The umask must not narrow the mode HEALTH-18 asks for. */
                if (fchmodat(w->data_dir_fd, HEALTH_DIR_NAME, 0755, 0) < 0)
                        return write_failed(w, "create VF health state dir", negative_errno());
        } else if (errno != EEXIST)
                return write_failed(w, "create VF health state dir", negative_errno());

        _cleanup_close_ int dir = openat(w->data_dir_fd, HEALTH_DIR_NAME,
                                         O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (dir < 0)
                return write_failed(w, "create VF health state dir", negative_errno());

        /* A new gpu/ entry is only durable once data_dir itself is synced. */
        if (w->created_dir || w->sync_parent) {
                w->fsyncs++;
                r = fsync_directory_at(w->data_dir_fd, ".");
                if (r < 0)
                        return write_failed(w, "sync VF health state parent dir", r);
                w->parent_synced = true;
        }

        /*
         * HEALTH-18's sequence, the file's bytes in one write(). The temp file gets fsync():
         * fdatasync() would do, since it makes the data and the size durable, all that reading
         * the file back after the rename needs (the timestamps it leaves out are not state). But
         * for a file just created and filled the size and the new blocks are metadata it must
         * commit anyway, in the same journal transaction, and it measured no faster (PERF-3 in
         * bench/README.md).
         */
        WriteStep step = WRITE_STEP_CREATE;
        r = write_file_atomic_at(dir, HEALTH_FILE_NAME, buf, size, 0644, &step);
        w->fsyncs += file_fsyncs(r, step);
        w->renamed = r >= 0 || step == WRITE_STEP_SYNC_DIR;
        if (w->renamed && fingerprint_read(dir, HEALTH_FILE_NAME, &w->fingerprint) < 0)
                w->fingerprint = (Fingerprint){0};
        if (r < 0)
                return write_failed(w, file_step_prefix[step], r);
        w->r = 0;
        return 0;
}

unsigned health_write_fsyncs(const HealthWrite *w)
{
        return w->fsyncs;
}

void health_write_set_failed(HealthWrite *w, int r, const char *error)
{
        w->r = r;
        w->renamed = false;
        (void)error_set(&w->error, r, "%s", error);
}

HealthWrite *health_write_free(HealthWrite *w)
{
        if (!w)
                return NULL;
        load_result_done(&w->loaded);
        health_state_free(w->state);
        free(w->error);
        free(w);
        return NULL;
}

bool health_store_write_pending(const HealthStore *s)
{
        return s->write_requested && !s->writing && !s->reading && !s->load_error;
}

bool health_store_write_in_flight(const HealthStore *s)
{
        return s->writing || s->reading;
}

int health_store_begin_write(HealthStore *s, HealthWrite **ret)
{
        /* Reads go first: a reload or a retried load decides what the write carries. */
        if (s->writing || s->reading || s->read_requested || !s->write_requested)
                return 0;
        /* HEALTH-17: a file that failed to load is never replaced. */
        if (s->load_error) {
                s->write_requested = false;
                return 0;
        }
        if (!s->pending) {
                s->write_requested = false;
                return 0;
        }

        HealthWrite *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        int r = health_state_copy(s->mem, &w->state);
        if (r < 0) {
                free(w);
                return r;
        }
        w->data_dir_fd = s->data_dir_fd;
        w->sync_parent = s->parent_sync_needed;
        w->expected = s->fingerprint;
        for (Pending *p = s->pending; p; p = p->next)
                p->in_flight = true;
        s->writing = true;
        s->write_requested = false;
        *ret = w;
        return 1;
}

static void kick(HealthStore *s);

static void finish_write(HealthStore *s, HealthWrite *w)
{
        Pending *carried;

        s->writing = false;
        if (w->changed) {
                /* Nothing written: the edited file is the new disk, and the requests the write
                 * carried go into the next one on top of it, or are refused (HEALTH-23). */
                for (Pending *p = s->pending; p; p = p->next)
                        p->in_flight = false;
                (void)store_load(s, &w->loaded, CHANGED_INVALID, NULL);
                health_write_free(w);
                return;
        }
        if (w->parent_synced)
                s->parent_sync_needed = false;
        else if (w->created_dir)
                s->parent_sync_needed = true;

        if (w->renamed) {
                /* Success, or a failed directory fsync: the new file is in place, keep it all. */
                health_state_free(s->disk);
                s->disk = TAKE_PTR(w->state);
                s->fingerprint = w->fingerprint;
                carried = take_pending(s, true, true);
        } else {
                /* Before the rename: the old file stands, and so must memory (HEALTH-20). */
                carried = take_pending(s, true, false);
                for (Pending *p = s->pending; p; p = p->next)
                        p->in_flight = false;
                if (rebuild_memory(s) < 0)
                        latch(&s->load_error, "rebuild VF health state: out of memory");
        }
        if (w->r < 0) {
                latch(&s->write_error, w->error);
                s->write_r = w->r;
        } else {
                unlatch(&s->write_error);
                s->write_r = 0;
        }
        update_unavailable(s);
        complete(s, carried, w->r, w->error);
        health_write_free(w);
}

void health_store_finish_write(HealthStore *s, HealthWrite *w)
{
        finish_write(s, w);
        kick(s);
}

static int finish_read(HealthStore *s, HealthRead *rd, char **error);

/* Runs every queued read and write on the calling thread. */
static void flush(HealthStore *s)
{
        for (;;) {
                HealthRead *rd;
                HealthWrite *w;
                if (health_store_begin_read(s, &rd) > 0) {
                        health_read_run(rd);
                        (void)finish_read(s, rd, NULL);
                } else if (health_store_begin_write(s, &w) > 0) {
                        (void)health_write_run(w);
                        finish_write(s, w);
                } else
                        return;
        }
}

static void kick(HealthStore *s)
{
        if (s->writing || s->reading)
                return;
        if (!s->read_requested && !(s->write_requested && !s->load_error))
                return;
        if (s->options.io_wanted)
                s->options.io_wanted(s, s->options.userdata);
        else
                flush(s);
}

/* ---- reading (HEALTH-17, HEALTH-21, HEALTH-22, HEALTH-32) ---------------------------------- */

int health_store_begin_read(HealthStore *s, HealthRead **ret)
{
        if (s->writing || s->reading || !s->read_requested)
                return 0;
        HealthRead *rd = calloc(1, sizeof *rd);
        if (!rd)
                return -ENOMEM;
        *rd = (HealthRead){
            .data_dir_fd = s->data_dir_fd,
            .kind = s->read_kind,
            .expected = s->fingerprint,
        };
        s->read_requested = false;
        s->reading = true;
        *ret = rd;
        return 1;
}

void health_read_run(HealthRead *rd)
{
        if (rd->kind == HEALTH_READ_CHECK && !file_differs(rd->data_dir_fd, &rd->expected))
                return;
        rd->loaded = true;
        load_file(rd->data_dir_fd, &rd->result);
}

HealthReadKind health_read_kind(const HealthRead *rd)
{
        return rd->kind;
}

HealthRead *health_read_free(HealthRead *rd)
{
        if (!rd)
                return NULL;
        load_result_done(&rd->result);
        free(rd);
        return NULL;
}

/* Takes ownership of rd. */
static int finish_read(HealthStore *s, HealthRead *rd, char **error)
{
        int r = 0;
        s->reading = false;
        s->read_timed_out = false;
        if (rd->loaded) {
                r = store_load(s, &rd->result,
                               rd->kind == HEALTH_READ_CHECK ? CHANGED_INVALID : UNAVAILABLE,
                               error);
                r = r < 0 ? r : 1;
        }
        health_read_free(rd);
        return r;
}

int health_store_finish_read(HealthStore *s, HealthRead *rd, char **error)
{
        int r = finish_read(s, rd, error);
        kick(s);
        return r;
}

void health_store_abandon_read(HealthStore *s, const char *error)
{
        s->reading = false;
        s->read_timed_out = true;
        /* Whatever the file is now, the next check reads it: the latch is not about its bytes. */
        s->fingerprint = (Fingerprint){0};
        (void)error_set(&s->load_error, -EIO, "read VF health state: %s", error);
        update_unavailable(s);

        /* As a failed load does: queued requests are refused, memory is what it was. */
        complete(s, take_pending(s, false, false), -EAGAIN, s->unavailable);
        s->write_requested = false;
        (void)rebuild_memory(s);
        kick(s);
}

/* Queues a read of that kind; the next kick() starts it, before any write. */
static void want_read(HealthStore *s, HealthReadKind kind)
{
        if (!s->read_requested || kind > s->read_kind)
                s->read_kind = kind;
        s->read_requested = true;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

bool health_threshold_is_valid(uint64_t threshold)
{
        return threshold >= HEALTH_THRESHOLD_MIN && threshold <= HEALTH_THRESHOLD_MAX;
}

int health_store_new(int data_dir_fd, const HealthOptions *options, HealthStore **ret)
{
        if (data_dir_fd < 0 || !health_threshold_is_valid(options->threshold) ||
            options->breaker_window == 0 || options->breaker_max_quarantines == 0)
                return -EINVAL;

        _cleanup_health_store_ HealthStore *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->data_dir_fd = data_dir_fd;
        s->options = *options;
        if (!s->options.clock)
                s->options.clock = &clock_realtime;
        /* Unknown until the first load, so a request before it reads the file first. */
        s->fingerprint = (Fingerprint){0};
        int r = health_state_new(&s->disk);
        if (r >= 0)
                r = health_state_new(&s->mem);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

HealthStore *health_store_free(HealthStore *s)
{
        if (!s)
                return NULL;
        while (s->pending)
                s->pending = pending_free(s->pending);
        health_state_free(s->disk);
        health_state_free(s->mem);
        free(s->load_error);
        free(s->write_error);
        free(s->unavailable);
        free(s);
        return NULL;
}

int health_store_load(HealthStore *s, char **error)
{
        if (s->writing || s->reading)
                return error_set(error, -EBUSY, "VF health state write in flight");

        /* HEALTH-19: a temp file left by a crash is never the truth; remove it. */
        (void)unlinkat(s->data_dir_fd, HEALTH_FILE_PATH ".tmp", 0);

        int r = store_reload(s, UNAVAILABLE, error);
        if (r == -EAGAIN)
                /* GEN-10's start-up line shows the load error itself, not the refusal. */
                return error_set(error, r, "%s", s->load_error);
        if (r < 0)
                return r;
        kick(s);
        if (s->write_error && !s->options.io_wanted)
                return error_set(error, s->write_r, "%s", s->write_error);
        return 0;
}

/* ---- requests ------------------------------------------------------------------------------ */

static int refuse_unavailable(const HealthStore *s, char **error)
{
        return error_set(error, -EAGAIN, "%s", health_store_unavailable_reason(s));
}

static int enqueue(HealthStore *s, HealthOp **op, HealthDone done, void *userdata, char **error)
{
        Pending *p = calloc(1, sizeof *p), **tail = &s->pending;
        if (!p)
                return error_set_oom(error);
        int r = health_op_apply(s->mem, *op, &s->options, &p->result);
        s->generation++; /* applied to memory, even half way on failure */
        if (r < 0) {
                free(p);
                (void)rebuild_memory(s); /* undo whatever the failed apply left half done */
                return error_set(error, r, "apply VF health request: %s", strerror(-r));
        }
        p->op = TAKE_PTR(*op);
        p->done = done;
        p->userdata = userdata;
        while (*tail)
                tail = &(*tail)->next;
        *tail = p;
        s->write_requested = true;
        kick(s);
        return 1;
}

static int submit_repair(HealthStore *s, HealthOp **op, HealthDone done, void *userdata,
                         HealthResult *ret, char **error)
{
        /* HEALTH-21: a healthy store does no I/O at all. A latched load is retried by a read;
         * the repair completes with it, and re-persists after it only if a write error is
         * latched too. */
        if (s->load_error) {
                want_read(s, HEALTH_READ_RETRY);
                if (s->read_timed_out) {
                        kick(s);
                        return refuse_unavailable(s, error);
                }
                return enqueue(s, op, done, userdata, error);
        }
        if (!s->write_error) {
                if (ret)
                        *ret = (HealthResult){0};
                return 0;
        }
        return enqueue(s, op, done, userdata, error);
}

int health_store_submit(HealthStore *s, const HealthRequest *request, HealthDone done,
                        void *userdata, HealthResult *ret, char **error)
{
        _cleanup_(health_op_freep) HealthOp *op = NULL;
        HealthResult res;

        if (request->kind == HEALTH_REQUEST_REEVALUATE)
                return error_set(error, -EINVAL, "re-evaluation is not a request");
        int r = health_op_new(request, clock_now(s->options.clock), &op, error);
        if (r < 0)
                return r;
        if (op->kind == HEALTH_REQUEST_REPAIR)
                return submit_repair(s, &op, done, userdata, ret, error);

        /* HEALTH-11/13: what changes nothing needs no I/O, available or not. */
        if (health_op_is_noop(s->mem, op, &s->options, &res)) {
                if (ret)
                        *ret = res;
                return 0;
        }
        if (s->write_error)
                return refuse_unavailable(s, error);
        if (s->load_error) {
                /* HEALTH-17: the load is retried first, and the change refused if it fails;
                 * at once while the last read has not even returned. */
                want_read(s, HEALTH_READ_RETRY);
                if (s->read_timed_out) {
                        kick(s);
                        return refuse_unavailable(s, error);
                }
        }
        /* The write compares the fingerprint before it writes (HEALTH-22). */
        return enqueue(s, &op, done, userdata, error);
}

typedef struct Capture {
        bool done;
        int r;
        HealthResult result;
        char *error;
} Capture;

static void capture_done(HealthStore *s, int r, const HealthResult *result, const char *error,
                         void *userdata)
{
        Capture *c = userdata;
        c->done = true;
        c->r = r;
        c->result = *result;
        if (r < 0)
                (void)error_set(&c->error, r, "%s", error);
}

int health_store_apply(HealthStore *s, const HealthRequest *request, HealthResult *ret,
                       char **error)
{
        if (s->writing || s->reading)
                return error_set(error, -EBUSY, "VF health state write in flight");

        Capture c = {0};
        int r = health_store_submit(s, request, capture_done, &c, ret, error);
        if (r <= 0)
                return r;
        if (!c.done)
                flush(s); /* an asynchronous store: run its write here */
        _cleanup_free_ char *err = c.error;
        if (!c.done)
                return error_set(error, -EIO, "VF health state write did not complete");
        if (c.r < 0)
                return error_set(error, c.r, "%s", err);
        if (ret)
                *ret = c.result;
        return 0;
}

int health_store_report_failure(HealthStore *s, const char *vf_address, const char *instance_id,
                                const char *assigned_at, const char *message, HealthResult *ret,
                                char **error)
{
        return health_store_apply(s,
                                  &(HealthRequest){
                                      .kind = HEALTH_REQUEST_FAILURE,
                                      .vf_address = vf_address,
                                      .instance_id = instance_id,
                                      .assigned_at = assigned_at,
                                      .text = message,
                                  },
                                  ret, error);
}

int health_store_report_success(HealthStore *s, const char *vf_address, const char *instance_id,
                                const char *assigned_at, HealthResult *ret, char **error)
{
        return health_store_apply(s,
                                  &(HealthRequest){
                                      .kind = HEALTH_REQUEST_SUCCESS,
                                      .vf_address = vf_address,
                                      .instance_id = instance_id,
                                      .assigned_at = assigned_at,
                                  },
                                  ret, error);
}

int health_store_quarantine(HealthStore *s, char *const *vfs, const char *reason, char **error)
{
        return health_store_apply(
            s, &(HealthRequest){.kind = HEALTH_REQUEST_QUARANTINE, .vfs = vfs, .text = reason},
            NULL, error);
}

int health_store_clear(HealthStore *s, char *const *vfs, char **error)
{
        return health_store_apply(s, &(HealthRequest){.kind = HEALTH_REQUEST_CLEAR, .vfs = vfs},
                                  NULL, error);
}

int health_store_reset_breaker(HealthStore *s, char **error)
{
        return health_store_apply(s, &(HealthRequest){.kind = HEALTH_REQUEST_BREAKER_RESET}, NULL,
                                  error);
}

int health_store_set_driver_version(HealthStore *s, const char *version, char **error)
{
        return health_store_apply(
            s, &(HealthRequest){.kind = HEALTH_REQUEST_DRIVER_VERSION, .text = version}, NULL,
            error);
}

int health_store_repair(HealthStore *s, char **error)
{
        return health_store_apply(s, &(HealthRequest){.kind = HEALTH_REQUEST_REPAIR}, NULL, error);
}

/* ---- reloads ------------------------------------------------------------------------------- */

/* A synchronous store runs the read it queued at once and returns finish_read()'s result. */
static int read_now(HealthStore *s, HealthReadKind kind, char **error)
{
        want_read(s, kind);
        if (s->options.io_wanted) {
                kick(s);
                return -EINPROGRESS;
        }
        HealthRead *rd;
        int r = health_store_begin_read(s, &rd);
        if (r <= 0)
                return r == 0 ? -EINPROGRESS : error_set_oom(error);
        health_read_run(rd);
        return health_store_finish_read(s, rd, error);
}

int health_store_poll(HealthStore *s, char **error)
{
        if (s->writing)
                return 0; /* the write compares the fingerprint itself */
        int r = read_now(s, HEALTH_READ_CHECK, error);
        return r == -EINPROGRESS ? 0 : r;
}

int health_store_reload(HealthStore *s, char **error)
{
        int r = read_now(s, HEALTH_READ_RELOAD, error);
        if (r == -EINPROGRESS)
                return 1;
        return r < 0 ? r : 0;
}

/* ---- queries ------------------------------------------------------------------------------- */

bool health_store_is_quarantined(const HealthStore *s, const char *vf_address)
{
        const HealthRecord *r = health_state_find(s->mem, vf_address);
        if (r && r->quarantined)
                return true;
        if (s->mem->n_drains == 0 || !s->options.gpu_of)
                return false;
        return health_state_find_drain(s->mem,
                                       s->options.gpu_of(vf_address, s->options.userdata)) != NULL;
}

const char *health_store_unavailable_reason(const HealthStore *s)
{
        return s->unavailable;
}

bool health_store_breaker_open(const HealthStore *s)
{
        return s->options.breaker_enabled && s->mem->breaker_open;
}

int health_store_breaker_warning(const HealthStore *s, char **ret)
{
        char *warning = NULL;
        if (health_store_breaker_open(s) &&
            strprintf(&warning, "automatic VF quarantine suspended: %s", s->mem->breaker_reason) <
                0)
                return -ENOMEM;
        *ret = warning;
        return 0;
}

const HealthState *health_store_state(const HealthStore *s)
{
        return s->mem;
}

const HealthOptions *health_store_options(const HealthStore *s)
{
        return &s->options;
}

uint64_t health_store_generation(const HealthStore *s)
{
        return s->generation;
}
