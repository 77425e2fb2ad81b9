#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# run-sim-test.sh VGPU_SIM HOST.yaml PROGRAM [ARGS...]
#
# Mounts a fresh vgpu-sim for HOST.yaml in a temporary directory, runs PROGRAM against it with
# VGPU_SIM_MOUNT, VGPU_SIM_CONTROL and VGPU_SIM_PID set, and always stops the simulator and
# unmounts it, whatever PROGRAM does. Everything runs in a private PID namespace with its own
# /proc and mount namespace (SIM-21), so nothing outlives the test even if this script is
# killed. PROGRAM's exit status is the script's; a simulator that does not stop cleanly (or
# that a sanitizer flagged) fails the test even when every check passed. tests/lib/sim.sh does
# the work.
set -eu
. "$(dirname "$0")/../lib/sim.sh"
sim_enter_namespace "$0" "$@"
sim_run "$@"
