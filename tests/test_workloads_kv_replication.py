"""Tensor-parallel widths beyond the key/value heads replicate each K/V head over
``t / kv_heads`` ranks: a rank's K/V weights, projections, activations and cache never fall
below one head's."""

import pytest

from phaze_common.errors import ConfigError
from workloads import TrainingSetup, build_layer_graph, get_model, valid_tp_widths
from workloads.memory import kv_bytes
from workloads.serving import kv_cache_bytes_per_token

SETUP = TrainingSetup(seq_len=256, global_batch=1, micro_batch=1)


def _block(t: int):
    return build_layer_graph(get_model("llama2-70b"), SETUP, t)


def _kv_ops(t: int) -> dict[str, tuple[int, int]]:
    ops = _block(t).op_graphs["block"].forward.ops
    return {op.name: (op.n, op.flops) for op in ops if op.name in ("k", "v")}


def test_llama2_70b_accepts_t16_beyond_its_8_kv_heads():
    m = get_model("llama2-70b")
    assert 16 in valid_tp_widths(m, max_tp=16)
    assert _block(16).layers[1].parameters > 0
    with pytest.raises(ConfigError, match=r"kv_heads = 8 \(or be a multiple of it\)"):
        _block(12)  # divides neither way (and not the 64 heads)


def test_k_and_v_stay_one_head_per_rank_beyond_the_kv_heads():
    m = get_model("llama2-70b")
    assert _kv_ops(16) == _kv_ops(8)
    assert _kv_ops(16)["k"][0] == m.head_dim  # one replicated head per rank
    # a rank's attention weights: Q and O split by t, K and V one head each from t = 8 on
    for t in (8, 16):
        q_and_o = 2 * m.hidden * m.heads * m.head_dim // t
        assert m._attention_parameters(t) - q_and_o == 2 * m.hidden * m.head_dim


def test_kv_cache_and_ring_bytes_per_device_stop_at_one_head():
    m = get_model("llama2-70b")
    assert kv_cache_bytes_per_token(m, 16) == kv_cache_bytes_per_token(m, 8)
    assert kv_cache_bytes_per_token(m, 8) == kv_cache_bytes_per_token(m, 4) // 2
    assert kv_bytes(m, SETUP, 16) == kv_bytes(m, SETUP, 8)
