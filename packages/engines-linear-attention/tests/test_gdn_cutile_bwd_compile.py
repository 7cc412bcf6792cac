"""The gdn_cutile backward kernels compile for SM80, SM90, SM100 and SM120, on any machine with cuTile's compiler.

As `test_gdn_cutile_compile.py` does for the forward: `cuda.tile.compilation.export_kernel` for a
named target without a GPU, from the signatures of the backward's launches
(`gdn_cutile_bwd.export_signatures`); skipped, saying why, where cuTile or its compiler is absent.
Compiled is all it shows: on SM80, SM100 and SM120 the kernels are compiled, not run.
"""

from __future__ import annotations

import io

import pytest

ct = pytest.importorskip(
    "cuda.tile", reason="cuTile is not installed (pip install 'pygraph-engines-linear-attention[cutile]')"
)


pytestmark = pytest.mark.usefixtures("cutile_compiler")  # skips where cuTile's compiler is absent

from pygraph_linear_attention.gdn.cutile_bwd import export_signatures  # noqa: E402
from pygraph_linear_attention.gdn.cutile_bwd_host import GdnCutileBwdConfig  # noqa: E402

# every option on (the most code): GVA 2, safe gate with dt_bias, both states, BLOCK_V 64
CONFIG = GdnCutileBwdConfig(
    tokens=4096, sequences=4, heads_qk=8, heads_v=16, heads_g=16, heads_beta=16, heads_a_log=16,
    heads_dt_bias=16, key_dim=128, value_dim=128, io_dtype="bfloat16", scale=128**-0.5,
    use_qk_l2norm=True, use_beta_sigmoid=True, allow_neg_eigval=True, safe_gate=True, has_dt_bias=True,
    has_initial_state=True, has_d_final_state=True, block_v=64,
)  # fmt: skip


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_every_backward_kernel_compiles_to_a_cubin_for(target):
    done = set()
    for name, (kernel, signature) in export_signatures(CONFIG).items():
        if kernel in done and name not in ("dQ", "dV", "dG", "d_a_log"):
            continue
        out = io.BytesIO()
        ct.compilation.export_kernel(kernel, [signature], out, gpu_code=target, output_format="cubin")
        assert out.getvalue()[:4] == b"\x7fELF", f"{name} for {target}: not an ELF cubin"
        done.add(kernel)


@pytest.mark.parametrize(("dim", "block_v"), [(64, 64), (128, 128)], ids=["d64-bv64", "d128-bv128"])
@pytest.mark.parametrize("launch", ["chunk_grad_output", "chunk_grad_wy"])
def test_the_chunk_gradients_compile_where_the_knob_covers_the_whole_value_dim(dim, block_v, launch):
    """BLOCK_V = V would give the chunk gradient kernels one-step loops over the value dim, which
    tileiras 13.4 fails to schedule; they take their own blocks (`GdnCutileBwdConfig.grad_block_v`,
    `grad_block_k`)."""
    import dataclasses

    cfg = dataclasses.replace(CONFIG, key_dim=dim, value_dim=dim, block_v=block_v)
    assert cfg.value_dim // cfg.grad_block_v >= 2 and cfg.key_dim // cfg.grad_block_k >= 2
    kernel, signature = export_signatures(cfg)[launch]
    out = io.BytesIO()
    ct.compilation.export_kernel(kernel, [signature], out, gpu_code="sm_90", output_format="cubin")
    assert out.getvalue()[:4] == b"\x7fELF"


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_the_per_chunk_kernels_compile_with_the_occupancy_hint_for(target):
    from pygraph_linear_attention.gdn.cutile_fwd import hinted
    from pygraph_linear_attention.gdn.cutile_host import HINTED_BWD, OCCUPANCY_BWD

    signatures = export_signatures(CONFIG)
    for name in HINTED_BWD:
        kernel, signature = signatures[name]
        for occupancy in OCCUPANCY_BWD[1:]:
            out = io.BytesIO()
            ct.compilation.export_kernel(
                hinted(kernel, occupancy=occupancy), [signature], out, gpu_code=target, output_format="cubin"
            )
            assert out.getvalue()[:4] == b"\x7fELF", (
                f"{name}, occupancy {occupancy}, {target}: not an ELF cubin"
            )


def test_the_chunk_gradient_kernels_compile_without_a_spill_frame_on_sm90():
    """A spill frame is what made the one-kernel chunk gradient 30x slower on the H200 (15.8 KB per
    thread: 50.9 ms of a 57.7 ms call at B1 T32768), and fp32 operands in the WY kernel (2.1 KB:
    33.5 ms against 1.1): the split kernels, as the engine launches them at K = V = 128, hold their
    tiles in registers."""
    import dataclasses

    from pygraph.cubin_resources import resources

    cfg = dataclasses.replace(CONFIG, use_qk_l2norm=False, heads_qk=16)  # the direct-store path too
    for config in (CONFIG, cfg):
        signatures = export_signatures(config)
        for name in ("chunk_grad_output", "chunk_grad_wy"):
            kernel, signature = signatures[name]
            out = io.BytesIO()
            ct.compilation.export_kernel(kernel, [signature], out, gpu_code="sm_90", output_format="cubin")
            found = resources(out.getvalue())
            assert found["frame"] == 0, f"{name}: {found}"
            assert 0 < found["registers"] <= 255, f"{name}: {found}"


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_the_split_scans_backward_launches_compile_for(target):
    import dataclasses

    split = dataclasses.replace(CONFIG, segment=32)
    signatures = export_signatures(split)
    for name in ("seg_chunk_offsets", "states", "grad_segments", "segment_combine_grad", "grad_scan"):
        kernel, signature = signatures[name]
        out = io.BytesIO()
        ct.compilation.export_kernel(kernel, [signature], out, gpu_code=target, output_format="cubin")
        assert out.getvalue()[:4] == b"\x7fELF", f"{name} (segment 32) for {target}: not an ELF cubin"
