"""Configuration of the SM90 GEMM kernel: knobs, epilogue spec, problem layout, and can_implement.

Everything here is plain Python (no CuTe DSL import), so the engine layer can build cache keys
and decline problems without loading the DSL.

Epilogue semantics (all math in fp32 on the fp32 accumulator ``acc = A @ B``)::

    pre = acc * row_scale[m] * col_scale[n] + bias[n] + residual[m, n]
    out = act(pre)                  # written to C, in the output dtype
    aux = pre                       # optional second output, pre-activation

Each piece is optional. ``bias`` runs along N (length N) and is shared by every batch, as are the
scale vectors (row_scale has length M, col_scale length N). The residual is shaped like C.
"""

from __future__ import annotations

from dataclasses import dataclass

from pygraph.engines.base import REFERENCE_SM_COUNT

ACTIVATIONS = ("none", "relu", "gelu", "gelu_approx_tanh", "silu", "sigmoid", "tanh")
_ACT_ALIASES = {"swish": "silu", "gelu_erf": "gelu", "gelu_tanh": "gelu_approx_tanh", "identity": "none"}
IN_DTYPES = ("bf16", "fp16")
OUT_DTYPES = ("bf16", "fp16", "fp32")
VEC_DTYPES = ("bf16", "fp16", "fp32")
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_TORCH_NAMES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}

TMA_ALIGN_BYTES = 16
MAX_SMEM_BYTES = 227 * 1024  # opt-in dynamic shared memory per block on SM90
# Width (columns) of the epilogue's sub-tiles, each one slot of the store ring. 64-wide sub-tiles in
# a 2-deep ring (half the epilogue's barriers and TMA stores per tile, the same shared memory) were
# measured level: bf16 plain / bias+gelu 677 / 666 against 682 / 667 TFLOP/s at 8192^3, 658 / 647
# against 660 / 649 at 16384x4096x4096 (H200, swizzle 8).
EPI_N = 32


def dtype_name(dt) -> str:
    """'bf16' | 'fp16' | 'fp32' from a short name, a torch dtype, or a cutlass type name."""
    s = str(dt).replace("torch.", "").lower()
    s = _TORCH_NAMES.get(s, s)
    s = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(s, s)
    return s


def dtype_bytes(name: str) -> int:
    return _BYTES[name]


def canonical_activation(act: str) -> str:
    a = _ACT_ALIASES.get(act, act)
    if a not in ACTIVATIONS:
        raise ValueError(f"unknown activation {act!r}; expected one of {ACTIVATIONS + tuple(_ACT_ALIASES)}")
    return a


