"""pygraph engine families ``gdn``, ``kda`` and ``gdn2``: chunked gated linear attention.

``family.py`` (the declarations), ``analyzer.py`` (facts, shared by the three families),
``heuristics.py`` (the ranking hook), ``reference.py`` (the plain-torch recurrences, forward and
backward, shipped for users), ``chunked.py``, ``chunked_bwd.py`` and ``chunked_kda_bwd.py`` (the
chunked forward and backward the kernels compute, in plain torch); those need
``pygraph-engines-linear-attention[torch]``. The engines (``engines/``, their kernels in
``kernels/``), a forward and a backward each:

- CuTe DSL for Hopper (the ``cute`` extra): ``gdn_sm90``, ``kda_sm90``, ``gdn2_sm90`` and their
  ``_bwd``, all default-on;
- cuTile (the ``cutile`` extra): ``gdn_cutile`` and ``gdn_cutile_bwd``, default-on; ``kda_cutile``,
  ``gdn2_cutile`` and their ``_bwd``, opt-in (``PYGRAPH_ENABLE_OPT_IN_ENGINES``).

``ops.py`` is the torch op ``gated_delta_net`` (a ``torch.library`` custom op over gdn and gdn_bwd
graphs; needs torch), ``kda_ops.py`` the ops ``kimi_delta_attention`` and ``gated_delta_net_v2``;
each is also reachable as ``pygraph_linear_attention.<name>``, imported on first access. No backend
lowers these ops, so a graph no engine serves raises `pygraph.GraphNotSupportedError` naming each
engine's reason. What each engine serves and why: ``docs/linear-attention.md``. Importing this
package imports no framework.
"""

from typing import Any

from pygraph_linear_attention._version import __version__

__all__ = ["__version__", "gated_delta_net", "gated_delta_net_v2", "kimi_delta_attention"]
_OPS = {"gated_delta_net": "ops", "kimi_delta_attention": "kda_ops", "gated_delta_net_v2": "kda_ops"}


def __getattr__(name: str) -> Any:
    # the torch ops are imported on first access, so importing the package imports no framework
    if name in _OPS:
        import importlib

        return getattr(importlib.import_module(f"pygraph_linear_attention.{_OPS[name]}"), name)
    raise AttributeError(f"module 'pygraph_linear_attention' has no attribute {name!r}")
