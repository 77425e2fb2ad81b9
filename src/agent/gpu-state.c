/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "agent/gpu-state.h"

#include "base/base.h"

const char *gpu_init_state_to_string(GpuInitState s)
{
        switch (s) {
        case GPU_INIT_FAILED:
                return "failed";
        case GPU_INIT_OK:
                return "ok";
        case GPU_INIT_UNKNOWN:
                break;
        }
        return "unknown";
}

const char *gpu_state_failure_message(const GpuState *g)
{
        return g->state == GPU_INIT_FAILED && g->failure_message ? g->failure_message : "";
}

int gpu_state_record_failure(GpuState *g, const char *message)
{
        /* A success seen by the probe outranks any record the watcher reads later: the record
         * may be an old one from the ring, or from an earlier, since recovered, attempt. */
        if (g->state == GPU_INIT_OK)
                return false;

        char *copy = strdup(message);
        if (!copy)
                return -ENOMEM;

        bool first = g->state != GPU_INIT_FAILED;
        free(g->failure_message);
        g->failure_message = copy;
        g->state = GPU_INIT_FAILED;
        if (first)
                log_warning("GPU init failure detected: %s", message);
        else
                log_debug("GPU init failure message replaced: %s", message);
        return true;
}

bool gpu_state_record_success(GpuState *g)
{
        if (g->state == GPU_INIT_OK)
                return false;
        g->state = GPU_INIT_OK;
        g->failure_message = (free(g->failure_message), NULL);
        log_info("GPU driver initialized");
        return true;
}

void gpu_state_done(GpuState *g)
{
        g->failure_message = (free(g->failure_message), NULL);
}
