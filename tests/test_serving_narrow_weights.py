"""Narrow serving weight formats: gpt-fast's weight-only int8 and int4 (group size 32) and
ModelOpt's NVFP4: the bytes each stores per weight with its scales, the GEMMs that read
them, decode at batch 1 against the weight-bandwidth bound, and the refusal of NVFP4 on a
chip without fp4 tensor cores (docs/serving.md)."""

from __future__ import annotations

import tomllib
from importlib import resources

import numpy as np
import pytest
from click.testing import CliRunner

from arch_space import Cluster, preset
from arch_space.perf.gemm import GemmShape, gemm_hbm_bytes, gemm_terms
from ilp.serving import serving_pass_time
from phaze.cli import cli
from phaze.validation.serving import load_points
from placement import parse_serving
from workloads import get_model
from workloads.serving import ServingPass
from workloads.serving_costs import pass_weight_read_bytes, weight_bytes_per_device
from workloads.serving_ops import serving_layer_graph


def _llama_parts(name: str, tp: int) -> tuple[int, int, int, int]:
    """(block weights, output rows of the block matrices, embedding and final norm, LM
    head) on one device of an untied Llama, from its shapes: Q and O h x h, K and V
    h x kv d_head, gate/up h x ffn and down ffn x h (each matrix's rows: its outputs), two
    norm gains per block (kept in bf16: a few thousandths of a percent)."""
    m = get_model(name)
    h, kv, f = m.hidden, m.kv_heads * m.head_dim, m.ffn_hidden
    matrices = (2 * h * h + 2 * h * kv + 3 * h * f) // tp
    rows = (2 * h + 2 * kv + 2 * f) // tp + h  # column-parallel split, row-parallel whole
    return m.layers * matrices, m.layers * rows, m.vocab * h // tp + h, m.vocab * h // tp


@pytest.mark.parametrize(("name", "tp"), [("llama2-7b", 1), ("llama2-70b", 1), ("llama3-8b", 2)])
def test_each_format_stores_its_weights_and_scales(name, tp):
    m = get_model(name)
    blocks, rows, edges, head = _llama_parts(name, tp)
    bf16 = weight_bytes_per_device(m, tp)
    # gpt-fast int8: one byte per weight and a bf16 scale per output channel, every Linear
    # (the head too); counted per row of K, the scales are within a few parts in 1e4
    int8 = blocks + 2 * rows + head + 2 * m.vocab // tp + 2 * edges
    got = weight_bytes_per_device(m, tp, weight_format="int8")
    assert got == pytest.approx(int8, rel=5e-4)
    # gpt-fast int4 at group size 32: half a byte and a bf16 scale and zero per 32 weights
    int4 = 0.625 * (blocks + head) + 2 * edges
    assert weight_bytes_per_device(m, tp, weight_format="int4") == pytest.approx(int4, rel=1e-4)
    # NVFP4: half a byte and one E4M3 scale per 16 weights; ModelOpt keeps the head bf16
    nvfp4 = 0.5625 * blocks + 2 * (edges + head)
    assert weight_bytes_per_device(m, tp, weight_format="nvfp4") == pytest.approx(nvfp4, rel=1e-4)
    assert bf16 > int8 > int4 > nvfp4 - 1.5 * head  # nvfp4 keeps the bf16 head


def test_a_decode_step_reads_the_stored_weights():
    m = get_model("llama2-7b")
    blocks, _, _, head = _llama_parts("llama2-7b", 1)
    read = {
        f: pass_weight_read_bytes(m, 1, ServingPass.decode(1, 64, weight_format=f))
        for f in (
            "bf16",
            "int4",
        )
    }
    # every block weight and the head: 2 bytes in bf16, 0.625 in int4
    assert read["bf16"] - read["int4"] == pytest.approx(1.375 * (blocks + head), rel=1e-4)


def test_weight_only_gemms_read_narrow_weights_at_the_bf16_rate():
    m = get_model("llama2-7b")
    g16 = serving_layer_graph(m, ServingPass.decode(1, 100), 1).op_graphs["block"].forward
    g4 = serving_layer_graph(m, ServingPass.decode(1, 100, weight_format="int4"), 1)
    g4 = g4.op_graphs["block"].forward
    by_name = {op.name: op for op in g16.ops}
    gemms = [op for op in g4.ops if op.is_gemm]
    assert len(gemms) == 7 and len(g4.ops) == len(g16.ops)  # no cast: activations stay bf16
    for op in gemms:
        assert op.fmt == "bf16" and op.weight_element_bytes == 0.625
        saved = by_name[op.name].bytes_read - op.bytes_read
        assert saved == round(1.375 * op.k * op.n)
        assert op.epilogue_flops == 3 * op.k * op.n  # (q - 8) x scale + zero per weight


def test_nvfp4_gemms_run_fp4_and_cast_their_input_with_block_scales():
    m = get_model("llama3-70b")
    g = serving_layer_graph(m, ServingPass.decode(8, 100, weight_format="nvfp4"), 1)
    ops = g.op_graphs["block"].forward.ops
    gemms = [op for op in ops if op.is_gemm]
    assert gemms and all(op.fmt == "fp4" for op in gemms)
    assert all(op.input_element_bytes == op.weight_element_bytes == 0.5625 for op in gemms)
    casts = [op for op in ops if op.name.endswith(".cast")]
    assert casts and all(c.bytes_written == round(0.5625 * c.elements) for c in casts)


def test_gemm_traffic_counts_each_operand_at_its_width():
    # a GEMV whose input and weights fit the buffer reads each once: m k e + k n w
    g = GemmShape(*(np.array([x], dtype=float) for x in (1, 1, 4096, 4096)))
    reads, _ = gemm_hbm_bytes(g, 128, 128, 40e6, 2, 4, np.array([2.0]), np.array([0.625]))
    assert reads[0] == pytest.approx(2 * 4096 + 0.625 * 4096 * 4096)


