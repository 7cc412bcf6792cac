"""pygraph engine families ``sdpa_fwd`` and ``sdpa_bwd``: fused scaled-dot-product attention.

The family skeleton: ``family.py`` (the declaration), ``analyzer.py`` (facts, shared by both
families), ``heuristics.py`` (the ranking hook), ``reference.py`` (plain-torch attention forward
and backward, shipped for users; needs ``pygraph-engines-sdpa[torch]``). The engines
(``engines/``), their kernels (``kernels/``) and the torch op (``ops.py``) are planned: until they
ship, the cuDNN backend serves SDPA graphs. Importing this package imports no framework.
"""

from pygraph_sdpa._version import __version__

__all__ = ["__version__"]
