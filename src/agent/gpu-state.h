/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * gpu-state: what the guest knows about its GPU's initialisation (AGENT-4, AGENT-5).
 *
 * Promises:
 *  - the state starts UNKNOWN;
 *  - a kmsg match moves UNKNOWN or FAILED to FAILED and stores its message, the latest
 *    replacing the earlier one;
 *  - a successful probe moves UNKNOWN or FAILED to OK, which is terminal: later matches are
 *    ignored and the failure message is empty from then on;
 *  - the first match logs "GPU init failure detected: <msg>", the success "GPU driver
 *    initialized"; nothing else is logged here.
 */

#include <stdbool.h>

typedef enum GpuInitState {
        GPU_INIT_UNKNOWN,
        GPU_INIT_FAILED,
        GPU_INIT_OK,
} GpuInitState;

typedef struct GpuState {
        GpuInitState state;
        char *failure_message; /* malloc'd; NULL unless FAILED */
} GpuState;

#define GPU_STATE_INIT                                             \
        {                                                          \
                .state = GPU_INIT_UNKNOWN, .failure_message = NULL \
        }

/* "unknown", "failed" or "ok", as guest-gpu-init-status names them (AGENT-15). */
const char *gpu_init_state_to_string(GpuInitState s);

/* The stored failure message, or "" when there is none. */
const char *gpu_state_failure_message(const GpuState *g);

/*
 * A kmsg record matched (AGENT-6): message is its trimmed text. true when the state took it,
 * false when OK ignored it. -ENOMEM when the copy fails (the state is left as it was).
 */
int gpu_state_record_failure(GpuState *g, const char *message);

/* The probe succeeded (AGENT-11). true when this moved the state to OK, false if it was OK. */
bool gpu_state_record_success(GpuState *g);

void gpu_state_done(GpuState *g);
