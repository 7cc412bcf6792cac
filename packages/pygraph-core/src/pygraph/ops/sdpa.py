"""The SDPA capture schema: 6 variants, each an explicit per-op schema turned into an `OpSpec`.

A schema lists the positional tensor ports, the optional tensor keywords, the scalar keywords
(with the backend's defaults), the keywords that are really outputs (rng_dump, dBias, ...) and the
returned outputs. Every keyword is captured generically by the one builder; an unknown one raises.
"""

from __future__ import annotations

from typing import Any

from pygraph.errors import OpInputError
from pygraph.ir.dtypes import attention_implementation, convert_enum, data_type, diagonal_alignment
from pygraph.ir.tensor import Tensor
from pygraph.node_types import NodeType
from pygraph.ops._common import as_bool, as_callable, as_int, const_dtype, like, like_dtype, optional_float
from pygraph.ops.build import dims_of
from pygraph.ops.spec import NO_DEFAULT, Attr, Lowering, OpSpec, Output, Port

__all__ = ["SDPA_SPECS"]

_F16 = frozenset({data_type.HALF, data_type.BFLOAT16})
_F8 = frozenset({data_type.FP8_E4M3, data_type.FP8_E5M2})
_FLOAT = const_dtype(data_type.FLOAT)


def _diag(v: Any) -> Any:
    return convert_enum(v, diagonal_alignment)


def _impl(v: Any) -> Any:
    return convert_enum(v, attention_implementation)


def _dropout(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, (tuple, list)):
        raise TypeError("expected a tuple such as (probability, seed, offset)")
    return tuple(value)


# the scalar keywords by kind (the rest are flags): each converter refuses a value of another kind
# at the builder (and at deserialize, which binds through it), not in an engine's analysis
_INT_ATTRS = frozenset(
    "sliding_window_length sliding_window diagonal_band_left_bound diagonal_band_right_bound left_bound "
    "right_bound paged_attention_max_seq_len_kv max_total_seq_len_q max_total_seq_len_kv".split()
)
_CALLABLE_ATTRS = frozenset({"score_mod", "score_mod_bprop", "fn"})


def _attrs(text: str) -> tuple[Attr, ...]:
    """``"name=default ..."``; defaults: None, False, True, TOP_LEFT, AUTO, REQUIRED."""
    out = []
    for item in text.split():
        name, _, default = item.partition("=")
        if name == "attn_scale":
            out.append(Attr(name, None, optional_float, tensor_ok=True))
        elif name == "diagonal_alignment":
            out.append(Attr(name, diagonal_alignment.TOP_LEFT, _diag))
        elif name == "implementation":
            out.append(Attr(name, attention_implementation.AUTO, _impl))
        elif name == "dropout":
            out.append(Attr(name, None, _dropout))
        else:
            value = {"None": None, "False": False, "True": True, "REQUIRED": NO_DEFAULT}[default or "None"]
            convert = as_int if name in _INT_ATTRS else as_callable if name in _CALLABLE_ATTRS else as_bool
            out.append(Attr(name, value, convert))
    return tuple(out)


def _stats_wanted(node) -> bool:
    generate = node.params.get("generate_stats")
    if generate is not None:
        return bool(generate)
    return node.params.get("is_inference") is False


def _o_dims(node):
    q, v = dims_of(node, "q"), dims_of(node, "v")
    return (*q[:-1], v[-1])


def _stats_dims(node):
    return (*dims_of(node, "q")[:-1], 1)


def _check(node) -> None:
    q, k = node.inputs["q"], node.inputs["k"]
    if q.dim and k.dim and q.dim[-1] != k.dim[-1]:
        raise OpInputError(
            f"{node.op}(): head dims differ: port 'q' (tensor {q.name!r}) dim {list(q.dim)}, "
            f"port 'k' (tensor {k.name!r}) dim {list(k.dim)}"
        )
    _check_geometry(node)
    for item in node.params.get("dropout") or ():
        if isinstance(item, Tensor):
            node.check_member(item, "dropout", f"{node.op}()")


