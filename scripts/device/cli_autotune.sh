#!/usr/bin/env bash
# The `pygraph` command on the device: info, then `pygraph bench` and `pygraph autotune` of the gemm
# examples and of attention (served by the cuDNN backend), each in its own process; then a fresh
# process's `explain` must find every winner first in its plan list (the plan cache's replay), and
# `summary.txt` says, per autotuned example, whether the winner is at least as fast as the list's
# default first plan (the acceptance of the CLI issue).
#   source /tmp/site/env.sh && bash scripts/device/cli_autotune.sh
# The CLI needs click (and platformdirs; rich is on the image): put click==8.5.1 and
# platformdirs==4.14.9 in the staged bundle, or carry their wheels in .dev-cli/ (pip download
# --no-deps -d .dev-cli click platformdirs on a machine with an index), installed below.
# GEMM kernels compile at build (0.5-3 s each, 8 per autotune): PYGRAPH_GEMM_CACHE_DIR keeps them
# for the later processes of the run (or carry a cache compiled ahead, scripts/device/precompile_gemm.py).
# GDN=1 adds the gdn example (gdn_cutile; needs .dev3/cutile.sh sourced).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/env.sh
if ! python3 -c "import click, rich" 2>/dev/null; then
  if compgen -G ".dev-cli/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps .dev-cli/*.whl
  else
    echo "click is not importable here: stage click and platformdirs (see this script's header)" >&2
    exit 1
  fi
fi
export PYGRAPH_PLAN_CACHE="$OUTDIR/plans.sqlite" COLUMNS=${COLUMNS:-180}
export PYGRAPH_GEMM_CACHE_DIR=${PYGRAPH_GEMM_CACHE_DIR:-/tmp/pygraph_gemm_cache}
rm -f "$PYGRAPH_PLAN_CACHE"
pg() { python3 -m pygraph "$@"; }
LOG="$OUTDIR/cli.log"
run() {  # run CMD...: echo it, append its output to the log, keep going on failure
  echo "\$ pygraph $*" | tee -a "$LOG"
  pg "$@" 2>&1 | tee -a "$LOG"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm --format=csv,noheader | tee "$OUTDIR/device.txt"
pg info --json > "$OUTDIR/info.json"
run info

# example:shape, the shapes of the benchmark table (docs/families.md) the examples reach quickly
GEMM_RUNS=${GEMM_RUNS:-gemm:4096,4096,4096 gemm:8192,8192,8192 gemm:128,4096,4096 gemm-bias-gelu:4096,4096,4096 gemm-bias-gelu:8192,8192,8192}
ATTN_RUNS=${ATTN_RUNS:-sdpa:2,8,1024,128 sdpa:4,16,4096,128 sdpa-bwd:2,8,1024,128}
[ "${GDN:-0}" = 1 ] && ATTN_RUNS="$ATTN_RUNS gdn:4096,16,128,4"
TUNED=()
for item in $GEMM_RUNS $ATTN_RUNS; do
  example=${item%%:*} shape=${item##*:}
  extra=()

  case "$example" in sdpa*) extra=(--backend-top 8) ;; esac
  run bench "$example" --shape "$shape" --top "${TOP:-8}"
  run autotune "$example" --shape "$shape" "${extra[@]}"
  TUNED+=("$example:$shape")
done

# A fresh process per example: its plan list must start with the recorded winner.
i=0
for item in "${TUNED[@]}"; do
  pg explain "${item%%:*}" --shape "${item##*:}" --head 1 --json > "$OUTDIR/replay_$i.json" 2>>"$LOG"
  i=$((i + 1))
done
run cache list
pg cache list --json > "$OUTDIR/cache.json"
python3 - "$OUTDIR" "${TUNED[@]}" <<'EOF' | tee "$OUTDIR/summary.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
entries = json.loads((out / "cache.json").read_text())["entries"]
print(f"{'graph':70s} {'winner ms':>10s} {'first ms':>10s} {'gain':>7s}  ok  plan")
for e in entries:
    gain = e["first_ms"] / e["time_ms"] if e["time_ms"] else float("nan")
    print(f"{e['summary'][:70]:70s} {e['time_ms']:10.4f} {e['first_ms']:10.4f} {gain:7.3f}  {'yes' if gain >= 1 else 'NO'}  {e['plan_name']}")
for i, item in enumerate(sys.argv[2:]):
    text = (out / f"replay_{i}.json").read_text()
    if not text.strip():
        print(f"replay {item}: explain failed (see cli.log)")
        continue
    report = json.loads(text)
    rec, head = report["recorded"], (report["plans"] or [{}])[0].get("name")
    ok = rec is not None and head == rec["plan_name"]
    print(f"replay {item}: {'winner first' if ok else 'NOT REPLAYED'} ({head})")
EOF
