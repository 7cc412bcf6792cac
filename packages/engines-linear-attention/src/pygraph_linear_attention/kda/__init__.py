"""Kimi Delta Attention and Gated DeltaNet-2 (the ``kda`` and ``gdn2`` families): everything of both
ops in one folder, because GDN-2 is KDA with channel-wise beta and a write gate, a flag of the same
kernels, host sides, engines, references and specs.

``reference``, ``chunked`` and ``chunked_bwd``, ``cutile_fwd``, ``cutile_bwd`` with ``cutile_host``,
``cutile_bwd_host``, ``sm90_fwd``, ``sm90_bwd`` (+ ``sm90_bwd_channels``) with ``sm90_host``,
``support``, ``engine_cutile`` and ``engine_sm90`` (the ``kda_*`` and ``gdn2_*`` engines),
``op`` (the torch ops ``kimi_delta_attention`` and ``gated_delta_net_v2``): the same file names as
`gdn`'s. The CuTe DSL kernels extend gdn's (`gdn.sm90_fwd.GdnSm90Fwd`, `gdn.sm90_bwd.GdnSm90Bwd`:
the same scans with per-channel decays); what both ops share otherwise is in
`pygraph_linear_attention.common`. Importing this package imports nothing.
"""
