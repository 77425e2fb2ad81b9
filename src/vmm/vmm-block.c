/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Disks added to and taken from a running VMM over QMP (DISK-8), each job on a QMP session of
 * its own that ends with the job. Nothing waits: the session's replies, the DEVICE_DELETED
 * event and the release timer all arrive on the loop.
 *
 * A descriptor handed over with add-fd stays in QEMU's fd set while a node uses it. QEMU closes
 * an fd set that no node uses once no QMP client is connected, so ending the session is what
 * frees the set of a node that blockdev-del closed, or of one whose blockdev-add failed.
 */
#include "vmm.h"

#include <fcntl.h>
#include <limits.h>

#include "vmm-internal.h"

typedef enum BlockKind {
        BLOCK_ATTACH,
        BLOCK_DETACH,
        BLOCK_QUERY,
} BlockKind;

struct VmmBlockJob {
        BlockKind kind;
        sd_event *event;
        VmmQmp *qmp;
        sd_event_source *timer; /* detach: the guest's time to release the device */
        VmmBlockDone done;
        void *userdata;

        /* attach */
        VmmDrive drive; /* its strings point into node and serial below */
        int fd;
        char *serial;
        char *first_error; /* device_add's, kept while blockdev-del takes the node back */
        const char *port;  /* the free hotplug port the device goes on (vmm_hotplug_port()) */
        /* attach and detach */
        char *node;
        /* detach */
        nsec_t release_timeout;
        char *device_path; /* the virtio-blk-pci device's QOM path */
        bool unplug_sent, deleted;
};

VmmBlockJob *vmm_block_job_free(VmmBlockJob *j)
{
        if (!j)
                return NULL;
        j->qmp = vmm_qmp_free(j->qmp);
        j->timer = sd_event_source_disable_unref(j->timer);
        sd_event_unref(j->event);
        closep(&j->fd);
        free(j->serial);
        free(j->first_error);
        free(j->node);
        free(j->device_path);
        free(j);
        return NULL;
}

/* The job ends: the session closes, done runs once, and the job is freed. */
static void job_finish(VmmBlockJob *j, int r, const char *error, char **nodes)
{
        VmmBlockDone done = j->done;
        void *userdata = j->userdata;
        _cleanup_free_ char *text = error ? strdup(error) : NULL;
        vmm_block_job_free(j);
        done(r, r < 0 ? (text ? text : ERROR_OUT_OF_MEMORY) : NULL, nodes, userdata);
}

static void job_fail(VmmBlockJob *j, int r, const char *fmt, ...) _printf_(3, 4);
static void job_fail(VmmBlockJob *j, int r, const char *fmt, ...)
{
        _cleanup_free_ char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        (void)error_setv(&text, r, fmt, ap);
        va_end(ap);
        job_finish(j, r, text, NULL);
}

static int job_new(BlockKind kind, sd_event *event, VmmBlockDone done, void *userdata,
                   VmmBlockJob **ret)
{
        VmmBlockJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        *j = (VmmBlockJob){.kind = kind,
                           .event = sd_event_ref(event),
                           .fd = -1,
                           .done = done,
                           .userdata = userdata};
        *ret = j;
        return 0;
}

/* ---- query-block --------------------------------------------------------------------------- */

/*
 * The QOM path of the device that holds node, from a query-block reply: 1 and *ret_path (NULL
 * when the node has no device), 0 when no backend shows the node; -EBADMSG for a reply that is
 * not QEMU's shape.
 */
static int find_node(json_t *value, const char *node, char **ret_path)
{
        if (!json_is_array(value))
                return -EBADMSG;
        size_t k;
        json_t *e;
        json_array_foreach (value, k, e) {
                json_t *inserted = json_object_get(e, "inserted");
                const char *name = json_string_value(json_object_get(inserted, "node-name"));
                if (!name || !streq(name, node))
                        continue;
                const char *qdev = json_string_value(json_object_get(e, "qdev"));
                char *path = NULL;
                if (qdev && qdev[0]) {
                        /* virtio-blk-pci's backend is its child; the proxy is what unplugs. */
                        size_t len = strlen(qdev);
                        const char *suffix = "/virtio-backend";
                        if (len > strlen(suffix) && streq(qdev + len - strlen(suffix), suffix))
                                len -= strlen(suffix);
                        path = strndup(qdev, len);
                        if (!path)
                                return -ENOMEM;
                }
                *ret_path = path;
                return 1;
        }
        *ret_path = NULL;
        return 0;
}

static void on_query_reply(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)q;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        _cleanup_strv_free_ char **nodes = NULL;
        if (!json_is_array(value)) {
                job_fail(j, -EBADMSG, "qmp query-block: the reply is not an array");
                return;
        }
        size_t k;
        json_t *e;
        json_array_foreach (value, k, e) {
                const char *name =
                    json_string_value(json_object_get(json_object_get(e, "inserted"), "node-name"));
                const char *qdev = json_string_value(json_object_get(e, "qdev"));
                /* A node without a device is not attached to the guest. */
                if (!name || !qdev || !qdev[0])
                        continue;
                if (strv_push(&nodes, name) < 0) {
                        job_fail(j, -ENOMEM, "qmp query-block: out of memory");
                        return;
                }
        }
        if (!nodes && !(nodes = calloc(1, sizeof(char *)))) {
                job_fail(j, -ENOMEM, "qmp query-block: out of memory");
                return;
        }
        job_finish(j, 0, NULL, nodes);
}

