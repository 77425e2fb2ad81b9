/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The Manager: the daemon's one context object (ARCHITECTURE.md). It owns every piece of
 * mutable state and the sd-event loop that touches it; blocking work goes to the sysfs worker
 * pool or the NVML thread and posts back to the loop.
 *
 * Life (GEN-10): manager_new() parses nothing and opens nothing; manager_start() takes a
 * validated Config and runs the synchronous part of start-up (lock, roots, health store, loop,
 * pools, signals), failing with one error line for what must stop start-up. manager_run() then
 * drives the rest on the loop: discovery → NVML initialisation and cache fill → HTTP
 * listeners → the first reconcile pass → READY=1 → timers, and serves until SIGTERM/SIGINT
 * (OPS-3). It returns the exit status.
 */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "api/api.h"
#include "base/base.h"
#include "config/config.h"
#include "ctrl/ctrl.h"
#include "gpu/gpu.h"
#include "device/device.h"
#include "fleet/fleet.h"
#include "health/health.h"
#include "http/http.h"
#include "instances/instances.h"
#include "notify/notify.h"
#include "nvml/nvml.h"
#include "sysfs/sysfs.h"
#include "worker/worker.h"

/* OPS-3: how long shutdown waits for in-flight operations to reach disk. */
#define MANAGER_SHUTDOWN_GRACE (10 * NSEC_PER_SEC)

/* HEALTH-21: repairs that reads ask for run at most this often. */
#define MANAGER_REPAIR_MIN_INTERVAL NSEC_PER_SEC

typedef enum ManagerPhase {
        MANAGER_PHASE_STARTING,    /* first discovery and NVML cache fill */
        MANAGER_PHASE_RECONCILING, /* listeners up, first reconcile pass running */
        MANAGER_PHASE_RUNNING,     /* READY=1 sent, timers armed */
        MANAGER_PHASE_STOPPING,    /* waiting for in-flight writes (OPS-3) */
} ManagerPhase;

/* GEN-10's start-up phases, in order; Manager.startup holds when each ended. */
typedef enum ManagerStartup {
        MANAGER_STARTUP_BEGIN,      /* cmd_daemon() entered */
        MANAGER_STARTUP_CONFIGURED, /* configuration parsed and checked */
        MANAGER_STARTUP_ROOTS,      /* directories, lock, roots, JWT secret */
        MANAGER_STARTUP_LOOP,       /* loop, pools, NVML client, tracker */
        MANAGER_STARTUP_HEALTH,     /* health store loaded */
        MANAGER_STARTUP_RECORDS,    /* instance records loaded and classified */
        MANAGER_STARTUP_FILLED,     /* discovery, NVML initialised, placement cache filled */
        MANAGER_STARTUP_LISTENING,  /* HTTP listeners */
        MANAGER_STARTUP_READY,      /* first reconcile pass done, READY=1 */
        _MANAGER_STARTUP_MAX,
} ManagerStartup;

typedef struct Manager {
        Config config;
        int lock_fd; /* CFG-9 */
        Root *sysfs, *proc;
        int data_dir_fd;

        sd_event *event;
        Notifier *notifier;                 /* OPS-2 */
        sd_event_source *signal_sources[3]; /* SIGTERM, SIGINT, SIGHUP */
        sd_event_source *reconcile_timer, *health_poll_timer, *shutdown_timer;
        sd_event_source *health_write_defer, *repair_defer; /* health_write_defer: any I/O */

        WorkerPool *workers;
        WorkerPool *disk_pool;   /* instance records, spawns, console reads (GEN-4: apart) */
        WorkerPool *helper_pool; /* helper programs and file copies, with deadlines (GEN-4) */
        NvmlClient *nvml;
        GpuTracker *tracker;    /* the host's one picture (ARCHITECTURE.md decision 3) */
        Reconciler *reconciler; /* the passes (ctrl/) */
        Sentinel *sentinel;     /* the guest GPU checks (ctrl/, SENT) */
        FleetSync *fleet;       /* the Placement sync (fleet/, FLEET); NULL while it is off */
        char *fleet_host_name;  /* placement.host_name, or the kernel's */
        HealthStore *health;
        DeviceRoots device_roots;
        DeviceOps *device_ops;      /* releases and the Claimer's writes */
        WriteGate *write_gate;      /* PLACE-9 for releases and repairs (instances/, ctrl/) */
        InstanceManager *instances; /* the VMs (instances/); owns the Claimer */
        int instances_dirfd;        /* <data_dir>/instances */
        ImageStore *images;         /* <data_dir>/images (storage/, DISK-1) */
        VolumeStore *volumes;       /* <data_dir>/volumes (storage/, DISK-7) */
        JwtSecret *jwt_secret;
        HttpServer *http;
        ApiContext api;

        char *logged_disabled; /* the placement_disabled_reason last logged */

        bool health_writing; /* a health read or write job is on the pool */
        nsec_t last_repair;  /* CLOCK_MONOTONIC */

        ManagerPhase phase;
        int exit_status;
        nsec_t startup[_MANAGER_STARTUP_MAX]; /* CLOCK_MONOTONIC; 0 for a phase not reached */
} Manager;

int manager_new(Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);
#define _cleanup_manager_ _cleanup_(manager_freep)

/*
 * Synchronous start-up (GEN-10) with a validated config (taken over): prepare the directories,
 * take the lock, open the roots, load the JWT secret, create the loop, the pools and the NVML
 * client, load the health store. Failures that stop start-up return < 0 with *error set to the
 * one error line; a health-store load failure does not (HEALTH-16).
 */
int manager_start(Manager *m, Config *config, char **error);

/* Runs the loop until shutdown; returns the exit status (0, or 1 for a listener failure). */
int manager_run(Manager *m);

/* ---- between the Manager's files ------------------------------------------------------------- */

/* manager-health.c */
int manager_health_setup(Manager *m);
void manager_health_io_wanted(HealthStore *s, void *userdata);
void manager_schedule_repair(void *userdata);
int manager_health_repair(Manager *m);
int manager_on_health_poll(sd_event_source *s, uint64_t usec, void *userdata);
void manager_health_reload(Manager *m);

/* manager-instances.c */
int manager_instances_setup(Manager *m, char **error);
void manager_instances_free(Manager *m);

/* manager-fleet.c */
int manager_fleet_setup(Manager *m, char **error);
void manager_fleet_start(Manager *m);
void manager_fleet_free(Manager *m);
/* InstanceManagerConfig.consumer_released: FLEET-6's DELETE, queued on the sync (userdata: m). */
void manager_fleet_consumer_released(void *userdata, const char *consumer);

/* manager.c */
void manager_check_placement(Manager *m);
void manager_stop(Manager *m, int status);
void manager_maybe_finish_stop(Manager *m);
int manager_arm_timer(Manager *m, sd_event_source **source, nsec_t interval,
                      sd_event_time_handler_t handler);
nsec_t manager_now(void);
