"""Serving weight formats: fp8 weights halve the block weights' bytes and reads, run the
block GEMMs at the fp8 tensor rate, and are refused on a design without fp8 tensor cores
(docs/serving.md)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from arch_space import Cluster, preset
from ilp.serving import serving_pass_time
from phaze.cli import cli
from phaze_common.errors import ConfigError
from workloads import get_model
from workloads.ops import OpGraph
from workloads.precision import apply_precision, recipe, recipe_names
from workloads.serving import RequestBatch, ServingPass, weight_recipe
from workloads.serving_costs import pass_weight_read_bytes, weight_bytes_per_device
from workloads.serving_ops import serving_layer_graph


def _llama_split(name: str, tp: int) -> tuple[int, int]:
    """(block parameters, embedding and head parameters) on one device of a Llama, from
    its shapes: Q and O h x h, K and V h x kv_heads d_head, gate/up/down h x ffn, two
    norm gains per block; the embedding and LM head vocab x h each, the final norm."""
    m = get_model(name)
    h, kv, f = m.hidden, m.kv_heads * m.head_dim, m.ffn_hidden
    block = (2 * h * h + 2 * h * kv + 3 * h * f) // tp + 2 * h
    edges = 2 * m.vocab * h // tp + h
    return m.layers * block, edges


@pytest.mark.parametrize(("name", "tp"), [("llama2-7b", 1), ("llama2-70b", 8), ("llama3-8b", 2)])
def test_fp8_weights_take_one_byte_per_block_weight(name, tp):
    m = get_model(name)
    blocks, edges = _llama_split(name, tp)
    assert weight_bytes_per_device(m, tp) == 2 * (blocks + edges)
    assert weight_bytes_per_device(m, tp, weight_format="fp8") == blocks + 2 * edges
    # the decode step reads every weight but the embedding table (one row per token)
    p8 = ServingPass.decode(1, 100, weight_format="fp8")
    p16 = ServingPass.decode(1, 100)
    saved = pass_weight_read_bytes(m, tp, p16) - pass_weight_read_bytes(m, tp, p8)
    assert saved == blocks


def test_fp8_block_gemms_read_one_byte_operands_at_the_fp8_format():
    m = get_model("llama2-7b")
    g16 = serving_layer_graph(m, ServingPass.decode(1, 100), 1).op_graphs["block"].forward
    g8 = serving_layer_graph(m, ServingPass.decode(1, 100, weight_format="fp8"), 1)
    g8 = g8.op_graphs["block"].forward
    by_name = {op.name: op for op in g16.ops}
    gemms = [op for op in g8.ops if op.is_gemm]
    assert gemms and all(op.fmt == "fp8" for op in gemms)
    for op in gemms:  # a weight's k x n and the input's m x k at one byte each
        assert by_name[op.name].bytes_read - op.bytes_read == op.batch * (op.m * op.k + op.k * op.n)
    casts = [op for op in g8.ops if op.name.endswith(".cast")]
    # one cast per distinct GEMM input (weights are stored in fp8; Q, K, V share one, the
    # gate and up projections another): reads bf16, writes one fp8 copy
    assert len(gemms) == 7 and [c.name for c in casts] == [
        "q.cast",
        "proj.cast",
        "fc1.gate.cast",
        "fc2.cast",
    ]
    for c in casts:
        assert c.bytes_read == 2 * c.elements and c.bytes_written == c.elements


def test_a_recipe_storing_fp8_weights_casts_only_the_input():
    g = serving_layer_graph(get_model("llama2-7b"), ServingPass.decode(4, 10), 1)
    fc = next(op for op in g.op_graphs["block"].forward.ops if op.is_gemm)
    stored = apply_precision(OpGraph((fc,), ()), recipe("fp8-weights"))
    # a training recipe without a weight cache casts the weight before every GEMM
    trained = apply_precision(OpGraph((fc,), ()), recipe("fp8-blockwise"))
    assert stored.ops[0].elements == fc.m * fc.k
    assert trained.ops[0].elements == fc.m * fc.k + fc.k * fc.n


def test_serving_recipes_are_not_training_precisions():
    assert "fp8-weights" in recipe_names("serving")
    assert "fp8-weights" not in recipe_names()
    assert weight_recipe("fp8").name == "fp8-weights"
    with pytest.raises(ConfigError, match=r"weight format.*'int3'.*bf16, fp16, fp8"):
        weight_recipe("int3")
    with pytest.raises(ConfigError, match="weight_format"):
        RequestBatch.of(10, 10, weight_format="int3")


@pytest.mark.parametrize(("model", "tp"), [("llama2-70b", 2), ("llama2-7b", 1)])
def test_fp8_decode_at_batch_one_is_within_the_weight_bandwidth_window(model, tp):
    # the serving criterion on the H100 with NVLink 4 (450 GB/s per device, H100 whitepaper)
    acc, m = preset("h100"), get_model(model)
    p = ServingPass.decode(1, 2048, weight_format="fp8")
    r = serving_pass_time(
        m, acc, Cluster(devices=tp, intra_node_bandwidth_bytes_per_s=450e9), p, tp
    )
    weights_s = weight_bytes_per_device(m, tp, weight_format="fp8") / acc.hbm_bandwidth_bytes_per_s
    assert 1.0 <= r.latency_s / weights_s <= 2.5
    # and the fp8 step reads about half the bf16 step's bytes from HBM
    r16 = serving_pass_time(
        m,
        acc,
        Cluster(devices=tp, intra_node_bandwidth_bytes_per_s=450e9),
        ServingPass.decode(1, 2048),
        tp,
    )
    assert 0.45 < r.hbm_bytes / r16.hbm_bytes < 0.55


def test_fp8_weights_serve_faster_and_the_json_names_the_format():
    args = ["serve", "--workload", "llama2-7b", "--arch", "h100", "--devices", "1"]
    args += ["--input-tokens", "512", "--output-tokens", "64", "--no-disaggregate", "--json"]
    docs = {}
    for fmt in ("bf16", "fp8"):
        result = CliRunner().invoke(cli, [*args, "--weight-format", fmt])
        assert result.exit_code == 0, result.output
        docs[fmt] = json.loads(result.output)
        assert docs[fmt]["weight_format"] == fmt
    assert docs["fp8"]["tokens_per_s_per_device"] > docs["bf16"]["tokens_per_s_per_device"]


def test_a_design_without_fp8_tensor_cores_is_refused_in_one_line():
    args = ["serve", "--workload", "llama2-7b", "--arch", "a100", "--devices", "1"]
    result = CliRunner().invoke(cli, [*args, "--input-tokens", "8", "--output-tokens", "8"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        cli, [*args, "--input-tokens", "8", "--output-tokens", "8", "--weight-format", "fp8"]
    )
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "weight format fp8 needs fp8 tensor cores; a100 runs bf16, fp16, int8" in lines[0]
