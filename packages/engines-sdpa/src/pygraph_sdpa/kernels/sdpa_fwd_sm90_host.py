"""Host side of ``sdpa_fwd_sm90`` and ``sdpa_bwd_sm90``: the static configurations a compile is keyed
by, the compiles themselves (CuTe DSL, for a named arch, no GPU needed) and the compiled functions
kept per process and on disk (``PYGRAPH_SDPA_SM90_CACHE_DIR``; ``off`` disables it)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from pygraph.kernel_cache import KernelCache

__all__ = ["HEAD_DIMS", "HEAD_DIMS_BWD", "SdpaBwdKey", "SdpaFwdKey", "compiled_backward", "compiled_forward"]

# D == D_v (the kernels stage O, dK, dV in the tiles of Q, K, V); 256 forward only (64-key blocks):
# the backward's K, V and two stages of Q and dO would not fit in shared memory there
HEAD_DIMS = (64, 128, 256)
HEAD_DIMS_BWD = (64, 128)
CACHE_ENV = "PYGRAPH_SDPA_SM90_CACHE_DIR"
FN_NAME = "sdpa_fwd_sm90"
# the compiled functions' pointer arguments, in order ("<role>_offset": the ragged offsets of role)
POINTERS = (
    "q",
    "k",
    "v",
    "o",
    "stats",
    "seq_len_q",
    "seq_len_kv",
    "q_offset",
    "k_offset",
    "v_offset",
    "o_offset",
)
BWD_POINTERS = (
    "q", "k", "v", "o", "dO", "stats", "dQ", "dK", "dV", "seq_len_q", "seq_len_kv",
    "q_offset", "k_offset", "v_offset", "o_offset", "dO_offset", "dQ_offset", "dK_offset", "dV_offset",
    "delta", "dq_acc",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SdpaFwdKey:
    head_dim: int
    io_dtype: str  # "bfloat16" or "float16"
    bottom_right: bool
    window_left: int  # -1: unbounded
    window_right: int  # -1: unbounded, 0: causal
    padded: bool  # seq_len_q / seq_len_kv given
    store_stats: bool
    p_in_registers: bool = False  # knob P_REGS: P as the register A operand of P V
    ragged: bool = False  # THD: each operand's rows from its ragged offsets


@dataclasses.dataclass(frozen=True)
class SdpaBwdKey:
    head_dim: int
    io_dtype: str
    bottom_right: bool
    window_left: int
    window_right: int
    padded: bool
    deterministic: bool = False  # dQ by its own pass (no atomics)
    ragged: bool = False


def backward_workspace(
    batch: int, heads: int, seq_q: int, head_dim: int, deterministic: bool = False
) -> tuple[int, int]:
    """The backward's workspace: delta ([B, H, S_q] fp32) from 0, then (not ``deterministic``) the
    fp32 dQ accumulator ([B, H, S_q, D]) from the first returned value (delta's bytes rounded up to
    256); the second is the total."""
    delta = -(-batch * heads * seq_q * 4 // 256) * 256
    return delta, delta + (0 if deterministic else batch * heads * seq_q * head_dim * 4)


# the compiled functions, per process and on disk, keyed by (key, arch), the DSL's version and the
# sources of the kernels' module graph (`pygraph.kernel_cache`)
KERNELS = KernelCache(
    "sdpa_sm90",
    CACHE_ENV,
    roots=(__name__, "pygraph_sdpa.kernels.sdpa_fwd_sm90", "pygraph_sdpa.kernels.sdpa_bwd_sm90"),
    kind="sdpa_fwd_sm90 kernel object",
)


def compiled_backward(key: SdpaBwdKey, arch: str = "sm_90a") -> Any:
    """The compiled backward of ``key`` for ``arch`` (as `compiled_forward`)."""
    return compiled_forward(key, arch)


def compiled_forward(key: Any, arch: str = "sm_90a") -> Any:
    """The compiled forward (or, for an `SdpaBwdKey`, backward) of ``key`` for ``arch``: from this
    process, else the disk, else compiled (about 5 s on a CPU core)."""
    return KERNELS.get(
        (type(key).__name__, dataclasses.astuple(key), arch),
        lambda: _compile(key, arch),
        function_name=FN_NAME,
    )


def _compile(key: Any, arch: str) -> Any:
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    from pygraph_sdpa.kernels.sdpa_bwd_sm90 import SdpaBwdSm90
    from pygraph_sdpa.kernels.sdpa_fwd_sm90 import DT, SdpaFwdSm90

    fields = dataclasses.asdict(key)  # the keys' fields are the kernels' arguments
    if isinstance(key, SdpaBwdKey):
        kernel = SdpaBwdSm90(**fields)
        # BWD_POINTERS's dtypes: q k v o dO (io), stats (f32), dQ dK dV (io), lengths and ragged offsets
        # (i32), then delta and dq_acc (f32, in the workspace: 256-byte aligned, which the engine checks)
        kinds, sizes = "iiiiifiii" + "n" * 10 + "ww", 14  # batch, heads (q, k), s_q, s_kv, then 3 x 3 strides
    else:
        kernel = SdpaFwdSm90(head_dim_v=key.head_dim, **fields)
        kinds, sizes = "iiiif" + "n" * 6, 18  # batch, heads (q, k, v), s_q, s_kv, then 4 x 3 strides
    gmem = cute.AddressSpace.gmem
    by_kind = {
        "i": make_ptr(DT[key.io_dtype], 0, gmem, assumed_align=16),
        "f": make_ptr(cutlass.Float32, 0, gmem, assumed_align=4),
        "w": make_ptr(cutlass.Float32, 0, gmem, assumed_align=16),
        "n": make_ptr(cutlass.Int32, 0, gmem, assumed_align=4),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trace-time advisories on the intended fully unrolled loops
        return cute.compile(
            kernel,
            *(by_kind[k] for k in kinds),
            *[cutlass.Int32(1)] * sizes,
            cutlass.Float32(1.0),
            make_fake_stream(),
            options=f"--enable-tvm-ffi --gpu-arch {arch}",
        )
