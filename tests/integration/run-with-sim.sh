#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# run-with-sim.sh VGPU_SIM HOST.yaml PROGRAM [ARGS...]
#
# Runs PROGRAM against a freshly mounted vgpu-sim of HOST.yaml, with VGPU_SIM_MOUNT and
# VGPU_SIM_CONTROL set, and exits with PROGRAM's status, in a private PID and mount namespace
# (SIM-21) so that the test sees only its own processes in /proc and nothing it started
# outlives it. The simulator is always stopped and unmounted, and one that does not exit
# cleanly fails the run. tests/lib/sim.sh does the work.
set -eu
. "$(dirname "$0")/../lib/sim.sh"
sim_enter_namespace "$0" "$@"
sim_run "$@"
