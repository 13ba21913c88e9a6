"""The sourced research tables (formats, precision recipes, FP8 runs, serving points) load,
every row names a source the file defines, numbers carry their unit in the key name, and the
published figures agree with each other where one can be recomputed from another."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from arch_space._data import shipped_toml
from arch_space.presets import PUBLISHED, preset_names
from workloads.catalog import get_model, model_names

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ROOT / "arch_space" / "data" / "formats.toml"
RECIPES = ROOT / "workloads" / "data" / "precision_recipes.toml"
RUNS = ROOT / "arch_space" / "data" / "fp8_runs.toml"
SERVING = ROOT / "phaze" / "data" / "serving_points.toml"

# A number's unit is in its key: one of these endings, or a dimensionless count or ratio.
UNIT_SUFFIXES = (
    "_per_s", "_per_s_per_gpu", "_s", "_pj", "_um2", "_hz", "_w", "_per_j", "_nm",
    "_fraction", "_tokens", "_per_token", "_elements", "_bytes",
)  # fmt: skip
DIMENSIONLESS = {
    "gpus", "gpus_per_node", "replicas", "tp", "pp", "vp", "cp", "ep", "micro_batch",
    "global_batch", "max_batch", "num_requests", "latency_percentile", "margin",
    "amax_history_len", "activation_tile", "weight_block",
}  # fmt: skip
FORMATS_CLOSED = {
    "fp32", "tf32", "fp16", "bf16", "fp8", "fp6", "fp4", "mxfp8", "mxfp6", "mxfp4", "nvfp4",
    "int8", "int4",
}  # fmt: skip
KINDS = {"published", "derived", "assumed"}


def _load(path: Path) -> Mapping:
    """A data file; formats.toml with every chip file's [[peak]] rows (as the model reads)."""
    if path == FORMATS:
        return shipped_toml(path.name)
    with path.open("rb") as f:
        return tomllib.load(f)


def _rows(doc: dict) -> list[tuple[str, dict]]:
    """Every array-of-tables row of a document, with its table name."""
    return [(name, row) for name, v in doc.items() if isinstance(v, list | tuple) for row in v]


def _numeric_keys(row: dict) -> list[str]:
    def numeric(v: object) -> bool:
        if isinstance(v, list):
            return bool(v) and all(numeric(x) for x in v)
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    return [k for k, v in row.items() if numeric(v)]


def _unit_ok(key: str) -> bool:
    return key in DIMENSIONLESS or key.startswith("relative_") or key.endswith(UNIT_SUFFIXES)


ALL_FILES = [FORMATS, RECIPES, RUNS, SERVING]


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_every_row_has_a_defined_source_and_unit_named_numbers(path):
    doc = _load(path)
    sources = doc["sources"]
    assert sources and all(isinstance(v, str) and len(v) > 20 for v in sources.values())
    rows = _rows(doc) + [(f"recipe.{n}", r) for n, r in doc.get("recipe", {}).items()]
    assert rows
    for table, row in rows:
        cited = row["sources"] if "sources" in row else [row["source"]]
        assert cited and set(cited) <= set(sources), (path.name, table, cited)
        bad = [k for k in _numeric_keys(row) if not _unit_ok(k)]
        assert not bad, (path.name, table, bad)
        if row.get("kind") in ("derived", "assumed"):
            assert row.get("derivation"), (path.name, table, row)


def test_peaks_cover_every_preset_and_agree_with_the_presets():
    doc = _load(FORMATS)
    peaks = doc["peak"]
    assert {p["preset"] for p in peaks} == set(preset_names()) - {"ref-max"}
    for p in peaks:
        assert p["format"] in FORMATS_CLOSED and p["kind"] in KINDS, p
        if not p["supported"]:
            assert not _numeric_keys(p), p
            continue
        assert p["dense_ops_per_s"] > 0
        if "sparse_ops_per_s" in p:  # NVIDIA 2:4 sparsity doubles the dense rate
            assert p["sparse_ops_per_s"] == pytest.approx(2 * p["dense_ops_per_s"], rel=2e-3)
    # the preset table's dense bf16 peak (fp16 on the V100) is the data sheet's
    for name, (peak_flops, _, _) in PUBLISHED.items():
        fmt = "fp16" if name == "v100" else "bf16"
        rows = [p for p in peaks if p["preset"] == name and p["format"] == fmt]
        assert rows and all(r["dense_ops_per_s"] == pytest.approx(peak_flops) for r in rows)
    a100_fp8 = [p for p in peaks if p["preset"] == "a100" and p["format"] == "fp8"]
    assert a100_fp8 and not a100_fp8[0]["supported"]


def test_sustained_gemm_fractions_are_measured_over_peak():
    for row in _load(FORMATS)["sustained_gemm"]:
        ratio = row["measured_ops_per_s"] / row["peak_dense_ops_per_s"]
        assert row["efficiency_fraction"] == pytest.approx(ratio, abs=1.5e-3), row
        assert 0 < ratio < 1


