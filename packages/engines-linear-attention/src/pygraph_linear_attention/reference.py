"""The plain-torch references of the linear-attention ops, token by token, under one public path:
Gated DeltaNet's (`gdn.reference`), KDA's and GDN-2's (`kda.reference`), and the checks, head mapping
and options they share (`common.reference`: `prepare_inputs`, `PreparedInputs`). Each module states
its recurrence; a user checks a graph the same way the family's suites check the engines::

    from pygraph_linear_attention.reference import gated_delta_net_reference
    o, final_state = gated_delta_net_reference(q, k, v, g, beta, cu_seqlens, output_final_state=True)
"""

from __future__ import annotations

from pygraph_linear_attention.common.reference import PreparedInputs, prepare_inputs
from pygraph_linear_attention.gdn.reference import (
    gated_delta_net_backward_reference,
    gated_delta_net_reference,
)
from pygraph_linear_attention.kda.reference import (
    gated_delta_net_v2_backward_reference,
    gated_delta_net_v2_reference,
    kimi_delta_attention_backward_reference,
    kimi_delta_attention_reference,
)

__all__ = [
    "PreparedInputs",
    "gated_delta_net_backward_reference",
    "gated_delta_net_reference",
    "gated_delta_net_v2_backward_reference",
    "gated_delta_net_v2_reference",
    "kimi_delta_attention_backward_reference",
    "kimi_delta_attention_reference",
    "prepare_inputs",
]
