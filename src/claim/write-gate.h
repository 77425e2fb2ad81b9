/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * write-gate: PLACE-9 for the writes vgpud makes outside a claim — the releases of INST-14,
 * INST-15, INST-16, INST-17, INST-18 and INST-19, and REC-4's repairs. No write to a VF of GPU G
 * starts while an NVML query about G runs: a claim round for G or a cache refresh (which asks
 * about every GPU). The Manager owns the one gate and hands it to instances/ and ctrl/; the
 * Claimer, which runs the queries, binds itself as the gate's query source, holds its new
 * queries back while a write waits, and opens the gate on each of its turns.
 *
 * Everything runs on the owner's thread.
 */
#include <stdbool.h>

#include "base/base.h"
#include "gpu/gpu.h"

typedef struct WriteGate WriteGate;

/* Runs the write: it hands it to DeviceOps before it returns, so that device_ops_is_busy()
 * holds later queries back. */
typedef void (*WriteGateGo)(void *userdata);

/* Whoever runs NVML queries: whether one about GPU pf runs now, and a nudge to look again soon
 * (a write started waiting). */
typedef struct WriteGateQueries {
        bool (*is_querying)(const char *pf, void *userdata);
        void (*nudge)(void *userdata);
        void *userdata;
} WriteGateQueries;

/* tracker: the host's one picture (borrowed), to find a VF's GPU. */
int write_gate_new(GpuTracker *tracker, WriteGate **ret);
/* Drops every waiting write without running it. */
WriteGate *write_gate_free(WriteGate *g);
DEFINE_TRIVIAL_CLEANUP_FUNC(WriteGate *, write_gate_free);

/* The Claimer binds itself (claimer_new()); unbound, no query ever runs. NULL unbinds. */
void write_gate_bind(WriteGate *g, const WriteGateQueries *queries);

/*
 * Returns 1 when no query about vf's GPU runs: the caller dispatches its write at once. Returns
 * 0 when one does: go(userdata) runs later, once it has ended (a query abandoned at its deadline
 * ends at once, NVML-10). A VF missing from the host's table (an SR-IOV cycle took it, DISC-21)
 * or a NULL vf concerns no query: 1. -ENOMEM when the wait cannot be queued.
 */
int write_gate_pass(WriteGate *g, const char *vf, WriteGateGo go, void *userdata);

/* Drops every waiting write of userdata, whose go() then never runs (its operation ended). */
void write_gate_cancel(WriteGate *g, void *userdata);

/* Lets through every waiting write whose GPU no query concerns any more; true while some still
 * wait (the Claimer looks again soon). */
bool write_gate_open(WriteGate *g);

/* A write waits on GPU pf (no new query about pf may start), or on any GPU (no refresh). */
bool write_gate_is_waiting(const WriteGate *g, const char *pf);
bool write_gate_any_waiting(const WriteGate *g);
