"""Eager PyTorch's kernels where fused stacks fuse: llm-foundry's unfused GELU and the
unpadding copies around its flash-attention call."""

import pytest

from phaze_common.errors import ConfigError
from workloads import TrainingSetup, build_layer_graph
from workloads.catalog import get_model
from workloads.framework import framework_profile, profile_from_mapping

T, P = 12 * 2048, 2  # MPT 1B's micro-batch of 12 sequences of 2,048 tokens, bf16


def _block(framework, model="mpt-1b"):
    setup = TrainingSetup(seq_len=2048, global_batch=12, micro_batch=12, framework=framework)
    return build_layer_graph(get_model(model), setup, 1).op_graphs["block"]


def _bytes(graph):
    return sum(op.bytes_read + op.bytes_written for op in graph.ops)


def _ops(graph):
    return {op.name: op for op in graph.ops}


def test_llm_foundry_runs_eager_gelu_and_unpads_around_flash():
    fsdp1 = framework_profile("fsdp1-2023")
    assert fsdp1.activation == "unfused" and fsdp1.attention_unpad
    for name in ("megatron-core-2024", "fsdp2-2024", "megatron-2022"):
        p = framework_profile(name)
        assert p.activation == "fused" and not p.attention_unpad


def test_the_extra_bytes_are_the_copies_and_the_gelu_pass():
    m = get_model("mpt-1b")
    h, f = m.hidden, m.ffn_hidden
    eager, fused = _block("fsdp1-2023"), _block("fsdp2-2024")
    # the same attention kernel (flash2) in both: only the copies and the GELU differ
    assert framework_profile("fsdp2-2024").attention == framework_profile("fsdp1-2023").attention
    qkv, out = T * 3 * h, T * h  # MPT: as many K/V heads as query heads
    # forward: gathers of Q, K, V (read, write); the output scattered into zeros (zeros,
    # read, write); the GELU reads and writes the FFN's hidden tensor
    forward = P * (2 * qkv + 3 * out + 2 * T * f)
    assert _bytes(eager.forward) - _bytes(fused.forward) == forward
    # backward: the Q, K, V gradients scattered into zeros, the output's gathered; the
    # GELU's backward reads and writes what the fused epilogue's did
    backward = P * (3 * qkv + 2 * out)
    assert _bytes(eager.backward) - _bytes(fused.backward) == backward
    ops = _ops(eager.forward)
    assert "fc1.act" in ops and ops["fc1"].epilogue_flops == 0
    assert _ops(fused.forward)["fc1"].epilogue_flops > 0
    names = [op.name for op in eager.backward.ops]
    assert names.index("attn.pad.bwd") < names.index("attn.unpad.bwd")


def test_gated_ffns_and_unfused_attention_are_unchanged():
    # a gated FFN's activation is its own op either way; without a fused core nothing unpads
    llama = build_layer_graph(
        get_model("llama2-7b"),
        TrainingSetup(seq_len=1024, global_batch=1, micro_batch=1, framework="fsdp1-2023"),
        1,
    ).op_graphs["block"]
    names = {op.name for op in llama.forward.ops}
    assert "fc1.act" not in names and "attn.unpad" in names


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("activation", "eager", "activation = 'eager' must be one of fused, unfused"),
        ("attention_unpad", "yes", "attention_unpad = 'yes' must be one of False, True"),
    ],
)
def test_bad_values_are_named(key, value, message):
    table = {"description": "x", "tp_overlap": [], "dp_overlap": False, key: value}
    with pytest.raises(ConfigError, match=message):
        profile_from_mapping("bad", table)
