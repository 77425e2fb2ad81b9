/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The console route (API-2): the tail of an instance's console.log, read on the disk pool; and
 * its followers (CONS-2), woken by inotify on the loop and fed by reads on the disk pool.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "instances/instance-internal.h"

typedef struct ConsoleJob {
        int dirfd;
        char id[INSTANCE_ID_LEN + 1];
        size_t tail;
        char *data;
        size_t size;
        InstanceConsoleFunc done;
        void *userdata;
} ConsoleJob;

static int console_job_run(void *data, char **error)
{
        ConsoleJob *j = data;
        _cleanup_free_ char *rel = NULL;
        if (strprintf(&rel, "%s/%s", j->id, INSTANCE_CONSOLE_FILE) < 0)
                return error_set_oom(error);
        _cleanup_close_ int fd = open_own_file_at(j->dirfd, rel, O_RDONLY, 0);
        if (fd == -ENOENT) {
                j->data = strdup("");
                return j->data ? 0 : error_set_oom(error);
        }
        if (fd < 0)
                return error_set(error, fd, "open console log of instance %s: %s", j->id,
                                 file_strerror(fd));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return error_set(error, -errno, "stat console log of instance %s: %m", j->id);
        off_t from = st.st_size > (off_t)j->tail ? st.st_size - (off_t)j->tail : 0;
        size_t want = (size_t)(st.st_size - from);
        j->data = malloc(want + 1);
        if (!j->data)
                return error_set_oom(error);
        size_t got = 0;
        while (got < want) {
                ssize_t k = pread(fd, j->data + got, want - got, from + (off_t)got);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return error_set(error, -errno, "read console log of instance %s: %m",
                                         j->id);
                }
                if (k == 0)
                        break;
                got += (size_t)k;
        }
        j->size = got;
        return 0;
}

static void console_job_done(int r, void *data, const char *error, void *userdata)
{
        ConsoleJob *j = data;
        (void)userdata;
        if (!j)
                return; /* no deadline is set: the pool never ends this job itself */
        j->done(r, r >= 0 ? j->data : NULL, r >= 0 ? j->size : 0, error, j->userdata);
}

static void console_job_free(void *data)
{
        ConsoleJob *j = data;
        free(j->data);
        free(j);
}

int instance_manager_console(InstanceManager *m, const char *id, size_t tail_bytes,
                             InstanceConsoleFunc done, void *userdata, InstanceFailure *ret_failure,
                             char **ret_error)
{
        if (!instance_find(m, id)) {
                *ret_failure = INSTANCE_FAILURE_NOT_FOUND;
                (void)strprintf(ret_error, "instance %s not found", id);
                return -ENOENT;
        }
        ConsoleJob *j = calloc(1, sizeof *j);
        if (!j) {
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                *ret_error = strdup("out of memory");
                return -ENOMEM;
        }
        *j = (ConsoleJob){.dirfd = m->cfg.instances_dirfd,
                          .tail = tail_bytes,
                          .done = done,
                          .userdata = userdata};
        snprintf(j->id, sizeof j->id, "%s", id);
        _cleanup_free_ char *error = NULL;
        int r = worker_pool_submit(m->cfg.disk_pool,
                                   &(WorkerJob){.run = console_job_run,
                                                .done = console_job_done,
                                                .data = j,
                                                .free_data = console_job_free},
                                   &error);
        if (r < 0) {
                console_job_free(j);
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                *ret_error = TAKE_PTR(error);
                return r;
        }
        return 0;
}

/* ---- followers (CONS-2) -------------------------------------------------------------------- */

/* An instance's followers and the one inotify watch on its directory that wakes them all. */
typedef struct ConsoleFollowers {
        Instance *i;
        int inotify_fd;
        sd_event_source *source;
        InstanceConsoleFollow *first;
        unsigned n;
} ConsoleFollowers;

struct InstanceConsoleFollow {
        ConsoleFollowers *group; /* NULL once closed or ended */
        InstanceConsoleFollow *prev, *next;
        InstanceConsoleSink sink;
        WorkerPool *pool;
        int dirfd;
        char id[INSTANCE_ID_LEN + 1];
        size_t tail;
        uint64_t offset;            /* the next byte to read, once started */
        bool started;               /* the tail has been read (offset is known) */
        bool at_eof;                /* the last read reached the end of the file */
        bool dirty;                 /* the file changed since the last read began */
        bool ending;                /* the VMM has exited: end at the end of the file */
        struct FollowRead *reading; /* the read on the pool, or NULL */
        bool closed;                /* closed or ended: freed when no read is left */
};

