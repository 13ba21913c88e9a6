"""Stashed activations vs Korthikanti et al. 2022 (Table 2), as integer equalities."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads import (
    Model,
    TrainingSetup,
    block_activation_bytes,
    boundary_bytes,
    build_layer_graph,
    get_model,
    head_activation_bytes,
    padded_vocab,
)


def setup(s, b, recompute="none", sp=False, framework="megatron-2022"):
    """Korthikanti's unfused attention core (framework megatron-2022) unless ``framework``
    says."""
    return TrainingSetup(
        seq_len=s,
        global_batch=b,
        micro_batch=b,
        recompute=recompute,
        sequence_parallel=sp,
        framework=framework,
    )


def exact(x: Fraction) -> int:
    assert x.denominator == 1
    return int(x)


CASES = [
    (name, s, b, t)
    for name in ("korthikanti-22b", "gpt3-175b", "korthikanti-530b", "megatron-1t", "gpt3-125m")
    for s, b in ((2048, 1), (1024, 4))
    for t in (1, 2, 4, 8)
    if get_model(name).heads % t == 0
]


@pytest.mark.parametrize(("name", "s", "b", "t"), CASES)
def test_korthikanti_block_formulas(name, s, b, t):
    m = get_model(name)
    h, a = m.hidden, m.heads
    sbh, t_ = s * b * h, Fraction(t)
    no_tp = exact(sbh * (34 + Fraction(5 * a * s, h)))
    tp = exact(sbh * (10 + 24 / t_ + Fraction(5 * a * s, h) / t_))
    tp_sp = exact(sbh / t_ * (34 + Fraction(5 * a * s, h)))
    sel = exact(sbh * (10 + 24 / t_))
    sel_sp = exact(34 * sbh / t_)
    full, full_sp = 2 * sbh, exact(2 * sbh / t_)
    if t == 1:
        assert block_activation_bytes(m, setup(s, b), 1) == no_tp
    assert block_activation_bytes(m, setup(s, b), t) == tp
    assert block_activation_bytes(m, setup(s, b, sp=True), t) == tp_sp
    assert block_activation_bytes(m, setup(s, b, "selective"), t) == sel
    assert block_activation_bytes(m, setup(s, b, "selective", sp=True), t) == sel_sp
    assert block_activation_bytes(m, setup(s, b, "full"), t) == full
    assert block_activation_bytes(m, setup(s, b, "full", sp=True), t) == full_sp
    lg = build_layer_graph(m, setup(s, b, "selective", sp=True), t)
    assert [layer.activation_bytes for layer in lg.layers[1:-1]] == [sel_sp] * m.layers


def test_llama_generalisation_gqa_swiglu_no_dropout():
    m = get_model("llama2-70b")  # a = 64, g = 8, f = 28672, no dropout
    s, b, t, p = 4096, 1, 8, 2
    h, d, f, a, g = m.hidden, m.head_dim, m.ffn_hidden, m.heads, m.kv_heads
    T = s * b
    replicated = 4 * p * T * h  # 2 norm inputs, QKV input, MLP input; no dropout masks
    split = p * T * (a + 2 * g) * d + p * T * h + 3 * p * T * f  # Q K V, proj in, SwiGLU
    core = p * a * s * s * b  # softmax output only
    assert block_activation_bytes(m, setup(s, b), t) == replicated + (split + core) // t
    assert block_activation_bytes(m, setup(s, b, "selective", sp=True), t) == (
        (replicated + split) // t
    )


def test_moe_generalisation():
    m = get_model("mixtral-8x7b")
    s, b, t, p = 1024, 1, 4, 2
    h, f, k, E = m.hidden, m.ffn_hidden, m.top_k, m.experts
    T = s * b
    dense_like = (
        4 * p * T * h
        + (
            p * T * (m.heads + 2 * m.kv_heads) * m.head_dim
            + p * T * h
            + k * 3 * p * T * f
            + p * m.heads * s * s * b
        )
        // t
    )
    assert block_activation_bytes(m, setup(s, b), t) == dense_like + p * T * (E + k * h)


def test_head_and_boundary_bytes():
    m = get_model("gpt3-175b")
    s, b, t = 2048, 2, 8
    sbh = s * b * m.hidden
    # final-norm input + logits input (2 s b h each, /t with SP) + fp32 logits 4 s b V / t
    v = padded_vocab(m.vocab, t)
    assert head_activation_bytes(m, setup(s, b), t) == 4 * sbh + 4 * s * b * v // t
    assert head_activation_bytes(m, setup(s, b, sp=True), t) == 4 * sbh // t + 4 * s * b * v // t
    assert boundary_bytes(m, setup(s, b), t) == 2 * sbh
    assert boundary_bytes(m, setup(s, b, sp=True), t) == 2 * sbh // t
    lg = build_layer_graph(m, setup(s, b, sp=True), t)
    assert {e.bytes for e in lg.edges} == {2 * sbh // t}
    assert len(lg.edges) == m.layers + 1


def test_precision_scales_activations():
    m = get_model("korthikanti-22b")
    s, b = 2048, 1
    fp32 = TrainingSetup(s, b, precision_bytes=4, framework="megatron-2022")
    sbh, a = s * b * m.hidden, m.heads
    # 4-byte tensors, 1-byte masks: 4 (norms, QKV in, MLP in) x 4 + 2 masks + 12 x 4 (split)
    assert block_activation_bytes(m, fp32, 1) == (16 + 2 + 48) * sbh + 9 * a * s * s * b
    assert fp32.state_bytes_per_parameter == 16


@given(
    heads=st.sampled_from([4, 8, 16]),  # every t below divides them (a valid width)
    head_dim=st.sampled_from([8, 64, 128]),
    s=st.sampled_from([16, 128, 2048]),
    b=st.integers(1, 8),
    t=st.sampled_from([1, 2, 4]),
)
def test_korthikanti_formulas_random_gpt_shapes(heads, head_dim, s, b, t):
    h = heads * head_dim
    m = Model("gpt-shaped", 2, h, heads, 4 * h, 1000, max_positions=s)
    sbh, core = s * b * h, 5 * heads * s * s * b
    assert block_activation_bytes(m, setup(s, b), t) == 10 * sbh + (24 * sbh + core) // t
    assert block_activation_bytes(m, setup(s, b, sp=True), t) == (34 * sbh + core) // t
    assert block_activation_bytes(m, setup(s, b, "selective", sp=True), t) == 34 * sbh // t
    assert block_activation_bytes(m, setup(s, b, "full"), t) == 2 * sbh


def test_numpy_integer_tp_is_accepted():
    import numpy as np

    m = get_model("gpt3-175b")
    assert build_layer_graph(m, setup(2048, 1), np.int64(8)).tp == 8