/* ---- attach -------------------------------------------------------------------------------- */

static void on_attach_rolled_back(VmmQmp *q, int r, json_t *value, const char *error,
                                  void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)q;
        (void)value;
        /* device_add's error is the answer; a node left behind goes with the session's end
         * only if blockdev-del worked, so say when it did not. */
        if (r < 0)
                job_fail(j, -EIO, "%s (and %s)", j->first_error, error);
        else
                job_finish(j, -EIO, j->first_error, NULL);
}

static void on_device_added(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)value;
        if (r >= 0) {
                job_finish(j, 0, NULL, NULL);
                return;
        }
        j->first_error = strdup(error);
        json_auto_t *args = json_pack("{s:s}", "node-name", j->node);
        if (!j->first_error || !args ||
            vmm_qmp_execute_with(q, "blockdev-del", args, -1, on_attach_rolled_back, j) < 0)
                job_fail(j, -ENOMEM, "%s", error);
}

static void on_blockdev_added(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)value;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        json_auto_t *args =
            json_pack("{s:s, s:s, s:s, s:s, s:s}", "driver", "virtio-blk-pci", "bus", j->port, "id",
                      j->node, "drive", j->node, "serial", j->serial);
        if (!args)
                r = -ENOMEM;
        else
                r = vmm_qmp_execute_with(q, "device_add", args, -1, on_device_added, j);
        if (r < 0)
                job_fail(j, r, "qmp device_add: %s", strerror(-r));
}

static void on_fd_added(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        json_int_t set = json_integer_value(json_object_get(value, "fdset-id"));
        if (!json_is_integer(json_object_get(value, "fdset-id")) || set < 0 || set > INT_MAX) {
                job_fail(j, -EBADMSG, "qmp add-fd: the reply has no fdset-id");
                return;
        }
        closep(&j->fd); /* QEMU holds its own copy now */
        j->fd = -1;
        json_auto_t *node = NULL;
        r = vmm_drive_blockdev_json(&j->drive, (int)set, &node);
        if (r >= 0)
                r = vmm_qmp_execute_with(q, "blockdev-add", node, -1, on_blockdev_added, j);
        if (r < 0)
                job_fail(j, r, "qmp blockdev-add: %s", strerror(-r));
}

/* The first hotplug port of a query-pci reply with nothing behind it; NULL when none is. */
static const char *free_port(json_t *value)
{
        size_t b;
        json_t *bus;
        json_array_foreach (value, b, bus) {
                for (size_t k = 0; k < VMM_HOTPLUG_PORTS_MAX; k++) {
                        size_t d;
                        json_t *dev;
                        json_array_foreach (json_object_get(bus, "devices"), d, dev) {
                                const char *id = json_string_value(json_object_get(dev, "qdev_id"));
                                json_t *behind =
                                    json_object_get(json_object_get(dev, "pci_bridge"), "devices");
                                if (id && streq(id, vmm_hotplug_port(k)) && json_is_array(behind) &&
                                    json_array_size(behind) == 0)
                                        return vmm_hotplug_port(k);
                        }
                }
        }
        return NULL;
}

static void on_ports(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        j->port = json_is_array(value) ? free_port(value) : NULL;
        if (!j->port) {
                job_fail(j, -ENOSPC, "no free hotplug port for %s", j->node);
                return;
        }
        /* opaque names the node, for whoever reads query-fdsets. */
        json_auto_t *args = json_pack("{s:s}", "opaque", j->node);
        r = args ? vmm_qmp_execute_with(q, "add-fd", args, j->fd, on_fd_added, j) : -ENOMEM;
        if (r < 0)
                job_fail(j, r, "qmp add-fd: %s", strerror(-r));
}

static void on_attach_ready(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)value;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        r = vmm_qmp_execute(q, "query-pci", on_ports, j);
        if (r < 0)
                job_fail(j, r, "qmp query-pci: %s", strerror(-r));
}