@dataclass(frozen=True)
class GemmKnobs:
    """Tuning knobs (all compile-time). ``stages=0`` picks as many A/B stages as shared memory holds."""

    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 64
    cga_m: int = 1  # cluster shape along M (B tile multicast across it)
    cga_n: int = 1  # cluster shape along N (A tile multicast across it)
    stages: int = 0
    swap_ab: bool = False  # compute C^T = B^T A^T (helps when M is tiny)
    raster: str = "m"  # "m": walk tiles along M first; "n": along N first
    swizzle: int = 1  # group size (in clusters) of the raster swizzle, for L2 reuse
    # split-K: each output tile's K loop is cut into ``split_k`` slices run by different CTAs; the
    # fp32 partials go to a workspace (see ``workspace_bytes``) and the last CTA of each tile (per-tile
    # semaphore) sums them in slice order and runs the fused epilogue once. 1 = no split (no workspace).
    split_k: int = 1
    # ping-pong: the two consumer warpgroups own alternate output tiles (each a whole tile_m x tile_n
    # tile) and take turns on the tensor cores, so one's epilogue runs under the other's main loop.
    # False = cooperative: both warpgroups share each tile (half its rows each).
    pingpong: bool = False
    # staggered cooperative: the two consumer warpgroups share each tile (half its rows each) but run
    # ``stagger`` k-blocks apart and each stores its own rows, so one's epilogue runs while the other
    # still issues wgmma. 0 = lockstep (one store of both halves). Needs more A/B stages than this.
    stagger: int = 0
    # L2 reuse across the persistent grid's rounds (the long-K rule names both). At K = 8192 a round
    # of the rule's 66 clusters reads ~33 MB of A rows and its band's 32 MB of B columns, so with C's
    # writes a B line is evicted before the band's next round reads it again. ``serpentine``: every
    # other band walks the raster axis backward, so a band's first round reads the rows the band
    # before it read last. ``k_flip``: every other tile of a CTA runs its k-blocks last to first, so
    # a round starts on the k-blocks the round before it read last (the fp32 sum over K then runs in
    # the other order on those tiles: a different rounding, as deterministic). Both: 8192^3 DRAM
    # reads 1.23 -> 1.07 GB, sustained bias+gelu +0.5..+1.0% on the long-K rows (H200).
    serpentine: bool = False
    k_flip: bool = False
    # clusters numbered GPC by GPC: cluster c starts at unit `tile_schedule.placed_rank(c)` instead
    # of c, so eight consecutive units run on one GPC and the CTAs that share an A tile read it from
    # one GPC, where the L2 request coalescer merges their requests (8192^3: 4.0 -> 24.8 M merged
    # sectors, 265 -> 239 M L2 reads, sustained +0.4..+1.2% on the long-K rows). A permutation of
    # the grid's clusters, so any placement stays correct; it needs 2-CTA clusters (one per TPC).
    place_order: bool = False

    def validate(self) -> str | None:
        if self.tile_m not in (64, 128, 256):
            return f"tile_m={self.tile_m} not in (64, 128, 256)"
        if self.tile_n % 16 or not 16 <= self.tile_n <= 256:
            return f"tile_n={self.tile_n} must be a multiple of 16 in [16, 256]"
        if self.tile_k not in (32, 64, 128):
            return f"tile_k={self.tile_k} not in (32, 64, 128)"
        for nm, v in (("cga_m", self.cga_m), ("cga_n", self.cga_n)):
            if v not in (1, 2, 4):
                return f"{nm}={v} not in (1, 2, 4)"
        if self.cga_m * self.cga_n > 8:  # 8: the largest portable cluster
            return f"cluster {self.cga_m}x{self.cga_n} larger than 8 CTAs"
        if self.raster not in ("m", "n"):
            return f"raster={self.raster!r} not in ('m', 'n')"
        if self.swizzle not in (1, 2, 4, 8, 16):
            return f"swizzle={self.swizzle} not in (1, 2, 4, 8, 16)"
        if self.stages and not 2 <= self.stages <= 12:
            return f"stages={self.stages} not in [2, 12]"
        if not 1 <= self.split_k <= 16:
            return f"split_k={self.split_k} not in [1, 16]"
        if not 0 <= self.stagger <= 3:
            return f"stagger={self.stagger} not in [0, 3]"
        if self.stagger and (self.tile_m == 64 or self.pingpong or self.split_k > 1):
            return (
                f"stagger={self.stagger} needs a cooperative tile of 128 or 256 rows without split-K "
                f"(tile_m={self.tile_m}, pingpong={self.pingpong}, split_k={self.split_k})"
            )
        if self.place_order and self.cga_m * self.cga_n != 2:
            return f"place_order orders 2-CTA clusters (one per TPC), got a {self.cga_m}x{self.cga_n} cluster"
        if self.tile_n > EPI_N and self.tile_n % EPI_N:
            # the epilogue stores whole EPI_N-wide sub-tiles: a last partial one would be left
            # unwritten or spill into the next tile's columns
            return f"tile_n={self.tile_n} is not a multiple of {EPI_N} (the epilogue's sub-tile width)"
        if self.pingpong:
            if self.tile_m not in (64, 128):
                return f"pingpong needs tile_m in (64, 128) (one warpgroup per tile), got {self.tile_m}"
            if self.tile_m * self.tile_n > 128 * 128:
                return (
                    f"pingpong tile {self.tile_m}x{self.tile_n} needs {self.tile_m * self.tile_n // 128} "
                    "accumulator registers per thread; at most 128 fit"
                )
            if self.split_k > 1:
                return f"pingpong does not combine with split_k={self.split_k}"
        return None


