"""The linear-attention families' kernels, one module per kernel set.

``gdn_cutile_fwd``: the cuTile forward of gdn (the chunk table, the chunks' preparation, the scan);
``gdn_cutile_host``: its pure-Python host side (problem, workspace carve, grids, arguments, launch
order); ``device_arrays``: DLPack views of the variant pack's addresses. Only ``gdn_cutile_fwd``
imports cuTile, when a plan is built.
"""
