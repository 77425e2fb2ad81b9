/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "vfio.h"

#include <fcntl.h>
#include <limits.h>

#include "base/base.h"

/* getdents64 buffers: one for the process list, one reused for every fd directory. */
#define SCAN_DIRBUF_SIZE (32u * 1024u)

#define SOCKET_LINK_PREFIX "socket:["
#define DELETED_SUFFIX " (deleted)"

typedef struct NodeEntry {
        char *path; /* NULL: empty slot */
        uint64_t hash;
        pid_t pid;
} NodeEntry;

typedef struct SocketEntry {
        uint64_t inode; /* 0: empty slot (socket inodes are never 0) */
        pid_t pid;
} SocketEntry;

/* Open addressing, linear probing, capacities are powers of two kept at most half full. */
struct VfioScan {
        char *prefix; /* "<dev_root>/vfio/" */
        size_t prefix_len;

        NodeEntry *nodes;
        size_t n_nodes, nodes_cap;

        SocketEntry *sockets;
        size_t n_sockets, sockets_cap;

        size_t n_processes;
};

static uint64_t hash_bytes(const char *p, size_t n)
{
        /* FNV-1a: the keys are short paths sharing a long prefix, which it spreads well. */
        uint64_t h = UINT64_C(14695981039346656037);
        for (size_t i = 0; i < n; i++) {
                h ^= (unsigned char)p[i];
                h *= UINT64_C(1099511628211);
        }
        return h;
}

static uint64_t hash_u64(uint64_t x)
{
        /* splitmix64's finaliser: inodes are sequential, their low bits alone would cluster. */
        x ^= x >> 30;
        x *= UINT64_C(0xbf58476d1ce4e5b9);
        x ^= x >> 27;
        x *= UINT64_C(0x94d049bb133111eb);
        x ^= x >> 31;
        return x;
}

static size_t node_slot(const NodeEntry *t, size_t cap, const char *path, size_t len, uint64_t h)
{
        size_t i = (size_t)h & (cap - 1);
        while (t[i].path &&
               !(t[i].hash == h && strncmp(t[i].path, path, len) == 0 && t[i].path[len] == 0))
                i = (i + 1) & (cap - 1);
        return i;
}

static int nodes_grow(VfioScan *s)
{
        size_t cap = s->nodes_cap ? s->nodes_cap * 2 : 64;
        NodeEntry *t = calloc(cap, sizeof *t);
        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < s->nodes_cap; i++)
                if (s->nodes[i].path) {
                        const NodeEntry *e = &s->nodes[i];
                        t[node_slot(t, cap, e->path, strlen(e->path), e->hash)] = *e;
                }
        free(s->nodes);
        s->nodes = t;
        s->nodes_cap = cap;
        return 0;
}

static int nodes_add(VfioScan *s, const char *path, size_t len, pid_t pid)
{
        if ((s->n_nodes + 1) * 2 > s->nodes_cap) {
                int r = nodes_grow(s);
                if (r < 0)
                        return r;
        }
        uint64_t h = hash_bytes(path, len);
        NodeEntry *e = &s->nodes[node_slot(s->nodes, s->nodes_cap, path, len, h)];
        if (e->path) {
                if (pid < e->pid)
                        e->pid = pid;
                return 0;
        }
        char *copy = strndup(path, len);
        if (!copy)
                return -ENOMEM;
        *e = (NodeEntry){.path = copy, .hash = h, .pid = pid};
        s->n_nodes++;
        return 0;
}

static size_t socket_slot(const SocketEntry *t, size_t cap, uint64_t inode)
{
        size_t i = (size_t)hash_u64(inode) & (cap - 1);
        while (t[i].inode && t[i].inode != inode)
                i = (i + 1) & (cap - 1);
        return i;
}