@dataclass(frozen=True)
class EpilogueSpec:
    """Which fused epilogue pieces are present, in the USER's frame (before any swap_ab)."""

    bias: bool = False  # vector of length N
    row_scale: bool = False  # vector of length M
    col_scale: bool = False  # vector of length N
    residual: bool = False  # tensor shaped like C
    activation: str = "none"
    aux_out: bool = False  # also write the pre-activation value
    vec_dtype: str = "fp32"  # dtype of bias / scale vectors
    residual_dtype: str = "bf16"
    aux_dtype: str = "bf16"

    def validate(self) -> str | None:
        try:
            canonical_activation(self.activation)
        except ValueError as e:
            return str(e)
        if self.vec_dtype not in VEC_DTYPES:
            return f"vec_dtype={self.vec_dtype!r} not in {VEC_DTYPES}"
        if self.residual and self.residual_dtype not in VEC_DTYPES:
            return f"residual_dtype={self.residual_dtype!r} not in {VEC_DTYPES}"
        if self.aux_out and self.aux_dtype not in OUT_DTYPES:
            return f"aux_dtype={self.aux_dtype!r} not in {OUT_DTYPES}"
        return None

    @property
    def act(self) -> str:
        return canonical_activation(self.activation)


@dataclass(frozen=True)
class KernelEpilogue:
    """The epilogue in the KERNEL's frame (after swap_ab): vectors along kernel M or kernel N."""

    bias_m: bool = False
    bias_n: bool = False
    scale_m: bool = False
    scale_n: bool = False
    residual: bool = False
    act: str = "none"
    aux_out: bool = False
    vec_dtype: str = "fp32"
    residual_dtype: str = "bf16"
    aux_dtype: str = "bf16"

    @staticmethod
    def from_spec(spec: EpilogueSpec, swap_ab: bool) -> KernelEpilogue:
        if swap_ab:
            bm, bn, sm, sn = spec.bias, False, spec.col_scale, spec.row_scale
        else:
            bm, bn, sm, sn = False, spec.bias, spec.row_scale, spec.col_scale
        return KernelEpilogue(
            bm,
            bn,
            sm,
            sn,
            spec.residual,
            spec.act,
            spec.aux_out,
            spec.vec_dtype,
            spec.residual_dtype,
            spec.aux_dtype,
        )

    @property
    def has_affine(self) -> bool:
        return self.bias_m or self.bias_n or self.scale_m or self.scale_n or self.residual

    @property
    def has_operands(self) -> bool:
        """Reads or writes a tensor besides A, B and C (a vector, the residual, the aux output)."""
        return self.has_affine or self.aux_out


@dataclass(frozen=True)
class KernelLayout:
    """Static layout facts of a problem in the KERNEL's frame; the compile-cache key with the knobs.

    a_major: 'k' (A is M x K row-major) or 'm'; b_major: 'k' (B stored N x K, i.e. B^T row-major)
    or 'n'; c_major: 'n' (row-major C) or 'm'. *_bcast: the batch stride is 0 (one matrix for all
    batches).
    """

    ab_dtype: str
    c_dtype: str
    a_major: str
    b_major: str
    c_major: str
    a_bcast: bool = False
    b_bcast: bool = False


def epi_ring_depth(knobs: GemmKnobs) -> int:
    """Slots of the epilogue's store ring (per consumer warpgroup in ping-pong and when staggered):
    4 sub-tiles, or 2 each for staggered warpgroups: at 128x256 (bf16) that leaves room for a 4th
    A/B stage, which a stagger of 3 k-blocks needs."""
    return 2 if knobs.stagger else 4


