/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Helpers for the cmocka tests that run against a mounted vgpu-sim (the runner scripts set
 * VGPU_SIM_MOUNT; meson sets VGPU_SIM_NVML to the built fake library): testlib's simulator
 * client with cmocka's failures, and the fake NVML library, loaded the way vgpud loads the real
 * one: dlopen with RTLD_NOW|RTLD_LOCAL, every function resolved by name.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "base/base.h"
#include "nvml.h"
#include "testlib.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct Nvml {
        __typeof__(nvmlInit_v2) *Init_v2;
        __typeof__(nvmlShutdown) *Shutdown;
        __typeof__(nvmlErrorString) *ErrorString;
        __typeof__(nvmlSystemGetDriverVersion) *SystemGetDriverVersion;
        __typeof__(nvmlDeviceGetHandleByPciBusId_v2) *DeviceGetHandleByPciBusId_v2;
        __typeof__(nvmlDeviceGetName) *DeviceGetName;
        __typeof__(nvmlDeviceGetVgpuHeterogeneousMode) *DeviceGetVgpuHeterogeneousMode;
        __typeof__(nvmlDeviceGetSupportedVgpus) *DeviceGetSupportedVgpus;
        __typeof__(nvmlVgpuTypeGetName) *VgpuTypeGetName;
        __typeof__(nvmlVgpuTypeGetFramebufferSize) *VgpuTypeGetFramebufferSize;
        __typeof__(nvmlVgpuTypeGetMaxInstances) *VgpuTypeGetMaxInstances;
        __typeof__(nvmlDeviceGetVgpuTypeCreatablePlacements) *DeviceGetVgpuTypeCreatablePlacements;
} Nvml;

typedef struct SimTest {
        TestSim *sim;
        void *dl;
        Nvml nvml;
} SimTest;

/* The mount only (no NVML library); fails the test when VGPU_SIM_MOUNT is not set. */
SimTest *st_open(void);
SimTest *st_close(SimTest *t);

/* Group set-up: finds the mount, loads the fake NVML library (not yet initialised). */
int st_group_setup(void **state);
int st_group_teardown(void **state);

/* Per-test tear-down: clears faults and NVML settings and releases every vGPU. */
int st_reset(void **state);

uint64_t st_now_ms(void);

/* Polls cond every 10 ms for at most timeout_ms; true once it holds. */
bool st_poll(bool (*cond)(const SimTest *t, const void *arg), const SimTest *t, const void *arg,
             unsigned timeout_ms);

/* A malloc'd path under the mount point. */
char *st_path(const SimTest *t, const char *fmt, ...) _printf_(2, 3);

/* "<mnt>/sys/bus/pci/devices/<vf>/nvidia/<attr>" */
char *st_vf_attr(const SimTest *t, const char *vf, const char *attr);

/* Address of VF i of the PF at pf ("0000:e3:00.0", 0 → "0000:e3:00.4"). */
void st_vf_address(const char *pf, unsigned i, char ret[static PCI_ADDRESS_STRLEN]);

/* One write() of value on an O_WRONLY descriptor, as vgpud does; 0 or -errno. */
int st_write(const char *path, const char *value);

/* Reads a whole file; fails the test on error. */
char *st_read(const char *path);

/* Reads a whole file; -errno on error. */
int st_try_read(const char *path, char **ret);

/* One .sim/ctl command; 0 or -errno. */
int st_ctl(const SimTest *t, const char *fmt, ...) _printf_(2, 3);
/* The same; fails the test when the simulator refuses it. */
void st_command(const SimTest *t, const char *fmt, ...) _printf_(2, 3);

/* What reading .sim/ctl shows after this process's last command. */
char *st_ctl_result(const SimTest *t);

/* state.json, parsed. */
json_t *st_state(const SimTest *t);

/* The state.json object of one VF (borrowed from state). */
json_t *st_state_vf(json_t *state, const char *vf);
json_int_t st_state_vf_int(const SimTest *t, const char *vf, const char *key);
/* The UUID of the mdev on vf, or "" when it carries none. */
void st_vf_mdev(const SimTest *t, const char *vf, char ret[static 37]);

/* Writes a type to current_vgpu_type; 0 or -errno. */
int st_set_type(const SimTest *t, const char *vf, uint32_t type);

/* Waits (bounded) until writing 0 succeeds: releases are asynchronous after a close. */
int st_release(const SimTest *t, const char *vf);

/* nvmlInit_v2 with VGPU_SIM_CONTROL pointing at this mount. */
void st_nvml_init(SimTest *t);

/* A PF handle through nvmlDeviceGetHandleByPciBusId_v2; fails the test on error. */
nvmlDevice_t st_nvml_device(const SimTest *t, const char *pf);
