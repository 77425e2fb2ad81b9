#!/bin/sh
# make demo: runs vgpud against a simulated GPU host and narrates what it does. Everything runs
# inside a private PID and mount namespace (SIM-21), so nothing outlives the demo.
set -eu
build=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
exec "$top/tests/sim/run-sim-test.sh" "$build/sim/vgpu-sim" "$top/sim/hosts/demo.yaml" \
        "$top/scripts/demo-steps.sh" "$build"
