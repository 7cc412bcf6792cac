#!/usr/bin/env bash
# The device bundle's DSL compilers on a CPU machine (no GPU needed): cuTile's (with .dev3) for the
# compile and spill-frame checks (tests/test_*_cutile_compile.py, scripts/cutile_resources.py), and
# CuTe DSL's (with .dev1) for the precompiles the device runs carry
# (scripts/device/precompile_linear_attention.py). It unpacks the bundle's parts that are here
# (.dev2 always; see scripts/device/README.md) into $SITE and makes a Python 3.12 venv (cuTile's
# extension and the CuTe DSL library are built for 3.12), then runs the given command in it:
#   bash scripts/cpu_dsl_env.sh python scripts/cutile_resources.py --op kda --only grad_scan
#   bash scripts/cpu_dsl_env.sh python -m pytest -q packages/engines-linear-attention/tests/test_kda_cutile_compile.py
#   PYGRAPH_GDN_SM90_CACHE_DIR=.lacache bash scripts/cpu_dsl_env.sh python scripts/device/precompile_linear_attention.py --only gdn
# With CuTe DSL the venv also gets torch (TORCH_SPEC, default the device image's torch==2.11.0: the
# precompiles plan graphs over torch tensors; a few minutes to download the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${SITE:-/tmp/cpu-site}
VENV=${VENV:-/tmp/v312}
TORCH_SPEC=${TORCH_SPEC:-torch==2.11.0}
PY312=${PY312:-$(command -v python3.12 || ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
IR=nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
[ -f .dev2/rest.tar.xz ] || { echo "cpu_dsl_env: .dev2/rest.tar.xz is missing (run the device bundle first)" >&2; exit 2; }
[ -f .dev1/ir.xz ] || [ -f .dev3/cutile-tools.tar.xz ] \
  || { echo "cpu_dsl_env: neither .dev1/ir.xz (CuTe DSL) nor .dev3/cutile-tools.tar.xz (cuTile) is here" >&2; exit 2; }
mkdir -p "$SITE"
if [ ! -f "$SITE/.rest_ok" ]; then xz -dc .dev2/rest.tar.xz | tar xf - -C "$SITE" && touch "$SITE/.rest_ok"; fi
if [ -f .dev1/ir.xz ] && [ ! -f "$SITE/$IR" ]; then xz -dc .dev1/ir.xz > "$SITE/$IR"; fi
if [ -f .dev3/cutile-tools.tar.xz ] && [ ! -f "$SITE/.cutile_ok" ]; then
  xz -dc .dev3/cutile-tools.tar.xz | tar xf - -C "$SITE" && chmod +x "$SITE"/nvidia/cu13/bin/* && touch "$SITE/.cutile_ok"
fi
if [ ! -x "$VENV/bin/python" ]; then
  [ -n "$PY312" ] || { echo "cpu_dsl_env: no python3.12 found (set PY312)" >&2; exit 2; }
  "$PY312" -m venv "$VENV"
fi
want=(numpy pytest)
[ -f "$SITE/$IR" ] && want+=("$TORCH_SPEC" click rich platformdirs filelock)
if ! "$VENV/bin/python" -c "import numpy, pytest${want[2]:+, torch}" 2> /dev/null; then
  "$VENV/bin/pip" install -q "${want[@]}"
fi
if [ -f "$SITE/.cutile_ok" ]; then
  export CUDA_HOME="$SITE/nvidia/cu13" PATH="$SITE/nvidia/cu13/bin:$PATH"
fi
# CuTe DSL's .pth (which puts dsl_packages on the path) is read only from site directories
PP=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages
for src in packages/*/src; do PP=$PP:$PWD/$src; done
export PYTHONPATH=$PP:$PWD:$PWD/packages/engines-linear-attention/tests PATH="$VENV/bin:$PATH"
exec "$@"