static void follow_free(InstanceConsoleFollow *f)
{
        free(f);
}

static void followers_free(ConsoleFollowers *g)
{
        if (!g)
                return;
        if (g->i)
                g->i->followers = NULL;
        sd_event_source_disable_unref(g->source);
        if (g->inotify_fd >= 0)
                close(g->inotify_fd);
        free(g);
}

/* Out of its instance's list; the list goes with its last follower. */
static void follow_detach(InstanceConsoleFollow *f)
{
        ConsoleFollowers *g = f->group;
        f->closed = true;
        if (!g)
                return;
        if (f->prev)
                f->prev->next = f->next;
        else
                g->first = f->next;
        if (f->next)
                f->next->prev = f->prev;
        f->prev = f->next = NULL;
        f->group = NULL;
        if (--g->n == 0)
                followers_free(g);
}

static void follow_end(InstanceConsoleFollow *f)
{
        InstanceConsoleSink sink = f->sink;
        follow_detach(f);
        if (!f->reading)
                follow_free(f);
        sink.end(sink.userdata);
}

void instance_console_follow_close(InstanceConsoleFollow *f)
{
        follow_detach(f);
        if (!f->reading)
                follow_free(f);
}

typedef struct FollowRead {
        InstanceConsoleFollow *f;
        int dirfd;
        char id[INSTANCE_ID_LEN + 1];
        bool first;
        size_t tail, want;
        uint64_t offset;
        char *data;
        size_t size;
        bool at_eof;
} FollowRead;

/*
 * One read of console.log: the tail at first, then on from offset. A file shorter than offset
 * was truncated (VMM-8), and is read again from its start; a missing file is an empty one.
 */
static int follow_read_run(void *data, char **error)
{
        FollowRead *j = data;
        _cleanup_free_ char *rel = NULL;
        if (strprintf(&rel, "%s/%s", j->id, INSTANCE_CONSOLE_FILE) < 0)
                return error_set_oom(error);
        _cleanup_close_ int fd = open_own_file_at(j->dirfd, rel, O_RDONLY, 0);
        if (fd == -ENOENT) {
                j->at_eof = true;
                j->offset = 0;
                return 0;
        }
        if (fd < 0)
                return error_set(error, fd, "open console log of instance %s: %s", j->id,
                                 file_strerror(fd));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return error_set(error, -errno, "stat console log of instance %s: %m", j->id);
        uint64_t size = (uint64_t)st.st_size;
        if (j->first)
                j->offset = size > j->tail ? size - j->tail : 0;
        else if (size < j->offset)
                j->offset = 0;
        uint64_t left = size - j->offset;
        size_t want = left < j->want ? (size_t)left : j->want;
        j->data = malloc(want ? want : 1);
        if (!j->data)
                return error_set_oom(error);
        while (j->size < want) {
                ssize_t k =
                    pread(fd, j->data + j->size, want - j->size, (off_t)(j->offset + j->size));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return error_set(error, -errno, "read console log of instance %s: %m",
                                         j->id);
                }
                if (k == 0)
                        break;
                j->size += (size_t)k;
        }
        j->at_eof = j->offset + j->size >= size;
        return 0;
}

static void follow_pump(InstanceConsoleFollow *f);

static void follow_read_done(int r, void *data, const char *error, void *userdata)
{
        FollowRead *j = data;
        if (!j)
                return; /* no deadline is set: the pool never ends this job itself */
        /* The job lets go of its follower here, before anything below may end and free it. */
        InstanceConsoleFollow *f = TAKE_PTR(j->f);
        f->reading = NULL;
        if (f->closed) {
                follow_free(f); /* closed while the read ran: it waited for this */
                return;
        }
        if (r < 0) {
                log_line(LOG_LEVEL_WARNING, r, "console follower ended", "instance_id", f->id,
                         "error", error, NULL);
                follow_end(f);
                return;
        }
        /* The first write comes once the tail is read, even an empty one: the sink answers then. */
        if ((j->size > 0 || j->first) && f->sink.write(f->sink.userdata, j->data, j->size) < 0) {
                follow_end(f);
                return;
        }
        f->offset = j->offset + j->size;
        f->started = true;
        f->at_eof = j->at_eof;
        follow_pump(f);
}

