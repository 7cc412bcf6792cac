"""pygraph engine family ``gemm``: a matmul followed by any chain of elementwise ops on its output.

The family skeleton: ``family.py`` (the declaration), ``analyzer.py`` (facts), ``heuristics.py``
(the ranking hook), ``reference.py`` (the plain-torch reference, shipped for users), ``engines/``
(``sm90``, ``sm80``: one module per engine), ``kernels/`` (the CuTe DSL kernels and their host
path). Importing this package is cheap: kernels and the DSL load when a plan is built.
"""

from pygraph_gemm._version import __version__

__all__ = ["__version__"]