def bias_staged(knobs: GemmKnobs, epi: KernelEpilogue) -> bool:
    """Whether the kernel stages its bias along N in shared memory: a spare warp of the producer
    warpgroup loads each tile's tile_n values (clamped, as fp32) into one of two buffers while the
    main loop runs, and the epilogue reads them with shared loads instead of clamped global loads
    (8192^3 bias+gelu 0.9% fewer cycles, sustained +1.0..+1.3% at 16384x4096x4096, H200). It needs
    a bias along the kernel's N, cooperative tiles (one buffer per tile, read by all its threads), no
    K slices (each tile's epilogue runs once, in order) and tile_n a multiple of the loading warp's
    32 lanes; elsewhere the epilogue loads the bias from global memory."""
    return bool(epi.bias_n and not knobs.pingpong and knobs.split_k == 1 and knobs.tile_n % 32 == 0)


def gelu_from_half(knobs: GemmKnobs, epi: KernelEpilogue) -> bool:
    """Whether the kernel stages bias / 2 and runs tanh-gelu from half the pre-activation: the bias
    add and gelu's 0.5 x become one FMA and the gelu takes 5 fp32 ops per element for 6, bit for bit
    the same result (every constant moves by a power of two; 8192^3 bf16 bias+gelu 156.2 -> 154.1 M
    instructions, -0.12% cycles). It needs a staged bias (`bias_staged`) added last (no bias along
    M, no residual), tanh-gelu, and no aux output (that stores the whole pre-activation)."""
    return bool(
        bias_staged(knobs, epi)
        and epi.act == "gelu_approx_tanh"
        and not (epi.bias_m or epi.residual or epi.aux_out)
    )


def _smem_bytes(knobs: GemmKnobs, lay: KernelLayout, epi: KernelEpilogue, stages: int) -> int:
    ab = (knobs.tile_m + knobs.tile_n) * knobs.tile_k * dtype_bytes(lay.ab_dtype) * stages
    epi_n = min(EPI_N, knobs.tile_n)
    own_rows = knobs.pingpong or knobs.stagger > 0  # each consumer warpgroup stores on its own
    epi_m = 64 if own_rows else min(128, knobs.tile_m)  # the kernel's epilogue sub-tile
    ring = epi_ring_depth(knobs)
    c = epi_m * epi_n * dtype_bytes(lay.c_dtype) * ring
    if epi.aux_out:
        c += epi_m * epi_n * dtype_bytes(epi.aux_dtype) * ring
    if own_rows:
        c *= 2  # each consumer warpgroup stores through its own ring
    if bias_staged(knobs, epi):
        c += 2 * knobs.tile_n * 4 + 64  # two fp32 bias buffers and their barriers
    return ab + c + 1024 + 4 * 1024  # barriers + alignment slack


def pick_stages(knobs: GemmKnobs, lay: KernelLayout, epi: KernelEpilogue) -> int:
    if knobs.stages:
        return knobs.stages
    s = 2
    while s < 12 and _smem_bytes(knobs, lay, epi, s + 1) <= MAX_SMEM_BYTES:
        s += 1
    return s


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def padded(count: int, group: int) -> int:
    """``count`` rounded up to whole groups of ``group`` (tiles padded to whole clusters)."""
    return ceil_div(count, group) * group


