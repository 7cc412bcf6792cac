"""pygraph engine families ``gdn``, ``kda`` and ``gdn2``: chunked gated linear attention.

The family skeleton: ``family.py`` (the declarations), ``analyzer.py`` (facts, shared by the three
families), ``heuristics.py`` (the ranking hook), ``reference.py`` (the plain-torch Gated DeltaNet
recurrence, forward and backward, shipped for users), ``chunked.py`` and ``chunked_bwd.py`` (the
chunked forward and backward the kernels compute, in plain torch); they need
``pygraph-engines-linear-attention[torch]``. ``engines/cutile.py`` is ``gdn_cutile``, the gdn
forward and backward in cuTile (``kernels/``; needs the ``cutile`` extra), default-on;
``engines/sm90.py`` is ``gdn_sm90``, the gdn forward in CuTe DSL for Hopper (the ``cute`` extra),
default-on; ``engines/kda_cutile.py`` is the kda and gdn2 forward in cuTile; the other CuTe DSL
engines are planned. ``ops.py`` is the torch op ``gated_delta_net`` (a ``torch.library`` custom op
over gdn and gdn_bwd graphs; needs torch), ``kda_ops.py`` the ops ``kimi_delta_attention`` and
``gated_delta_net_v2``; each is also reachable as ``pygraph_linear_attention.<name>``, imported on
first access. No backend lowers these
ops, so a graph no engine serves raises `pygraph.GraphNotSupportedError` naming each engine's
reason. Importing this package imports no framework.
"""

from typing import Any

from pygraph_linear_attention._version import __version__

__all__ = ["__version__", "gated_delta_net", "gated_delta_net_v2", "kimi_delta_attention"]
_OPS = {"gated_delta_net": "gdn.op", "kimi_delta_attention": "kda.op", "gated_delta_net_v2": "kda.op"}


def __getattr__(name: str) -> Any:
    # the torch ops are imported on first access, so importing the package imports no framework
    if name in _OPS:
        import importlib

        return getattr(importlib.import_module(f"pygraph_linear_attention.{_OPS[name]}"), name)
    raise AttributeError(f"module 'pygraph_linear_attention' has no attribute {name!r}")
