"""The GEMM kernels in CuTe DSL: SM90 (Hopper, TMA + wgmma, warp-specialized) and the portable SM80
slot, both with fused epilogues. Modules marked (DSL) import CuTe DSL; the others do not.

Configuration and the host path:
  config.py          knobs, epilogue and layout records, shared-memory budget, can_implement
  frame.py           the user frame -> kernel frame mapping of pointers, sizes and strides
  compile_cache.py   compile once per key: in memory, then on disk, then CuTe DSL
  plan.py            Plan: a problem's configuration resolved to a compiled kernel and its arguments
  semaphores.py      the engine-owned split-K tile semaphores, per device and stream
  torch_gemm.py      gemm(): a torch wrapper over Plan with its own default knobs

The SM90 kernel, by concern (DSL, but for the schedule):
  gemm_sm90.py       Sm90Gemm: its configuration and the kernel, composed of the pieces below
  tile_schedule.py   which output tile a cluster runs at each step (plain Python, traced)
  mainloop.py        the consumer's k-loop over the A/B ring
  split_k.py         split-K's reduction of the K slices' fp32 partials
  epilogue.py        the epilogue's math in registers (scales, bias, residual, activations)
  store.py           the epilogue's store path: registers -> shared ring -> TMA store
  gemm_sm90_host.py  the host side: TMA atoms, the schedule's extent, shared storage, the launch
  entry.py           the compiled function's signatures (full and lean), shared with SM80
  gemm_sm90_split.py the split-K entry point (workspace and semaphores)

gemm_sm80.py         the portable cp.async + mma.sync kernel (DSL)
"""