int vmm_block_attach(sd_event *event, const char *qmp_socket, const VmmDrive *drive,
                     VmmBlockDone done, void *userdata, VmmBlockJob **ret)
{
        if (!drive->node_name || !drive->serial || drive->fd < 0 ||
            drive->device != VMM_DRIVE_VIRTIO_BLK)
                return -EINVAL;
        VmmBlockJob *j = NULL;
        int r = job_new(BLOCK_ATTACH, event, done, userdata, &j);
        if (r < 0)
                return r;
        j->drive = *drive;
        j->node = strdup(drive->node_name);
        j->serial = strdup(drive->serial);
        j->fd = fcntl(drive->fd, F_DUPFD_CLOEXEC, 3);
        if (!j->node || !j->serial || j->fd < 0) {
                r = j->fd < 0 && j->node && j->serial ? negative_errno() : -ENOMEM;
                vmm_block_job_free(j);
                return r;
        }
        j->drive.node_name = j->node;
        j->drive.serial = j->serial;
        j->drive.fd = -1;
        r = vmm_qmp_connect(event, qmp_socket, 0, on_attach_ready, j, &j->qmp);
        if (r < 0) {
                vmm_block_job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

/* ---- detach -------------------------------------------------------------------------------- */

static void on_blockdev_deleted(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)q;
        (void)value;
        /* A node the device never had is gone already (a settle after an interrupted attach). */
        if (r < 0 && j->device_path)
                job_finish(j, r, error, NULL);
        else
                job_finish(j, 0, NULL, NULL);
}

static void delete_node(VmmBlockJob *j)
{
        j->timer = sd_event_source_disable_unref(j->timer);
        json_auto_t *args = json_pack("{s:s}", "node-name", j->node);
        int r = args
                    ? vmm_qmp_execute_with(j->qmp, "blockdev-del", args, -1, on_blockdev_deleted, j)
                    : -ENOMEM;
        if (r < 0)
                job_fail(j, r, "qmp blockdev-del: %s", strerror(-r));
}

static void on_event(VmmQmp *q, const char *event, json_t *data, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)q;
        if (!streq(event, "DEVICE_DELETED") || !j->device_path || j->deleted)
                return;
        const char *path = json_string_value(json_object_get(data, "path"));
        if (!path || !streq(path, j->device_path))
                return;
        j->deleted = true;
        /* The event can come before device_del's own reply; the node goes after both. */
        if (j->unplug_sent)
                delete_node(j);
}

static int on_release_timeout(sd_event_source *s, uint64_t usec, void *userdata)
{
        VmmBlockJob *j = userdata;
        char d[DURATION_STRLEN];
        (void)s;
        (void)usec;
        job_fail(j, -EBUSY, "the guest did not release the device within %s",
                 format_duration(j->release_timeout, d));
        return 0;
}

static void on_device_del(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)q;
        (void)value;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        j->unplug_sent = true;
        if (j->deleted) {
                delete_node(j);
                return;
        }
        r = sd_event_add_time_relative(j->event, &j->timer, CLOCK_MONOTONIC,
                                       j->release_timeout / NSEC_PER_USEC, 1000, on_release_timeout,
                                       j);
        if (r < 0)
                job_fail(j, r, "arm the release timer: %s", strerror(-r));
}

static void on_detach_query(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        _cleanup_free_ char *path = NULL;
        r = find_node(value, j->node, &path);
        if (r < 0) {
                job_fail(j, r, "qmp query-block: %s",
                         r == -EBADMSG ? "the reply is not an array" : strerror(-r));
                return;
        }
        if (!path) {
                /* No device holds the node: only the node may be left to close. */
                delete_node(j);
                return;
        }
        j->device_path = TAKE_PTR(path);
        json_auto_t *args = json_pack("{s:s}", "id", j->device_path);
        r = args ? vmm_qmp_execute_with(q, "device_del", args, -1, on_device_del, j) : -ENOMEM;
        if (r < 0)
                job_fail(j, r, "qmp device_del: %s", strerror(-r));
}

static void on_detach_ready(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)value;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        vmm_qmp_set_event_handler(q, on_event, j);
        r = vmm_qmp_execute(q, "query-block", on_detach_query, j);
        if (r < 0)
                job_fail(j, r, "qmp query-block: %s", strerror(-r));
}

int vmm_block_detach(sd_event *event, const char *qmp_socket, const char *node_name,
                     nsec_t release_timeout, VmmBlockDone done, void *userdata, VmmBlockJob **ret)
{
        VmmBlockJob *j = NULL;
        int r = job_new(BLOCK_DETACH, event, done, userdata, &j);
        if (r < 0)
                return r;
        j->release_timeout = release_timeout;
        j->node = strdup(node_name);
        if (!j->node) {
                vmm_block_job_free(j);
                return -ENOMEM;
        }
        r = vmm_qmp_connect(event, qmp_socket, 0, on_detach_ready, j, &j->qmp);
        if (r < 0) {
                vmm_block_job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

/* ---- query --------------------------------------------------------------------------------- */

static void on_query_ready(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        VmmBlockJob *j = userdata;
        (void)value;
        if (r < 0) {
                job_finish(j, r, error, NULL);
                return;
        }
        r = vmm_qmp_execute(q, "query-block", on_query_reply, j);
        if (r < 0)
                job_fail(j, r, "qmp query-block: %s", strerror(-r));
}

int vmm_block_query(sd_event *event, const char *qmp_socket, VmmBlockDone done, void *userdata,
                    VmmBlockJob **ret)
{
        VmmBlockJob *j = NULL;
        int r = job_new(BLOCK_QUERY, event, done, userdata, &j);
        if (r < 0)
                return r;
        r = vmm_qmp_connect(event, qmp_socket, 0, on_query_ready, j, &j->qmp);
        if (r < 0) {
                vmm_block_job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}