def test_the_arrays_read_each_operand_from_the_buffer_at_its_stored_width():
    # a GEMV on one array: the input once per column fold, the weights once, the HBM
    # output's bytes read back to be written out; narrow operands are never widened to bf16
    m, k, n, cols = 1, 4096, 4096, 128
    g = GemmShape(*(np.array([x], dtype=float) for x in (1, m, k, n)))
    hbm = (np.array([0.0]), np.array([2.0 * m * n]))
    args = dict(rows=128, cols=cols, cores=1, clock_hz=1e9, glb_bytes_per_s=1e12)
    for x, w in ((2.0, 2.0), (2.0, 0.625), (0.5625, 0.5625), (1.0, 1.0)):
        t = gemm_terms(
            g, hbm, **args, bytes_per_element=2, accumulator_bytes=4,
            operand_bytes=np.array([x]), weight_operand_bytes=np.array([w]),
        )  # fmt: skip
        expected = x * m * k * (n / cols) + w * k * n + 2.0 * m * n
        assert t.buffer_read_bytes[0] == pytest.approx(expected)


def test_nvfp4_decode_at_batch_one_on_a_b200_is_within_the_weight_bandwidth_window():
    acc, m = preset("b200"), get_model("llama3-70b")
    for fmt in ("bf16", "fp8", "nvfp4"):
        p = ServingPass.decode(1, 2048, weight_format=fmt)
        r = serving_pass_time(m, acc, Cluster(devices=1), p, 1)
        weights = weight_bytes_per_device(m, 1, weight_format=fmt)
        assert 1.0 <= r.latency_s / (weights / acc.hbm_bandwidth_bytes_per_s) <= 2.5, fmt


@pytest.mark.parametrize(
    ("model", "fmt"), [("llama2-7b", "int8"), ("llama2-7b", "int4"), ("llama2-70b", "int8")]
)
def test_weight_only_decode_at_batch_one_is_within_the_weight_bandwidth_window(model, fmt):
    acc, m = preset("a100"), get_model(model)
    p = ServingPass.decode(1, 2048, weight_format=fmt)
    r = serving_pass_time(m, acc, Cluster(devices=1), p, 1)
    weights_s = weight_bytes_per_device(m, 1, weight_format=fmt) / acc.hbm_bandwidth_bytes_per_s
    assert 1.0 <= r.latency_s / weights_s <= 2.5
    if model == "llama2-7b":  # (the 70B model does not fit one A100 in bf16)
        r16 = serving_pass_time(m, acc, Cluster(devices=1), ServingPass.decode(1, 2048), 1)
        assert r.latency_s < r16.latency_s


def test_nvfp4_decode_reads_its_narrow_weights_and_beats_fp8_on_a_b200():
    acc, m = preset("b200"), get_model("llama3-70b")
    t = {
        f: serving_pass_time(
            m, acc, Cluster(devices=1), ServingPass.decode(1, 2048, weight_format=f), 1
        )
        for f in ("fp8", "nvfp4")
    }
    assert t["nvfp4"].latency_s < t["fp8"].latency_s
    blocks, _, _, _ = _llama_parts("llama3-70b", 1)
    saved = t["fp8"].hbm_bytes - t["nvfp4"].hbm_bytes
    assert saved == pytest.approx((1 - 0.5625) * blocks, rel=0.02)


@pytest.mark.parametrize("arch", ["a100", "h100"])
def test_nvfp4_on_a_chip_without_fp4_tensor_cores_is_refused_in_one_line(arch):
    args = ["serve", "--workload", "llama2-7b", "--arch", arch, "--devices", "1"]
    args += ["--input-tokens", "8", "--output-tokens", "8", "--weight-format", "nvfp4"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "weight format nvfp4 needs fp4 tensor cores" in lines[0] and arch in lines[0]


def test_int8_weights_parse_print_and_serve_on_an_a100():
    layout = parse_serving("t=1,p=1,batch=1,weights=int8")
    assert layout.weights == "int8" and "weights=int8" in str(layout)
    assert parse_serving(str(layout)) == layout
    args = ["serve", "--workload", "llama2-7b", "--arch", "a100", "--devices", "1"]
    args += ["--input-tokens", "8", "--output-tokens", "8", "--strategy", str(layout), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert '"weight_format": "int8"' in result.output


def test_gpt_fast_weight_bytes_match_its_own_bandwidth_column():
    # gpt-fast's README prints achieved bandwidth = its model's bytes x tokens/s, so
    # bandwidth / tokens/s is the bytes it counts per token: the int8 and int4 models' sizes
    rows = {r.case: r for r in load_points() if r.source == "gpt-fast-readme" and r.tp == 1}
    doc = {p["case"]: p for p in _points_doc()}
    for case, fmt in (
        ("gpt-fast llama2-7b 1xA100 int8-weight batch1", "int8"),
        ("gpt-fast llama2-7b 1xA100 int4-weight batch1", "int4"),
        ("gpt-fast llama2-70b 1xA100 int8-weight batch1", "int8"),
    ):
        p = doc[case]
        published = p["achieved_memory_bytes_per_s"] / p["output_tokens_per_s"]
        ours = weight_bytes_per_device(get_model(rows[case].model), 1, weight_format=fmt)
        assert ours == pytest.approx(published, rel=0.01)


def _points_doc() -> list[dict]:
    text = resources.files("phaze").joinpath("data", "serving_points.toml").read_text("utf-8")
    return tomllib.loads(text)["point"]
