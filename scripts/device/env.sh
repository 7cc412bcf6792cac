# Source on the device machine (after the toolchain is staged: ../shared/device/README.md):
# puts every package's src/ on PYTHONPATH so the working tree runs without an install.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for _src in "$_root"/packages/*/src; do PYTHONPATH="$_src${PYTHONPATH:+:$PYTHONPATH}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
export PYGRAPH_REQUIRE_ARCH=${PYGRAPH_REQUIRE_ARCH:-sm90}
# the benchmark scripts import each other (bench_gemm, check_gemm); logs go under $OUT
PYTHONPATH="$PYTHONPATH:$_root/benchmarks"
OUTDIR=${OUTDIR:-${OUT:-/tmp/out}}  # a caller may point one step's logs elsewhere
mkdir -p "$OUTDIR"
# ab_table LOG: the per-column lines benchmarks/ab_gemm.py appended to LOG, one table
ab_table() { grep -hvE "^\s*$|^device" "$1" | sed -E 's/ +/ /g' | cut -c1-110; }
