"""gemm_sm90's per-call closure against the kernel's argument mapping, on the CPU.

The compiled function is replaced by a recorder (``launch.get_compiled`` patched), so a real
`launch.Plan` is built without the DSL. For every case the closure's argument tuple must equal
`launch.Plan.kernel_args` and the pre-factoring mapping (`_legacy_kernel_args`, kept verbatim
here as the oracle), and a refused call must launch nothing and name its rule.
"""

from __future__ import annotations

import itertools
from math import prod
from types import SimpleNamespace

import pytest

from pygraph.execution.variant_pack import OperandBuffer
from pygraph.ir.dtypes import data_type
from pygraph_gemm.engines import sm90 as engine_sm90
from pygraph_gemm.kernels import plan as launch_plan
from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs

M, N, K = 64, 48, 32
STREAM = 0xBEEF
POINTERS = {
    "a": 0x10000,
    "b": 0x20000,
    "out": 0x30000,
    "bias": 0x40000,
    "row_scale": 0x50000,
    "col_scale": 0x60000,
    "residual": 0x70000,
    "aux": 0x80000,
}


def _legacy_kernel_args(lay, swap, a_ptr, b_ptr, c_ptr, m, n, k, l, a_strides, b_strides, c_strides,
                        bias_ptr=0, row_scale_ptr=0, col_scale_ptr=0, residual_ptr=0,
                        residual_strides=(0, 0, 0), aux_ptr=0, aux_strides=(0, 0, 0), stream=0):  # fmt: skip
    """`launch.Plan.kernel_args` as it was before the mapping was factored out (the oracle)."""
    abs_, ar, ac = a_strides
    bbs, br, bc = b_strides
    cbs, cr, cc = c_strides
    xbs, xr, xc = aux_strides
    if l == 1:
        abs_ = bbs = cbs = xbs = 0
    if not swap:
        a_ld = ar if lay.a_major == "k" else ac
        b_ld = br if lay.b_major == "n" else bc
        c_ld = cr if lay.c_major == "n" else cc
        x_ld = xr if lay.c_major == "n" else xc
        cm = m if lay.c_major == "n" else n
        return (a_ptr, b_ptr, c_ptr, bias_ptr, row_scale_ptr, col_scale_ptr, residual_ptr, aux_ptr,
                m, n, k, l,
                a_ld, abs_ or a_ld * (m if lay.a_major == "k" else k),
                b_ld, bbs or b_ld * (n if lay.b_major == "k" else k),
                c_ld, cbs or c_ld * cm,
                residual_strides[1], residual_strides[2], residual_strides[0],
                x_ld, xbs or x_ld * cm, stream)  # fmt: skip
    ka_ld = bc if lay.a_major == "k" else br
    kb_ld = ar if lay.b_major == "k" else ac
    kc_ld = cc if lay.c_major == "n" else cr
    x_ld = xc if lay.c_major == "n" else xr
    cm = n if lay.c_major == "n" else m
    return (b_ptr, a_ptr, c_ptr, bias_ptr, col_scale_ptr, row_scale_ptr, residual_ptr, aux_ptr,
            n, m, k, l,
            ka_ld, bbs or ka_ld * (n if lay.a_major == "k" else k),
            kb_ld, abs_ or kb_ld * (m if lay.b_major == "k" else k),
            kc_ld, cbs or kc_ld * cm,
            residual_strides[2], residual_strides[1], residual_strides[0],
            x_ld, xbs or x_ld * cm, stream)  # fmt: skip


def _matrix(batch: tuple, rows: int, cols: int, col_major: bool, batch_stride: int | None = None):
    """(shape, stride) of a [*batch, rows, cols] matrix; batch_stride 0 broadcasts it."""
    inner = (1, rows) if col_major else (cols, 1)
    step = rows * cols if batch_stride is None else batch_stride
    stride, acc = [], step
    for d in reversed(batch):
        stride.insert(0, acc)
        acc *= d if batch_stride is None else 1
    return (*batch, rows, cols), (*stride, *inner)