static int sockets_add(VfioScan *s, uint64_t inode, pid_t pid)
{
        if ((s->n_sockets + 1) * 2 > s->sockets_cap) {
                size_t cap = s->sockets_cap ? s->sockets_cap * 2 : 256;
                SocketEntry *t = calloc(cap, sizeof *t);
                if (!t)
                        return -ENOMEM;
                for (size_t i = 0; i < s->sockets_cap; i++)
                        if (s->sockets[i].inode)
                                t[socket_slot(t, cap, s->sockets[i].inode)] = s->sockets[i];
                free(s->sockets);
                s->sockets = t;
                s->sockets_cap = cap;
        }
        SocketEntry *e = &s->sockets[socket_slot(s->sockets, s->sockets_cap, inode)];
        if (e->inode) {
                if (pid < e->pid)
                        e->pid = pid;
                return 0;
        }
        *e = (SocketEntry){.inode = inode, .pid = pid};
        s->n_sockets++;
        return 0;
}

int vfio_parse_socket_link(const char *target, uint64_t *ret)
{
        const char *p = startswith(target, SOCKET_LINK_PREFIX);
        if (!p)
                return -EINVAL;

        const char *end = strchr(p, ']');
        if (!end || end[1] != 0 || end == p || end - p > 20 || p[0] == '0')
                return -EBADMSG;

        char digits[21];
        memcpy(digits, p, (size_t)(end - p));
        digits[end - p] = 0;
        uint64_t inode;
        if (parse_uint64(digits, &inode) < 0)
                return -EBADMSG;
        *ret = inode;
        return 0;
}

/* A process or descriptor that vanished while we looked at it holds nothing any more. */
static bool is_gone(int r)
{
        return r == -ENOENT || r == -ESRCH;
}

static bool is_all_digits(const char *s)
{
        if (!*s)
                return false;
        for (; *s; s++)
                if (*s < '0' || *s > '9')
                        return false;
        return true;
}

/* Records one fd link target of pid; everything but VFIO nodes and sockets is ignored. */
static int scan_target(VfioScan *s, pid_t pid, const char *fd, const char *target, size_t len,
                       char **error)
{
        if (len > s->prefix_len && memcmp(target, s->prefix, s->prefix_len) == 0) {
                /* A node unlinked (say by udev re-creating /dev/vfio) while open is still
                 * held through the same group; keeping it under its old name errs towards
                 * "in use", the safe side. */
                size_t suffix = strlen(DELETED_SUFFIX);
                if (len > s->prefix_len + suffix &&
                    memcmp(target + len - suffix, DELETED_SUFFIX, suffix) == 0)
                        len -= suffix;
                int r = nodes_add(s, target, len, pid);
                if (r < 0)
                        return error_set(error, r, "record open VFIO node: %s", strerror(-r));
                return 0;
        }

        uint64_t inode;
        int r = vfio_parse_socket_link(target, &inode);
        if (r == -EINVAL)
                return 0;
        if (r < 0)
                return error_set(error, r, "read process %d file descriptor %s: %s", (int)pid, fd,
                                 strerror(-r));
        r = sockets_add(s, inode, pid);
        if (r < 0)
                return error_set(error, r, "record socket owner: %s", strerror(-r));
        return 0;
}

static int scan_fd(VfioScan *s, int fd_dir, pid_t pid, const char *fd, char **error)
{
        char target[PATH_MAX];
        ssize_t n = readlinkat(fd_dir, fd, target, sizeof target);
        if (n < 0) {
                int r = negative_errno();
                /* The kernel refuses to print a path longer than PATH_MAX. Every candidate
                 * node is shorter than that (vfio_scan checks the prefix), so such a link
                 * cannot be one; failing here instead would let any user who opens a deeply
                 * nested file stop every release and placement on the host. */
                if (is_gone(r) || r == -ENAMETOOLONG)
                        return 0;
                return error_set(error, r, "read process %d file descriptor %s: %s", (int)pid, fd,
                                 strerror(-r));
        }
        if ((size_t)n >= sizeof target)
                return 0; /* truncated, hence longer than any candidate, as above */
        target[n] = 0;
        return scan_target(s, pid, fd, target, (size_t)n, error);
}

