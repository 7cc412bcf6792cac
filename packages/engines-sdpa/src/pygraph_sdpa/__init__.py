"""pygraph engine families ``sdpa_fwd`` and ``sdpa_bwd``: fused scaled-dot-product attention.

The family skeleton: ``family.py`` (the declaration), ``analyzer.py`` (facts, shared by both
families), ``heuristics.py`` (the ranking hook), ``reference.py`` (plain-torch attention forward
and backward, shipped for users; needs ``pygraph-engines-sdpa[torch]``). ``ops.py`` is the torch op
``sdpa`` (a ``torch.library`` custom op over sdpa and sdpa_backward graphs; needs torch), also
reachable as ``pygraph_sdpa.sdpa``, imported on first access. The engines (``engines/``) and their
kernels (``kernels/``) are planned: until they ship, the cuDNN backend serves SDPA graphs.
Importing this package imports no framework.
"""

from typing import Any

from pygraph_sdpa._version import __version__

__all__ = ["__version__", "sdpa"]


def __getattr__(name: str) -> Any:
    # the torch op is imported on first access, so importing the package imports no framework
    if name == "sdpa":
        from pygraph_sdpa.ops import sdpa

        return sdpa
    raise AttributeError(f"module 'pygraph_sdpa' has no attribute {name!r}")
