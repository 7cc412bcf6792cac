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

from .tile_schedule import tail_split

ACTIVATIONS = ("none", "relu", "gelu", "gelu_approx_tanh", "silu", "sigmoid", "tanh")
_ACT_ALIASES = {"swish": "silu", "gelu_erf": "gelu", "gelu_tanh": "gelu_approx_tanh", "identity": "none"}
IN_DTYPES = ("bf16", "fp16")
OUT_DTYPES = ("bf16", "fp16", "fp32")
VEC_DTYPES = ("bf16", "fp16", "fp32")
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_TORCH_NAMES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}

TMA_ALIGN_BYTES = 16
MAX_SMEM_BYTES = 227 * 1024  # opt-in dynamic shared memory per block on SM90


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
    # epilogue sub-tile width along N: 32 (a 4-deep store ring) or 64 (2-deep, the same shared
    # memory; half the sub-tiles, so half the epilogue barriers and TMA stores per tile)
    epi_n: int = 32
    # split tail: when the persistent grid's last round of tiles would leave SMs idle, its tiles run
    # as up to ``tail_split`` K-slices each (partials reduced like split-K's; `tile_schedule.tail_split`
    # picks the count per launch, 1 where splitting does not pay). 1 = off.
    tail_split: int = 1
    # staggered cooperative: the two consumer warpgroups share each tile (half its rows each) but run
    # ``stagger`` k-blocks apart and each stores its own rows, so one's epilogue runs while the other
    # still issues wgmma. 0 = lockstep (one store of both halves). Needs more A/B stages than this.
    stagger: int = 0
    # slots of the epilogue's store ring (each one sub-tile); 0 = the default of ``epi_ring_depth``.
    # Fewer slots free shared memory for A/B stages: at 128x256 bf16, 2 or 3 slots of 128x32 let a
    # 4th stage fit (4 slots: 3 stages).
    epi_slots: int = 0
    # wait for every wgmma of a k-block before the next (depth 0) and release its slot at once, instead
    # of keeping one k-block in flight (depth 1, which holds each slot about one k-block longer); the
    # two cooperative warpgroups' wgmma interleave, so one's queue covers the other's wait. Measured
    # level in lockstep and at 256x128, 0.6-0.8% slower staggered (kernels/NOTES.md v13).
    wait_all: bool = False
    # a bias along N staged in shared memory (`bias_staged` says where it applies): a spare warp of the
    # producer warpgroup loads each tile's tile_n values (clamped, as fp32) into one of two buffers
    # while the main loop runs, and the epilogue reads them with shared loads instead of clamped
    # global loads (0.9% fewer cycles at 8192^3 bias+gelu, +1.0-1.3% sustained at 16384x4096x4096:
    # kernels/NOTES.md v16). False keeps the global loads, for A/B runs.
    bias_smem: bool = True
    # L2 eviction priority of the A/B loads and C's stores (kernel-only). A swizzled raster walks the
    # grid in bands: the operand tiles of the band's own lines (B's columns when rastering along M,
    # A's rows along N) are read again on every round of the band, the other operand's only by the
    # clusters of one round. 1: the band's operand loads evict_last and the other evict_first; 2:
    # evict_last on the band's operand only; 3: as 1, and C's stores evict_first; 4: C's stores
    # evict_first only; 0: no hint. Level or slower on the long-K rows but 3 at 16384x4096x4096
    # (+0.8%); streaming A doubles 8192^3's DRAM reads (kernels/NOTES.md v18).
    l2_hint: int = 0
    # L2 reuse across rounds (kernels/NOTES.md v19; the long-K rule names both). At K = 8192 a round
    # of the rule's 66 clusters reads ~33 MB of A rows and its band's 32 MB of B columns, so with C's writes
    # a B line is evicted before the band's next round reads it again. ``serpentine``: every other
    # band walks the raster axis backward, so a band's first round reads the rows the band before
    # it read last. ``k_flip``: every other tile of a CTA runs its k-blocks last to first, so a
    # round starts on the k-blocks the round before it read last (the fp32 sum over K then runs in
    # the other order on those tiles: a different rounding, as deterministic).
    serpentine: bool = False
    k_flip: bool = False
    # tanh-gelu from half the pre-activation (`gelu_from_half` says where it applies): the staged
    # bias is stored halved, so the bias add and gelu's 0.5 x are one FMA and the gelu takes 5 fp32
    # ops per element for 6, bit for bit the same result (every constant moves by a power of two).
    # tanh-gelu's cost at one clock follows its instruction count (NOTES.md v20, v21). False keeps
    # the whole pre-activation, for A/B runs.
    gelu_half: bool = True
    # static ring slots: when a tile starts at the ring's slot 0, its k-blocks run in whole passes
    # over the ring with every slot index a compile-time constant, so each wgmma's shared-memory
    # descriptors are a base plus an immediate instead of runtime stage arithmetic; what is left of
    # K (n_kt % stages) and tiles starting elsewhere take the runtime-slot loop. Same wgmma in the
    # same order (bit-identical outputs); at 8192^3 bias+gelu 154 -> 94 M instructions, -0.2..-0.6%
    # cycles, +0.3..+0.6% sustained (NOTES.md v22). False keeps the runtime-slot loop only, for A/B.
    static_ring: bool = True
    # clusters numbered GPC by GPC: cluster c starts at unit `tile_schedule.placed_rank(c)` instead
    # of c, so eight consecutive units run on one GPC and the CTAs that share an A tile read it from
    # one GPC, where the L2 request coalescer merges their requests (kernels/NOTES.md v27 has the
    # merges, L2 reads and times). A permutation of the grid's clusters, so any placement stays
    # correct; it needs 2-CTA clusters (one per TPC).
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
        if self.l2_hint not in (0, 1, 2, 3, 4):
            return f"l2_hint={self.l2_hint} not in (0, 1, 2, 3, 4)"
        if self.stages and not 2 <= self.stages <= 12:
            return f"stages={self.stages} not in [2, 12]"
        if not 1 <= self.split_k <= 16:
            return f"split_k={self.split_k} not in [1, 16]"
        if not 1 <= self.tail_split <= 8:
            return f"tail_split={self.tail_split} not in [1, 8]"
        if self.tail_split > 1 and (self.split_k > 1 or self.pingpong):
            what = f"split_k={self.split_k}" if self.split_k > 1 else "pingpong"
            return f"tail_split={self.tail_split} does not combine with {what}"
        if not 0 <= self.stagger <= 3:
            return f"stagger={self.stagger} not in [0, 3]"
        if self.stagger and (self.tile_m == 64 or self.pingpong or self.split_k > 1 or self.tail_split > 1):
            return (
                f"stagger={self.stagger} needs a cooperative tile of 128 or 256 rows without split-K or a split "
                f"tail (tile_m={self.tile_m}, pingpong={self.pingpong}, split_k={self.split_k}, "
                f"tail_split={self.tail_split})"
            )
        if self.wait_all and (self.pingpong or self.tile_m == 64):
            return (
                "wait_all needs two warpgroups issuing wgmma side by side (cooperative, tile_m 128 or 256), "
                f"got tile_m={self.tile_m}, pingpong={self.pingpong}"
            )
        if self.place_order and self.cga_m * self.cga_n != 2:
            return f"place_order orders 2-CTA clusters (one per TPC), got a {self.cga_m}x{self.cga_n} cluster"
        if self.epi_n not in (32, 64):
            return f"epi_n={self.epi_n} not in (32, 64)"
        if self.epi_slots and not 2 <= self.epi_slots <= 4:
            return f"epi_slots={self.epi_slots} not 0 (default) or in [2, 4]"
        if self.tile_n > self.epi_n and self.tile_n % self.epi_n:
            # the epilogue stores whole epi_n-wide sub-tiles: a last partial one would be left
            # unwritten or spill into the next tile's columns
            return f"tile_n={self.tile_n} is not a multiple of epi_n={self.epi_n} (the epilogue's sub-tile width)"
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
    4 sub-tiles of 32 columns or 2 of 64, the same shared memory. Staggered warpgroups keep 2 slots
    each whatever the width: at 128x256 (bf16) that leaves room for a 4th A/B stage, which a
    stagger of 3 k-blocks needs. ``knobs.epi_slots`` overrides the count."""
    if knobs.epi_slots:
        return knobs.epi_slots
    if knobs.stagger or knobs.epi_n == 64:
        return 2
    return 4


# cp.async.bulk.tensor L2 cache-hint operands (createpolicy.fractional with fraction 1.0, the values
# CUTLASS's CacheHintSm90 uses): every line the copy touches gets this eviction priority
L2_EVICT_FIRST = 0x12F0000000000000
L2_EVICT_LAST = 0x14F0000000000000


def l2_cache_hints(knobs: GemmKnobs) -> tuple[int | None, int | None, int | None]:
    """(A's loads, B's loads, C's stores) L2 cache-hint operands of ``knobs.l2_hint``; None: no hint.
    The band's operand (B when rastering along M, A along N: `tile_schedule.unit_coord`) is the one
    kept; the other operand and C are the ones streamed."""
    hint = knobs.l2_hint
    keep = L2_EVICT_LAST if hint in (1, 2, 3) else None
    stream = L2_EVICT_FIRST if hint in (1, 3) else None
    a, b = (stream, keep) if knobs.raster == "m" else (keep, stream)
    return a, b, L2_EVICT_FIRST if hint in (3, 4) else None


def gelu_from_half(knobs: GemmKnobs, epi: KernelEpilogue) -> bool:
    """Whether the kernel stages bias / 2 and runs tanh-gelu from half the pre-activation
    (GemmKnobs.gelu_half): a staged bias (`bias_staged`) added last (no bias along M, no residual),
    tanh-gelu, and no aux output (that stores the whole pre-activation)."""
    return bool(
        knobs.gelu_half
        and bias_staged(knobs, epi)
        and epi.act == "gelu_approx_tanh"
        and not (epi.bias_m or epi.residual or epi.aux_out)
    )


def bias_staged(knobs: GemmKnobs, epi: KernelEpilogue) -> bool:
    """Whether the kernel stages its bias along N in shared memory (GemmKnobs.bias_smem): a bias along
    the kernel's N, cooperative tiles (one buffer per tile, read by all its threads), no K slices (each
    tile's epilogue runs once, in order) and tile_n a multiple of the loading warp's 32 lanes."""
    return bool(
        knobs.bias_smem
        and epi.bias_n
        and not knobs.pingpong
        and knobs.split_k == 1
        and knobs.tail_split == 1
        and knobs.tile_n % 32 == 0
    )


def _smem_bytes(knobs: GemmKnobs, lay: KernelLayout, epi: KernelEpilogue, stages: int) -> int:
    ab = (knobs.tile_m + knobs.tile_n) * knobs.tile_k * dtype_bytes(lay.ab_dtype) * stages
    epi_n = min(knobs.epi_n, knobs.tile_n)
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


# Clusters of each size resident at once on a 132-SM H100 SXM / H200 (what the occupancy query gave
# on the H200, 2026-11-29); used where no GPU can be asked, e.g. compiling ahead on a CPU machine.
# 8 is not yet queried: 14 is what GPCs of 18 and 12 SMs would place (they also give 66 and 30);
# a different answer on the device only means a fresh compile there.
RESIDENT_132 = {1: 132, 2: 66, 4: 30, 8: 14}


def resident_fallback(cluster_size: int) -> int:
    return RESIDENT_132.get(cluster_size, 132 // cluster_size)


def tail_tiles(m: int, n: int, k: int, l: int, knobs: GemmKnobs, resident: int = 0) -> tuple[int, int]:
    """(output tiles in the split tail, K-slices per tile) of a launch of (M, N, K, L) in the USER
    frame on a GPU running ``resident`` clusters at once (0: the H200's count); (0, 1) when the tail
    is not split."""
    if knobs.tail_split <= 1:
        return 0, 1
    if knobs.swap_ab:
        m, n = n, m
    cluster = knobs.cga_m * knobs.cga_n
    resident = resident or resident_fallback(cluster)
    units = (
        ceil_div(ceil_div(m, knobs.tile_m), knobs.cga_m)
        * ceil_div(ceil_div(n, knobs.tile_n), knobs.cga_n)
        * l
    )
    whole, slices = tail_split(units, min(units, resident), ceil_div(k, knobs.tile_k), knobs.tail_split)
    return (units - whole) * cluster, slices


def splitk_tiles(m: int, n: int, l: int, knobs: GemmKnobs) -> int:
    """Output tiles (kernel frame, padded to whole clusters): one int32 semaphore and ``split_k``
    fp32 partial tiles each. The semaphores live apart from the partials (`launch.semaphores`)."""
    if knobs.swap_ab:
        m, n = n, m
    mt = padded(ceil_div(m, knobs.tile_m), knobs.cga_m)
    nt = padded(ceil_div(n, knobs.tile_n), knobs.cga_n)
    return mt * nt * l


def needs_workspace(knobs: GemmKnobs) -> bool:
    """Whether launches take a workspace and semaphores (split-K, or a split tail)."""
    return knobs.split_k > 1 or knobs.tail_split > 1


def workspace_bytes(m: int, n: int, l: int, knobs: GemmKnobs, k: int = 0, resident: int = 0) -> int:
    """Caller workspace the kernel needs for (M, N, L) in the USER frame; 0 without split-K or a
    split tail. A split tail's size also depends on K and on the clusters resident at once
    (``resident``; 0 = the H200's count).

    It holds only the fp32 partials (``split_k`` tiles per output tile, or the slices of each tail
    tile) and may hold anything at launch: every partial is written before it is read. The per-tile
    semaphores, which must be zero at launch and which the kernel leaves zero, are engine-owned
    (`launch.semaphores`).
    """
    tile_bytes = knobs.tile_m * knobs.tile_n * 4
    if knobs.split_k > 1:
        return splitk_tiles(m, n, l, knobs) * knobs.split_k * tile_bytes
    if knobs.tail_split > 1:
        tiles, slices = tail_tiles(m, n, k, l, knobs, resident)
        return tiles * slices * tile_bytes
    return 0


def semaphore_words(m: int, n: int, l: int, knobs: GemmKnobs, k: int = 0, resident: int = 0) -> int:
    """Zeroed int32 tile semaphores a launch needs (engine-owned, `launch.semaphores`)."""
    if knobs.split_k > 1:
        return splitk_tiles(m, n, l, knobs)
    if knobs.tail_split > 1:
        return max(1, tail_tiles(m, n, k, l, knobs, resident)[0])
    return 0


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