static void follow_read_free(void *data)
{
        FollowRead *j = data;
        InstanceConsoleFollow *f = j->f;
        /* Without a done() (the pool is being freed) the read is over all the same. */
        if (f) {
                f->reading = NULL;
                if (f->closed)
                        follow_free(f);
        }
        free(j->data);
        free(j);
}

/* Reads while there is something new and the sink has room; ends once an exited VMM's log is
 * read to its end. */
static void follow_pump(InstanceConsoleFollow *f)
{
        if (f->closed || f->reading)
                return;
        bool more = !f->started || f->dirty || !f->at_eof;
        if (!more) {
                if (f->ending)
                        follow_end(f);
                return;
        }
        size_t room = f->sink.room(f->sink.userdata);
        if (room == 0)
                return;
        FollowRead *j = calloc(1, sizeof *j);
        if (!j) {
                follow_end(f);
                return;
        }
        *j = (FollowRead){.f = f,
                          .dirfd = f->dirfd,
                          .first = !f->started,
                          .tail = f->tail,
                          .want =
                              room < INSTANCE_CONSOLE_READ_MAX ? room : INSTANCE_CONSOLE_READ_MAX,
                          .offset = f->offset};
        memcpy(j->id, f->id, sizeof j->id);
        f->dirty = false;
        f->reading = j;
        _cleanup_free_ char *error = NULL;
        int r = worker_pool_submit(f->pool,
                                   &(WorkerJob){.run = follow_read_run,
                                                .done = follow_read_done,
                                                .data = j,
                                                .free_data = follow_read_free},
                                   &error);
        if (r < 0) {
                f->reading = NULL;
                free(j);
                log_line(LOG_LEVEL_WARNING, r, "console follower ended", "instance_id", f->id,
                         "error", error, NULL);
                follow_end(f);
        }
}

void instance_console_follow_wake(InstanceConsoleFollow *f)
{
        follow_pump(f);
}

/* inotify on the loop: a change of console.log wakes every follower of the instance. */
static int on_followers_inotify(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        ConsoleFollowers *g = userdata;
        bool changed = false;
        for (;;) {
                char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
                ssize_t n = read(fd, buf, sizeof buf);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                for (char *p = buf; p < buf + n;) {
                        const struct inotify_event *e = (const struct inotify_event *)p;
                        if ((e->mask & IN_Q_OVERFLOW) ||
                            (e->len > 0 && streq(e->name, INSTANCE_CONSOLE_FILE)))
                                changed = true;
                        p += sizeof *e + e->len;
                }
        }
        if (!changed)
                return 0;
        /* A follower may end (and the list go) while the others are woken. */
        InstanceConsoleFollow *next;
        for (InstanceConsoleFollow *f = g->first; f; f = next) {
                next = f->next;
                f->dirty = true;
                bool last = !next;
                follow_pump(f);
                if (last)
                        break;
        }
        return 0;
}

static int followers_new(Instance *i, ConsoleFollowers **ret, char **error)
{
        InstanceManager *m = i->m;
        _cleanup_free_ char *dir = NULL;
        if (strprintf(&dir, "%s/instances/%s", m->config->data_dir, i->rec.id) < 0)
                return error_set_oom(error);
        ConsoleFollowers *g = calloc(1, sizeof *g);
        if (!g)
                return error_set_oom(error);
        *g = (ConsoleFollowers){.i = i, .inotify_fd = -1};
        g->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        int r = g->inotify_fd < 0 ? -errno : 0;
        if (r >= 0 && inotify_add_watch(g->inotify_fd, dir,
                                        IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_ONLYDIR |
                                            IN_DONT_FOLLOW) < 0)
                r = -errno;
        if (r >= 0)
                r = worker_attach_io(m->event, &g->source, g->inotify_fd, on_followers_inotify, g);
        if (r < 0) {
                g->i = NULL;
                followers_free(g);
                return error_set(error, r, "watch console log of instance %s: %s", i->rec.id,
                                 strerror(-r));
        }
        *ret = g;
        return 0;
}

