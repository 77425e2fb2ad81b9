/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The completion of a DeviceOps operation, as the device tests record it (tests/unit/test-device.c
 * on fixture trees, tests/integration/test-device-sim.c against vgpu-sim). Include after
 * <cmocka.h>.
 */

#include "device/device.h"

typedef struct DeviceDone {
        bool called;
        int r;
        DeviceOutcome outcome;
        DeviceFailureKind kind;
        char *error;
        char vf[PCI_ADDRESS_STRLEN]; /* "" when the result named none */
        uint32_t type_id;
        unsigned attempts;
} DeviceDone;

/* A DeviceDoneFunc: records res in the DeviceDone that userdata points to; runs once. */
static inline void device_done_record(const DeviceResult *res, void *userdata)
{
        DeviceDone *d = userdata;
        assert_false(d->called);
        /* DEV-19: an outcome is "failed" exactly when the operation failed. */
        assert_int_equal(res->r < 0, res->outcome == DEVICE_OUTCOME_FAILED);
        *d = (DeviceDone){
            .called = true,
            .r = res->r,
            .outcome = res->outcome,
            .kind = res->kind,
            .error = res->error ? strdup(res->error) : NULL,
            .type_id = res->type_id,
            .attempts = res->attempts,
        };
        if (res->vf)
                snprintf(d->vf, sizeof d->vf, "%s", res->vf);
}

static inline void device_done_clear(DeviceDone *d)
{
        free(d->error);
        *d = (DeviceDone){};
}
