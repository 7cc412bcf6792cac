"""pygraph engine families ``gdn``, ``kda`` and ``gdn2``: chunked gated linear attention.

The family skeleton: ``family.py`` (the declarations), ``analyzer.py`` (facts, shared by the three
families), ``heuristics.py`` (the ranking hook), ``reference.py`` (the plain-torch Gated DeltaNet
recurrence, forward and backward, shipped for users), ``chunked.py`` and ``chunked_bwd.py`` (the
chunked forward and backward the kernels compute, in plain torch); they need
``pygraph-engines-linear-attention[torch]``. ``engines/cutile.py`` is ``gdn_cutile``, the gdn
forward and backward in cuTile (``kernels/``; needs the ``cutile`` extra), default-on; the CuTe
DSL engines and the torch ops (``ops.py``) are planned. No backend lowers these ops, so a graph no engine serves raises
`pygraph.GraphNotSupportedError` naming each engine's reason. Importing this package imports no
framework.
"""

from pygraph_linear_attention._version import __version__

__all__ = ["__version__"]
