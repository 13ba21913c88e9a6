"""The measured data gathered for the time model's next mechanisms (not yet read by the
model): each file parses, every figure has a source, and the numbers are self-consistent."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib import resources

import pytest

from arch_space._data import CHIP_TABLES, shipped_toml
from phaze.validation.published_runs import default_registry
from workloads.framework import framework_names

PRESETS = {"v100", "tpuv4", "a100", "h100", "b200"}  # the presets that are real chips


def _data(package: str, name: str) -> Mapping:
    """A data file; arch_space's with every chip file's tables joined in (as the model reads)."""
    if package == "arch_space" and name in CHIP_TABLES.values():
        return shipped_toml(name)
    return tomllib.loads(resources.files(package).joinpath("data", name).read_text("utf-8"))


def test_gemm_rates_cover_every_preset():
    formats = _data("arch_space", "formats.toml")
    measured = {r["preset"] for r in formats["sustained_gemm"]}
    assert {"v100", "a100", "h100", "b200", "mi300x"} <= measured
    # TPU v4: no isolated matmul rate was found; the file says so
    assert any("TPU v4" in c["topic"] for c in formats["claim"])
    fp8 = {r["preset"] for r in formats["sustained_gemm"] if r["format"] == "fp8"}
    assert {"h100", "b200"} <= fp8


@pytest.mark.parametrize(
    ("preset", "rate", "fraction"),
    [
        ("a100", 267.9e12, 0.859),
        ("h100", 792.1e12, 0.801),
        ("b200", 1745.0e12, 0.776),
        ("mi300x", 668.4e12, 0.511),
        ("v100", 112.28e12, 0.898),
    ],
)
def test_devices_toml_caps_are_measurements_of_formats_toml(preset, rate, fraction):
    devices = _data("arch_space", "devices.toml")
    assert devices[preset]["sustained_tensor_fraction"] == fraction
    (row,) = [
        r
        for r in _data("arch_space", "formats.toml")["sustained_gemm"]
        if r["preset"] == preset
        and r["format"] in ("bf16", "fp16")
        and r["measured_ops_per_s"] == rate
    ]
    assert row["measured_ops_per_s"] / row["peak_dense_ops_per_s"] == pytest.approx(
        fraction, abs=5e-4
    )


def test_clock_findings_name_every_preset():
    data = _data("arch_space", "measured_clocks.toml")
    assert set(data["status"]) == PRESETS
    assert all(
        f["source"] and f["text"] and f["kind"] in ("clock", "power", "rate", "statement")
        for f in data["finding"]
    )


def test_nccl_curves_are_sorted_sweeps_with_sources():
    data = _data("arch_space", "measured_nccl_multinode.toml")
    for c in data["curve"]:
        sizes, bw = c["size_bytes"], c["busbw_bytes_per_s"]
        assert len(sizes) == len(bw) and sizes == sorted(set(sizes)) and min(bw) > 0
        assert c["collective"] == "all_reduce" and c["nodes"] >= 1 and c["source"]
    assert {c["nodes"] for c in data["curve"]} >= {1, 4}
    assert all(p["busbw_bytes_per_s"] > 0 and p["source"] for p in data["point"])
    assert {"a100", "h100"} <= {p["preset"] for p in data["point"]}


def test_launch_overheads_are_microseconds_with_sources():
    data = _data("arch_space", "measured_launch_overhead.toml")
    for f in data["figure"]:
        assert f["source"] and f["what"]
        for key in ("cpu_launch_s", "eager_per_kernel_s", "graph_per_kernel_s"):
            for v in f[key] if isinstance(f.get(key), list) else [f.get(key)]:
                assert v is None or 1e-7 < v < 1e-4


def test_framework_facts_source_the_profiles_of_the_registry_stacks():
    facts = _data("workloads", "framework_facts.toml")["fact"]
    assert all(f["where"] and f["text"] and f["mechanism"] for f in facts)
    stacks = {f["stack"] for f in facts}
    assert {"megatron-core-2024", "fsdp1-2023", "fsdp2-2024", "deepspeed-2022"} <= stacks
    # each stack the facts describe has its own profile now, and no fallback
    assert stacks <= set(framework_names())
    assert not stacks & set(default_registry().fallbacks)
