/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Manager's instance side: the disk pool, DeviceOps and the InstanceManager (which owns the
 * Claimer), wired to the health store, the host tracker and the API's snapshot.
 */
#include <fcntl.h>

#include "manager.h"

/* DEV-2's questions, answered from the health store. */
static bool guard_is_quarantined(void *userdata, const char *vf)
{
        Manager *m = userdata;
        return m->health && health_store_is_quarantined(m->health, vf);
}

static const char *guard_store_unavailable(void *userdata)
{
        Manager *m = userdata;
        return m->health ? health_store_unavailable_reason(m->health) : NULL;
}

/* DISK-2's `instances`, DISK-4's refusal: records in any state whose root disk is the image. */
static unsigned count_image_users(const char *name, void *userdata)
{
        Manager *m = userdata;
        const InstanceRecord *const *list = NULL;
        size_t n = m->instances ? instance_manager_list(m->instances, &list) : 0;
        unsigned users = 0;
        for (size_t k = 0; k < n; k++)
                users += streq_ptr(list[k]->disk.image, name);
        return users;
}

/* DISK-7: a volume's holders are the records that attach it. */
static unsigned volume_holder(const char *id, char **ret, void *userdata)
{
        Manager *m = userdata;
        const InstanceRecord *const *list = NULL;
        size_t n = m->instances ? instance_manager_list(m->instances, &list) : 0;
        unsigned holders = 0;
        for (size_t k = 0; k < n; k++)
                for (size_t i = 0; i < list[k]->n_volumes; i++)
                        if (streq(list[k]->volumes[i].id, id) && holders++ == 0)
                                *ret = strdup(list[k]->id);
        return holders;
}

int manager_instances_setup(Manager *m, char **error)
{
        /*
         * Pools by kind (GEN-2, GEN-4): record writes never queue behind stuck sysfs calls, nor
         * behind a slow helper program or file copy, which get a bounded pool of their own.
         */
        const struct {
                WorkerPoolConfig config;
                WorkerPool **pool;
        } pools[] = {
            {WORKER_POOL_CONFIG_DISK, &m->disk_pool},
            {WORKER_POOL_CONFIG_HELPER, &m->helper_pool},
        };
        int r = 0;
        for (size_t i = 0; i < ELEMENTSOF(pools); i++) {
                r = worker_pool_new(&pools[i].config, pools[i].pool);
                if (r >= 0)
                        r = worker_pool_attach_event(*pools[i].pool, m->event);
                if (r < 0)
                        return error_set(error, r, "set up the %s worker pool: %s",
                                         pools[i].config.name, strerror(-r));
        }

        /* DISK-1: the image store loads before the records that name its images. */
        r = image_store_new(&(ImageStoreConfig){.data_dir_fd = m->data_dir_fd,
                                                .data_dir = m->config.data_dir,
                                                .image_dirs = m->config.image_dirs,
                                                .qemu_img = m->config.storage.qemu_img_binary,
                                                .max_image_size = m->config.storage.max_image_size,
                                                .disk_pool = m->disk_pool,
                                                .helper_pool = m->helper_pool,
                                                .count_users = count_image_users,
                                                .userdata = m},
                            &m->images, error);
        if (r < 0)
                return error_prefix(error, r, "load the image store");
        m->api.images = m->images;
        r = volume_store_new(&(VolumeStoreConfig){.data_dir_fd = m->data_dir_fd,
                                                  .data_dir = m->config.data_dir,
                                                  .qemu_img = m->config.storage.qemu_img_binary,
                                                  .disk_pool = m->disk_pool,
                                                  .helper_pool = m->helper_pool,
                                                  .holder = volume_holder,
                                                  .userdata = m},
                             &m->volumes, error);
        if (r < 0)
                return error_prefix(error, r, "load the volume store");
        m->api.volumes = m->volumes;

        m->instances_dirfd =
            openat(m->data_dir_fd, "instances", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (m->instances_dirfd < 0) {
                r = negative_errno();
                return error_set(error, r, "data_dir %s/instances: %s", m->config.data_dir,
                                 strerror(-r));
        }

        DeviceGuard guard = {.is_quarantined = guard_is_quarantined,
                             .store_unavailable = guard_store_unavailable,
                             .userdata = m};
        m->device_roots =
            (DeviceRoots){.sysfs = m->sysfs, .proc = m->proc, .dev_root = m->config.dev_root};
        r = device_ops_new(&(DeviceOpsConfig){.roots = m->device_roots,
                                              .pool = m->workers,
                                              .sysfs_timeout = m->config.gpu.sysfs_timeout,
                                              .guard = guard},
                           &m->device_ops);
        if (r >= 0)
                r = device_ops_attach_event(m->device_ops, m->event);
        if (r >= 0)
                r = write_gate_new(m->tracker, &m->write_gate);
        if (r < 0)
                return error_set(error, r, "set up device operations: %s", strerror(-r));

        InstanceManagerConfig ic = {
            .config = &m->config,
            .instances_dirfd = m->instances_dirfd,
            .proc = m->proc,
            .dev_root = m->config.dev_root,
            .sysfs_path = m->config.sysfs_root,
            .disk_pool = m->disk_pool,
            .helper_pool = m->helper_pool,
            .ops = m->device_ops,
            .images = m->images,
            .volumes = m->volumes,
            .claimer = {.sysfs = m->sysfs,
                        .tracker = m->tracker,
                        .proc = m->proc,
                        .dev_root = m->config.dev_root,
                        .pool = m->workers,
                        .ops = m->device_ops,
                        .gate = m->write_gate,
                        .nvml = m->nvml,
                        .nvml_timeout = m->config.gpu.nvml_timeout,
                        .sysfs_timeout = m->config.gpu.sysfs_timeout,
                        .policy = m->config.gpu.placement_policy,
                        .guard = guard},
            .consumer_released = manager_fleet_consumer_released,
            .userdata = m,
        };
        r = instance_manager_new(&ic, &m->instances, error);
        if (r < 0)
                return r;
        r = instance_manager_attach_event(m->instances, m->event);
        if (r < 0)
                return error_set(error, r, "attach the instance manager: %s", strerror(-r));
        m->api.instances = m->instances;
        m->api.claimer = instance_manager_get_claimer(m->instances);

        /* GEN-10: records load and are classified before discovery, without waiting on VMMs. */
        _cleanup_free_ char *load_error = NULL;
        r = instance_manager_load(m->instances, &load_error);
        if (r < 0)
                return error_set(error, r, "load instance records: %s", load_error);
        return 0;
}

void manager_instances_free(Manager *m)
{
        m->instances = instance_manager_free(m->instances);
        m->device_ops = device_ops_free(m->device_ops);
        m->images = image_store_free(m->images);
        m->volumes = volume_store_free(m->volumes);
        closep(&m->instances_dirfd);
}