# batching: (a batch, a batch stride, b batch, b batch stride, out batch)
BATCHING = {
    "2d": ((), None, (), None, ()),
    "l1": ((1,), None, (1,), None, (1,)),
    "batched": ((3,), None, (3,), None, (3,)),
    "batched_2dims": ((2, 3), None, (2, 3), None, (2, 3)),
    "bcast_a": ((), None, (3,), None, (3,)),
    "bcast_b_stride0": ((3,), None, (3,), 0, (3,)),
}
EPILOGUES = [
    (),
    ("bias",),
    ("row_scale", "col_scale"),
    ("bias", "residual"),
    ("aux",),
    ("bias", "row_scale", "residual", "aux"),
]


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, *args) -> None:
        self.calls.append(args)


def _setup(monkeypatch, a_col, b_col, c_col, swap, batching, epilogue, split_k=1):
    fn = _Recorder()
    monkeypatch.setattr(launch_plan, "get_compiled", lambda *a, **k: fn)
    ab, asb, bb, bsb, ob = BATCHING[batching]
    geo = {
        "a": _matrix(ab, M, K, a_col, asb),
        "b": _matrix(bb, K, N, b_col, bsb),
        "out": _matrix(ob, M, N, c_col),
    }
    if "residual" in epilogue:
        geo["residual"] = _matrix(ob, M, N, False)
    if "aux" in epilogue:
        geo["aux"] = _matrix(ob, M, N, c_col)
    for vec, shape in (("bias", (1, N)), ("row_scale", (M, 1)), ("col_scale", (1, N))):
        if vec in epilogue:
            geo[vec] = (shape, (shape[1], 1))
    bf16 = data_type.BFLOAT16
    declared = {
        r: OperandBuffer(0, s, st, data_type.FLOAT if r in ("bias", "row_scale", "col_scale") else bf16)
        for r, (s, st) in geo.items()
    }
    spec = EpilogueSpec(
        bias="bias" in epilogue,
        row_scale="row_scale" in epilogue,
        col_scale="col_scale" in epilogue,
        residual="residual" in epilogue,
        activation="relu" if "aux" in epilogue else "none",
        aux_out="aux" in epilogue,
    )
    l = prod(ob) if ob else 1
    s3 = {r: engine_sm90._strides3(declared[r]) for r in ("a", "b", "out")}
    kp = launch_plan.Plan(
        GemmKnobs(swap_ab=swap, split_k=split_k),
        spec,
        "bf16",
        "bf16",
        s3["a"],
        s3["b"],
        s3["out"],
        M,
        N,
        K,
        l,
    )
    assert kp.fn is fn
    tensor = SimpleNamespace(data_type=bf16)
    facts = SimpleNamespace(m=M, n=N, k=K, a=tensor, b=tensor, out=tensor)
    order = ("a", "b", "out", "bias", "row_scale", "col_scale", "residual", "aux")
    roles = [r for r in order if r in declared]
    positions = {r: i for i, r in enumerate(reversed(roles))}  # pack order is not role order
    plan = engine_sm90.GemmSm90Plan(SimpleNamespace(name="g"), facts, kp, positions, spec, declared)
    return plan, kp, fn, declared, positions, l


def _pack(declared, positions, pointers=POINTERS, **geometry):
    bufs = [None] * len(positions)
    for role, i in positions.items():
        d = declared[role]
        shape, stride = geometry.get(role, (d.shape, d.stride))
        bufs[i] = OperandBuffer(pointers[role], shape, stride, d.dtype, 0)
    return SimpleNamespace(buffers=bufs, device=0)


