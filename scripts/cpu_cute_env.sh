#!/usr/bin/env bash
# CuTe DSL's compiler on a CPU machine, for the precompiles the device runs carry
# (scripts/device/precompile_linear_attention.py) and the SASS checks that need no GPU. It unpacks
# the device toolchain (.dev1 and .dev2, made by the device bundle: see scripts/device/README.md)
# into $SITE, with the MLIR library where the package looks for it, and makes a Python 3.12 venv
# (the library is built for 3.12) holding torch, then runs the given command in it:
#   bash scripts/cpu_cute_env.sh python scripts/device/precompile_linear_attention.py --only gdn
# The first run downloads torch (TORCH_SPEC, default the device image's torch==2.11.0: several
# hundred MB with its CUDA wheels) and takes a few minutes; later runs reuse $SITE and $VENV.
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${SITE:-/tmp/cpu-cute-site}
VENV=${VENV:-/tmp/v312}
TORCH_SPEC=${TORCH_SPEC:-torch==2.11.0}
PY312=${PY312:-$(command -v python3.12 || ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
IR=nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
if [ ! -f "$SITE/.ok" ]; then
  for part in .dev1/ir.xz .dev2/rest.tar.xz; do
    [ -f "$part" ] || { echo "cpu_cute_env: $part is missing (run the device bundle first)" >&2; exit 2; }
  done
  mkdir -p "$SITE"
  xz -dc .dev2/rest.tar.xz | tar xf - -C "$SITE"
  xz -dc .dev1/ir.xz > "$SITE/$IR"
  touch "$SITE/.ok"
fi
if [ ! -x "$VENV/bin/python" ]; then
  [ -n "$PY312" ] || { echo "cpu_cute_env: no python3.12 found (set PY312)" >&2; exit 2; }
  "$PY312" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, numpy, pytest" 2> /dev/null; then
  "$VENV/bin/pip" install -q "$TORCH_SPEC" numpy pytest click rich platformdirs filelock
fi
# the package's .pth (which puts dsl_packages on the path) is read only from site directories
PP=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages
for src in packages/*/src; do PP=$PP:$PWD/$src; done
export PYTHONPATH=$PP:$PWD:$PWD/packages/engines-linear-attention/tests PATH="$VENV/bin:$PATH"
exec "$@"
