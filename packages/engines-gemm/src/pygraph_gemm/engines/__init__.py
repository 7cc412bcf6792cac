"""The ``gemm`` family's engines, one module per engine: `sm90` (TMA + wgmma) and `sm80` (portable).

Core builds them from the classes ``family.py``'s slots name; nothing here is imported until a
gemm graph is planned.
"""