def _expected(kp, pack, positions, batch):
    """What the plan launched before: strides3 per operand, sizes from the shapes, via kernel_args."""
    b = {r: pack.buffers[i] for r, i in positions.items()}
    s3 = {r: engine_sm90._strides3(b[r]) for r in b if r in ("a", "b", "out", "residual", "aux")}
    m, k, n = b["a"].shape[-2], b["a"].shape[-1], b["b"].shape[-1]
    ptr = {r: b[r].pointer if r in b else 0 for r in POINTERS}
    args = (ptr["a"], ptr["b"], ptr["out"], m, n, k, batch, s3["a"], s3["b"], s3["out"],
            ptr["bias"], ptr["row_scale"], ptr["col_scale"], ptr["residual"], s3.get("residual", (0, 0, 0)),
            ptr["aux"], s3.get("aux", (0, 0, 0)), STREAM)  # fmt: skip
    new = kp.kernel_args(*args)
    legacy = _legacy_kernel_args(kp.klay, kp.swap, *args)
    if kp.lean:  # an epilogue with no other operand: the pointers and geometry of A, B and C only
        legacy = legacy[:3] + legacy[8:18] + legacy[23:]
    assert new == legacy
    return new


CASES = list(
    itertools.product(
        (False, True), (False, True), (False, True), (False, True), list(BATCHING), range(len(EPILOGUES))
    )
)


@pytest.mark.parametrize(("a_col", "b_col", "c_col", "swap", "batching", "epi"), CASES)
def test_closure_launches_what_kernel_args_maps(
    monkeypatch, a_col, b_col, c_col, swap, batching, epi
) -> None:
    plan, kp, fn, declared, positions, batch = _setup(
        monkeypatch, a_col, b_col, c_col, swap, batching, EPILOGUES[epi]
    )
    pack = _pack(declared, positions)
    plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0))
    assert fn.calls == [_expected(kp, pack, positions, batch)]


def test_an_epilogue_without_operands_launches_the_lean_function(monkeypatch) -> None:
    """No vector, residual or aux: 3 pointers, 4 sizes, 6 strides and the stream (14 arguments)."""
    plan, kp, fn, declared, positions, _batch = _setup(monkeypatch, False, True, False, True, "batched", ())
    assert kp.lean
    plan.execute(None, _pack(declared, positions), SimpleNamespace(stream=STREAM, workspace=0))
    (args,) = fn.calls
    assert len(args) == 14 and args[:3] == (POINTERS["b"], POINTERS["a"], POINTERS["out"])
    assert args[-1] == STREAM


@pytest.mark.parametrize(
    ("swap", "batching"), [(s, b) for s in (False, True) for b in ("2d", "batched", "bcast_a")]
)
def test_a_call_outside_the_declared_geometry_is_mapped_per_call(monkeypatch, swap, batching) -> None:
    plan, kp, fn, declared, positions, batch = _setup(
        monkeypatch, False, True, False, swap, batching, ("bias",)
    )
    ab, _asb, _bb, _bsb, ob = BATCHING[batching]
    # a different M with a padded leading dim (same majors, same batching): served, mapped for this call
    m2, lda = 40, K + 8
    a_shape = (*ab, m2, K)
    a_stride = (*((m2 * lda,) if ab else ()), lda, 1)
    out_shape, out_stride = _matrix(ob, m2, N, False)
    pack = _pack(declared, positions, a=(a_shape, a_stride), out=(out_shape, out_stride))
    plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0))
    assert fn.calls == [_expected(kp, pack, positions, batch)]


def test_an_unaligned_pointer_is_refused_and_launches_nothing(monkeypatch) -> None:
    plan, _kp, fn, declared, positions, _l = _setup(
        monkeypatch, False, False, False, False, "batched", ("bias",)
    )
    for role, align in (("a", 16), ("out", 16), ("bias", 4)):
        pack = _pack(declared, positions, pointers={**POINTERS, role: POINTERS[role] + 2})
        with pytest.raises(ValueError, match=rf"operand {role} pointer .* is not {align}-byte aligned"):
            plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0))
    assert fn.calls == []