static int scan_process(VfioScan *s, int proc_dir, const char *name, char *buf, char **error)
{
        /* /proc prints pids canonically; anything else here is not a tree we understand. */
        uint64_t v;
        int r = name[0] == '0' || strlen(name) > 10 ? -ERANGE
                                                    : parse_uint64_range(name, 1, INT32_MAX, &v);
        if (r < 0)
                return error_set(error, r, "read process %s file descriptors: %s", name,
                                 strerror(-r));
        pid_t pid = (pid_t)v;

        char rel[sizeof "2147483647/fd"];
        size_t len = strlen(name);
        memcpy(rel, name, len);
        memcpy(rel + len, "/fd", sizeof "/fd");

        _cleanup_close_ int fd_dir = openat(proc_dir, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd_dir < 0) {
                r = negative_errno();
                if (is_gone(r))
                        return 0;
                return error_set(error, r, "read process %d file descriptors: %s", (int)pid,
                                 strerror(-r));
        }
        s->n_processes++;

        for (;;) {
                ssize_t n = getdents64(fd_dir, buf, SCAN_DIRBUF_SIZE);
                if (n < 0) {
                        r = negative_errno();
                        if (is_gone(r))
                                return 0;
                        return error_set(error, r, "read process %d file descriptors: %s", (int)pid,
                                         strerror(-r));
                }
                if (n == 0)
                        return 0;
                for (ssize_t off = 0; off < n;) {
                        const struct dirent64 *de = (const struct dirent64 *)(buf + off);
                        off += de->d_reclen;
                        if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                                continue;
                        /* Every other entry is read, numeric or not: an entry we cannot
                         * account for makes the scan fail rather than look complete. */
                        r = scan_fd(s, fd_dir, pid, de->d_name, error);
                        if (r < 0)
                                return r;
                }
        }
}

static int scan_set_prefix(VfioScan *s, const char *dev_root)
{
        if (!dev_root || dev_root[0] != '/')
                return -EINVAL;
        size_t len = strlen(dev_root);
        while (len > 1 && dev_root[len - 1] == '/')
                len--;
        if (len == 1)
                len = 0; /* dev_root "/" gives "/vfio/" */
        int r = strprintf(&s->prefix, "%.*s/vfio/", (int)len, dev_root);
        if (r < 0)
                return r;
        s->prefix_len = strlen(s->prefix);
        /* Leaves room for "devices/<name>" so every candidate fits in PATH_MAX (scan_fd). */
        if (s->prefix_len + sizeof "devices/" + NAME_MAX >= PATH_MAX)
                return -ENAMETOOLONG;
        return 0;
}

