"""pygraph engine families ``gdn``, ``kda`` and ``gdn2``: chunked gated linear attention.

The family skeleton: ``family.py`` (the declarations), ``analyzer.py`` (facts, shared by the three
families), ``heuristics.py`` (the ranking hook), ``reference.py`` (the plain-torch Gated DeltaNet
recurrence, forward and backward, shipped for users) and ``chunked.py`` (the chunked algorithm the
kernels compute, in plain torch); both need ``pygraph-engines-linear-attention[torch]``.
``engines/cutile.py`` is ``gdn_cutile``, the gdn forward in cuTile (``kernels/``; needs the
``cutile`` extra), shipped opt-in; the CuTe DSL engines, the backward and the torch ops
(``ops.py``) are planned. No backend lowers these ops, so a graph no engine serves raises
`pygraph.GraphNotSupportedError` naming each engine's reason. Importing this package imports no
framework.
"""

from pygraph_linear_attention._version import __version__

__all__ = ["__version__"]
