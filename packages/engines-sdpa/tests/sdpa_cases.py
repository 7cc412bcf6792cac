"""The sdpa families' device cases and their helpers (the sm90 tests of the backend path and of
sdpa_fwd_sm90 share them): the case table, inputs, graph attributes and the error measure."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

TOLERANCE = {"bfloat16": 1e-2, "float16": 5e-3}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    b: int = 2
    hq: int = 4
    hkv: int = 4
    s_q: int = 256
    s_kv: int = 256
    d: int = 128
    io: str = "bfloat16"
    causal: bool = False
    bottom_right: bool = False
    window: int = -1  # keys visible left of the diagonal, the diagonal's included (with causal)
    seq_len_q: tuple[int, ...] | None = None
    seq_len_kv: tuple[int, ...] | None = None

    def reference_options(self) -> dict:
        opts = {
            "is_causal": self.causal,
            "causal_bottom_right": self.bottom_right,
            "window_left": self.window,
        }
        if self.seq_len_q is not None:
            opts["seq_len_q"] = torch.tensor(self.seq_len_q)
            opts["seq_len_kv"] = torch.tensor(self.seq_len_kv)
        return opts


CASES = (
    Case("d128"),
    Case("d64-fp16", d=64, io="float16"),
    Case("causal", causal=True),
    Case("causal-bottom-right", s_q=192, s_kv=320, causal=True, bottom_right=True),
    Case("odd-lengths", s_q=131, s_kv=77, d=64),
    Case("odd-causal-top-left", s_q=97, s_kv=203, causal=True),
    Case("window", s_q=300, s_kv=300, causal=True, window=64),
    Case("gqa-8-causal", hq=16, hkv=2, causal=True),
    Case("gqa-8", hq=16, hkv=2, s_q=200, s_kv=200),
    Case("mqa", hq=8, hkv=1, d=64),
    Case("padding", s_q=256, s_kv=256, seq_len_q=(200, 37), seq_len_kv=(256, 100)),
    Case("padding-causal", s_q=160, s_kv=160, causal=True, seq_len_q=(160, 1), seq_len_kv=(160, 90)),
)


def _torch_dtype(name: str):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _handle():
    cudnn = pytest.importorskip("cudnn")
    return cudnn.create_handle()


def _mask_attrs(case: Case) -> dict:
    attrs = {}
    if case.causal:
        attrs["use_causal_mask_bottom_right" if case.bottom_right else "use_causal_mask"] = True
    if case.window > 0:
        attrs["sliding_window_length"] = case.window
    return attrs


def _padding(g, case: Case) -> tuple[dict, dict]:
    """The graph's padding attributes and ports, and the device tensors bound to them."""
    if case.seq_len_q is None:
        return {}, {}
    lengths_q = torch.tensor(case.seq_len_q, dtype=torch.int32, device="cuda").view(-1, 1, 1, 1)
    lengths_kv = torch.tensor(case.seq_len_kv, dtype=torch.int32, device="cuda").view(-1, 1, 1, 1)
    tq, tkv = g.tensor_like(lengths_q), g.tensor_like(lengths_kv)
    return {"use_padding_mask": True, "seq_len_q": tq, "seq_len_kv": tkv}, {tq: lengths_q, tkv: lengths_kv}


def _run(g, bindings: dict) -> str:
    g.create_execution_plans()
    g.build_plans()
    workspace = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute(bindings, workspace)
    torch.cuda.synchronize()
    return g.selected_plan.name


def _valid_rows(case: Case, x):
    """x [B, H, S_q, ...] with each batch's rows past its seq_len_q dropped, flattened."""
    if case.seq_len_q is None:
        return x.reshape(-1)
    return torch.cat([x[b, :, : case.seq_len_q[b]].reshape(-1) for b in range(case.b)])


def _valid_keys(case: Case, x):
    """x [B, H, S_kv, ...] with each batch's keys past its seq_len_kv dropped, flattened."""
    if case.seq_len_kv is None:
        return x.reshape(-1)
    return torch.cat([x[b, :, : case.seq_len_kv[b]].reshape(-1) for b in range(case.b)])


def _rel(got, want) -> float:
    got, want = got.double(), want.double()
    finite = torch.isfinite(want)
    if not bool(torch.equal(torch.isfinite(got), finite)):
        return float("inf")
    return float((got[finite] - want[finite]).norm() / want[finite].norm().clamp_min(1e-30))


def _inputs(case: Case, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    io = _torch_dtype(case.io)

    def normal(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(io)

    q = normal(case.b, case.hq, case.s_q, case.d)
    k = normal(case.b, case.hkv, case.s_kv, case.d)
    v = normal(case.b, case.hkv, case.s_kv, case.d)
    return q, k, v


# cases only the python kernels' own loops reach (their suites add them to CASES): many blocks under
# the causal bound, more keys than queries with a bottom-right window, more queries than keys (rows
# that see no key), fp16 at head dim 128, padding with a window
KERNEL_CASES = (
    Case("long-causal", b=1, hq=2, hkv=2, s_q=1031, s_kv=1031, causal=True),
    Case("long-full-d64", b=1, hq=2, hkv=1, s_q=515, s_kv=1100, d=64),
    Case("window-bottom-right", s_q=190, s_kv=700, causal=True, bottom_right=True, window=100),
    Case("more-queries-bottom-right", s_q=300, s_kv=100, causal=True, bottom_right=True),
    Case("fp16-d128-causal", io="float16", causal=True, s_q=333, s_kv=333),
    Case(
        "padding-window",
        s_q=384,
        s_kv=384,
        causal=True,
        window=50,
        seq_len_q=(384, 129),
        seq_len_kv=(300, 129),
    ),
)


def _where(got, want, rows: int = 16, cols: int = 16) -> str:
    """Where ``got`` [B, H, S, D] departs from ``want``: NaN count, then the mean absolute error per
    block of ``rows`` sequence rows and per block of ``cols`` head-dim columns (the worst four of
    each), so a failing case points at a tile, a mask edge or a layout."""
    got, want = got.double(), want.double()
    nan = int(torch.isnan(got).sum())
    err = (got - want).abs().nan_to_num(nan=float("inf"))
    by_row = err.mean(dim=(0, 1, 3))
    by_row = torch.stack([c.mean() for c in by_row.split(rows)])
    by_col = torch.stack([c.mean() for c in err.mean(dim=(0, 1, 2)).split(cols)])
    worst_rows = [(int(i) * rows, f"{float(by_row[i]):.2e}") for i in by_row.argsort(descending=True)[:4]]
    worst_cols = [(int(i) * cols, f"{float(by_col[i]):.2e}") for i in by_col.argsort(descending=True)[:4]]
    return f"NaN {nan}; worst row blocks (first row, error) {worst_rows}; worst column blocks {worst_cols}"
