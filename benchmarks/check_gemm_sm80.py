"""Correctness runner for the portable SM80 CuTe DSL GEMM (kernels/gemm_sm80.py), on any GPU >= sm_80.

    PYTHONPATH=packages/engines-gemm/src python benchmarks/check_gemm_sm80.py [--arch sm_90] [--quick]

Each case: fresh random inputs, output (and aux) poisoned with NaN, relative Frobenius error of the
result against a float64 reference; bf16 outputs < 1e-2, fp16 < 5e-3, fp32 < 2e-3. The problem goes
through the SAME user->kernel argument mapping as the SM90 engine (``launch.kernel_frame``, the
layout derivation of ``launch.Plan``), only the compiled function differs. ``k_pad`` cases store A
and B with a K row padded to 8 elements and NaN in the padding (K % 8 != 0): any k >= K leaking
into the sum shows as NaN. Prints one line per case and a SUMMARY line last.

``--arch`` defaults to the GPU's own (sm_90 on H100/H200): a cubin only loads on its own major
architecture, so an ``sm_80`` build (the kernel's A100 target) cannot launch on an SM90 GPU.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TOLS = {"bf16": 1e-2, "fp16": 5e-3, "fp32": 2e-3}
_FNS: dict = {}


def _compiled(knobs, kepi, lay, arch):
    from pygraph_gemm.kernels.gemm_sm80 import compile_sm80

    key = (knobs, kepi, lay, arch)
    if key not in _FNS:
        _FNS[key] = compile_sm80(knobs, kepi, lay, arch=arch)
    return _FNS[key]


def run_case(
    m,
    n,
    k,
    l=1,
    dt="bf16",
    out="bf16",
    a_col=False,
    b_col=False,
    c_col=False,
    a_bc=False,
    b_bc=False,
    bias=False,
    row_scale=False,
    col_scale=False,
    residual=False,
    act="none",
    aux=False,
    knobs=None,
    k_pad=False,
    c_pad=False,
    arch="sm_90",
    dev="cuda",
):
    """Returns (rel_err, tol, aux_err_or_None). Raises on failure to run (or can_implement refusal)."""
    import torch
    from check_gemm import DT, _relerr, poisoned_output, random_operand, reference

    from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, KernelEpilogue, can_implement
    from pygraph_gemm.kernels.frame import kernel_frame, kernel_layout

    knobs = knobs or GemmKnobs(tile_m=128, tile_n=128, tile_k=32)
    idt, odt = DT[dt], DT[out]
    kp = (-k) % 8 if k_pad else 0
    # A (M, K): K contiguous unless a_col; B (K, N): N contiguous unless b_col (then K contiguous)
    # k_pad: pad (with NaN) the K-contiguous rows: A's when K-major, B's when b_col (K-major)
    a = random_operand(l, m, k, idt, a_col, a_bc, dev, pad=0 if a_col else kp)
    b = random_operand(l, k, n, idt, b_col, b_bc, dev, pad=kp if b_col else 0)
    vecs, res, pre, ref = reference(a, b, idt, row_scale, col_scale, bias, residual, act)
    cp = (-n if not c_col else -m) % 8 if c_pad else 0  # pad C's contiguous rows to 16 bytes
    c, c_store = poisoned_output(l, m, n, odt, c_col, cp, dev)
    x = torch.full_like(c, float("nan"), dtype=idt) if aux else None  # same strides as C

    spec = EpilogueSpec(
        bias=bias,
        row_scale=row_scale,
        col_scale=col_scale,
        residual=residual,
        activation=act,
        aux_out=aux,
        vec_dtype="fp32",
        residual_dtype=dt,
        aux_dtype=dt,
    )
    st = lambda t: tuple(t.stride()) if t is not None else (0, 0, 0)  # noqa: E731
    why = can_implement(
        m, n, k, l, idt, idt, odt, st(a), st(b), st(c), a.data_ptr(), b.data_ptr(), c.data_ptr(), knobs, spec,
        st(res) if res is not None else None, st(x) if x is not None else None,
        tuple(v.data_ptr() for v in vecs.values()), res.data_ptr() if res is not None else 0,
        x.data_ptr() if x is not None else 0,
    )  # fmt: skip
    if why:
        raise ValueError(f"can_implement refused: {why}")
    lay = kernel_layout(knobs.swap_ab, dt, out, st(a), st(b), st(c), m, n, k, l)
    kepi = KernelEpilogue.from_spec(spec, knobs.swap_ab)
    fn = _compiled(knobs, kepi, lay, arch)
    order, geometry = kernel_frame(lay, knobs.swap_ab)
    ptrs = (
        a.data_ptr(),
        b.data_ptr(),
        c.data_ptr(),
        vecs["bias"].data_ptr() if bias else 0,
        vecs["row_scale"].data_ptr() if row_scale else 0,
        vecs["col_scale"].data_ptr() if col_scale else 0,
        res.data_ptr() if res is not None else 0,
        x.data_ptr() if x is not None else 0,
    )
    geo = geometry(m, n, k, l, st(a), st(b), st(c), st(res), st(x))
    if dev == "cpu":  # --compile-only: everything but the launch
        assert len(ptrs) + len(geo) == 23 and callable(fn)
        return None
    fn(*(ptrs[i] for i in order), *geo, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    err = _relerr(c, ref)
    if cp and not torch.isnan(c_store[:, :, -cp:]).all():
        err = float("inf")  # a store past N (row-major) or M (column-major) hit the padding
    xerr = _relerr(x, pre) if aux else None
    return err, TOLS[out], xerr


def cases(quick: bool = False):
    from pygraph_gemm.kernels.config import GemmKnobs

    K128 = GemmKnobs(tile_m=128, tile_n=128, tile_k=32)
    K128_64 = GemmKnobs(tile_m=128, tile_n=128, tile_k=64)
    K64 = GemmKnobs(tile_m=64, tile_n=128, tile_k=64)
    K64_32 = GemmKnobs(tile_m=64, tile_n=128, tile_k=32, stages=3)
    KSQ = GemmKnobs(tile_m=128, tile_n=64, tile_k=32)
    KSMALL = GemmKnobs(tile_m=64, tile_n=64, tile_k=32, stages=2)
    KSWAP = GemmKnobs(tile_m=128, tile_n=64, tile_k=32, swap_ab=True)
    rag = dict(m=1000, n=1048, k=520)
    cs = []
    # all four A/B majors x both input dtypes, ragged M/N/K; both C majors
    for a_col in (False, True):
        for b_col in (False, True):
            for dt in ("bf16", "fp16"):
                cs.append(dict(**rag, dt=dt, out=dt, a_col=a_col, b_col=b_col, knobs=K128))
            cs.append(dict(**rag, a_col=a_col, b_col=b_col, c_col=True, knobs=K64))
    # output dtypes, both tile shapes and both tile_k
    for out in ("bf16", "fp16", "fp32"):
        cs.append(dict(m=264, n=392, k=200, dt="bf16", out=out, knobs=K128_64))
        cs.append(dict(m=264, n=392, k=200, dt="fp16", out=out, knobs=K64, bias=True, act="gelu"))
        cs.append(dict(m=264, n=392, k=200, dt="fp16", out=out, knobs=K64_32, c_col=True, a_col=True))
    # every activation, with bias
    for act in ("none", "relu", "gelu", "gelu_approx_tanh", "silu", "sigmoid", "tanh"):
        cs.append(dict(**rag, bias=True, act=act, knobs=K128))
    # scales, residual, aux, everything at once (also fp32 out, column-major C, swap_ab)
    every = dict(bias=True, row_scale=True, col_scale=True, residual=True, aux=True)
    cs += [
        dict(**rag, row_scale=True, knobs=K128),
        dict(**rag, col_scale=True, knobs=K64),
        dict(**rag, residual=True, knobs=K128_64),
        dict(**rag, bias=True, act="gelu_approx_tanh", aux=True, knobs=K128),
        dict(**rag, **every, act="silu", knobs=K128),
        # fp32 out: no aux (a 16-bit aux next to an fp32 output is declined by can_implement)
        dict(**rag, **{**every, "aux": False}, act="gelu", out="fp32", knobs=K64),
        dict(**rag, **every, act="relu", dt="fp16", out="fp16", c_col=True, a_col=True, knobs=KSQ),
        dict(**rag, **every, act="gelu", knobs=KSWAP),
    ]
    # K tails: K < tile_k, K % 8 != 0 with NaN in the row padding, one k-tile, many k-tiles
    cs += [
        dict(m=200, n=136, k=1, k_pad=True, knobs=K128),
        dict(m=200, n=136, k=37, k_pad=True, knobs=K128_64),
        dict(m=200, n=136, k=37, k_pad=True, a_col=True, b_col=True, knobs=K64),
        dict(m=200, n=136, k=77, k_pad=True, b_col=True, dt="fp16", out="fp16", knobs=KSMALL),
        dict(m=130, n=136, k=32, knobs=K128),
        # odd M and N: C rows padded to 136 (the padding must stay NaN-free of writes: checked)
        dict(m=131, n=131, k=64, b_col=True, c_pad=True, bias=True, residual=True, act="silu", knobs=K128),
        dict(m=131, n=131, k=64, b_col=True, c_pad=True, c_col=True, knobs=K64),
        dict(m=512, n=512, k=4096, knobs=K128, bias=True, act="gelu_approx_tanh"),
        dict(m=512, n=512, k=4104, a_col=True, knobs=K128_64),
    ]
    # tiny M (and swap_ab, which turns it into tiny N)
    for m in (1, 16):
        cs.append(dict(m=m, n=4096, k=1024, knobs=K128))
        cs.append(dict(m=m, n=4096, k=1024, knobs=K64, bias=True, act="relu"))
        cs.append(dict(m=m, n=4096, k=1024, knobs=KSWAP, bias=True, row_scale=True, act="gelu_approx_tanh"))
    # batched, broadcast operand
    cs += [
        dict(m=384, n=520, k=264, l=3, knobs=K128, bias=True, act="relu"),
        dict(m=384, n=520, k=264, l=3, a_bc=True, knobs=K64),
        dict(m=384, n=520, k=264, l=3, b_bc=True, b_col=True, knobs=K128, residual=True, aux=True),
        dict(m=384, n=520, k=264, l=2, a_col=True, a_bc=True, c_col=True, knobs=K128_64, bias=True),
        dict(m=384, n=520, k=264, l=2, knobs=KSWAP, bias=True, b_bc=True),
    ]
    return cs[::4] if quick else cs


def _default_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default=None, help="compile target (default: the GPU's own, e.g. sm_90)")
    ap.add_argument("--quick", action="store_true", help="every 4th case")
    ap.add_argument("--only", default=None, help="comma-separated case indices")
    ap.add_argument("--log", default=None, help="also write lines (and tracebacks) here")
    ap.add_argument(
        "--compile-only",
        action="store_true",
        help="no GPU: build each case's inputs on the CPU, check can_implement and compile its kernel",
    )
    args = ap.parse_args(argv)

    import torch

    dev = "cpu" if args.compile_only else "cuda"
    arch = args.arch or ("sm_80" if args.compile_only else _default_arch())
    from check_gemm import Tally

    tally = Tally(open(args.log, "w") if args.log else None)
    torch.manual_seed(0)
    only = None if args.only is None else {int(x) for x in args.only.split(",")}
    for i, c in enumerate(cases(args.quick)):
        if only is not None and i not in only:
            continue
        kn = c["knobs"]
        kd = f"{kn.tile_m}x{kn.tile_n}x{kn.tile_k}{' swap' if kn.swap_ab else ''}{f' st{kn.stages}' if kn.stages else ''}"
        desc = " ".join(f"{key}={v}" for key, v in c.items() if key != "knobs")
        label = f"#{i} [{kd}] {desc}"
        try:
            r = run_case(**c, arch=arch, dev=dev)
            if r is None:
                tally.compiled(label)
            else:
                tally.result(label, *r)
        except Exception as e:  # report and go on
            tally.error(label, e)
    where = torch.cuda.get_device_name() if dev == "cuda" else "compile-only, no launch"
    return tally.summary(f"check_gemm_sm80 ({arch})", "compiled" if dev == "cpu" else "passed", where)


if __name__ == "__main__":
    sys.exit(main())
