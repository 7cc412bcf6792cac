"""Gated DeltaNet (the ``gdn`` family): everything of this op in one folder.

``reference`` (the token loop), ``chunked`` and ``chunked_bwd`` (the chunked spec and its gradient),
``cutile_fwd``, ``cutile_bwd`` with ``cutile_host``, ``cutile_bwd_host`` (the cuTile kernels and
their host sides), ``sm90_fwd`` (+ ``sm90_output``), ``sm90_bwd`` (+ ``sm90_bwd_scans``) with
``sm90_host`` (the CuTe DSL kernels for Hopper), ``support`` (the engines' rules and the kernels'
config), ``engine_cutile`` and ``engine_sm90`` (the engines ``family.py`` names), ``op`` (the torch op
``gated_delta_net``). What it shares with ``kda`` is in `pygraph_linear_attention.common`.
Importing this package imports nothing.
"""
