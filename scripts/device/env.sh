# Source on the device machine (after the toolchain is staged: scripts/device/README.md): puts every
# package's src/ and the repository root (the `benchmarks` package) on PYTHONPATH, so the working
# tree runs without an install.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for _src in "$_root"/packages/*/src; do PYTHONPATH="$_src${PYTHONPATH:+:$PYTHONPATH}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
export PYGRAPH_REQUIRE_ARCH=${PYGRAPH_REQUIRE_ARCH:-sm90}
PYTHONPATH="$PYTHONPATH:$_root"
# logs go under $OUT
OUTDIR=${OUTDIR:-${OUT:-/tmp/out}}  # a caller may point one step's logs elsewhere
mkdir -p "$OUTDIR"
# ab_table LOG: the per-column lines benchmarks.gemm.ab_gemm appended to LOG, one table
ab_table() { grep -hvE "^\s*$|^device" "$1" | sed -E 's/ +/ /g' | cut -c1-110; }
