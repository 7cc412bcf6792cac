#!/usr/bin/env bash
# gdn_cutile on the device: the sm90 correctness tests of the linear-attention family, then the
# benchmark (correctness table and timing against flash-linear-attention and cudnn-frontend).
#   source /tmp/site/env.sh && source .dev3/cutile.sh && bash scripts/device/gdn_cutile.sh [bench args...]
# cuTile needs its compiler (tileiras with a ptxas/libnvvm of CUDA 13.2+: .dev3/cutile.sh). Each
# kernel compiles on its first launch (2-5 s each) into cuTile's disk cache, so the benchmark,
# run after the tests, finds them compiled.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm --format=csv,noheader | tee "$OUTDIR/device.txt"
python3 -c "import cuda.tile, torch; print('cuda.tile', cuda.tile.__version__, 'torch', torch.__version__)" 2>&1 | tee -a "$OUTDIR/device.txt"
python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s --maxfail=6 --durations=8 packages/engines-linear-attention/tests 2>&1 \
  | tee "$OUTDIR/gdn_sm90_pytest.log" | tail -45
python3 -m benchmarks.linear_attention.bench_gdn --skip cases "$@" 2>&1 | tee "$OUTDIR/bench_gdn.log"
