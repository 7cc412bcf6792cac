"""pygraph engine families ``gdn``, ``kda`` and ``gdn2``: chunked gated linear attention."""

from pygraph_linear_attention._version import __version__

__all__ = ["__version__"]