@pytest.mark.parametrize("batching", ["2d", "batched"])
def test_an_output_smaller_than_a_at_b_is_refused_and_launches_nothing(monkeypatch, batching) -> None:
    """The plan maps M, N, K and the batch from A and B: an output buffer with fewer rows, columns
    or batch matrices than they imply would be written past its end."""
    from pygraph.execution import OperandGeometryError

    plan, _kp, fn, declared, positions, _l = _setup(monkeypatch, False, False, False, False, batching, ())
    ob = BATCHING[batching][4]
    small = [_matrix(ob, M - 8, N, False), _matrix(ob, M, N - 8, False)]
    if ob:
        small.append(_matrix((ob[0] - 1,), M, N, False))
    for geometry in small:
        pack = _pack(declared, positions, out=geometry)
        with pytest.raises(OperandGeometryError, match=r"gemm_sm90 \(graph .g.\): operand (out|a) "):
            plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0))
    assert fn.calls == []


def test_batch_dims_that_do_not_collapse_are_refused(monkeypatch) -> None:
    plan, _kp, fn, declared, positions, _l = _setup(
        monkeypatch, False, False, False, False, "batched_2dims", ()
    )
    shape, stride = declared["a"].shape, declared["a"].stride
    gapped = (stride[0] * 2, *stride[1:])  # outer batch stride skips a matrix
    pack = _pack(declared, positions, a=(shape, gapped))
    with pytest.raises(ValueError, match="operand a .* batch dims do not collapse"):
        plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0))
    assert fn.calls == []


def test_a_layout_the_kernel_was_not_compiled_for_is_refused(monkeypatch) -> None:
    plan, _kp, fn, declared, positions, _l = _setup(monkeypatch, False, False, False, True, "2d", ())
    pack = _pack(declared, positions, a=_matrix((), M, K, True))  # A column-major, compiled row-major
    with pytest.raises(ValueError, match=r"majors .* compiled for"):
        plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0))
    pack = _pack(declared, positions, b=_matrix((), K + 8, N, False))  # K of B is not K of A
    with pytest.raises(ValueError, match=r"operand b is \[40, 48\] per batch, the GEMM needs \[32, 48\]"):
        plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0))
    assert fn.calls == []


