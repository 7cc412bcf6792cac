"""pygraph engine families ``gdn``, ``kda`` and ``gdn2``: chunked gated linear attention.

The family skeleton, shared by the three families: ``family.py`` (the declarations), ``analyzer.py``
(facts), ``heuristics.py`` (the ranking hook). Then one folder per op, as flash-linear-attention lays
out ``fla/ops/<op>/``, with the same file names in each: ``gdn/`` (Gated DeltaNet) and ``kda/`` (KDA
and GDN-2, one set of kernels with GDN-2 as a flag) hold each op's ``reference``, ``chunked`` spec,
cuTile kernels and host (``cutile_*``), CuTe DSL kernels and host (``sm90_*``), ``support`` rules,
engines (``engine_cutile``, ``engine_sm90``) and torch ``op``; ``common/`` holds what they share. The
references and chunked specs need ``pygraph-engines-linear-attention[torch]``, the cuTile kernels the
``cutile`` extra, the CuTe DSL kernels the ``cute`` extra.

Public paths: ``pygraph_linear_attention.reference`` (the plain-torch references),
``pygraph_linear_attention.ops`` (``gated_delta_net``), and the torch ops ``gated_delta_net``,
``kimi_delta_attention`` and ``gated_delta_net_v2``, each also reachable as
``pygraph_linear_attention.<name>``, imported on first access; ``pygraph_linear_attention.context_parallel``
(the ops over a ``torch.distributed`` group, which the ops' ``cp_group=`` routes to). No backend lowers these ops, so a
graph no engine serves raises `pygraph.GraphNotSupportedError` naming each engine's reason.
Importing this package imports no framework.

The engines, a forward and a backward each:

- CuTe DSL for Hopper (the ``cute`` extra): ``gdn_sm90``, ``kda_sm90``, ``gdn2_sm90`` and their
  ``_bwd``, all default-on;
- cuTile (the ``cutile`` extra): ``gdn_cutile`` and ``gdn_cutile_bwd``, default-on; ``kda_cutile``,
  ``gdn2_cutile`` and their ``_bwd``, opt-in (``PYGRAPH_ENABLE_OPT_IN_ENGINES``).

What each engine serves and why: ``docs/linear-attention.md``.
"""

from typing import Any

from pygraph.extras import require_for_import
from pygraph_linear_attention._version import __version__

__all__ = ["__version__", "gated_delta_net", "gated_delta_net_v2", "kimi_delta_attention"]
_OPS = {"gated_delta_net": "gdn.op", "kimi_delta_attention": "kda.op", "gated_delta_net_v2": "kda.op"}

# the torch ops' modules (and the references they check against) import torch: without it,
# importing them names the extra that brings it
TORCH_INSTALL = "pip install 'pygraph-engines-linear-attention[torch]'"
require_for_import(
    (
        "pygraph_linear_attention.ops",
        "pygraph_linear_attention.reference",
        "pygraph_linear_attention.context_parallel",
        *(f"pygraph_linear_attention.{module}" for module in sorted(set(_OPS.values()))),
    ),
    "torch",
    TORCH_INSTALL,
)


def __getattr__(name: str) -> Any:
    # the torch ops are imported on first access, so importing the package imports no framework
    if name in _OPS:
        import importlib

        return getattr(importlib.import_module(f"pygraph_linear_attention.{_OPS[name]}"), name)
    raise AttributeError(f"module 'pygraph_linear_attention' has no attribute {name!r}")
