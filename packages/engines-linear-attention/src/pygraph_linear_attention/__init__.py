"""pygraph engine families ``gdn``, ``kda`` and ``gdn2``: chunked gated linear attention.

The family skeleton: ``family.py`` (the declarations), ``analyzer.py`` (facts, shared by the three
families), ``heuristics.py`` (the ranking hook), ``reference.py`` (the plain-torch Gated DeltaNet
recurrence, forward and backward, shipped for users; needs
``pygraph-engines-linear-attention[torch]``). The engines (``engines/``), their kernels
(``kernels/``) and the torch ops (``ops.py``) are planned; no backend lowers these ops, so until
the engines ship, planning such a graph raises `pygraph.GraphNotSupportedError` saying so.
Importing this package imports no framework.
"""

from pygraph_linear_attention._version import __version__

__all__ = ["__version__"]
