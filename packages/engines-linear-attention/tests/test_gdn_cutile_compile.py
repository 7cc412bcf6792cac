"""The gdn_cutile kernels compile for SM80, SM90, SM100 and SM120, on any machine with cuTile's compiler.

`cuda.tile.compilation.export_kernel` compiles a kernel for a named target without a GPU, from the
signatures the engine's launches have (`gdn.cutile_fwd.export_signatures`). It needs cuTile and its
compiler (tileiras, with a ptxas and libnvvm of CUDA 13.2 or newer beside it, found through PATH
or CUDA_HOME); where they are absent (CI) the test skips saying which. Compiling is all it shows:
on SM80, SM100 and SM120 the kernels are compiled, not run (only the H200 runs them).
"""

from __future__ import annotations

import io

import pytest

ct = pytest.importorskip(
    "cuda.tile", reason="cuTile is not installed (pip install 'pygraph-engines-linear-attention[cutile]')"
)


pytestmark = pytest.mark.usefixtures("cutile_compiler")  # skips where cuTile's compiler is absent

from pygraph_linear_attention.gdn.cutile_fwd import KERNELS, export_signatures, hinted  # noqa: E402
from pygraph_linear_attention.gdn.cutile_host import GdnCutileConfig  # noqa: E402

# every option on (the most code): GVA 2, safe gate with dt_bias, both states, BLOCK_V 64
CONFIG = GdnCutileConfig(
    tokens=4096, sequences=4, heads_qk=8, heads_v=16, heads_g=16, heads_beta=16, heads_a_log=16,
    heads_dt_bias=16, key_dim=128, value_dim=128, io_dtype="bfloat16", scale=128**-0.5,
    use_qk_l2norm=True, use_beta_sigmoid=True, allow_neg_eigval=True, safe_gate=True, has_dt_bias=True,
    has_initial_state=True, output_final_state=True, block_v=64,
)  # fmt: skip


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_every_kernel_compiles_to_a_cubin_for(target):
    for name, signature in export_signatures(CONFIG).items():
        out = io.BytesIO()
        ct.compilation.export_kernel(KERNELS[name], [signature], out, gpu_code=target, output_format="cubin")
        cubin = out.getvalue()
        assert cubin[:4] == b"\x7fELF", f"{name} for {target}: not an ELF cubin"


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
@pytest.mark.parametrize("occupancy", [2, 4])
def test_the_hinted_kernels_compile_with_each_occupancy_hint_for(target, occupancy):
    from pygraph_linear_attention.gdn.cutile_host import HINTED_FWD

    for name in HINTED_FWD[occupancy]:
        out = io.BytesIO()
        kernel = hinted(KERNELS[name], occupancy=occupancy)
        ct.compilation.export_kernel(
            kernel, [export_signatures(CONFIG)[name]], out, gpu_code=target, output_format="cubin"
        )
        assert out.getvalue()[:4] == b"\x7fELF", f"{name}, occupancy {occupancy}, {target}: not an ELF cubin"


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_the_split_scans_kernels_compile_for(target):
    import dataclasses

    split = dataclasses.replace(CONFIG, segment=32)
    for name in ("seg_table", "seg_offsets", "seg_bounds", "segment_scan", "segment_combine", "scan"):
        out = io.BytesIO()
        signature = export_signatures(split)[name]
        ct.compilation.export_kernel(KERNELS[name], [signature], out, gpu_code=target, output_format="cubin")
        assert out.getvalue()[:4] == b"\x7fELF", f"{name} (segment 32) for {target}: not an ELF cubin"
