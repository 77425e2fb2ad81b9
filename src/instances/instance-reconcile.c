/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The instance stages of a reconcile pass (REC-4, REC-5, REC-10, VMM-8): liveness probes on
 * the disk pool with the pass's one fd scan, then stale releases and resumed deletes as
 * ordinary operations, and console truncation.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "instances/instance-internal.h"

/* ---- probes -------------------------------------------------------------------------------- */

typedef struct ProbeJob {
        InstanceManager *m;
        char id[INSTANCE_ID_LEN + 1];
        const Root *proc;
        char *boot_id, *recorded_boot_id, *qmp_socket, *dev_root;
        pid_t pid;
        uint64_t start_time;
        DeviceScan *scan;
        bool steps_1_2;
        VmmLiveness result;
        bool done;
        InstanceProbeDone callback;
        void *userdata;
        const char *qemu_binary; /* the configuration's, as long-lived as the manager */
} ProbeJob;

static void probe_job_free(void *data)
{
        ProbeJob *j = data;
        if (j->done)
                vmm_liveness_done(&j->result);
        device_scan_unref(j->scan);
        free(j->boot_id);
        free(j->recorded_boot_id);
        free(j->qmp_socket);
        free(j->dev_root);
        free(j);
}

static int probe_job_run(void *data, char **error)
{
        ProbeJob *j = data;
        VmmLivenessQuery q = {
            .proc = j->proc,
            .boot_id = j->boot_id,
            .qemu_binary = j->qemu_binary,
            .identity = {.pid = j->pid,
                         .start_time = j->start_time,
                         .boot_id = j->recorded_boot_id,
                         .qmp_socket = j->qmp_socket},
            .scan = j->scan ? device_scan_get(j->scan) : NULL,
            .dev_root = j->steps_1_2 ? NULL : j->dev_root,
        };
        int r = vmm_liveness_probe(&q, &j->result);
        if (r < 0)
                return error_set_oom(error);
        j->done = true;
        return 0;
}

static void probe_job_done(int r, void *data, const char *error, void *userdata)
{
        ProbeJob *j = data;
        (void)userdata;
        if (!j)
                return; /* no deadline: the pool never ends a probe itself */
        VmmLiveness ambiguous = {.verdict = VMM_AMBIGUOUS, .pidfd = -1, .reason = (char *)error};
        j->callback(j->m, j->id, r >= 0 ? &j->result : &ambiguous, j->userdata);
}

int instance_probe(Instance *i, DeviceScan *scan, bool steps_1_2, InstanceProbeDone done,
                   void *userdata)
{
        InstanceManager *m = i->m;
        const InstanceHypervisor *h = &i->rec.hypervisor;
        ProbeJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        *j = (ProbeJob){.m = m,
                        .proc = m->cfg.proc,
                        .qemu_binary = m->config->qemu_binary,
                        .pid = h->pid,
                        .start_time = h->start_time,
                        .scan = scan ? device_scan_ref(scan) : NULL,
                        .steps_1_2 = steps_1_2,
                        .callback = done,
                        .userdata = userdata};
        snprintf(j->id, sizeof j->id, "%s", i->rec.id);
        if (strdup_nullable(m->boot_id, &j->boot_id) < 0 ||
            strdup_nullable(h->boot_id, &j->recorded_boot_id) < 0 ||
            strdup_nullable(h->qmp_socket, &j->qmp_socket) < 0 ||
            strdup_nullable(m->cfg.dev_root, &j->dev_root) < 0) {
                probe_job_free(j);
                return -ENOMEM;
        }
        _cleanup_free_ char *error = NULL;
        int r = worker_pool_submit(m->cfg.disk_pool,
                                   &(WorkerJob){.key = i->rec.id,
                                                .run = probe_job_run,
                                                .done = probe_job_done,
                                                .data = j,
                                                .free_data = probe_job_free},
                                   &error);
        if (r < 0)
                probe_job_free(j);
        return r;
}

/* ---- the sweep ------------------------------------------------------------------------------ */

typedef struct Sweep {
        InstanceManager *m;
        DeviceScan *scan;
        unsigned pending;
        InstanceReconcileResult result;
        InstanceReconcileDone done;
        void *userdata;
} Sweep;

void instance_sweep_free(Sweep *s)
{
        if (!s)
                return;
        device_scan_unref(s->scan);
        free(s);
}

static void sweep_step_done(Sweep *s)
{
        if (--s->pending > 0)
                return;
        InstanceManager *m = s->m;
        m->sweep = NULL;
        InstanceReconcileResult res = s->result;
        InstanceReconcileDone done = s->done;
        void *userdata = s->userdata;
        instance_sweep_free(s);
        if (done)
                done(&res, userdata);
}