int vfio_scan(const Root *proc_root, const char *dev_root, VfioScan **ret, char **error)
{
        _cleanup_(vfio_scan_freep) VfioScan *s = calloc(1, sizeof *s);
        if (!s)
                return error_set(error, -ENOMEM, "%s", strerror(ENOMEM));

        int r = scan_set_prefix(s, dev_root);
        if (r < 0)
                return error_set(error, r, "invalid dev_root \"%s\": %s", dev_root ? dev_root : "",
                                 strerror(-r));

        _cleanup_free_ char *bufs = malloc(2 * SCAN_DIRBUF_SIZE);
        if (!bufs)
                return error_set(error, -ENOMEM, "%s", strerror(ENOMEM));
        char *list_buf = bufs, *fd_buf = bufs + SCAN_DIRBUF_SIZE;

        /* Our own open file description: the root fd is shared, and reading it as a
         * directory would move its offset under any other thread doing the same. */
        _cleanup_close_ int proc_dir =
            openat(proc_root->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (proc_dir < 0) {
                r = negative_errno();
                return error_set(error, r, "list processes in %s: %s", proc_root->path,
                                 strerror(-r));
        }

        for (;;) {
                ssize_t n = getdents64(proc_dir, list_buf, SCAN_DIRBUF_SIZE);
                if (n < 0) {
                        r = negative_errno();
                        return error_set(error, r, "list processes in %s: %s", proc_root->path,
                                         strerror(-r));
                }
                if (n == 0)
                        break;
                for (ssize_t off = 0; off < n;) {
                        const struct dirent64 *de = (const struct dirent64 *)(list_buf + off);
                        off += de->d_reclen;
                        if (!is_all_digits(de->d_name))
                                continue;
                        r = scan_process(s, proc_dir, de->d_name, fd_buf, error);
                        if (r < 0)
                                return r;
                }
        }

        *ret = TAKE_PTR(s);
        return 0;
}

int vfio_scan_startup(const Root *proc_root, const char *dev_root, VfioScan **ret, char **error)
{
        int r = vfio_scan(proc_root, dev_root, ret, error);
        if (r < 0)
                return error_prefix(error, r, "open-handle scan failed");
        return 0;
}

VfioScan *vfio_scan_free(VfioScan *s)
{
        if (s) {
                for (size_t i = 0; i < s->nodes_cap; i++)
                        free(s->nodes[i].path);
                free(s->nodes);
                free(s->sockets);
                free(s->prefix);
                free(s);
        }
        return NULL;
}

int vfio_scan_find_node(const VfioScan *s, const char *path, pid_t *ret_pid)
{
        if (s->n_nodes == 0)
                return -ENOENT;
        size_t len = strlen(path);
        const NodeEntry *e =
            &s->nodes[node_slot(s->nodes, s->nodes_cap, path, len, hash_bytes(path, len))];
        if (!e->path)
                return -ENOENT;
        if (ret_pid)
                *ret_pid = e->pid;
        return 0;
}

int vfio_scan_find_socket(const VfioScan *s, uint64_t inode, pid_t *ret_pid)
{
        if (s->n_sockets == 0 || inode == 0)
                return -ENOENT;
        const SocketEntry *e = &s->sockets[socket_slot(s->sockets, s->sockets_cap, inode)];
        if (!e->inode)
                return -ENOENT;
        if (ret_pid)
                *ret_pid = e->pid;
        return 0;
}

size_t vfio_scan_n_nodes(const VfioScan *s)
{
        return s->n_nodes;
}

size_t vfio_scan_n_sockets(const VfioScan *s)
{
        return s->n_sockets;
}

size_t vfio_scan_n_processes(const VfioScan *s)
{
        return s->n_processes;
}

/* ---- the in-use probe (DEV-12, DEV-13) ----------------------------------------------------- */

typedef struct Probe {
        const VfioScan *scan;
        const Root *sysfs;
        bool in_use;
        pid_t holder;
        int error; /* the first probe error, 0 if none */
        char *errors;
} Probe;

static void probe_done(Probe *p)
{
        free(p->errors);
}

static void probe_fail(Probe *p, int r, const char *fmt, ...) _printf_(3, 4);
static void probe_fail(Probe *p, int r, const char *fmt, ...)
{
        _cleanup_free_ char *msg = NULL;
        va_list ap;

        va_start(ap, fmt);
        (void)error_setv(&msg, r, fmt, ap);
        va_end(ap);
        if (p->error == 0)
                p->error = r;
        /* error_set() keeps a text even out of memory: p->errors is set whenever p->error is. */
        (void)error_set(&p->errors, r, "%s%s%s", p->errors ?: "", p->errors ? "; " : "", msg);
}

static void probe_candidate(Probe *p, const char *suffix)
{
        /* Fits: callers pass "<group>" or "devices/vfio<n>" with at most 10 digits, and
         * scan_set_prefix left room for far more. */
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s%s", p->scan->prefix, suffix);

        pid_t pid;
        if (vfio_scan_find_node(p->scan, path, &pid) < 0)
                return;
        if (!p->in_use || pid < p->holder)
                p->holder = pid;
        p->in_use = true;
}

/* A number as the kernel prints it: no sign, no leading zero, at most 10 digits. */
static bool is_canonical_number(const char *s)
{
        return is_all_digits(s) && (s[0] != '0' || s[1] == 0) && strlen(s) <= 10;
}

static bool is_cdev_name(const char *name)
{
        const char *n = startswith(name, "vfio");
        return n && is_canonical_number(n);
}

static void probe_cdevs(Probe *p, const char *dir)
{
        _cleanup_free_ char *rel = NULL;
        _cleanup_strv_free_ char **names = NULL;

        int r = strprintf(&rel, "%s/vfio-dev", dir);
        if (r >= 0)
                r = root_list_dir(p->sysfs, rel, &names);
        if (r == -ENOENT)
                return;
        if (r < 0) {
                probe_fail(p, r, "list %s/%s: %s", p->sysfs->path, rel ? rel : dir, strerror(-r));
                return;
        }

        for (char **name = names; *name; name++) {
                char suffix[sizeof "devices/vfio" + 10];
                if (!is_cdev_name(*name)) {
                        probe_fail(p, -EBADMSG, "unexpected entry \"%s\" in %s/%s", *name,
                                   p->sysfs->path, rel);
                        continue;
                }
                snprintf(suffix, sizeof suffix, "devices/%s", *name);
                probe_candidate(p, suffix);
        }
}

static void probe_group(Probe *p, const char *dir)
{
        _cleanup_free_ char *rel = NULL, *group = NULL;
        int r = strprintf(&rel, "%s/iommu_group", dir);
        if (r >= 0)
                r = root_readlink_basename(p->sysfs, rel, &group);
        if (r == -ENOENT)
                return;
        if (r < 0)
                probe_fail(p, r, "read link %s/%s: %s", p->sysfs->path, rel ? rel : dir,
                           strerror(-r));
        else if (!is_canonical_number(group))
                probe_fail(p, -EBADMSG, "invalid IOMMU group \"%s\" in %s/%s", group,
                           p->sysfs->path, rel);
        else
                probe_candidate(p, group);
}

static int probe_device(const VfioScan *s, const Root *sysfs, const char *dir, pid_t *ret_holder,
                        char **error)
{
        _cleanup_(probe_done) Probe p = {.scan = s, .sysfs = sysfs};

        probe_cdevs(&p, dir);
        probe_group(&p, dir);

        /* An open candidate proves the device busy, whatever else could not be read. */
        if (p.in_use) {
                if (ret_holder)
                        *ret_holder = p.holder;
                return 1;
        }
        if (p.error < 0)
                return error_set(error, p.error, "%s", p.errors);
        return 0;
}

int vfio_probe_vf(const VfioScan *s, const Root *sysfs, const char *vf, pid_t *ret_holder,
                  char **error)
{
        if (!pci_address_is_valid(vf))
                return error_set(error, -EINVAL, "invalid VF address \"%s\"", vf);

        char dir[sizeof "bus/pci/devices/" + PCI_ADDRESS_STRLEN];
        snprintf(dir, sizeof dir, "bus/pci/devices/%s", vf);
        return probe_device(s, sysfs, dir, ret_holder, error);
}

int vfio_probe_mdev(const VfioScan *s, const Root *sysfs, const char *uuid, pid_t *ret_holder,
                    char **error)
{
        if (!uuid_text_is_valid(uuid, strlen(uuid), false))
                return error_set(error, -EINVAL, "invalid mdev UUID \"%s\"", uuid);

        char dir[sizeof "bus/mdev/devices/" + 36];
        snprintf(dir, sizeof dir, "bus/mdev/devices/%s", uuid);
        return probe_device(s, sysfs, dir, ret_holder, error);
}