def _check_geometry(node) -> None:
    """q, k and v agree: one batch, K and V one set of heads and keys, q's heads a multiple of K's
    (GQA), and the backward's o, dO and stats what q and v imply. Kernels size their reads from q and
    k, so a v with fewer keys or a k of another batch would be read past its end. A paged K/V (page
    tables given) is [blocks, heads, block size, D]: its batch and key counts are the tables'."""
    q, k, v = (node.inputs.get(p) for p in ("q", "k", "v"))
    if not (q is not None and k is not None and v is not None and q.dim and k.dim and v.dim):
        return
    if len(q.dim) != 4 or len(k.dim) != 4 or len(v.dim) != 4:
        return  # the ports' rank rule names it
    op = node.op
    paged = node.inputs.get("paged_attention_k_table") is not None
    if k.dim[1] != v.dim[1] or (not paged and (k.dim[0], k.dim[2]) != (v.dim[0], v.dim[2])):
        raise OpInputError(
            f"{op}(): port 'k' (tensor {k.name!r}) dim {list(k.dim)} and port 'v' (tensor {v.name!r}) dim "
            f"{list(v.dim)} differ in batch, heads or keys [B, H_kv, S_kv, *]"
        )
    if not paged and q.dim[0] != k.dim[0]:
        raise OpInputError(
            f"{op}(): port 'q' (tensor {q.name!r}) has batch {q.dim[0]}, port 'k' (tensor {k.name!r}) "
            f"{k.dim[0]} (dims {list(q.dim)}, {list(k.dim)})"
        )
    if q.dim[1] % k.dim[1]:
        raise OpInputError(
            f"{op}(): port 'q' has {q.dim[1]} heads, port 'k' {k.dim[1]}: q's heads are a multiple of "
            "K's (grouped-query attention)"
        )
    implied = {"o": (*q.dim[:-1], v.dim[-1]), "dO": (*q.dim[:-1], v.dim[-1]), "stats": (*q.dim[:-1], 1)}
    for port, want in implied.items():
        t = node.inputs.get(port)
        if t is not None and t.dim and tuple(t.dim) != want:
            raise OpInputError(
                f"{op}(): port {port!r} (tensor {t.name!r}) has dim {list(t.dim)}; q and v imply {list(want)}"
            )


def _lower_dropout(node, kwargs: dict[str, Any], lowerer: Any) -> None:
    drop = node.params.get("dropout")
    if drop is not None:
        kwargs["dropout"] = tuple(lowerer.source(x) if isinstance(x, Tensor) else x for x in drop)


def _amax(name: str) -> Output:
    return Output(name, dims=lambda node: (1, 1, 1, 1), dtype=_FLOAT)


def _schema(
    name: str,
    node_type: NodeType,
    required: str,
    optional: str,
    attrs: str,
    outputs: tuple[Output, ...],
    kw_outputs: str = "",
    qkv_dtypes: frozenset[data_type] = _F16,
    doc: str = "",
) -> OpSpec:
    qkv = {"q", "k", "v"}
    inputs = tuple(
        Port(p, ranks=(4,) if p in qkv else None, dtypes=qkv_dtypes if p in qkv else None)
        for p in required.split()
    ) + tuple(Port(p, required=False) for p in optional.split())
    outs = outputs + tuple(Output(o, from_kwarg=True) for o in kw_outputs.split())
    return OpSpec(
        name=name,
        node_type=node_type,
        family="sdpa",
        inputs=inputs,
        attrs=_attrs(attrs),
        outputs=outs,
        positional=tuple(required.split()),
        lowering=Lowering(name, output_layout="always", adjust=_lower_dropout),
        check=_check,
        single_return=False,
        doc=doc,
    )


_O = Output("O", dims=_o_dims, dtype=like_dtype("q"))
_STATS = Output(
    "Stats",
    dims=_stats_dims,
    dtype=_FLOAT,
    when=_stats_wanted,
    when_doc="generate_stats (or is_inference=False)",
)
_GRADS = (
    Output("dQ", dims=like("q"), dtype=like_dtype("q")),
    Output("dK", dims=like("k"), dtype=like_dtype("k")),
    Output("dV", dims=like("v"), dtype=like_dtype("v")),
)