static void stale_done(const InstanceOutcome *o, void *userdata)
{
        Sweep *s = userdata;
        if (o->r >= 0)
                s->result.released++;
        else if (o->failure == INSTANCE_FAILURE_BUSY)
                /* The re-check found it listening again. Not -EBUSY: a driver that refuses the
                 * release says EBUSY too, and that is REC-5's failure. */
                s->result.kept++;
        else
                s->result.release_failed++;
        sweep_step_done(s);
}

static void delete_done(const InstanceOutcome *o, void *userdata)
{
        Sweep *s = userdata;
        if (o->r >= 0)
                s->result.deletes_resumed++;
        sweep_step_done(s);
}

/*
 * A VMM that an earlier verdict could not see (its socket not yet bound when start-up looked,
 * or ambiguous then) is watched from now on, its identity written; behind a Stopped or Failed
 * record it is terminated, as INST-21 says for start-up.
 */
static void adopt(Instance *i, VmmLiveness *l)
{
        int r = instance_attach_vmm(i, l->pid, l->pidfd, false, l->start_time);
        l->pidfd = -1; /* taken, whatever the result */
        if (r < 0) {
                log_line(LOG_LEVEL_WARNING, r, "cannot watch a live VMM", "instance_id", i->rec.id,
                         NULL);
                return;
        }
        log_line(LOG_LEVEL_NOTICE, 0, "found a live VMM", "instance_id", i->rec.id, "state",
                 instance_state_to_string(i->rec.state), NULL);
        if (instance_set_identity(i, l->pid, l->start_time) < 0)
                return;
        if (i->rec.state == INSTANCE_STOPPED || i->rec.state == INSTANCE_FAILED) {
                i->recovery = RECOVERY_TERMINATE;
                instance_ops_recover(i);
        } else
                (void)instance_write(i, NULL);
}

static void on_probe(InstanceManager *m, const char *id, const VmmLiveness *l, void *userdata)
{
        Sweep *s = userdata;
        Instance *i = instance_find(m, id);
        s->result.checked++;
        if (!i || i->op) {
                sweep_step_done(s);
                return;
        }
        bool claimed = instance_record_is_claimed(&i->rec);
        i->ambiguous = l->verdict == VMM_AMBIGUOUS;
        if (l->verdict != VMM_GONE) {
                if (claimed)
                        s->result.kept++;
                if (l->verdict == VMM_AMBIGUOUS && claimed)
                        m->liveness_uncertain++; /* VMM-19 */
                if (l->verdict == VMM_ALIVE && !i->vmm)
                        adopt(i, (VmmLiveness *)l);
                sweep_step_done(s);
                return;
        }
        int r = -ENOENT;
        if (i->rec.state == INSTANCE_DELETING)
                r = instance_ops_resume_delete(i, delete_done, s);
        else if (claimed)
                r = instance_ops_release_stale(i, s->scan, stale_done, s);
        else {
                /* Nothing to release: the identity of a VMM proven gone is forgotten. */
                instance_record_clear_hypervisor(&i->rec);
                if (i->rec.state == INSTANCE_RUNNING)
                        i->rec.state = INSTANCE_STOPPED;
                (void)instance_write(i, NULL);
        }
        if (r < 0)
                sweep_step_done(s);
}

/* VMM-8: a console over vmm.console_max_bytes starts again with a marker. */
typedef struct TruncateJob {
        int dirfd;
        uint64_t max;
        char **ids;
        unsigned truncated;
        Sweep *s;
} TruncateJob;

#define CONSOLE_TRUNCATED_MARK "[vgpud: console log truncated]\n"

static int truncate_run(void *data, char **error)
{
        TruncateJob *j = data;
        for (char **id = j->ids; id && *id; id++) {
                _cleanup_free_ char *rel = NULL;
                if (strprintf(&rel, "%s/%s", *id, INSTANCE_CONSOLE_FILE) < 0)
                        return error_set_oom(error);
                /* INST-2a: a FIFO or a link in its place is skipped at once, never waited on. */
                _cleanup_close_ int fd = open_own_file_at(j->dirfd, rel, O_WRONLY | O_APPEND, 0);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size <= j->max)
                        continue;
                /* QEMU appends (append=on), so it carries on after the marker. */
                if (ftruncate(fd, 0) < 0 ||
                    write_all(fd, CONSOLE_TRUNCATED_MARK, strlen(CONSOLE_TRUNCATED_MARK)) < 0) {
                        log_line(LOG_LEVEL_WARNING, -errno, "cannot truncate a console log",
                                 "instance_id", *id, NULL);
                        continue;
                }
                j->truncated++;
        }
        return 0;
}