def test_an_epilogue_vector_of_the_wrong_length_or_stride_is_refused(monkeypatch) -> None:
    plan, _kp, fn, declared, positions, _l = _setup(
        monkeypatch, False, False, False, False, "2d", ("bias", "row_scale")
    )
    for role, geometry, rule in (
        ("bias", ((1, N - 8), (N - 8, 1)), rf"operand bias: shape \[1, {N - 8}\] holds {N - 8} elements, the GEMM needs {N}"),
        ("row_scale", ((M, 1), (2, 1)), rf"operand row_scale: shape \[{M}, 1\] stride \[2, 1\] is not one contiguous vector"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=rule):
            plan.execute(
                None,
                _pack(declared, positions, **{role: geometry}),
                SimpleNamespace(stream=STREAM, workspace=0),
            )
    assert fn.calls == []


def test_each_call_gets_its_own_argument_list(monkeypatch) -> None:
    plan, kp, fn, declared, positions, batch = _setup(
        monkeypatch, False, False, False, False, "2d", ("bias",)
    )
    first = _pack(declared, positions)
    second = _pack(declared, positions, pointers={r: p + 0x100000 for r, p in POINTERS.items()})
    plan.execute(None, first, SimpleNamespace(stream=STREAM, workspace=0))
    plan.execute(None, second, SimpleNamespace(stream=STREAM, workspace=0))
    assert fn.calls == [_expected(kp, first, positions, batch), _expected(kp, second, positions, batch)]


def test_buffers_checked_before_skip_the_checks_and_nothing_else_does(monkeypatch) -> None:
    """The closure skips its comparisons only for the very buffer objects it passed last time."""
    plan, kp, fn, declared, positions, batch = _setup(
        monkeypatch, False, False, False, False, "2d", ("bias",)
    )
    ctx = SimpleNamespace(stream=STREAM, workspace=0)
    first = _pack(declared, positions)
    plan.execute(None, first, ctx)
    plan.execute(None, first, ctx)  # the same buffers: launched without re-checking, same arguments
    assert fn.calls == [_expected(kp, first, positions, batch)] * 2

    def swapped(role, **fields):
        bufs = list(first.buffers)  # every other position keeps the buffer that passed
        bufs[positions[role]] = bufs[positions[role]]._replace(**fields)
        return SimpleNamespace(buffers=bufs, device=0)

    for role, align in (("a", 16), ("bias", 4)):
        bad = swapped(role, pointer=POINTERS[role] + 2)
        with pytest.raises(ValueError, match=rf"operand {role} pointer .* is not {align}-byte aligned"):
            plan.execute(None, bad, ctx)
    wide = swapped("a", shape=(M, K + 8))
    with pytest.raises(ValueError, match="per batch, the GEMM needs"):
        plan.execute(None, wide, ctx)
    m2 = 40  # a smaller M, A and C re-read: mapped for this call, not launched with the declared sizes
    smaller = swapped("a", shape=(m2, K))
    smaller.buffers[positions["out"]] = first.buffers[positions["out"]]._replace(shape=(m2, N))
    plan.execute(None, smaller, ctx)
    assert fn.calls[-1] == _expected(kp, smaller, positions, batch)
    plan.execute(None, first, ctx)
    assert len(fn.calls) == 4 and fn.calls[-1] == fn.calls[0]


def test_split_k_closure_passes_partials_then_stream_semaphores_before_the_stream(
    monkeypatch,
) -> None:
    from cuda.bindings import driver

    from pygraph_gemm.kernels import semaphores as sem_mod
    from pygraph_gemm.kernels.config import splitk_tiles

    monkeypatch.setitem(globals(), "K", 256)  # two K slices need at least two tiles of 64 along K
    memsets = []
    monkeypatch.setattr(
        driver, "cuMemsetD32Async", lambda *args: memsets.append(args) or (driver.CUresult.CUDA_SUCCESS,)
    )
    pool = _FakeSemaphores()
    monkeypatch.setattr(sem_mod, "_POOL", pool)
    plan, kp, fn, declared, positions, batch = _setup(
        monkeypatch, False, True, False, False, "batched", ("bias",), split_k=2
    )
    assert plan.get_workspace_size() == kp.workspace_bytes(M, N, batch) > 0
    pack = _pack(declared, positions)
    for _ in range(2):  # every call: the partials in the caller's workspace, the stream's semaphores
        plan.execute(None, pack, SimpleNamespace(stream=STREAM, workspace=0x900000))
    assert pool.asked == [(pack.device, STREAM, splitk_tiles(M, N, batch, kp.knobs))] * 2
    assert memsets == []  # the kernel leaves its semaphores zero: nothing is reset per call
    kp1 = launch_plan.Plan(
        GemmKnobs(),
        plan._spec,
        "bf16",
        "bf16",
        *(engine_sm90._strides3(declared[r]) for r in ("a", "b", "out")),
        M,
        N,
        K,
        batch,
    )
    one_slice = _expected(
        kp1, pack, positions, batch
    )  # the split-K launch: same frame, workspace before the stream
    assert fn.calls == [(*one_slice[:-1], 0x900000, _FakeSemaphores.ADDRESS, STREAM)] * 2
    # Only the declared geometry: another M is refused, nothing launches.
    out_shape, out_stride = _matrix((3,), 40, N, False)
    a_shape, a_stride = _matrix((3,), 40, K, False)
    with pytest.raises(ValueError, match="a split-K plan runs only the declared geometry"):
        plan.execute(None, _pack(declared, positions, a=(a_shape, a_stride), out=(out_shape, out_stride)),
                     SimpleNamespace(stream=STREAM, workspace=0x900000))  # fmt: skip
    assert len(fn.calls) == 2


class _FakeSemaphores:
    """Stands in for the engine's per-stream semaphore pool (no device)."""

    ADDRESS = 0x7700000

    def __init__(self) -> None:
        self.asked = []

    def address(self, device: int, stream: int, words: int) -> int:
        self.asked.append((device, stream, words))
        return self.ADDRESS
