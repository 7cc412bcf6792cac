"""The ``gdn`` family's torch op under its public path: `gated_delta_net` (`gdn.op`, which registers
``torch.ops.pygraph_linear_attention.gated_delta_net``). KDA's and GDN-2's are `kda.op`'s; all three
are also ``pygraph_linear_attention.<name>``."""

from __future__ import annotations

from pygraph_linear_attention.gdn.op import gated_delta_net

__all__ = ["gated_delta_net"]
