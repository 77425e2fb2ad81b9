/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The instance manager's table: instances in memory, their records on the disk pool, the
 * Claimer's owner, start-up recovery (INST-20, INST-21, INST-22) and the reads of the API (the
 * console's is instance-console.c's).
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "instances/instance-internal.h"

/* ---- the table ----------------------------------------------------------------------------- */

static int instance_compare(const Instance *a, const Instance *b)
{
        int c = timestamp_compare(a->rec.created_at, b->rec.created_at);
        return c != 0 ? c : strcmp(a->rec.id, b->rec.id);
}

Instance *instance_new(InstanceManager *m)
{
        Instance *i = calloc(1, sizeof *i);
        if (i)
                i->m = m;
        return i;
}

static Instance *instance_free(Instance *i)
{
        if (!i)
                return NULL;
        if (i->op)
                instance_op_free(i->op);
        instance_console_followers_free(i);
        vmm_free(i->vmm);
        instance_record_done(&i->rec);
        free(i);
        return NULL;
}

int instance_insert(InstanceManager *m, Instance *i)
{
        Instance **n = reallocarray(m->instances, m->n_instances + 1, sizeof *n);
        if (!n)
                return -ENOMEM;
        m->instances = n;
        int r = instance_index_add(m, i);
        if (r < 0)
                return r;
        size_t at = m->n_instances;
        while (at > 0 && instance_compare(m->instances[at - 1], i) > 0)
                at--;
        memmove(&m->instances[at + 1], &m->instances[at], (m->n_instances - at) * sizeof *n);
        m->instances[at] = i;
        m->n_instances++;
        m->generation++;
        return 0;
}

void instance_drop(InstanceManager *m, Instance *i)
{
        /* NET-4, NET-6: its address, name and forwards leave the table and dnsmasq's files. */
        bool nat = i->rec.network.mode == INSTANCE_NETWORK_NAT;
        m->generation++;
        instance_index_remove(m, i);
        for (size_t k = 0; k < m->n_instances; k++)
                if (m->instances[k] == i) {
                        memmove(&m->instances[k], &m->instances[k + 1],
                                (m->n_instances - k - 1) * sizeof *m->instances);
                        m->n_instances--;
                        break;
                }
        instance_free(i);
        if (nat)
                instance_nat_sync(m);
}

char *instance_runtime_path(const Instance *i, const char *name)
{
        char *p = NULL;
        if (strprintf(&p, "%s/%s/%s", i->m->runtime_instances, i->rec.id, name) < 0)
                return NULL;
        return p;
}

bool instance_has_vfio(const Instance *i)
{
        return i->rec.gpu.device_path != NULL;
}

/* ---- record writes on the disk pool (INST-1, GEN-4) ---------------------------------------- */

typedef struct WriteJob {
        int dirfd;
        InstanceRecord copy;
        Instance *i;
        InstanceWriteDone next;
} WriteJob;

static int write_job_run(void *data, char **error)
{
        WriteJob *j = data;
        return instance_record_save_at(j->dirfd, &j->copy, error);
}

static void write_job_done(int r, void *data, const char *error, void *userdata)
{
        Instance *i = userdata;
        InstanceManager *m = i->m;
        InstanceWriteDone next = data ? ((WriteJob *)data)->next : NULL;
        i->writes--;
        if (r < 0)
                log_line(LOG_LEVEL_ERR, r, "save instance record failed", "instance_id", i->rec.id,
                         "error", error, NULL);
        /* A failed write may put a claim back or clear one (claim_write_done, the ops' own). */
        m->generation++;
        if (next)
                next(i, r, error);
        m->generation++;
}

static void write_job_free(void *data)
{
        WriteJob *j = data;
        instance_record_done(&j->copy);
        free(j);
}

/*
 * Record writes have no deadline, so the pool never ends one itself and done() always gets
 * the data back with its next step.
 */
int instance_write(Instance *i, InstanceWriteDone next)
{
        /* The claim it carries was set or cleared in memory in this same turn. */
        i->m->generation++;
        WriteJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->dirfd = i->m->cfg.instances_dirfd;
        j->i = i;
        j->next = next;
        int r = instance_record_copy(&i->rec, &j->copy);
        if (r < 0) {
                free(j);
                return r;
        }
        _cleanup_free_ char *error = NULL;
        r = worker_pool_submit(i->m->cfg.disk_pool,
                               &(WorkerJob){.key = i->rec.id,
                                            .run = write_job_run,
                                            .done = write_job_done,
                                            .data = j,
                                            .free_data = write_job_free,
                                            .userdata = i},
                               &error);
        if (r < 0) {
                write_job_free(j);
                return r;
        }
        i->writes++;
        return 0;
}