static void truncate_done(int r, void *data, const char *error, void *userdata)
{
        TruncateJob *j = data;
        Sweep *s = userdata;
        if (j)
                s->result.consoles_truncated = j->truncated;
        sweep_step_done(s);
}

static void truncate_free(void *data)
{
        TruncateJob *j = data;
        strv_free(j->ids);
        free(j);
}

static void submit_truncation(Sweep *s)
{
        InstanceManager *m = s->m;
        TruncateJob *j = calloc(1, sizeof *j);
        if (!j)
                return;
        *j = (TruncateJob){
            .dirfd = m->cfg.instances_dirfd, .max = m->config->vmm.console_max_bytes, .s = s};
        for (size_t k = 0; k < m->n_instances; k++)
                if (strv_push(&j->ids, m->instances[k]->rec.id) < 0) {
                        truncate_free(j);
                        return;
                }
        _cleanup_free_ char *error = NULL;
        if (worker_pool_submit(m->cfg.disk_pool,
                               &(WorkerJob){.run = truncate_run,
                                            .done = truncate_done,
                                            .data = j,
                                            .free_data = truncate_free,
                                            .userdata = s},
                               &error) < 0) {
                truncate_free(j);
                return;
        }
        s->pending++;
}

/* Whether a pass decides on this instance's liveness now (REC-4, REC-10). */
static bool wants_probe(const Instance *i)
{
        if (i->op || (i->vmm && !i->exited))
                return false;
        const InstanceHypervisor *h = &i->rec.hypervisor;
        return instance_record_is_claimed(&i->rec) || i->rec.state == INSTANCE_DELETING ||
               h->pid > 0 || h->qmp_socket;
}

/* ---- list_instances (REC-3) and the .deleted-* retries (REC-10) ---------------------------- */

/* A record the listing could not load: its id, the load's result and text. */
typedef struct Unloadable {
        char id[INSTANCE_ID_LEN + 1];
        int r;
        char *error;
} Unloadable;

typedef struct ListJob {
        int dirfd;
        const char *runtime_instances; /* the manager's: it outlives the pool's jobs */
        char **known;                  /* ids in memory: not loaded again */
        InstanceRecord *loaded;
        size_t n_loaded;
        Unloadable *unreadable; /* records that did not load, in listing order */
        size_t n_unreadable;
} ListJob;

static void list_job_free(void *data)
{
        ListJob *j = data;
        for (size_t k = 0; k < j->n_loaded; k++)
                instance_record_done(&j->loaded[k]);
        free(j->loaded);
        strv_free(j->known);
        for (size_t k = 0; k < j->n_unreadable; k++)
                free(j->unreadable[k].error);
        free(j->unreadable);
        free(j);
}

static bool strv_has(char *const *v, const char *s)
{
        for (; v && *v; v++)
                if (streq(*v, s))
                        return true;
        return false;
}

static int unloadable_push(ListJob *j, const char *id, int r, const char *error)
{
        Unloadable *n = reallocarray(j->unreadable, j->n_unreadable + 1, sizeof *n);
        if (!n)
                return -ENOMEM;
        j->unreadable = n;
        Unloadable *u = &n[j->n_unreadable];
        *u = (Unloadable){.r = r, .error = strdup(error ? error : strerror(-r))};
        if (!u->error)
                return -ENOMEM;
        snprintf(u->id, sizeof u->id, "%s", id);
        j->n_unreadable++;
        return 0;
}

static int list_job_run(void *data, char **error)
{
        ListJob *j = data;
        InstanceDirList l = {0};
        int r = instance_dir_list_at(j->dirfd, &l, error);
        if (r < 0)
                return r;
        for (char **p = l.deleted; p && *p; p++) {
                _cleanup_free_ char *e = NULL;
                if (instance_tree_delete_at(j->dirfd, *p, &e) < 0)
                        log_line(LOG_LEVEL_WARNING, 0, "cannot delete removed instance", "name", *p,
                                 "error", e, NULL);
        }
        for (char **id = l.ids; id && *id && r >= 0; id++) {
                if (strv_has(j->known, *id))
                        continue;
                InstanceRecord rec = {0};
                _cleanup_free_ char *e = NULL;
                int k = instance_record_load_at(j->dirfd, j->runtime_instances, *id, &rec, &e);
                if (k == -ENOENT)
                        continue; /* removed meanwhile */
                if (k < 0) {
                        if (unloadable_push(j, *id, k, e) < 0)
                                r = error_set_oom(error);
                        continue;
                }
                InstanceRecord *n = reallocarray(j->loaded, j->n_loaded + 1, sizeof *n);
                if (!n) {
                        instance_record_done(&rec);
                        r = error_set_oom(error);
                        break;
                }
                j->loaded = n;
                j->loaded[j->n_loaded++] = rec;
        }
        instance_dir_list_done(&l);
        return r;
}