def test_horowitz_derived_mac_ratios_follow_from_the_op_table():
    doc = _load(FORMATS)
    op = {r["op"]: r for r in doc["op_cost"]}

    def mac(mult: str, add: str, field: str) -> float:
        return op[mult][field] + op[add][field]

    expected = {
        "int8": ("int8_mult", "int32_add"),
        "fp32": ("fp32_mult", "fp32_add"),
    }
    rows = [r for r in doc["mac_cost"] if r["study"] == "horowitz-derived"]
    assert {r["format"] for r in rows} == set(expected)
    for r in rows:
        m, a = expected[r["format"]]
        area = mac(m, a, "area_um2") / mac("fp16_mult", "fp32_add", "area_um2")
        energy = mac(m, a, "energy_pj") / mac("fp16_mult", "fp32_add", "energy_pj")
        assert r["relative_area"] == pytest.approx(area, rel=2e-3)
        assert r["relative_energy"] == pytest.approx(energy, rel=2e-3)
    for r in doc["mac_cost"] + doc["efficiency_point"]:
        assert "node_nm" in r or r.get("node_note"), r
        assert r["unit_kind"] in {"dedicated", "multi-format"}, r
    for r in doc["efficiency_point"]:
        assert r["energy_per_op_pj"] == pytest.approx(1e12 / r["ops_per_j"], rel=5e-3), r


def test_recipes_name_their_gemm_formats_and_facts_point_at_recipes():
    doc = _load(RECIPES)
    recipes = doc["recipe"]
    assert {"bf16", "fp8-te-delayed", "fp8-blockwise-deepseek", "mxfp8-te", "nvfp4-te"} <= set(
        recipes
    )
    for name, r in recipes.items():
        assert r["description"] and r["gemm_format_fprop"], name
        assert isinstance(r["unstated"], list) if "unstated" in r else True
    for fact in doc["fact"]:
        assert fact["recipe"] in recipes and fact["statement"] and fact["location"], fact
    ds = recipes["fp8-blockwise-deepseek"]
    assert ds["activation_tile"] == [1, 128] and ds["weight_block"] == [128, 128]


def _flops_per_token(convention: str, model: str, seq_len: int) -> float:
    """The convention's forward + backward FLOP per token, from the model catalog."""
    m = get_model(model)
    l, h, s, v = m.layers, m.hidden, seq_len, m.vocab  # noqa: E741
    if convention == "nemo-2024-gpt":  # 72 l h^2 (1 + s/(6h) + V/(12 l h)), V padded to 51200
        return 72 * l * h * h * (1 + s / (6 * h) + 51200 / (12 * l * h))
    attention = {"nemo-2024-llama": 12, "mbridge-2025-llama": 6}[convention]
    kv = m.kv_heads or m.heads
    return (
        l
        * h
        * h
        * (12 + 12 * kv / m.heads + 18 * m.ffn_hidden / h + attention * s / h + 6 * v / (l * h))
    )


def test_fp8_runs_are_complete_and_their_flop_conventions_reproduce_the_throughput():
    doc = _load(RUNS)
    recipes = _load(RECIPES)["recipe"]
    runs = doc["run"]
    assert len(runs) >= 6
    required = {"case", "chip", "gpus", "framework", "precision", "recipe", "tp", "pp", "cp"}
    required |= {"global_batch", "seq_len_tokens", "tokens_per_s_per_gpu", "flop_convention"}
    checked = 0
    for r in runs:
        assert required <= set(r), (r["case"], required - set(r))
        assert r["recipe"] in recipes and r["flop_convention"] in doc["flop_convention"]
        assert r.get("model") in model_names() or r.get("model_note"), r["case"]
        assert set(r.get("assumed", [])) <= set(r), r["case"]
        model_parallel = r["tp"] * r["pp"] * r["cp"]
        assert r["gpus"] % model_parallel == 0, r["case"]
        dp = r["gpus"] // model_parallel
        if r.get("micro_batch", 0) > 0:
            assert r["global_batch"] % (dp * r["micro_batch"]) == 0, r["case"]
        if "model_flops_per_s_per_gpu" in r:
            fpt = _flops_per_token(r["flop_convention"], r["model"], r["seq_len_tokens"])
            assert r["flops_per_token"] == pytest.approx(fpt, rel=5e-3), r["case"]
            implied = r["tokens_per_s_per_gpu"] * fpt
            assert implied == pytest.approx(r["model_flops_per_s_per_gpu"], rel=1.5e-2), r["case"]
            checked += 1
    assert checked >= 6


def test_serving_points_are_consistent_with_their_constraints():
    points = _load(SERVING)["point"]
    assert len(points) >= 8
    metrics = {
        "mlperf-offline": "output_tokens_per_s",
        "mlperf-server": "output_tokens_per_s",
        "max-throughput": "output_tokens_per_s",
        "decode-batch1": "output_tokens_per_s",
        "static-throughput": "output_tokens_per_s_per_gpu",
        "ttft-batch1": "ttft_s",
    }
    assert {p["kind_of_point"] for p in points} == set(metrics)
    for p in points:
        assert p["model"] in model_names(), p["case"]
        assert p["replicas"] * p["tp"] * p["pp"] == p["gpus"], p["case"]
        assert p[metrics[p["kind_of_point"]]] > 0 and p["weight_format"], p["case"]
        if p["kind_of_point"] == "mlperf-server":  # LoadGen's p99 bounds were met
            assert p["ttft_p99_s"] <= p["ttft_limit_s"] and p["tpot_p99_s"] <= p["tpot_limit_s"]
            assert p["latency_percentile"] == 99
        if p["kind_of_point"] == "decode-batch1":  # the Mixtral table gives no bandwidth
            assert p["max_batch"] == 1 and p.get("achieved_memory_bytes_per_s", 1) > 0
            assert p["isl_tokens"] > 0 and p["osl_tokens"] > 0
        if p["kind_of_point"] == "max-throughput":
            assert p["isl_tokens"] > 0 and p["osl_tokens"] > 0
