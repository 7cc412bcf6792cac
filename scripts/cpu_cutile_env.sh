#!/usr/bin/env bash
# cuTile's compiler on a CPU machine, for the compile and spill-frame checks that need no GPU
# (tests/test_*_cutile_compile.py, scripts/cutile_resources.py). It unpacks the device toolchain
# (.dev2 and .dev3, made by the device bundle: see scripts/device/README.md) into $SITE and makes a
# Python 3.12 venv (cuTile 1.7's extension is built for 3.12), then runs the given command in it:
#   bash scripts/cpu_cutile_env.sh python scripts/cutile_resources.py --op kda --only grad_scan
#   bash scripts/cpu_cutile_env.sh python -m pytest -q packages/engines-linear-attention/tests/test_kda_cutile_compile.py
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${SITE:-/tmp/cpu-site}
VENV=${VENV:-/tmp/v312}
PY312=${PY312:-$(command -v python3.12 || ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
if [ ! -f "$SITE/.ok" ]; then
  for part in .dev2/rest.tar.xz .dev3/cutile-tools.tar.xz; do
    [ -f "$part" ] || { echo "cpu_cutile_env: $part is missing (run the device bundle first)" >&2; exit 2; }
  done
  mkdir -p "$SITE"
  xz -dc .dev2/rest.tar.xz | tar xf - -C "$SITE"
  xz -dc .dev3/cutile-tools.tar.xz | tar xf - -C "$SITE"
  chmod +x "$SITE"/nvidia/cu13/bin/*
  touch "$SITE/.ok"
fi
if [ ! -x "$VENV/bin/python" ]; then
  [ -n "$PY312" ] || { echo "cpu_cutile_env: no python3.12 found (set PY312)" >&2; exit 2; }
  "$PY312" -m venv "$VENV"
  "$VENV/bin/pip" install -q numpy pytest
fi
export CUDA_HOME="$SITE/nvidia/cu13" PATH="$SITE/nvidia/cu13/bin:$VENV/bin:$PATH"
PP=$SITE
for src in packages/*/src; do PP=$PP:$PWD/$src; done
export PYTHONPATH=$PP:$PWD
exec "$@"
