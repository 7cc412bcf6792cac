#!/usr/bin/env bash
# One-command development setup from a fresh clone: a .venv with all five packages editable,
# the cuDNN frontend (for lowering), a CPU torch, and the test/lint/build tools.
#   bash scripts/setup-dev.sh        then   source .venv/bin/activate
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m venv --upgrade-deps .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
.venv/bin/python -m pip install -q \
  -e packages/manifest \
  -e packages/pygraph-core \
  -e packages/engines-gemm \
  -e packages/engines-sdpa \
  -e "packages/engines-linear-attention"
.venv/bin/python -c "import pygraph, pygraph_manifest; print('pygraph', pygraph.__version__, 'families:', [f.name for f in pygraph.engines.families()])"
echo "ready: source .venv/bin/activate"
