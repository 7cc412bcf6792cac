"""pygraph engine families ``sdpa_fwd`` and ``sdpa_bwd``: fused scaled-dot-product attention.

``family.py`` (the declaration), ``analyzer.py`` (facts, shared by both families), ``heuristics.py``
(the ranking hook), ``reference.py`` (plain-torch attention forward and backward, shipped for users;
needs ``pygraph-engines-sdpa[torch]``). ``engines/sm90.py`` holds ``sdpa_fwd_sm90`` and
``sdpa_bwd_sm90``, the CuTe DSL engines for Hopper (their kernels in ``kernels/``; the ``cute``
extra), default-on and ranked after the cuDNN backend's entries, which measured faster in every
timed cell; where no cuDNN runtime is installed they serve the graphs alone. ``ops.py`` is the torch
op ``sdpa`` (a ``torch.library`` custom op over sdpa and sdpa_backward graphs; needs torch), also
reachable as ``pygraph_sdpa.sdpa``, imported on first access. What each engine serves and why:
``docs/sdpa.md``. Importing this package imports no framework.
"""

from typing import Any

from pygraph.extras import require_for_import
from pygraph_sdpa._version import __version__

__all__ = ["__version__", "sdpa"]

# the torch op and the reference import torch: without it, importing them names the extra that brings it
TORCH_INSTALL = "pip install 'pygraph-engines-sdpa[torch]'"
require_for_import(("pygraph_sdpa.ops", "pygraph_sdpa.reference"), "torch", TORCH_INSTALL)


def __getattr__(name: str) -> Any:
    # the torch op is imported on first access, so importing the package imports no framework
    if name == "sdpa":
        from pygraph_sdpa.ops import sdpa

        return sdpa
    raise AttributeError(f"module 'pygraph_sdpa' has no attribute {name!r}")
