#!/usr/bin/env bash
# The GPU lane: proves every GPU backend on a machine with a CUDA GPU and no network.
#   scripts/gpu-lane.sh OUTDIR
# Installs the project offline into this machine's python3, prints the device, driver and library
# versions, runs `gemmzoo check` on every available GPU backend, the GPU-marked tests, and a short
# benchmark of every GPU backend; writes gpu-lane.log, gpu-lane.json and gpu-lane.md to OUTDIR.
# GPU_LANE_TIMING=1 adds the timing engine's agreement check against triton.testing.do_bench (OUTDIR/timing).
set -uo pipefail
out=${1:?usage: scripts/gpu-lane.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
exec > >(tee "$out/gpu-lane.log") 2>&1
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
python3 scripts/gpu_lane.py "$out"
lane=$?
# pytest-benchmark device time against triton.testing.do_bench at 2048³ and 4096³
if [ "${GPU_LANE_TIMING:-0}" = 1 ]; then python3 tests/test_gpu_timing.py "$out/timing" --seconds=240 || lane=1; fi
exit $lane
