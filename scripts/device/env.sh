# Source on the device machine (after the toolchain is staged: scripts/device/README.md): puts every
# package's src/, the repository root (the `benchmarks` package) and the linear-attention tests
# folder (the case tables the benchmarks share with the tests, as pytest's `pythonpath` has it) on
# PYTHONPATH, so the working tree runs without an install.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for _src in "$_root"/packages/*/src; do PYTHONPATH="$_src${PYTHONPATH:+:$PYTHONPATH}"; done
export PYTHONPATH PYTHONUNBUFFERED=1
export PYGRAPH_REQUIRE_ARCH=${PYGRAPH_REQUIRE_ARCH:-sm90}
PYTHONPATH="$PYTHONPATH:$_root:$_root/packages/engines-linear-attention/tests"
# logs go under $OUT
OUTDIR=${OUTDIR:-${OUT:-/tmp/out}}  # a caller may point one step's logs elsewhere
mkdir -p "$OUTDIR"
# The reference libraries' Triton kernels (flash-linear-attention's) autotune on their first call, 30 s
# to 4 minutes of device time a shape. Their results are kept on disk (TRITON_CACHE_AUTOTUNING: the
# best config per kernel and key, keyed by Triton, the target and the kernel's source) and come back
# with a call's logs: `save_autotune` packs the results (not the compiled kernels) into
# $OUTDIR/triton-autotune.tgz; unpacked into .tritoncache/ of the checkout and carried, a later
# machine's first calls read them instead of tuning again.
export TRITON_CACHE_AUTOTUNING=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
if [ -d "$_root/.tritoncache" ] && [ ! -e "$TRITON_CACHE_DIR/.restored" ]; then
  mkdir -p "$TRITON_CACHE_DIR" && cp -r "$_root/.tritoncache/." "$TRITON_CACHE_DIR/" && touch "$TRITON_CACHE_DIR/.restored"
fi
save_autotune() {
  (cd "$TRITON_CACHE_DIR" 2>/dev/null && find . -name '*.autotune.json' | tar czf "$OUTDIR/triton-autotune.tgz" -T - \
    && echo "save_autotune: $(tar tzf "$OUTDIR/triton-autotune.tgz" | wc -l) results in $OUTDIR/triton-autotune.tgz")
}
# FlashQLA's TileLang kernels compile on their first call (about 20 s a forward, 90 s a backward, each
# shape: most of the FlashQLA table's device time). TileLang keeps them under TILELANG_CACHE_DIR;
# `save_tilelang` packs that folder into $OUTDIR/tilelang-cache.tgz (refused over the 16 MiB a file
# the device tool returns), and a carried .qlacache/tilelang-cache.tgz is unpacked first, so a later
# machine's FlashQLA calls load them instead.
export TILELANG_CACHE_DIR=${TILELANG_CACHE_DIR:-/tmp/tilelang-cache}
if [ -f "$_root/.qlacache/tilelang-cache.tgz" ] && [ ! -e "$TILELANG_CACHE_DIR/.restored" ]; then
  mkdir -p "$TILELANG_CACHE_DIR" && tar xzf "$_root/.qlacache/tilelang-cache.tgz" -C "$TILELANG_CACHE_DIR" \
    && touch "$TILELANG_CACHE_DIR/.restored"
fi
save_tilelang() {
  [ -d "$TILELANG_CACHE_DIR" ] || return 0
  tar czf "$OUTDIR/tilelang-cache.tgz" -C "$TILELANG_CACHE_DIR" --exclude=.restored . || return 1
  local bytes; bytes=$(stat -c %s "$OUTDIR/tilelang-cache.tgz")
  if [ "$bytes" -gt $((16 * 1024 * 1024)) ]; then
    rm "$OUTDIR/tilelang-cache.tgz"; echo "save_tilelang: $bytes bytes packed, over 16 MiB: not kept"
  else
    echo "save_tilelang: $bytes bytes in $OUTDIR/tilelang-cache.tgz (next time: .qlacache/tilelang-cache.tgz, carried)"
  fi
}
# cudnn-frontend's Hopper KDA anchor compiles with NVRTC against CUDA headers whose crt/ part the
# image's pip tree lacks: with .dev4 carried (scripts/device/bundle_crt.sh), add it to the tree the
# compiler picks under this call's CUDA_HOME and sys.path (a no-op once it has them)
if [ -d "$_root/.dev4" ]; then python3 "$_root/scripts/device/crt_headers.py" "$_root/.dev4"; fi
# ab_table LOG: the per-column lines benchmarks.gemm.ab_gemm appended to LOG, one table
ab_table() { grep -hvE "^\s*$|^device" "$1" | sed -E 's/ +/ /g' | cut -c1-110; }
# One pytest process per test id, PAR (default 8) at once: cuTile and CuTe DSL compile a configuration's
# kernels on its first launch (up to about 20 s each), so the cases compile in parallel on the
# machine's cores and share the disk caches. Each case's printed errors go to
# the log; the summary line counts passes and names every failure.
run_tests() {  # $1: pytest -k expression, $2: log name; $tests: the test file
  local ids="$OUTDIR/${2%.log}.ids" dir="$OUTDIR/${2%.log}"
  mkdir -p "$dir"
  python3 -m pytest -m sm90 -p no:cacheprovider -q --collect-only -k "$1" "$tests" 2>/dev/null | grep "::" > "$ids"
  local started=$SECONDS
  xargs -P "${PAR:-8}" -I{} bash -c 'log="$2/$(echo "$1" | md5sum | cut -c1-10).log"
    python3 -m pytest -m sm90 -p no:cacheprovider -q -rs -s "$1" > "$log" 2>&1
    echo "$? $1"' _ {} "$dir" < "$ids" > "$dir/exits.txt"
  grep -h ": {" "$dir"/*.log | sed -E "s/'(rel|plan)'/\1/g" | cut -c1-230 > "$OUTDIR/$2"
  for f in $(grep -L " passed" "$dir"/*.log); do tail -25 "$f"; done >> "$OUTDIR/$2"
  cat "$OUTDIR/$2" | tail -60
  echo "$2: $(grep -c '^0 ' "$dir/exits.txt") of $(wc -l < "$ids") passed in $((SECONDS - started)) s;" \
    "failed: $(grep -v '^0 ' "$dir/exits.txt" | cut -d' ' -f2- | sed 's/.*\[//; s/\]//' | tr '\n' ' ')" \
    | tee -a "$OUTDIR/$2"
  # one file of every case's output instead of a file per case: the device tool returns a few files only
  cat "$dir"/*.log > "$OUTDIR/${2%.log}.cases.txt" && rm -rf "$dir"
}
