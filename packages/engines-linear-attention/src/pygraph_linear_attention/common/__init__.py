"""What the linear-attention ops share (`gdn`, `kda`), under public names.

``host`` (the chunk, the workspace carve, the chunk slots), ``support`` (the support rules every
engine applies), ``engine_cutile`` and ``engine_sm90`` (the plans that bind an op's kernels to a
graph), ``cutile_blocks`` and ``cutile_export`` (the cuTile kernels' shared blocks and their export
signatures), ``sm90_tiles`` and ``sm90_compile`` (the CuTe DSL building blocks and the compile and
cache), ``device_arrays``, ``reference``, ``chunked`` and ``chunked_bwd`` (the
plain-torch recurrence, chunked algorithm and gradient chain rules), ``op_arguments`` and
``op_graphs`` (the torch ops' checks and graphs). Importing this package imports nothing.
"""
