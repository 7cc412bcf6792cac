"""Lowering of the IR to execution backends (the cuDNN backend graph)."""