int instance_manager_console_follow(InstanceManager *m, const char *id, size_t tail_bytes,
                                    const InstanceConsoleSink *sink, InstanceConsoleFollow **ret,
                                    InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = instance_find(m, id);
        if (!i) {
                *ret_failure = INSTANCE_FAILURE_NOT_FOUND;
                (void)strprintf(ret_error, "instance %s not found", id);
                return -ENOENT;
        }
        if (i->followers && i->followers->n >= INSTANCE_CONSOLE_FOLLOWERS_MAX) {
                *ret_failure = INSTANCE_FAILURE_BUSY;
                (void)strprintf(ret_error, "instance %s already has %d console followers", id,
                                INSTANCE_CONSOLE_FOLLOWERS_MAX);
                return -EBUSY;
        }
        InstanceConsoleFollow *f = calloc(1, sizeof *f);
        if (!f) {
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                *ret_error = strdup("out of memory");
                return -ENOMEM;
        }
        if (!i->followers) {
                int r = followers_new(i, &i->followers, ret_error);
                if (r < 0) {
                        free(f);
                        *ret_failure = INSTANCE_FAILURE_INTERNAL;
                        return r;
                }
        }
        ConsoleFollowers *g = i->followers;
        *f = (InstanceConsoleFollow){.group = g,
                                     .next = g->first,
                                     .sink = *sink,
                                     .pool = m->cfg.disk_pool,
                                     .dirfd = m->cfg.instances_dirfd,
                                     .tail = tail_bytes,
                                     /* No VMM to wait for: the tail, and the follow is over. */
                                     .ending = !(i->vmm && !i->exited)};
        snprintf(f->id, sizeof f->id, "%s", id);
        if (g->first)
                g->first->prev = f;
        g->first = f;
        g->n++;
        *ret = f;
        return 0;
}

void instance_console_vmm_exited(Instance *i)
{
        if (!i->followers)
                return;
        InstanceConsoleFollow *next;
        for (InstanceConsoleFollow *f = i->followers->first; f; f = next) {
                next = f->next;
                f->ending = true;
                f->dirty = true; /* its last words may not have been seen yet */
                bool last = !next;
                follow_pump(f);
                if (last)
                        break;
        }
}

static void attach_end(InstanceConsoleAttach *a);

void instance_console_followers_free(Instance *i)
{
        while (i->followers && i->followers->first)
                follow_end(i->followers->first);
        if (i->attached)
                attach_end(i->attached);
}

/* ---- the attached client (CONS-3) ---------------------------------------------------------- */

struct InstanceConsoleAttach {
        Instance *i; /* NULL once closed or ended */
        InstanceConsoleAttachSink sink;
        sd_event *event;
        int fd;
        sd_event_source *io;
        char *in; /* typed by the client, not yet taken by the console socket */
        size_t in_len;
        bool full; /* a write was refused: writable() is due once there is room */
};

static void attach_free(InstanceConsoleAttach *a)
{
        if (a->i)
                a->i->attached = NULL;
        sd_event_source_disable_unref(a->io);
        if (a->fd >= 0)
                close(a->fd);
        sd_event_unref(a->event);
        free(a->in);
        free(a);
}

static void attach_end(InstanceConsoleAttach *a)
{
        InstanceConsoleAttachSink sink = a->sink;
        attach_free(a);
        sink.end(sink.userdata);
}

static int attach_update_events(InstanceConsoleAttach *a)
{
        if (!a->io)
                return 0;
        return sd_event_source_set_io_events(a->io,
                                             EPOLLIN | EPOLLRDHUP | (a->in_len > 0 ? EPOLLOUT : 0));
}

/* Gives the console socket what it takes now; the rest waits for EPOLLOUT. */
static int attach_flush(InstanceConsoleAttach *a)
{
        while (a->in_len > 0) {
                ssize_t n = send(a->fd, a->in, a->in_len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0)
                        return n < 0 ? -errno : -EPIPE;
                memmove(a->in, a->in + n, a->in_len - (size_t)n);
                a->in_len -= (size_t)n;
        }
        return attach_update_events(a);
}

