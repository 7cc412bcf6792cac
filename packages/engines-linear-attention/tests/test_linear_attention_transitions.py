"""The state transitions' algebra (`common.transitions`): a span's (M, B) summarises its chunks
exactly, compositions are associative, and the segments' combine reaches the sequential scan's
final state; the state gradient's reverse transitions likewise reach the chunked backward's (float64,
CPU): what the segmented scans (gdn_sm90's SEGMENT, the ranks of a context-parallel group) rely on."""

from __future__ import annotations

import torch

from pygraph_linear_attention.common.chunked import CHUNK, chunk_prepare, to_chunks
from pygraph_linear_attention.common.reference import prepare_inputs
from pygraph_linear_attention.common.transitions import (
    apply,
    chunk_gradient_transition,
    chunk_transition,
    compose,
    entering_states,
    gradient_boundaries,
    span_transition,
    warmup_start,
)
from pygraph_linear_attention.gdn.chunked import chunked_gated_delta_net
from pygraph_linear_attention.gdn.chunked_bwd import chunk_state_step


def _inputs(tokens=5 * CHUNK + 17, heads=2, dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q = torch.nn.functional.normalize(r(tokens, heads, dim), dim=-1)
    k = torch.nn.functional.normalize(r(tokens, heads, dim), dim=-1)
    v = r(tokens, heads, dim)
    g = torch.nn.functional.logsigmoid(r(tokens, heads))
    beta = torch.sigmoid(r(tokens, heads))
    h0 = r(1, heads, dim, dim)
    cu = torch.tensor([0, tokens])
    return q, k, v, g, beta, cu, h0


def _chunks(q, k, v, g, beta, cu, h0):
    """Per chunk of the one sequence: (gamma, w, u, k) [HO, NC, C, ...] from the chunked spec's prepare."""
    prepared = prepare_inputs(q, k, v, g, beta, cu, initial_state=h0)
    count = -(-q.shape[0] // CHUNK)
    ck, cv = (to_chunks(x, count, CHUNK) for x in (prepared.k, prepared.v))
    cg, cb = (to_chunks(x, count, CHUNK) for x in (prepared.decay, prepared.write))
    gamma, w, u = chunk_prepare(ck, cv, cg, cb)
    return gamma, w, u, ck, count


def _gradient_chunks(q, k, v, g, beta, cu, h0, seed=7):
    """`_chunks` plus q and a random output gradient per chunk [HO, NC, C, ...] (zero on the padding)."""
    gamma, w, _, ck, count = _chunks(q, k, v, g, beta, cu, h0)
    prepared = prepare_inputs(q, k, v, g, beta, cu, initial_state=h0)
    gen = torch.Generator().manual_seed(seed)
    do = torch.randn(*v.shape, generator=gen, dtype=torch.float64)
    cq, cdo = (to_chunks(x, count, CHUNK) for x in (prepared.q, do))
    return gamma, w, ck, cq, cdo, count


def test_the_segments_combine_reaches_the_sequential_final_state():
    q, k, v, g, beta, cu, h0 = _inputs()
    _, final = chunked_gated_delta_net(q, k, v, g, beta, cu, initial_state=h0, output_final_state=True)
    gamma, w, u, ck, count = _chunks(q, k, v, g, beta, cu, h0)
    per_chunk = [chunk_transition(w[:, c], u[:, c], ck[:, c], gamma[:, c]) for c in range(count)]
    # segments of 2 chunks (the last one chunk): each summarised alone, then combined in order
    segments = []
    for first in range(0, count, 2):
        span = per_chunk[first]
        for t in per_chunk[first + 1 : first + 2]:
            span = compose(span, t)
        segments.append(span)
    states = entering_states(segments, h0[0])
    assert len(states) == len(segments) + 1
    torch.testing.assert_close(states[-1], final[0], rtol=1e-10, atol=1e-10)


def test_composition_is_associative_and_apply_follows_it():
    q, k, v, g, beta, cu, h0 = _inputs(seed=1)
    gamma, w, u, ck, _ = _chunks(q, k, v, g, beta, cu, h0)
    a, b, c = (chunk_transition(w[:, i], u[:, i], ck[:, i], gamma[:, i]) for i in range(3))
    left, right = compose(compose(a, b), c), compose(a, compose(b, c))
    for x, y in zip(left, right):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        apply(left, h0[0]), apply(c, apply(b, apply(a, h0[0]))), rtol=1e-12, atol=1e-12
    )


def test_a_spans_transition_from_its_rows_is_the_composed_one():
    # the kernels' way: the chunk step run on zero rows with u (B) and on the identity's rows without (M)
    q, k, v, g, beta, cu, h0 = _inputs(seed=2)
    gamma, w, u, ck, count = _chunks(q, k, v, g, beta, cu, h0)

    def step(rows, with_u):
        for c in range(count):
            last = gamma[:, c, -1:]
            kd = ck[:, c] * torch.exp(last - gamma[:, c])[..., None]
            v_new = (u[:, c] if with_u else 0) - w[:, c] @ rows.transpose(-1, -2)
            rows = rows * torch.exp(last)[..., None] + v_new.transpose(-1, -2) @ kd
        return rows

    zero = torch.zeros_like(h0[0])
    m, b = span_transition(step, zero, k.shape[-1])
    span = chunk_transition(w[:, 0], u[:, 0], ck[:, 0], gamma[:, 0])
    for c in range(1, count):
        span = compose(span, chunk_transition(w[:, c], u[:, c], ck[:, c], gamma[:, c]))
    torch.testing.assert_close(m, span[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(b, span[1], rtol=1e-10, atol=1e-10)


def test_a_per_channel_decay_transition_is_the_chunk_step():
    # KDA / GDN-2: gamma per key channel; (M, B) applied to a state equals the chunk step itself
    gen = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    heads, size, dim = 2, 8, 4
    w, k, u = r(heads, size, dim), r(heads, size, dim), r(heads, size, dim)
    gamma = torch.nn.functional.logsigmoid(r(heads, size, dim)).cumsum(-2)
    state = r(heads, dim, dim)
    last = gamma[:, -1:, :]
    v_new = u - w @ state.transpose(-1, -2)
    stepped = state * torch.exp(last) + v_new.transpose(-1, -2) @ (k * torch.exp(last - gamma))
    torch.testing.assert_close(
        apply(chunk_transition(w, u, k, gamma), state), stepped, rtol=1e-12, atol=1e-12
    )


def test_the_gradient_combine_reaches_the_sequential_state_gradients():
    # the reverse scan chunk by chunk (the chunked backward's step) against segments of 2 chunks
    # (the last one chunk), each summarised alone, combined from the sequence's end
    q, k, v, g, beta, cu, h0 = _inputs(seed=4)
    gamma, w, ck, cq, cdo, count = _gradient_chunks(q, k, v, g, beta, cu, h0)
    final = torch.randn(h0[0].shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    sequential = [final]
    for c in reversed(range(count)):
        _, d_in = chunk_state_step(cq[:, c], ck[:, c], w[:, c], gamma[:, c], cdo[:, c], sequential[-1])
        sequential.append(d_in)
    sequential = sequential[::-1]  # the gradient at each chunk boundary, in order
    per_chunk = [
        chunk_gradient_transition(w[:, c], ck[:, c], gamma[:, c], cq[:, c], cdo[:, c]) for c in range(count)
    ]
    segments = []
    for first in range(0, count, 2):
        span = per_chunk[first]
        if first + 1 < count:  # reverse order: the later chunk's step first
            span = compose(per_chunk[first + 1], span)
        segments.append(span)
    boundaries = gradient_boundaries(segments, final)
    assert len(boundaries) == len(segments) + 1
    for i, grad in enumerate(boundaries):
        torch.testing.assert_close(grad, sequential[min(2 * i, count)], rtol=1e-10, atol=1e-10)


def test_a_spans_gradient_matrix_is_its_forward_matrix_transposed():
    # so the backward's segment pass needs only D: the forward's phase 1 already summarised M
    q, k, v, g, beta, cu, h0 = _inputs(seed=6)
    gamma, w, u, ck, count = _chunks(q, k, v, g, beta, cu, h0)
    _, _, _, cq, cdo, _ = _gradient_chunks(q, k, v, g, beta, cu, h0)
    forward = chunk_transition(w[:, 0], u[:, 0], ck[:, 0], gamma[:, 0])
    backward = chunk_gradient_transition(w[:, 0], ck[:, 0], gamma[:, 0], cq[:, 0], cdo[:, 0])
    for c in range(1, count):
        forward = compose(forward, chunk_transition(w[:, c], u[:, c], ck[:, c], gamma[:, c]))
        backward = compose(
            chunk_gradient_transition(w[:, c], ck[:, c], gamma[:, c], cq[:, c], cdo[:, c]), backward
        )
    torch.testing.assert_close(backward[0], forward[0].transpose(-1, -2), rtol=1e-10, atol=1e-10)


def test_a_per_channel_decay_gradient_transition_is_the_reverse_step():
    # KDA / GDN-2: dh_in = dh M^T + D against the reverse step written with per-channel decays
    gen = torch.Generator().manual_seed(8)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    heads, size, dim = 2, 8, 4
    w, k, q, do = r(heads, size, dim), r(heads, size, dim), r(heads, size, dim), r(heads, size, dim)
    gamma = torch.nn.functional.logsigmoid(r(heads, size, dim)).cumsum(-2)
    d_state = r(heads, dim, dim)
    last = gamma[:, -1:, :]
    scores = torch.einsum("hrc,hjc,hrjc->hrj", q, k, torch.exp(gamma[:, :, None, :] - gamma[:, None, :, :]))
    scores = scores * torch.ones(size, size, dtype=torch.bool).tril()
    dv_new = scores.transpose(-1, -2) @ do + (k * torch.exp(last - gamma)) @ d_state.transpose(-1, -2)
    d_in = (
        d_state * torch.exp(last)
        + do.transpose(-1, -2) @ (q * torch.exp(gamma))
        - dv_new.transpose(-1, -2) @ w
    )
    torch.testing.assert_close(
        apply(chunk_gradient_transition(w, k, gamma, q, do), d_state), d_in, rtol=1e-12, atol=1e-12
    )


def test_a_spans_gradient_transition_from_its_rows_is_the_composed_one():
    # the kernels' way for the backward's segments: the reverse chunk steps run on zero rows with
    # the output's gradient (D) and on the identity's rows without it (M^T)
    q, k, v, g, beta, cu, h0 = _inputs(seed=9)
    gamma, w, ck, cq, cdo, count = _gradient_chunks(q, k, v, g, beta, cu, h0)

    def step(rows, with_do):
        for c in reversed(range(count)):
            do = cdo[:, c] if with_do else torch.zeros_like(cdo[:, c])
            _, rows = chunk_state_step(cq[:, c], ck[:, c], w[:, c], gamma[:, c], do, rows)
        return rows

    n, d = span_transition(step, torch.zeros_like(h0[0]), k.shape[-1])
    span = chunk_gradient_transition(
        w[:, count - 1], ck[:, count - 1], gamma[:, count - 1], cq[:, count - 1], cdo[:, count - 1]
    )
    for c in reversed(range(count - 1)):
        span = compose(span, chunk_gradient_transition(w[:, c], ck[:, c], gamma[:, c], cq[:, c], cdo[:, c]))
    torch.testing.assert_close(n, span[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(d, span[1], rtol=1e-10, atol=1e-10)


def _contractive_chunks(gate_shift: float, beta_max: float = 2.0, count: int = 12, seed: int = 3):
    """(gamma, w, u, k) per chunk of one head (unit keys, betas in [0, beta_max]) and the chunks' log
    decays (each chunk's last gamma)."""
    gen = torch.Generator().manual_seed(seed)
    t, d = count * CHUNK, 16
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    k = torch.nn.functional.normalize(r(t, 1, d), dim=-1)
    v = r(t, 1, d)
    g = torch.nn.functional.logsigmoid(r(t, 1) + gate_shift)
    beta = torch.rand(t, 1, generator=gen, dtype=torch.float64) * beta_max
    gamma, w, u, ck, _ = _chunks(
        k, k, v, g, beta, torch.tensor([0, t]), torch.zeros(1, 1, d, d, dtype=torch.float64)
    )
    return gamma[0], w[0], u[0], ck[0], gamma[0, :, -1].tolist()


def test_a_span_of_unit_keys_and_betas_in_range_shrinks_by_its_decay():
    """The warmup's premise: ||M||_2 <= exp(summed log decay) for unit keys and beta in [0, 2]."""
    gamma, w, u, ck, decays = _contractive_chunks(gate_shift=2.0)
    m = torch.eye(16, dtype=torch.float64)
    for c in range(len(decays)):
        m = m @ chunk_transition(w[c], u[c], ck[c], gamma[c])[0]
        bound = torch.exp(torch.tensor(sum(decays[: c + 1]), dtype=torch.float64))
        assert torch.linalg.matrix_norm(m, ord=2) <= bound * (1 + 1e-9)


def test_the_warmup_state_is_within_the_threshold_of_the_exact():
    """B of the warmup's chunks from zero against the exact state leaving the segment from a random
    entering state: the difference is at most exp(threshold) times the state where the warmup starts."""
    gamma, w, u, ck, decays = _contractive_chunks(gate_shift=4.5)
    threshold = -8.0
    first = warmup_start(decays, [True] * len(decays), threshold)
    assert first is not None and 0 < first < len(decays) - 1  # a warmup of a few chunks, not all
    steps = [chunk_transition(w[c], u[c], ck[c], gamma[c]) for c in range(len(decays))]
    state = torch.randn(1, 16, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)[0] * 10
    for c in range(first):
        state = apply(steps[c], state)
    at_start = state
    for c in range(first, len(decays)):
        state = apply(steps[c], state)
    warm = torch.zeros_like(state)
    for c in range(first, len(decays)):
        warm = apply(steps[c], warm)
    err = torch.linalg.matrix_norm(state - warm)
    assert err <= torch.exp(torch.tensor(threshold)) * torch.linalg.matrix_norm(at_start)


def test_the_warmup_keeps_the_exact_path_when_the_decay_is_weak_or_a_beta_out_of_range():
    decays = [-3.0] * 10
    assert warmup_start(decays, [True] * 10, -16.0) == 4  # -3 x 6 = -18 from the end: chunk 4
    assert warmup_start(decays, [True] * 10, -40.0) is None  # -30 in all: never below
    in_range = [True] * 10
    in_range[7] = False
    assert warmup_start(decays, in_range, -16.0) is None  # chunk 7 is walked before the sum gets there
    in_range = [True] * 10
    in_range[2] = False
    assert warmup_start(decays, in_range, -16.0) == 4  # chunk 2 lies before the warmup
    grows = list(decays)
    grows[8] = 1.0
    assert warmup_start(grows, [True] * 10, -16.0) is None  # a growing gate breaks the bound
