#!/usr/bin/env bash
# The SM90 suite on the device: every test marked sm90, then (optional) benchmarks.
#   source /tmp/site/env.sh && bash scripts/device/sm90_suite.sh [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm --format=csv,noheader | tee "$OUTDIR/device.txt"
# --durations: the suite runs 324-420 s on the H200; name what grows
python3 -m pytest -m sm90 -p no:cacheprovider -q --durations=15 "$@" 2>&1 | tee "$OUTDIR/sm90_pytest.log" | tail -40
