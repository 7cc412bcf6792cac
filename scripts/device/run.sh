#!/usr/bin/env bash
# The device runner: one part of a family's device work (tests, compute-sanitizer, benchmark, profile).
#   source /tmp/site/env.sh && bash scripts/device/run.sh FAMILY [PART] [ARGS...]
# FAMILY is suite, gemm, sdpa or linear-attention; PART defaults to the family's first part below.
# ARGS go to the part (pytest's or the benchmark's arguments); a first ARG starting with "-" goes to
# the default part. The parts are functions of scripts/device/families/FAMILY.sh; each runs from the
# repository root with scripts/device/env.sh sourced, and its logs go under $OUT. Variables a part
# reads (K, PAR, MEMCHECK_*, NCU_RUN) are named beside it.
#
# suite: every test marked sm90, of all families and tests/, in one pytest (ARGS: pytest's)
set -uo pipefail
cd "$(dirname "$0")/../.."
families=scripts/device/families

usage() {
  # this header, then each family's (the comment block its file opens with)
  sed -n '2,/^set /{/^#/s/^# \{0,1\}//p}' scripts/device/run.sh
  for f in "$families"/*.sh; do
    echo
    sed -n '/^[^#]/q; s/^# \{0,1\}//p' "$f"
  done
}

family=${1:-}
case "$family" in
  suite | gemm | sdpa | linear-attention) shift ;;
  -h | --help | help) usage; exit 0 ;;
  *)
    echo "usage: bash scripts/device/run.sh FAMILY [PART] [ARGS...], FAMILY one of suite, gemm, sdpa," \
      "linear-attention (${family:-none given}); \`run.sh help\` lists each family's parts" >&2
    exit 2
    ;;
esac

part=suite
if [ "$family" != suite ]; then
  source "$families/$family.sh"  # DEFAULT_PART, a part_NAME function per part, family_setup if any
  part=$DEFAULT_PART
  if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
    if ! declare -F "part_$1" > /dev/null; then
      parts=$(declare -F | sed -n 's/^declare -f part_//p' | paste -sd' ')
      echo "run.sh: $family has no part '$1' (parts: $parts; \`run.sh help\` says what each runs)" >&2
      exit 2
    fi
    part=$1
    shift
  fi
fi

source scripts/device/env.sh
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm --format=csv,noheader | tee "$OUTDIR/device.txt"
if [ "$part" = suite ]; then
  # --durations: name what grows
  python3 -m pytest -m sm90 -p no:cacheprovider -q --durations=15 "$@" 2>&1 | tee "$OUTDIR/sm90_pytest.log" | tail -40
  exit "${PIPESTATUS[0]}"
fi
if declare -F family_setup > /dev/null; then family_setup; fi
"part_$part" "$@"