# Clusters of each size resident at once on the reference card (`REFERENCE_SM_COUNT` SMs: the H200,
# and the H100 SXM), what the occupancy query gave on the H200 (docs/gemm.md, Cluster residency).
# 4-CTA clusters do not tile every GPC: 30, not 33. 8 is not yet queried: 14 is what GPCs of 18 and
# 12 SMs would place (they also give 66 and 30); a different answer on the device only means a
# fresh compile there.
RESIDENT_ON_REFERENCE = {1: REFERENCE_SM_COUNT, 2: REFERENCE_SM_COUNT // 2, 4: 30, 8: 14}


def resident_for(sm_count: int, cluster_size: int) -> int:
    """Clusters of ``cluster_size`` CTAs (one per SM) resident at once on a card of ``sm_count`` SMs,
    as known without asking the card: the reference card's occupancy answers on it; on another, 1-
    and 2-CTA clusters fill every SM and larger ones take the reference card's share of its SMs
    (rounded down, at least one). Used by the ranking rules, which never ask a GPU, and by the
    compile where the card asked for is not the one present (`compile_cache.resident_clusters`)."""
    if sm_count == REFERENCE_SM_COUNT:
        return RESIDENT_ON_REFERENCE.get(cluster_size, sm_count // cluster_size)
    if cluster_size <= 2 or cluster_size not in RESIDENT_ON_REFERENCE:
        return max(1, sm_count // cluster_size)
    return max(1, RESIDENT_ON_REFERENCE[cluster_size] * sm_count // REFERENCE_SM_COUNT)


def splitk_tiles(m: int, n: int, l: int, knobs: GemmKnobs) -> int:
    """Output tiles (kernel frame, padded to whole clusters): one int32 semaphore and ``split_k``
    fp32 partial tiles each. The semaphores live apart from the partials (`semaphores`)."""
    if knobs.swap_ab:
        m, n = n, m
    mt = padded(ceil_div(m, knobs.tile_m), knobs.cga_m)
    nt = padded(ceil_div(n, knobs.tile_n), knobs.cga_n)
    return mt * nt * l


def needs_workspace(knobs: GemmKnobs) -> bool:
    """Whether launches take a workspace and semaphores (split-K)."""
    return knobs.split_k > 1


def workspace_bytes(m: int, n: int, l: int, knobs: GemmKnobs) -> int:
    """Caller workspace the kernel needs for (M, N, L) in the USER frame; 0 without split-K.

    It holds only the fp32 partials (``split_k`` tiles per output tile) and may hold anything at
    launch: every partial is written before it is read. The per-tile semaphores, which must be zero
    at launch and which the kernel leaves zero, are engine-owned (`semaphores.stream_semaphores`).
    """
    if knobs.split_k > 1:
        return splitk_tiles(m, n, l, knobs) * knobs.split_k * knobs.tile_m * knobs.tile_n * 4
    return 0


def semaphore_words(m: int, n: int, l: int, knobs: GemmKnobs) -> int:
    """Zeroed int32 tile semaphores a launch needs (engine-owned, `semaphores.stream_semaphores`)."""
    return splitk_tiles(m, n, l, knobs) if knobs.split_k > 1 else 0


def can_implement(
    m: int,
    n: int,
    k: int,
    l: int,
    a_dtype,
    b_dtype,
    c_dtype,
    a_strides: tuple,
    b_strides: tuple,
    c_strides: tuple,
    a_ptr: int = 0,
    b_ptr: int = 0,
    c_ptr: int = 0,
    knobs: GemmKnobs | None = None,
    spec: EpilogueSpec | None = None,
    residual_strides: tuple | None = None,
    aux_strides: tuple | None = None,
    vec_ptrs: tuple = (),
    residual_ptr: int = 0,
    aux_ptr: int = 0,
) -> str | None:
    """Why this problem cannot be served (a reason string), or None when it can.

    Shapes in the user's frame: A is (L, M, K), B is (L, K, N), C is (L, M, N); strides are given
    in elements, (batch, row, col) for each. Never raises on a bad problem.
    """
    try:
        for nm, v in (("M", m), ("N", n), ("K", k), ("L", l)):
            if int(v) < 1:
                return f"{nm}={v} must be >= 1"
        if max(m, n) >= 2**31 or k >= 2**31 or l >= 2**16:
            return f"problem {m}x{n}x{k}x{l} too large for 32-bit tile coordinates"
        ad, bd, cd = dtype_name(a_dtype), dtype_name(b_dtype), dtype_name(c_dtype)
        if ad not in IN_DTYPES:
            return f"A dtype {a_dtype} unsupported (need one of {IN_DTYPES})"
        if bd != ad:
            return f"A dtype {a_dtype} and B dtype {b_dtype} differ"
        if cd not in OUT_DTYPES:
            return f"C dtype {c_dtype} unsupported (need one of {OUT_DTYPES})"
        if knobs is not None and (r := knobs.validate()):
            return r
        if spec is not None and (r := spec.validate()):
            return r
        if knobs is not None and knobs.split_k > 1:
            k_tiles = ceil_div(int(k), knobs.tile_k)
            if k_tiles < knobs.split_k:
                return (
                    f"split_k={knobs.split_k} needs at least that many K tiles; K={k} gives "
                    f"{k_tiles} of tile_k={knobs.tile_k}"
                )
        if knobs is not None and knobs.stagger:
            kepi = KernelEpilogue.from_spec(spec or EpilogueSpec(), knobs.swap_ab)
            stages = pick_stages(knobs, KernelLayout(ad, cd, "k", "k", "n"), kepi)
            if knobs.stagger >= stages:
                return (
                    f"stagger={knobs.stagger} needs more A/B stages than the {stages} that fit next to "
                    f"this epilogue's store rings ({cd} output{', aux' if kepi.aux_out else ''})"
                )
        ops = [
            ("A", a_strides, ad, (m, k), a_ptr, True),
            ("B", b_strides, bd, (k, n), b_ptr, True),
            ("C", c_strides, cd, (m, n), c_ptr, False),
        ]
        if spec is not None and spec.residual:
            if residual_strides is None:
                return "residual requested but no residual strides given"
            ops.append(("residual", residual_strides, spec.residual_dtype, (m, n), residual_ptr, None))
        if spec is not None and spec.aux_out:
            if aux_strides is None:
                return "aux_out requested but no aux strides given"
            if dtype_bytes(spec.aux_dtype) != dtype_bytes(cd):
                # both outputs leave the registers through one fragment layout (stmatrix for 16-bit)
                return (
                    f"aux (pre-activation) dtype {spec.aux_dtype} and output dtype {cd} differ in "
                    "element size; the epilogue stores both through one register layout"
                )
            ops.append(("aux", aux_strides, spec.aux_dtype, (m, n), aux_ptr, False))
        for name, st, dn, (r, c), ptr, is_in in ops:
            if len(st) != 3:
                return f"{name} strides {st} must be (batch, row, col)"
            sb, sr, sc = (int(x) for x in st)
            eb = dtype_bytes(dn)
            if ptr % TMA_ALIGN_BYTES:
                return f"{name} base address {ptr:#x} not {TMA_ALIGN_BYTES}-byte aligned (TMA)"
            if is_in is None:  # residual: any strides, read with plain loads
                continue
            if sc == 1 or c == 1:
                ld = sr
            elif sr == 1 or r == 1:
                ld = sc
            else:
                return f"{name} strides {st}: neither rows nor columns are contiguous"
            if (ld * eb) % TMA_ALIGN_BYTES:
                return (
                    f"{name} leading stride {ld} elements = {ld * eb} bytes is not a multiple of "
                    f"{TMA_ALIGN_BYTES} (TMA alignment)"
                )
            if ld * eb >= 2**40 or (sb * eb) >= 2**40:
                return f"{name} strides {st} too large for TMA"
            if sb and (sb * eb) % TMA_ALIGN_BYTES and l > 1:
                return f"{name} batch stride {sb} elements is not a multiple of {TMA_ALIGN_BYTES} bytes"
            if not is_in and sb == 0 and l > 1:
                return f"{name} batch stride 0 with L={l}: outputs cannot broadcast"
        for p in vec_ptrs:
            if p and p % 4:
                return f"epilogue vector base address {p:#x} not 4-byte aligned"
        return None
    except Exception as e:  # never crash on a bad problem
        return f"cannot analyse problem: {type(e).__name__}: {e}"
