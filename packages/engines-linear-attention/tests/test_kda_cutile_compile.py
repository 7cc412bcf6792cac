"""The kda_cutile / gdn2_cutile kernels, forward and backward, compile for SM80, SM90, SM100 and SM120,
on any machine with cuTile's compiler (`cuda.tile.compilation.export_kernel`, no GPU needed), from the signatures the
engine's launches have (`kda.cutile_fwd.export_signatures`). Where cuTile or its compiler is absent
(CI) the test skips saying which. On SM80, SM100 and SM120 the kernels are compiled, not run."""

from __future__ import annotations

import io

import pytest

ct = pytest.importorskip(
    "cuda.tile", reason="cuTile is not installed (pip install 'pygraph-engines-linear-attention[cutile]')"
)

pytestmark = pytest.mark.usefixtures("cutile_compiler")  # skips where cuTile's compiler is absent

from pygraph_linear_attention.kda.cutile_fwd import KERNELS, export_signatures  # noqa: E402
from pygraph_linear_attention.kda.cutile_host import KdaCutileConfig  # noqa: E402


def _config(op: str) -> KdaCutileConfig:
    # every option on (the most code): GVA 2, the safe gate with a_log and dt_bias, both states
    return KdaCutileConfig(
        op=op, tokens=4096, sequences=4, heads_qk=8, heads_v=16, key_dim=128, value_dim=128,
        io_dtype="bfloat16", scale=128**-0.5, use_qk_l2norm=True, use_beta_sigmoid=True,
        allow_neg_eigval=True, safe_gate=True, has_a_log=True, has_dt_bias=True,
        has_initial_state=True, output_final_state=True, block_v=64,
    )  # fmt: skip


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_every_kernel_compiles_to_a_cubin_for(op, target):
    for name, signature in export_signatures(_config(op)).items():
        out = io.BytesIO()
        ct.compilation.export_kernel(KERNELS[name], [signature], out, gpu_code=target, output_format="cubin")
        assert out.getvalue()[:4] == b"\x7fELF", f"{op} {name} for {target}: not an ELF cubin"


@pytest.mark.parametrize("op", ["kda", "gdn2"])
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_every_backward_kernel_compiles_to_a_cubin_for(op, target):
    import dataclasses

    from pygraph_linear_attention.kda.cutile_bwd import export_signatures as bwd_signatures
    from pygraph_linear_attention.kda.cutile_bwd_host import KdaCutileBwdConfig

    fields = {f.name: getattr(_config(op), f.name) for f in dataclasses.fields(KdaCutileConfig)}
    cfg = KdaCutileBwdConfig(**{**fields, "output_final_state": False}, has_d_final_state=True)
    for name, (kernel, signature) in bwd_signatures(cfg).items():
        out = io.BytesIO()
        ct.compilation.export_kernel(kernel, [signature], out, gpu_code=target, output_format="cubin")
        assert out.getvalue()[:4] == b"\x7fELF", f"{op} backward {name} for {target}: not an ELF cubin"


# spill frames (bytes per thread) measured on sm_90 at K = V = 128, every option on
# (scripts/cutile_resources.py --op kda|gdn2): a regression past them is a slower kernel
# "prepare" is the backward's launch (16 key channels a step, the gradient scan's decayed operands
# beside T: 552 B, GDN-2 400 B), "fwd_prepare" the forward's
SPILL_AT_MOST = {"fwd_prepare": 144, "prepare": 552, "states": 0, "output": 288, "grad_scan": 136, "grad_output": 616,
                 "grad_dt": 0, "grad_wy": 816}  # fmt: skip


@pytest.mark.parametrize("op", ["kda", "gdn2"])
def test_the_chunk_kernels_spill_no_more_than_measured_on_sm90(op):
    import dataclasses

    from pygraph.cubin_resources import resources
    from pygraph_linear_attention.kda.cutile_bwd import export_signatures as bwd_signatures
    from pygraph_linear_attention.kda.cutile_bwd_host import KdaCutileBwdConfig

    fields = {f.name: getattr(_config(op), f.name) for f in dataclasses.fields(KdaCutileConfig)}
    cfg = KdaCutileBwdConfig(**{**fields, "output_final_state": False}, has_d_final_state=True)
    forward = export_signatures(cfg)
    launches = {"output": (KERNELS["output"], forward["output"]), **bwd_signatures(cfg)}
    launches["fwd_prepare"] = (KERNELS["prepare"], export_signatures(_config(op))["prepare"])
    frames = {}
    for name in SPILL_AT_MOST:
        kernel, signature = launches[name]
        out = io.BytesIO()
        ct.compilation.export_kernel(kernel, [signature], out, gpu_code="sm_90", output_format="cubin")
        frames[name] = resources(out.getvalue())["frame"]
    assert all(frames[n] <= limit for n, limit in SPILL_AT_MOST.items()), frames
