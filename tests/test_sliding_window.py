"""Sliding-window attention (Mistral 7B v0.1): each token attends at most ``window`` keys, so
the KV cache holds at most that many tokens per sequence and attention FLOPs and cache reads
count only them, in serving and in training (docs/models.md, docs/serving.md)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads import TrainingSetup, build_layer_graph
from workloads.attention_ops import attended_scores, flash_scores
from workloads.flops import attention_core_flops, model_flops_per_sequence
from workloads.hf import model_from_hf
from workloads.hf_write import to_hf_config
from workloads.serving import ServingPass, kv_cache_bytes_per_sequence, kv_cache_bytes_per_token
from workloads.serving_costs import attention_flops, pass_flops, pass_kv_read_bytes
from workloads.serving_ops import serving_layer_graph

# mistralai/Mistral-7B-v0.1 config.json (architecture keys)
MISTRAL_7B = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}
W = 4096
MISTRAL = model_from_hf(MISTRAL_7B, "mistral-7b")
UNWINDOWED = dataclasses.replace(MISTRAL, sliding_window=None)
# the same shape, small enough to build graphs quickly
SMALL = model_from_hf(
    MISTRAL_7B | {"num_hidden_layers": 2, "hidden_size": 512, "intermediate_size": 1024},
    "small-mistral",
)


def test_the_window_is_read_from_config_json_and_written_back():
    assert MISTRAL.sliding_window == W and MISTRAL.parameters == 7_241_732_096
    assert model_from_hf(MISTRAL_7B | {"sliding_window": None}, "m").sliding_window is None
    assert to_hf_config(MISTRAL)["model_type"] == "mistral"
    assert model_from_hf(to_hf_config(MISTRAL), "mistral-7b") == MISTRAL


def test_the_kv_cache_holds_at_most_the_window():
    per_token = kv_cache_bytes_per_token(MISTRAL, 1)
    assert kv_cache_bytes_per_sequence(MISTRAL, 1, 16_099) == W * per_token
    assert kv_cache_bytes_per_sequence(MISTRAL, 1, 1000) == 1008 * per_token  # whole pages
    assert kv_cache_bytes_per_sequence(UNWINDOWED, 1, 16_099) == 16_112 * per_token


def test_workloads_show_caches_the_window_not_the_whole_context(cli_run, tmp_path):
    path = tmp_path / "mistral-7b.json"
    path.write_text(json.dumps(MISTRAL_7B))
    args = ("--serve", "--input-tokens", "16000", "--output-tokens", "100", "--json")
    r = cli_run("workloads", "show", path, *args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    per_token = doc["kv_cache_bytes_per_token_per_device"]
    assert doc["sliding_window"] == W
    assert doc["kv_cache_bytes_per_sequence_per_device"] == W * per_token
    assert doc["decode"]["kv_read_bytes_per_device"] == W * per_token


def test_a_decode_past_the_window_attends_and_reads_the_window_only():
    far, near = ServingPass.decode(2, 16_050), ServingPass.decode(2, W)  # W keys
    assert attention_flops(MISTRAL, far) == attention_flops(MISTRAL, near)
    assert attention_flops(UNWINDOWED, far) > 3 * attention_flops(MISTRAL, far)
    assert pass_kv_read_bytes(MISTRAL, 1, far) == 2 * W * kv_cache_bytes_per_token(MISTRAL, 1)
    # inside the window nothing changes
    assert attention_flops(MISTRAL, near) == attention_flops(UNWINDOWED, near)


@given(b=st.integers(1, 2), context=st.integers(1, 700), window=st.integers(1, 600))
def test_the_decode_graph_executes_the_closed_form_flops(b, context, window):
    m = dataclasses.replace(SMALL, sliding_window=window)
    p = ServingPass.decode(b, context)
    g = serving_layer_graph(m, p, 1)
    flops = sum(2 * op.macs for layer in g.layers for op in g.op_graphs[layer.class_id].forward.ops)
    assert flops == pass_flops(m, p)


@given(c=st.integers(2, 300), cached=st.integers(0, 600), window=st.integers(1, 500))
def test_a_prefill_chunk_attends_within_the_window(c, cached, window):
    m = dataclasses.replace(SMALL, sliding_window=window)
    p = ServingPass.prefill(1, c, cached)
    exact = attended_scores(c, cached, window)
    assert exact == sum(min(cached + i + 1, window) for i in range(c))
    g = serving_layer_graph(m, p, 1)
    flops = sum(2 * op.macs for layer in g.layers for op in g.op_graphs[layer.class_id].forward.ops)
    padding = m.layers * 2 * m.heads * (c * -(-exact // c) - exact) * 2 * m.head_dim
    assert flops == pass_flops(m, p) + padding
    kernels = [
        op
        for op in g.op_graphs["block"].forward.ops
        if op.name.startswith("heads") and op.name.endswith("flash")
    ]
    kv = sum(op.bytes_read for op in kernels) - 2 * c * m.hidden  # less the queries
    seen = c + min(cached, window - 1)
    assert kv == seen * kv_cache_bytes_per_token(m, 1, layers=1)


def test_training_counts_each_query_s_keys_within_the_window():
    s = 8192
    width = 2 * MISTRAL.head_dim
    assert attention_core_flops(MISTRAL, s) == 2 * s * W * MISTRAL.heads * width
    assert attention_core_flops(MISTRAL, W) == attention_core_flops(UNWINDOWED, W)
    assert model_flops_per_sequence(MISTRAL, s) < model_flops_per_sequence(UNWINDOWED, s)
    # the flash kernel skips the key tiles before every query's window
    assert flash_scores(s, True, window=W) < flash_scores(s, True)
    assert flash_scores(s, True, window=s) == flash_scores(s, True)


def test_the_training_flash_kernel_executes_the_window_s_tiles():
    s, setup = 2048, TrainingSetup(seq_len=2048, global_batch=1)
    windowed = dataclasses.replace(SMALL, sliding_window=256)

    def core_macs(m):
        g = build_layer_graph(m, setup, 1).op_graphs["block"].forward
        return sum(op.macs for op in g.ops if op.name.endswith(".flash"))

    full, banded = core_macs(SMALL), core_macs(windowed)
    keys = -(-flash_scores(s, True, window=256) // s)
    assert banded * -(-flash_scores(s, True) // s) == full * keys
    assert banded < full / 3


@pytest.mark.parametrize("window", [None, 4096])
def test_serving_memory_fits_more_sequences_with_the_window(window):
    from arch_space import Cluster, preset
    from phaze.model.serving import ServeContext, evaluate_layout
    from placement.serving_layout import parse_serving
    from workloads.serving import RequestBatch

    m = dataclasses.replace(MISTRAL, sliding_window=window)
    ctx = ServeContext(cluster=Cluster(devices=1), requests=RequestBatch.of(16_000, 100))
    layout = parse_serving("t=1,p=1,d=1,ep=1,batch=32,chunk=off,batching=continuous")
    if window is None:
        from phaze_common.errors import Infeasible

        with pytest.raises(Infeasible, match="KV cache"):
            evaluate_layout("m", m, preset("h100"), layout, ctx)
    else:
        point = evaluate_layout("m", m, preset("h100"), layout, ctx)
        assert point.memory[0].kv_cache_bytes <= point.memory[0].kv_capacity_bytes
