"""SM90 (Hopper) GEMM with fused epilogues in CuTe DSL.

config.py  knobs / epilogue dataclasses and can_implement (no DSL import)
epilogue.py  in-register epilogue math (DSL)
gemm_sm90.py  the persistent warp-specialized kernel class Sm90Gemm (DSL)
launch.py  compile cache (memory + optional disk) and the low-host-cost Plan launcher
"""