/* ---- VMMs ---------------------------------------------------------------------------------- */

static void on_vmm_exited(Vmm *v, const VmmExit *exit, void *userdata)
{
        Instance *i = userdata;
        i->exited = true;
        i->last_exit = *exit;
        instance_console_vmm_exited(i);
        if (exit->status_known && exit->signal == SIGKILL && !exit->killed_by_us &&
            instance_has_vfio(i))
                /* VMM-13: a kill vgpud did not send is worth the same warning. */
                log_line(LOG_LEVEL_WARNING, 0, "VMM killed; VF may wedge", "instance_id", i->rec.id,
                         "device_path", i->rec.gpu.device_path, "in_grace",
                         vmm_in_init_window(v) ? "true" : "false", NULL);
        if (!i->op)
                instance_ops_vmm_exited(i);
}

static void on_vmm_forced_kill(Vmm *v, bool in_grace, void *userdata)
{
        Instance *i = userdata;
        i->m->forced_kills[in_grace ? 1 : 0]++;
        log_line(LOG_LEVEL_WARNING, 0, "VMM killed; VF may wedge", "instance_id", i->rec.id,
                 "device_path", i->rec.gpu.device_path, "in_grace", in_grace ? "true" : "false",
                 NULL);
}

/* VMM-16: every signal vgpud sends to a VMM is logged, VFIO or not. */
static void on_vmm_signalled(Vmm *v, int sig, bool group, const char *reason, void *userdata)
{
        Instance *i = userdata;
        char pid[16], name[24];
        snprintf(pid, sizeof pid, "%d", (int)vmm_pid(v));
        snprintf(name, sizeof name, "SIG%s", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
        _cleanup_free_ char *why = NULL;
        if (group && strprintf(&why, "%s; to its process group", reason) < 0)
                why = NULL;
        log_line(LOG_LEVEL_NOTICE, 0, "signalled VMM", "instance_id", i->rec.id, "pid", pid,
                 "signal", name, "reason", why ? why : reason, NULL);
}

int instance_attach_vmm(Instance *i, pid_t pid, int pidfd, bool is_child, uint64_t start_time)
{
        const Config *c = i->m->config;
        Vmm *v = NULL;
        int r = vmm_new(&(VmmConfig){.pid = pid,
                                     .pidfd = pidfd,
                                     .is_child = is_child,
                                     .start_time = start_time,
                                     .qmp_socket = i->rec.hypervisor.qmp_socket,
                                     .has_vfio = instance_has_vfio(i),
                                     .vfio_term_grace = c->gpu.vfio_term_grace,
                                     .vfio_init_window = c->gpu.vfio_init_window,
                                     .exited = on_vmm_exited,
                                     .forced_kill = on_vmm_forced_kill,
                                     .signalled = on_vmm_signalled,
                                     .userdata = i},
                        &v);
        if (r >= 0 && i->m->event)
                r = vmm_attach_event(v, i->m->event);
        if (r < 0) {
                /*
                 * An unwatched child of ours must not run on (INST-13's rule). Unreaped, its pid
                 * is still its own when it has no pidfd.
                 */
                if (is_child) {
                        char text[16];
                        snprintf(text, sizeof text, "%d", (int)pid);
                        if (pidfd >= 0)
                                (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                        else
                                (void)kill(pid, SIGKILL);
                        log_line(LOG_LEVEL_NOTICE, 0, "signalled VMM", "instance_id", i->rec.id,
                                 "pid", text, "signal", "SIGKILL", "reason", "cannot watch it",
                                 NULL);
                        log_line(LOG_LEVEL_ERR, r, "cannot watch the VMM; it was killed",
                                 "instance_id", i->rec.id, NULL);
                }
                if (v)
                        vmm_free(v); /* it had taken the pidfd */
                else
                        closep(&pidfd);
                return r;
        }
        vmm_free(i->vmm);
        i->vmm = v;
        i->exited = false;
        i->ambiguous = false;
        return 0;
}

int instance_set_identity(Instance *i, pid_t pid, uint64_t start_time)
{
        char *boot_id = NULL;
        if (strdup_nullable(i->m->boot_id, &boot_id) < 0)
                return -ENOMEM;
        i->rec.hypervisor.pid = pid;
        i->rec.hypervisor.start_time = start_time;
        free(i->rec.hypervisor.boot_id);
        i->rec.hypervisor.boot_id = boot_id;
        return 0;
}

void instance_forget_vmm(Instance *i)
{
        /* A stop's done runs before the exit callback, and may forget the VMM first (CONS-2). */
        if (i->vmm)
                instance_console_vmm_exited(i);
        i->vmm = vmm_free(i->vmm);
        i->exited = false;
}

/* ---- the Claimer's owner (PLACE-1, PLACE-20) ----------------------------------------------- */

static void claim_write_done(Instance *i, int r, const char *error);

static int owner_save(void *userdata, const ClaimRecord *rec, Claim *token, char **error)
{
        InstanceManager *m = userdata;
        Instance *i = instance_find(m, rec->instance_id);
        if (!i)
                return error_set(error, -ENOENT, "instance %s is gone", rec->instance_id);
        InstanceGpu *g = &i->rec.gpu;
        free(g->framework);
        free(g->device_path);
        free(g->mdev_uuid);
        g->framework = strdup(rec->framework);
        g->device_path = strdup(rec->device_path);
        g->mdev_uuid = rec->mdev_uuid ? strdup(rec->mdev_uuid) : NULL;
        g->claimed_at = rec->claimed_at;
        snprintf(i->vf, sizeof i->vf, "%s", rec->vf);
        if (!g->framework || !g->device_path || (rec->mdev_uuid && !g->mdev_uuid)) {
                instance_record_clear_claim(&i->rec);
                return error_set_oom(error);
        }
        i->claim_token = token;
        i->claim_clear = false;
        int r = instance_write(i, claim_write_done);
        if (r < 0) {
                instance_record_clear_claim(&i->rec);
                return error_set(error, r, "write instance record: %s", strerror(-r));
        }
        return 0;
}

static int owner_clear(void *userdata, const ClaimRecord *rec, Claim *token, char **error)
{
        InstanceManager *m = userdata;
        Instance *i = instance_find(m, rec->instance_id);
        if (!i)
                return error_set(error, -ENOENT, "instance %s is gone", rec->instance_id);
        instance_record_clear_claim(&i->rec);
        i->vf[0] = 0;
        i->claim_token = token;
        i->claim_clear = true;
        int r = instance_write(i, claim_write_done);
        if (r < 0)
                return error_set(error, r, "write instance record: %s", strerror(-r));
        return 0;
}

static void claim_write_done(Instance *i, int r, const char *error)
{
        Claim *token = TAKE_PTR(i->claim_token);
        if (r < 0 && !i->claim_clear) {
                instance_record_clear_claim(&i->rec);
                i->vf[0] = 0;
        }
        if (i->claim_clear)
                claimer_clear_done(i->m->claimer, token, r, error);
        else
                claimer_save_done(i->m->claimer, token, r, error);
}

static bool owner_is_claimed(void *userdata, const char *vf, uint64_t *ret_fb)
{
        const InstanceRecord *r = instance_manager_find_claim(userdata, vf);
        if (!r)
                return false;
        *ret_fb = gpu_profile_framebuffer_mib(r->gpu.profile);
        return true;
}

int instance_manager_reread_host(InstanceManager *m, const char *vf, GpuTrackerDone done,
                                 void *userdata)
{
        GpuTracker *t = m->cfg.claimer.tracker;
        _cleanup_free_ char *error = NULL;
        const GpuHost *h = t ? gpu_tracker_host(t) : NULL;
        m->generation++; /* a release clears the claim in the turn that asks for this */
        const GpuVf *v = h && vf ? gpu_host_find_vf(h, vf) : NULL;
        /*
         * Only a GPU that decides on NVML placements is served by its VFs' types alone; the
         * sysfs lists of the others, and mdevs (directories), need a full discovery.
         */
        bool full = !v || !claimer_gpu_uses_nvml(m->claimer, v->parent);
        int r = !t     ? -ENODEV
                : full ? gpu_tracker_discover(t, done, userdata, &error)
                       : gpu_tracker_reread_types(t, done, userdata, &error);
        if (r < 0 && t)
                log_line(LOG_LEVEL_WARNING, r, "cannot re-read the host after a VF change", "vf",
                         vf, "error", error, NULL);
        return r;
}

/* DISC-20: a configure or reset by the Claimer has ended. */
static void owner_vf_changed(void *userdata, const char *vf)
{
        (void)instance_manager_reread_host(userdata, vf, NULL, NULL);
}

static void owner_reserved(void *userdata, const char *instance_id)
{
        Instance *i = instance_find(userdata, instance_id);
        if (i)
                instance_ops_reserved(i);
}

/* ---- construction -------------------------------------------------------------------------- */

int instance_manager_new(const InstanceManagerConfig *config, InstanceManager **ret, char **error)
{
        if (!config || !config->config || !config->disk_pool || !config->helper_pool ||
            !config->ops || config->instances_dirfd < 0)
                return error_set(error, -EINVAL, "instance manager: incomplete configuration");
        _cleanup_(instance_manager_freep) InstanceManager *m = calloc(1, sizeof *m);
        if (!m)
                return error_set_oom(error);
        m->cfg = *config;
        m->config = config->config;
        if (strprintf(&m->runtime_instances, "%s/instances", m->config->runtime_dir) < 0)
                return error_set_oom(error);

        ClaimerConfig cc = config->claimer;
        cc.owner = (ClaimerOwner){.save = owner_save,
                                  .clear = owner_clear,
                                  .is_claimed = owner_is_claimed,
                                  .reserved = owner_reserved,
                                  .vf_changed = owner_vf_changed,
                                  .userdata = m};
        int r = claimer_new(&cc, &m->claimer);
        if (r < 0)
                return error_set(error, r, "claim flow: %s", strerror(-r));
        m->gate = cc.gate;
        r = claim_index_new(&m->claims);
        if (r < 0)
                return error_set_oom(error);
        *ret = TAKE_PTR(m);
        return 0;
}

InstanceManager *instance_manager_free(InstanceManager *m)
{
        if (!m)
                return NULL;
        for (size_t k = 0; k < m->n_instances; k++)
                instance_free(m->instances[k]);
        free(m->instances);
        free(m->by_id);
        claim_index_free(m->claims);
        instance_sweep_free(m->sweep);
        free(m->view);
        claimer_free(m->claimer);
        instance_nat_free(m->nat);
        sd_event_unref(m->event);
        free(m->boot_id);
        free(m->disabled_reason);
        free(m->scan_error);
        free(m->runtime_instances);
        free(m);
        return NULL;
}

int instance_manager_attach_event(InstanceManager *m, sd_event *event)
{
        if (m->event)
                return -EBUSY;
        if (!event) {
                int r = sd_event_default(&m->event);
                if (r < 0)
                        return r;
        } else
                m->event = sd_event_ref(event);
        int r = claimer_attach_event(m->claimer, m->event);
        if (r < 0)
                return r;
        for (size_t k = 0; k < m->n_instances; k++)
                if (m->instances[k]->vmm) {
                        r = vmm_attach_event(m->instances[k]->vmm, m->event);
                        if (r < 0)
                                return r;
                }
        return 0;
}

Claimer *instance_manager_get_claimer(InstanceManager *m)
{
        return m->claimer;
}

const char *instance_manager_disabled_reason(const InstanceManager *m)
{
        return m->disabled_reason;
}

int instance_manager_placement_disabled_reason(const InstanceManager *m, char **ret)
{
        const ClaimerConfig *c = &m->cfg.claimer;
        PlacementDisabledSources sources = {
            .store_unavailable =
                c->guard.store_unavailable ? c->guard.store_unavailable(c->guard.userdata) : NULL,
            .discovery_error = c->tracker ? gpu_tracker_error(c->tracker) : NULL,
            .scan_error = m->scan_error,
            .records_error = m->disabled_reason,
            .pool = c->pool,
        };
        return placement_disabled_reason(&sources, ret);
}

int instance_manager_set_scan_error(InstanceManager *m, const char *error)
{
        char *copy = NULL;
        if (strdup_nullable(error, &copy) < 0)
                return -ENOMEM;
        free(m->scan_error);
        m->scan_error = copy;
        return 0;
}

uint64_t instance_manager_generation(const InstanceManager *m)
{
        return m->generation;
}

/* ---- start-up (GEN-10, INST-20, INST-21, INST-22) ------------------------------------------- */

/* Whether a process listens on <dir>/qmp.sock or agent.sock (INST-20, VMM-17). */
static bool runtime_dir_is_listened(const InstanceManager *m, const char *dir)
{
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r = root_read_file(m->cfg.proc, "net/unix", VMM_NET_UNIX_MAX, &text, &size);
        if (r < 0)
                return true; /* cannot tell: leave it */
        const char *names[] = {INSTANCE_QMP_SOCKET, INSTANCE_AGENT_SOCKET};
        for (size_t k = 0; k < 2; k++) {
                _cleanup_free_ char *path = NULL, *err = NULL;
                uint64_t inode;
                size_t n = 0;
                if (strprintf(&path, "%s/%s", dir, names[k]) < 0)
                        return true;
                if (vmm_net_unix_find_listening(text, size, path, &inode, 1, &n, &err) < 0 || n > 0)
                        return true;
        }
        return false;
}

static void sweep_runtime_dirs(InstanceManager *m)
{
        _cleanup_closedir_ DIR *d = NULL;
        int r = opendir_at(AT_FDCWD, m->runtime_instances, 0, &d);
        if (r < 0) {
                if (r != -ENOENT)
                        log_line(LOG_LEVEL_WARNING, r, "cannot list runtime directories", "path",
                                 m->runtime_instances, NULL);
                return;
        }
        struct dirent *de;
        _cleanup_strv_free_ char **gone = NULL;
        while (readdir_next(d, &de) > 0)
                if (de->d_name[0] != '.' && !instance_find(m, de->d_name))
                        (void)strv_push(&gone, de->d_name);
        for (char **g = gone; g && *g; g++) {
                _cleanup_free_ char *dir = NULL, *err = NULL;
                if (strprintf(&dir, "%s/%s", m->runtime_instances, *g) < 0)
                        return;
                if (runtime_dir_is_listened(m, dir)) {
                        log_line(LOG_LEVEL_WARNING, 0,
                                 "runtime directory of a removed instance is still listened on",
                                 "path", dir, NULL);
                        continue;
                }
                if (instance_tree_delete_at(dirfd(d), *g, &err) < 0)
                        log_line(LOG_LEVEL_WARNING, 0, "cannot remove runtime directory", "path",
                                 dir, "error", err, NULL);
        }
}

static void sweep_leftovers(InstanceManager *m, const InstanceDirList *l)
{
        for (char **p = l->deleted; p && *p; p++) {
                _cleanup_free_ char *err = NULL;
                if (instance_tree_delete_at(m->cfg.instances_dirfd, *p, &err) < 0)
                        log_line(LOG_LEVEL_WARNING, 0, "cannot delete removed instance", "name", *p,
                                 "error", err, NULL);
        }
        for (char **p = l->orphans; p && *p; p++) {
                _cleanup_free_ char *err = NULL;
                log_line(LOG_LEVEL_INFO, 0, "removing instance directory without a record", "name",
                         *p, NULL);
                if (instance_tree_delete_at(m->cfg.instances_dirfd, *p, &err) < 0)
                        log_line(LOG_LEVEL_WARNING, 0, "cannot delete instance directory", "name",
                                 *p, "error", err, NULL);
        }
        for (char **p = l->unknown; p && *p; p++)
                log_line(LOG_LEVEL_WARNING, 0, "unexpected entry in instances directory", "name",
                         *p, NULL);
}

static bool has_hypervisor(const InstanceRecord *r)
{
        return r->hypervisor.pid > 0 || r->hypervisor.qmp_socket;
}

/* Writes a state change of start-up at once: the loop does not serve yet (GEN-10). */
static void save_now(InstanceManager *m, Instance *i)
{
        _cleanup_free_ char *err = NULL;
        if (instance_record_save_at(m->cfg.instances_dirfd, &i->rec, &err) < 0)
                log_line(LOG_LEVEL_ERR, 0, "save instance record failed", "instance_id", i->rec.id,
                         "error", err, NULL);
}

/* INST-21's table for one record, given its VMM's verdict. */
static void classify(InstanceManager *m, Instance *i, const VmmLiveness *l)
{
        InstanceRecord *r = &i->rec;
        InstanceState was = r->state;
        bool had_hypervisor = has_hypervisor(r);
        bool alive = l->verdict == VMM_ALIVE, gone = l->verdict == VMM_GONE;
        if (l->verdict == VMM_AMBIGUOUS) {
                i->ambiguous = true;
                if (instance_record_is_claimed(r))
                        m->liveness_uncertain++;
                log_line(LOG_LEVEL_WARNING, 0, "VMM liveness is ambiguous", "instance_id", r->id,
                         "state", instance_state_to_string(r->state), "reason", l->reason, NULL);
        }
        switch (r->state) {
        case INSTANCE_CREATING:
                if (alive)
                        i->recovery = RECOVERY_READY;
                else {
                        r->state = INSTANCE_FAILED;
                        if (gone)
                                (void)instance_set_error(r, "interrupted by daemon restart");
                }
                break;
        case INSTANCE_RUNNING:
                if (gone) {
                        r->state = INSTANCE_STOPPED;
                        instance_record_clear_hypervisor(r);
                }
                break;
        case INSTANCE_STOPPING:
                if (alive)
                        i->recovery = RECOVERY_STOP;
                else if (gone) {
                        r->state = INSTANCE_STOPPED;
                        instance_record_clear_hypervisor(r);
                } else
                        r->state = INSTANCE_FAILED;
                break;
        case INSTANCE_DELETING:
                /* Gone or alive: the delete completes or resumes; ambiguous: REC-10, later. */
                if (alive || gone)
                        i->recovery = RECOVERY_DELETE;
                break;
        case INSTANCE_STOPPED:
        case INSTANCE_FAILED:
                if (alive)
                        i->recovery = RECOVERY_TERMINATE;
                else if (gone && has_hypervisor(r))
                        instance_record_clear_hypervisor(r);
                break;
        default:
                break;
        }
        if (had_hypervisor && gone)
                /* VMM-16: why a recorded identity names no VMM (another program, another boot). */
                log_line(LOG_LEVEL_INFO, 0, "recorded VMM is gone", "instance_id", r->id, "state",
                         instance_state_to_string(was), "reason", l->reason, NULL);
        if (r->state != was || had_hypervisor != has_hypervisor(r))
                save_now(m, i);
        if (r->state != was)
                log_line(LOG_LEVEL_NOTICE, 0, "instance recovered after restart", "instance_id",
                         r->id, "from", instance_state_to_string(was), "to",
                         instance_state_to_string(r->state), "vmm",
                         vmm_verdict_to_string(l->verdict), NULL);
}

static int load_one(InstanceManager *m, const char *id, const VfioScan *scan)
{
        _cleanup_free_ char *err = NULL;
        Instance *i = instance_new(m);
        if (!i)
                return -ENOMEM;
        int r = instance_record_load_at(m->cfg.instances_dirfd, m->runtime_instances, id, &i->rec,
                                        &err);
        if (r < 0) {
                free(i);
                if (r == -ENOMEM)
                        return r;
                log_line(instance_load_failure_is_transient(r) ? LOG_LEVEL_WARNING : LOG_LEVEL_ERR,
                         r, instance_load_failure_event(r), "instance_id", id, "error", err, NULL);
                if (!m->disabled_reason &&
                    strprintf(&m->disabled_reason, "instance record %s/instances/%s %s: %s",
                              m->config->data_dir, id, instance_load_failure_reason(r), err) < 0)
                        return -ENOMEM;
                return 0;
        }

        VmmLiveness l = {.verdict = VMM_GONE, .pidfd = -1};
        if (has_hypervisor(&i->rec)) {
                r = vmm_liveness_probe(
                    &(VmmLivenessQuery){.proc = m->cfg.proc,
                                        .boot_id = m->boot_id,
                                        .qemu_binary = m->config->qemu_binary,
                                        .identity = {.pid = i->rec.hypervisor.pid,
                                                     .start_time = i->rec.hypervisor.start_time,
                                                     .boot_id = i->rec.hypervisor.boot_id,
                                                     .qmp_socket = i->rec.hypervisor.qmp_socket},
                                        .scan = scan,
                                        .dev_root = m->cfg.dev_root},
                    &l);
                if (r < 0) {
                        instance_record_done(&i->rec);
                        free(i);
                        return r;
                }
        }
        if (l.verdict == VMM_ALIVE) {
                r = instance_attach_vmm(i, l.pid, l.pidfd, false, l.start_time);
                l.pidfd = -1; /* taken, whatever the result */
                if (r < 0) {
                        vmm_liveness_done(&l);
                        instance_record_done(&i->rec);
                        free(i);
                        return r;
                }
                if (l.pid != i->rec.hypervisor.pid) {
                        /* VMM-18: the socket's owner is the VMM now; its identity is whole. */
                        r = instance_set_identity(i, l.pid, l.start_time);
                        if (r < 0) {
                                vmm_liveness_done(&l);
                                instance_record_done(&i->rec);
                                free(i);
                                return r;
                        }
                }
        }
        r = instance_insert(m, i);
        if (r < 0) {
                vmm_liveness_done(&l);
                instance_free(i);
                return r;
        }
        classify(m, i, &l);
        vmm_liveness_done(&l);
        return 0;
}

int instance_manager_load(InstanceManager *m, char **error)
{
        _cleanup_free_ char *err = NULL;
        int r = vmm_read_boot_id(m->cfg.proc, &m->boot_id, &err);
        if (r < 0)
                /* Without it no stored pid can be trusted: every pid is ambiguous then. */
                log_line(LOG_LEVEL_WARNING, r, "cannot read boot id", "error", err, NULL);

        InstanceDirList list = {0};
        r = instance_dir_list_at(m->cfg.instances_dirfd, &list, error);
        if (r < 0)
                return r;
        sweep_leftovers(m, &list);

        /* One fd scan serves every record's VMM-18 step (REC-9's rule, at start-up too). */
        _cleanup_(vfio_scan_freep) VfioScan *scan = NULL;
        _cleanup_free_ char *scan_error = NULL;
        if (list.ids && vfio_scan(m->cfg.proc, m->cfg.dev_root, &scan, &scan_error) < 0)
                log_line(LOG_LEVEL_WARNING, 0, "open-handle scan for VMM liveness failed", "error",
                         scan_error, NULL);
        for (char **id = list.ids; id && *id; id++) {
                r = load_one(m, *id, scan);
                if (r < 0) {
                        instance_dir_list_done(&list);
                        return error_set(error, r, "load instance %s: %s", *id, strerror(-r));
                }
        }
        instance_dir_list_done(&list);
        sweep_runtime_dirs(m);
        return 0;
}

void instance_manager_start_recovery(InstanceManager *m)
{
        /* A recovery may drop its instance (a completed delete): walk a copy. */
        size_t n = m->n_instances;
        _cleanup_free_ Instance **copy = calloc(n ? n : 1, sizeof *copy);
        if (!copy)
                return;
        if (n > 0)
                memcpy(copy, m->instances, n * sizeof *copy);
        for (size_t k = 0; k < n; k++)
                if (copy[k]->recovery != RECOVERY_NONE)
                        instance_ops_recover(copy[k]);
        /* DISK-8: an attach or detach a restart cut short, settled from the live VMM. */
        for (size_t k = 0; k < m->n_instances; k++)
                instance_volumes_settle(m->instances[k]);
}

/* ---- reads --------------------------------------------------------------------------------- */

const InstanceRecord *instance_manager_get(const InstanceManager *m, const char *id)
{
        Instance *i = instance_find(m, id);
        return i ? &i->rec : NULL;
}

size_t instance_manager_list(InstanceManager *m, const InstanceRecord *const **ret)
{
        if (m->n_instances > m->n_view) {
                const InstanceRecord **n = reallocarray(m->view, m->n_instances, sizeof *n);
                if (!n) {
                        *ret = NULL;
                        return 0;
                }
                m->view = n;
                m->n_view = m->n_instances;
        }
        for (size_t k = 0; k < m->n_instances; k++)
                m->view[k] = &m->instances[k]->rec;
        *ret = m->view;
        return m->n_instances;
}

bool instance_manager_is_running(const InstanceManager *m, const char *id)
{
        Instance *i = instance_find(m, id);
        return i && ((i->vmm && !i->exited) || i->ambiguous);
}

bool instance_manager_vmm_is_watched(const InstanceManager *m, const char *id)
{
        Instance *i = instance_find(m, id);
        return i && i->vmm && !i->exited;
}

void instance_manager_get_stats(const InstanceManager *m, InstanceManagerStats *ret)
{
        InstanceManagerStats s = {.forced_kills = {m->forced_kills[0], m->forced_kills[1]},
                                  .liveness_uncertain = m->liveness_uncertain,
                                  .stale_release_failures = m->stale_release_failures};
        for (size_t k = 0; k < m->n_instances; k++)
                s.by_state[m->instances[k]->rec.state]++;
        *ret = s;
}

bool instance_manager_is_settled(const InstanceManager *m)
{
        for (size_t k = 0; k < m->n_instances; k++)
                if (m->instances[k]->writes > 0)
                        return false;
        return true;
}