static int on_attach_io(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        InstanceConsoleAttach *a = userdata;
        if (revents & EPOLLOUT) {
                if (attach_flush(a) < 0) {
                        attach_end(a);
                        return 0;
                }
                if (a->full && a->in_len < INSTANCE_CONSOLE_INPUT_MAX) {
                        a->full = false;
                        a->sink.writable(a->sink.userdata);
                        return 0; /* the owner may have closed it */
                }
        }
        if (revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                char buf[INSTANCE_CONSOLE_READ_MAX];
                ssize_t n = recv(a->fd, buf, sizeof buf, MSG_DONTWAIT);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return 0;
                /* The console's end: the VMM has exited (or closed it). */
                if (n <= 0 || a->sink.send(a->sink.userdata, buf, (size_t)n) < 0)
                        attach_end(a);
        }
        return 0;
}

int instance_manager_console_attach(InstanceManager *m, const char *id,
                                    const InstanceConsoleAttachSink *sink,
                                    InstanceConsoleAttach **ret, InstanceFailure *ret_failure,
                                    char **ret_error)
{
        Instance *i = instance_find(m, id);
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        if (!i) {
                f = INSTANCE_FAILURE_NOT_FOUND;
                (void)strprintf(ret_error, "instance %s not found", id);
        } else if (i->attached) {
                f = INSTANCE_FAILURE_BUSY;
                (void)strprintf(ret_error, "instance %s already has an attached console", id);
        } else if (!(i->vmm && !i->exited)) {
                f = INSTANCE_FAILURE_INVALID_STATE;
                (void)strprintf(ret_error, "instance %s is not running", id);
        } else if (!i->rec.hypervisor.console_socket) {
                f = INSTANCE_FAILURE_INVALID_STATE;
                (void)strprintf(ret_error,
                                "the console of instance %s is a plain file until its next "
                                "start",
                                id);
        }
        if (f != INSTANCE_FAILURE_NONE) {
                *ret_failure = f;
                return f == INSTANCE_FAILURE_NOT_FOUND ? -ENOENT : -EBUSY;
        }

        const char *path = i->rec.hypervisor.console_socket;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof sa.sun_path) {
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                (void)strprintf(ret_error, "console socket of instance %s: path too long", id);
                return -ENAMETOOLONG;
        }
        strcpy(sa.sun_path, path);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        /* A Unix socket connects at once or not at all; it never waits on the loop. */
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int r = -errno;
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                (void)strprintf(ret_error, "connect console socket of instance %s: %s", id,
                                strerror(-r));
                return r;
        }
        InstanceConsoleAttach *a = calloc(1, sizeof *a);
        if (a)
                a->in = malloc(2 * INSTANCE_CONSOLE_INPUT_MAX);
        if (!a || !a->in) {
                free(a);
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                *ret_error = strdup("out of memory");
                return -ENOMEM;
        }
        *a = (InstanceConsoleAttach){
            .i = i, .sink = *sink, .event = sd_event_ref(m->event), .fd = TAKE_FD(fd), .in = a->in};
        i->attached = a;
        *ret = a;
        return 0;
}

int instance_console_attach_start(InstanceConsoleAttach *a)
{
        if (a->io)
                return -EBUSY;
        return sd_event_add_io(a->event, &a->io, a->fd, EPOLLIN | EPOLLRDHUP, on_attach_io, a);
}

int instance_console_attach_write(InstanceConsoleAttach *a, const void *data, size_t size)
{
        if (size > INSTANCE_CONSOLE_INPUT_MAX)
                return -EMSGSIZE;
        if (a->in_len >= INSTANCE_CONSOLE_INPUT_MAX) {
                a->full = true;
                return -ENOBUFS;
        }
        /* Room for one more piece past the mark: what was accepted is never lost. */
        memcpy(a->in + a->in_len, data, size);
        a->in_len += size;
        int r = attach_flush(a);
        if (r < 0)
                return r;
        if (a->in_len >= INSTANCE_CONSOLE_INPUT_MAX) {
                a->full = true;
                return 1;
        }
        return 0;
}

void instance_console_attach_close(InstanceConsoleAttach *a)
{
        attach_free(a);
}
