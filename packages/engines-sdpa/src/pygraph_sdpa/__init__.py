"""pygraph engine families ``sdpa_fwd`` and ``sdpa_bwd``: fused scaled-dot-product attention."""

from pygraph_sdpa._version import __version__

__all__ = ["__version__"]
