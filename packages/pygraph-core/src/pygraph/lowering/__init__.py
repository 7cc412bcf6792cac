"""Lowering of the IR to execution backends (today: the cuDNN backend graph)."""