SDPA_SPECS: tuple[OpSpec, ...] = (
    _schema(
        "sdpa", NodeType.SDPA, "q k v",
        "bias block_mask seq_len_q seq_len_kv paged_attention_k_table paged_attention_v_table sink_token "
        "cu_seq_len_q cu_seq_len_kv",
        "is_inference attn_scale use_alibi_mask=False use_padding_mask=False use_causal_mask=False "
        "use_causal_mask_bottom_right=False sliding_window_length diagonal_alignment diagonal_band_left_bound "
        "diagonal_band_right_bound dropout paged_attention_max_seq_len_kv max_total_seq_len_q "
        "max_total_seq_len_kv score_mod generate_stats implementation unfuse_fma=False stats_use_log2=False",
        (_O, _STATS), "rng_dump score_max score_sum_exp",
        doc="Scaled dot-product attention forward (fp16/bf16). O: q's dims with v's head dim.",
    ),
    _schema(
        "sdpa_backward", NodeType.SDPA_BWD, "q k v o dO stats", "bias seq_len_q seq_len_kv sink_token",
        "attn_scale use_alibi_mask=False use_padding_mask=False max_total_seq_len_q max_total_seq_len_kv "
        "use_causal_mask=False use_causal_mask_bottom_right=False sliding_window_length diagonal_alignment "
        "diagonal_band_left_bound diagonal_band_right_bound dropout use_deterministic_algorithm=False "
        "score_mod score_mod_bprop",
        _GRADS, "dBias rng_dump dSink_token",
    ),
    _schema(
        "sdpa_fp8", NodeType.SDPA_FP8, "q k v descale_q descale_k descale_v descale_s scale_s scale_o",
        "bias seq_len_q seq_len_kv paged_attention_k_table paged_attention_v_table sink_token cu_seq_len_q "
        "cu_seq_len_kv",
        "is_inference attn_scale use_alibi_mask=False use_padding_mask=False use_causal_mask=False "
        "use_causal_mask_bottom_right=False sliding_window diagonal_alignment left_bound right_bound dropout "
        "paged_attention_max_seq_len_kv max_total_seq_len_q max_total_seq_len_kv fn generate_stats "
        "unfuse_fma=False implementation stats_use_log2=False",
        (_O, _STATS, _amax("Amax_S"), _amax("Amax_O")), "rng_dump score_max score_sum_exp", _F8,
    ),
    _schema(
        "sdpa_fp8_backward", NodeType.SDPA_FP8_BWD,
        "q k v o dO stats descale_q descale_k descale_v descale_o descale_dO descale_s descale_dP scale_s "
        "scale_dQ scale_dK scale_dV scale_dP",
        "seq_len_q seq_len_kv sink_token",
        "attn_scale use_padding_mask=False use_causal_mask=False use_causal_mask_bottom_right=False "
        "diagonal_alignment left_bound right_bound use_deterministic_algorithm=False dropout "
        "max_total_seq_len_q max_total_seq_len_kv",
        (*_GRADS, _amax("amax_dQ"), _amax("amax_dK"), _amax("amax_dV"), _amax("amax_dP")), "dSink_token", _F8,
    ),
    _schema(
        "sdpa_mxfp8", NodeType.SDPA_MXFP8, "q k v descale_q descale_k descale_v",
        "sink_token seq_len_q seq_len_kv cu_seq_len_q cu_seq_len_kv paged_attention_k_table paged_attention_v_table",
        "attn_scale use_causal_mask=False use_causal_mask_bottom_right=False diagonal_alignment "
        "diagonal_band_left_bound diagonal_band_right_bound generate_stats=REQUIRED unfuse_fma=False "
        "implementation use_padding_mask=False max_total_seq_len_q max_total_seq_len_kv "
        "paged_attention_max_seq_len_kv",
        (_O, _STATS, _amax("Amax_O")), "", _F8,
    ),
    _schema(
        "sdpa_mxfp8_backward", NodeType.SDPA_MXFP8_BWD,
        "q q_T k k_T v o_f16 dO_f16 dO dO_T stats descale_q descale_q_T descale_k descale_k_T descale_v "
        "descale_dO descale_dO_T",
        "seq_len_q seq_len_kv sink_token",
        "attn_scale use_padding_mask=False use_causal_mask=False use_causal_mask_bottom_right=False "
        "diagonal_alignment left_bound right_bound use_deterministic_algorithm=False dropout "
        "max_total_seq_len_q max_total_seq_len_kv",
        (*_GRADS, _amax("amax_dQ"), _amax("amax_dK"), _amax("amax_dV")), "dSink_token", _F8,
    ),
)  # fmt: skip