static void start_probes(Sweep *s);

static void list_job_done(int r, void *data, const char *error, void *userdata)
{
        Sweep *s = userdata;
        ListJob *j = data;
        InstanceManager *m = s->m;
        if (r < 0 || !j) {
                s->result.unreadable++;
                log_line(LOG_LEVEL_ERR, r, "cannot list instance records", "error", error, NULL);
                sweep_step_done(s);
                return;
        }
        for (size_t k = 0; k < j->n_loaded; k++) {
                if (instance_find(m, j->loaded[k].id))
                        continue; /* created meanwhile */
                Instance *i = instance_new(m);
                if (!i)
                        continue;
                i->rec = j->loaded[k];
                j->loaded[k] = (InstanceRecord){0};
                if (instance_insert(m, i) < 0) {
                        instance_record_done(&i->rec);
                        free(i);
                        continue;
                }
                /* Its claim and VMM are resolved by the probes below, like every other. */
                s->result.loaded++;
                log_line(LOG_LEVEL_NOTICE, 0, "instance record found on disk", "instance_id",
                         i->rec.id, "state", instance_state_to_string(i->rec.state), NULL);
        }
        /* INST-22: the reason follows what is unreadable now. */
        free(m->disabled_reason);
        m->disabled_reason = NULL;
        for (size_t k = 0; k < j->n_unreadable; k++) {
                const Unloadable *u = &j->unreadable[k];
                if (s->result.unreadable++ == 0) {
                        snprintf(s->result.unreadable_id, sizeof s->result.unreadable_id, "%s",
                                 u->id);
                        s->result.unreadable_transient = instance_load_failure_is_transient(u->r);
                }
                log_line(instance_load_failure_is_transient(u->r) ? LOG_LEVEL_WARNING
                                                                  : LOG_LEVEL_ERR,
                         u->r, instance_load_failure_event(u->r), "instance_id", u->id, "error",
                         u->error, NULL);
                if (!m->disabled_reason)
                        (void)strprintf(&m->disabled_reason,
                                        "instance record %s/instances/%s %s: %s",
                                        m->config->data_dir, u->id,
                                        instance_load_failure_reason(u->r), u->error);
        }
        if (s->result.unreadable == 0)
                start_probes(s);
        sweep_step_done(s);
}

static int submit_list(Sweep *s)
{
        InstanceManager *m = s->m;
        ListJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->dirfd = m->cfg.instances_dirfd;
        j->runtime_instances = m->runtime_instances;
        for (size_t k = 0; k < m->n_instances; k++)
                if (strv_push(&j->known, m->instances[k]->rec.id) < 0) {
                        list_job_free(j);
                        return -ENOMEM;
                }
        _cleanup_free_ char *error = NULL;
        int r = worker_pool_submit(m->cfg.disk_pool,
                                   &(WorkerJob){.run = list_job_run,
                                                .done = list_job_done,
                                                .data = j,
                                                .free_data = list_job_free,
                                                .userdata = s},
                                   &error);
        if (r < 0) {
                list_job_free(j);
                return r;
        }
        s->pending++;
        return 0;
}

static void start_probes(Sweep *s)
{
        InstanceManager *m = s->m;
        DeviceScan *scan = s->scan;
        for (size_t k = 0; k < m->n_instances; k++) {
                Instance *i = m->instances[k];
                /* DISK-8: an interrupted attach or detach; it answers nobody, so no wait. */
                instance_volumes_settle(i);
                if (!wants_probe(i))
                        continue;
                if (instance_probe(i, scan, false, on_probe, s) >= 0)
                        s->pending++;
        }
        submit_truncation(s);
}

int instance_manager_reconcile(InstanceManager *m, DeviceScan *scan, InstanceReconcileDone done,
                               void *userdata)
{
        if (m->sweep)
                return -EBUSY;
        Sweep *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (Sweep){.m = m,
                     .scan = scan ? device_scan_ref(scan) : NULL,
                     .pending = 1, /* held until everything is submitted */
                     .done = done,
                     .userdata = userdata};
        m->sweep = s;
        /* NET-4, REL-14: bridge, table and hosts files made equal to the records again. */
        instance_nat_sync(m);
        int r = submit_list(s);
        if (r < 0) {
                s->result.unreadable++;
                log_line(LOG_LEVEL_ERR, r, "cannot list instance records", NULL);
        }
        sweep_step_done(s);
        return 0;
}
