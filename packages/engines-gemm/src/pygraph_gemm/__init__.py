"""pygraph engine family ``gemm``: a matmul followed by any chain of elementwise ops on its output.

Importing this package is cheap: kernels and the DSL load when a plan is built.
"""

from pygraph_gemm._version import __version__

__all__ = ["__version__"]
