"""The linear-attention families' engines, one module per engine: `cutile` (``gdn_cutile``, the
portable cuTile forward of ``gdn``).

Core builds them from the classes ``family.py``'s slots name; nothing here is imported until a graph
of the family is planned, and deciding support imports no DSL.
"""
