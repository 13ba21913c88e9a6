"""The registry of published training runs and ``phaze validate runs``."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from arch_space import preset
from arch_space.area import static_power_w
from arch_space.perf.device import device_profile, preset_profile
from arch_space.power import unlimited_gemm_power_w
from phaze.cli import cli
from phaze.errors import ConfigError
from phaze.model.pipeline import timing_design
from phaze.validation.published_runs import (
    METRICS,
    default_registry,
    flops_per_iteration,
    load_registry,
    measured_iteration_s,
    metric_from_iteration_s,
)
from phaze.validation.runs import (
    RunResult,
    Targets,
    evaluate_run,
    model_kind,
    outside_targets,
    summarize,
    system_device,
)
from placement import parse_strategy
from workloads import get_model, model_flops_per_sequence
from workloads.optimizer_state import OptimizerState, parse_optimizer_state

REGISTRY = default_registry()


def test_registry_covers_the_generations_stacks_and_holds_out_most_runs():
    runs = REGISTRY.runs
    assert len(runs) >= 30
    held_out = [r for r in runs if not r.fitted]
    assert len(held_out) >= len(runs) / 2
    assert {"v100", "a100", "h100"} <= {r.arch for r in runs}
    families = {r.framework.split("-")[0] for r in runs}
    assert {"megatron", "deepspeed", "fsdp2", "fsdp1"} <= families
    assert len({r.id for r in runs}) == len(runs)
    for r in runs:
        assert r.source.url.startswith("https://"), r.id
        s = parse_strategy(r.strategy)
        assert not s.open and s.devices == r.gpus, r.id
        profile, why = REGISTRY.profile_for(r.framework)
        assert profile and (why or profile == r.framework), r.id


def test_fitted_rows_are_the_fits_and_nothing_else():
    fitted = [r.id for r in REGISTRY.runs if r.fitted]
    a100 = [
        "korthikanti-t5-22b-full",
        "korthikanti-t5-22b-selective",
        "korthikanti-t5-530b-full",
        "korthikanti-t5-530b-selective",
    ]
    h100 = ["mcore-weak-32b", "mcore-weak-70b", "mcore-weak-177b", "mpt-h100-30b-128"]
    # the B200's: the dense FP8 runs of one container (25.11), the MoE ones held out
    b200 = [
        "nemo-2511-b200-llama3-8b-fp8",
        "nemo-2511-gb200-llama3-8b-fp8",
        "nemo-2511-gb200-llama3-405b-fp8",
    ]
    tpuv5p = ["maxtext-v5p-32b-64", "maxtext-v5p-64b-64"]
    assert sorted(fitted) == sorted(a100 + h100 + b200 + tpuv5p)
    # the preset's provenance names exactly the rows its parameters came from
    for arch, rows in (("h100", h100), ("b200", b200), ("tpuv5p", tpuv5p)):
        provenance = preset_profile(arch).provenance
        assert f"phaze validate runs --fit {arch}" in provenance
        assert all(i in provenance for i in rows)
        assert set(preset_profile(arch).fitted) == {
            "sustained_clock_fraction",
            "collective_compute_share",
        }


def test_a_system_part_runs_at_its_own_clock_measured_as_the_preset():
    # the DGX-2H's V100s: 2.1 petaFLOPS for 16 GPUs against the DGX-2's 2.0
    (run,) = [r for r in REGISTRY.runs if r.id == "megatron-v1-1.2b-1gpu"]
    acc, device = system_device(run.system)
    assert acc.clock_hz == pytest.approx(preset("v100").clock_hz * 2.1 / 2.0, rel=1e-3)
    assert device is None and acc.profile_name == "v100"
    assert device_profile(timing_design(acc)) == preset_profile("v100")
    assert acc.peak_flops == pytest.approx(preset("v100").peak_flops * 2.1 / 2.0, rel=1e-3)


def test_a_system_part_runs_at_its_power_limit_and_hbm_bandwidth():
    (run,) = [r for r in REGISTRY.runs if r.id == "torchtitan-h100-llama3-8b-8"]
    assert run.system.power_limit_w == 500.0 and run.system.hbm_bandwidth_bytes_per_s == 2.4e12
    acc, device = system_device(run.system)
    shipped = preset_profile("h100")
    assert acc.hbm_bandwidth_bytes_per_s == 2.4e12 and acc.hbm_bytes == 96 * 2**30
    # the clock scales by the power model's held share at 500 W over that at 700 W:
    # min(1, (limit - leakage) / (asked - leakage)), asked by the GEMM probe at the preset's
    # training clock (under 700 W there, over 500 W)
    leak, asked = static_power_w(acc), unlimited_gemm_power_w(preset("h100"))
    assert 500.0 < asked < 700.0
    ratio = (500.0 - leak) / (asked - leak)
    assert device.sustained_clock_fraction == pytest.approx(
        shipped.sustained_clock_fraction * ratio
    )
    assert device.board_limit_w == 500.0 and device.intra_node == shipped.intra_node
    # a system that is the preset as shipped keeps the preset's own lookup
    (plain,) = [r for r in REGISTRY.runs if r.id == "mcore-weak-32b"]
    assert system_device(plain.system)[1] is None


@pytest.mark.slow
def test_fit_prints_its_data_and_values():
    r = CliRunner().invoke(cli, ["validate", "runs", "--fit", "h100", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [row["id"] for row in doc["rows"]] == [
        "mcore-weak-32b",
        "mcore-weak-70b",
        "mcore-weak-177b",
        "mpt-h100-30b-128",
    ]
    # the shipped values are the fit's
    shipped = preset_profile("h100")
    assert doc["values"]["sustained_clock_fraction"] == shipped.sustained_clock_fraction
    assert doc["values"]["collective_compute_share"] == shipped.collective_compute_share
    bad = CliRunner().invoke(cli, ["validate", "runs", "--fit", "v100"])
    assert bad.exit_code == 1 and "no run of v100 is marked fitted" in bad.output


@pytest.mark.slow
def test_tpuv5p_clock_is_its_fit_to_the_64_chip_rows():
    r = CliRunner().invoke(cli, ["validate", "runs", "--fit", "tpuv5p", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [row["id"] for row in doc["rows"]] == ["maxtext-v5p-32b-64", "maxtext-v5p-64b-64"]
    shipped = preset_profile("tpuv5p")
    assert doc["values"]["sustained_clock_fraction"] == shipped.sustained_clock_fraction
    assert doc["values"]["collective_compute_share"] == shipped.collective_compute_share


@pytest.mark.slow
def test_b200_clock_is_its_fit_to_its_dense_rows():
    r = CliRunner().invoke(cli, ["validate", "runs", "--fit", "b200", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert all("llama3" in row["id"] for row in doc["rows"])
    shipped = preset_profile("b200")
    assert doc["values"]["sustained_clock_fraction"] == shipped.sustained_clock_fraction
    assert doc["values"]["collective_compute_share"] == shipped.collective_compute_share
    # a training clock, not the benchmark's: near the H100's fitted one, below 1
    assert 0.6 < shipped.sustained_clock_fraction < 0.85


@pytest.mark.parametrize(
    ("model", "seq_len"),
    [("mcore-gpt-177b", 4096), ("llama3-70b", 8192), ("gemma-7b", 8192), ("mpt-7b", 2048)],
)
def test_megatron_core_flop_count_is_the_model_flops(model, seq_len):
    # Megatron-Core's closed form (GQA, gated FFN, logits) against the op-level count of
    # workloads.flops: two independent derivations of the same three passes
    assert flops_per_iteration("megatron-core", model, seq_len, 3) == pytest.approx(
        3 * model_flops_per_sequence(get_model(model), seq_len), rel=1e-12
    )


@pytest.mark.parametrize("model", ["maxtext-32b", "maxtext-128b", "maxtext-1024b"])
def test_maxtext_flop_counts_are_the_model_flops_and_halve_attention(model):
    # MaxText's 6 N per token plus the full s x s attention against the op-level count of
    # workloads.flops (three passes; the norms' weights are MaxText's only extra parameters)
    s, m = 2048, get_model(model)
    full = flops_per_iteration("maxtext", model, s, 3)
    assert full == pytest.approx(3 * model_flops_per_sequence(m, s), rel=1e-4)
    attention = 3 * 12.0 * m.heads * m.layers * m.head_dim * s * s
    assert full - flops_per_iteration("maxtext-causal", model, s, 3) == pytest.approx(attention / 2)


def test_maxtext_v5p_rows_are_single_slices_at_the_published_peak():
    rows = [r for r in REGISTRY.runs if r.framework == "maxtext-2023"]
    assert len(rows) >= 6 and {r.arch for r in rows} == {"tpuv5p"}
    assert REGISTRY.profile_for("maxtext-2023")[0] == "maxtext-2023"
    # the v5p's two fitted parameters come from the two 64-chip rows; the rest are held out
    assert {r.id for r in rows if r.fitted} == {"maxtext-v5p-32b-64", "maxtext-v5p-64b-64"}
    for r in rows:
        s = parse_strategy(r.strategy)
        assert r.flops == "maxtext-causal" and s.p == 1 and s.zero == 3, r.id
        assert r.gpus <= r.system.devices_per_node, r.id  # one ICI slice
        assert r.peak_flops_per_s == pytest.approx(preset("tpuv5p").peak_flops, rel=2e-3), r.id


def test_every_metric_maps_back_to_the_published_figure():
    seen = set()
    for r in REGISTRY.runs:
        t = measured_iteration_s(r)
        assert t > 0
        assert metric_from_iteration_s(r, t) == pytest.approx(r.measured, rel=1e-12)
        seen.add(r.metric)
    assert seen == set(METRICS)


def test_published_metrics_become_iteration_times_by_their_conventions():
    by_id = {r.id: r for r in REGISTRY.runs}
    # MPT-70B, 64 A100: 410 tokens/s per GPU at 2048 sequences of 2048 tokens
    assert measured_iteration_s(by_id["mpt-a100-70b-64"]) == pytest.approx(2048 * 2048 / (410 * 64))
    # Megatron-Core 177B on 96 H100: 47 % of 989 TFLOP/s, three passes of 1152 x 4096 tokens
    work = 3 * 1152 * model_flops_per_sequence(get_model("mcore-gpt-177b"), 4096) / 3
    assert measured_iteration_s(by_id["mcore-strong-177b-96"]) == pytest.approx(
        work / (0.47 * 989e12 * 96)
    )


def _write(tmp_path, text):
    path = tmp_path / "runs.toml"
    path.write_text(text)
    return path


_GOOD_HEAD = """
[sources.s]
title = "a paper"
url = "https://example.org"
date = "2024-01"

[systems.n]
description = "a node"
arch = "a100"
devices_per_node = 8
intra_node_bandwidth_bytes_per_s = 300e9
inter_node_bandwidth_bytes_per_s = 25e9
source = "data sheet"
"""

_GOOD_RUN = """
[[run]]
id = "r1"
label = "one run"
source = "s"
where = "Table 1"
system = "n"
gpus = 8
framework = "megatron-2022"
framework_version = "2022"
model = "korthikanti-22b"
seq_len = 2048
global_batch = 4
strategy = "t=8,p=1,d=1,v=1,mbs=4,recompute=full,sp=off,zero=0,ep=1,cp=1"
metric = "iteration_s"
measured = 1.42
fitted = false
"""


def test_a_small_registry_loads(tmp_path):
    reg = load_registry(_write(tmp_path, _GOOD_HEAD + _GOOD_RUN))
    (run,) = reg.runs
    assert run.system.arch == "a100" and run.assumed == () and run.citation.endswith("example.org")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("gpus = 8", "gpsu = 8"),
            r"unknown key 'gpsu' \(did you mean 'gpus'\?\).*gpus is missing",
        ),
        (('"korthikanti-22b"', '"gpt5"'), r"model 'gpt5' is not in the catalog"),
        (("d=1,v=1", "v=1"), r"strategy leaves d open"),
        (("global_batch = 4", "global_batch = 0"), r"global_batch = 0 must be > 0"),
        (
            ('"iteration_s"', '"flops_per_s_per_gpu"'),
            r"flops = None must be one of sc21, megatron-core",
        ),
        (('"megatron-2022"', '"jax-2030"'), r"framework 'jax-2030' has no profile"),
        (("gpus = 8", "gpus = 16"), r"t\*p\*d\*cp = 8 devices, gpus = 16"),
        (('source = "s"', 'source = "t"'), r"source 't' is not in \[sources\]"),
        (
            ("fitted = false", 'fitted = false\noptimizer_state = "moments=fp16"'),
            r"optimizer_state: moments = 'fp16' must be one of fp32, bf16, 8bit",
        ),
    ],
)
def test_registry_errors_name_the_run_the_key_and_the_rule(tmp_path, edit, message):
    bad = _GOOD_RUN.replace(*edit)
    with pytest.raises(ConfigError) as e:
        load_registry(_write(tmp_path, _GOOD_HEAD + bad))
    assert re.search(message, str(e.value)), str(e.value)
    assert str(e.value).startswith(f"registry {tmp_path / 'runs.toml'}: [[run]] 1 (r1): ")


def test_a_damaged_registry_is_one_error_line(tmp_path):
    path = _write(tmp_path, _GOOD_HEAD + _GOOD_RUN.replace("fitted = false", "fitted = 'no'"))
    path.with_name("bad.toml").write_text("[[run]\n")
    cases = ((path, "fitted = 'no' must be of type bool"), (path.with_name("bad.toml"), "not TOML"))
    for target, pattern in cases:
        r = CliRunner().invoke(cli, ["validate", "runs", "--registry", str(target)])
        assert r.exit_code == 1, r.output
        lines = [x for x in r.output.splitlines() if x.startswith("Error:")]
        assert len(lines) == 1 and pattern in lines[0] and "Traceback" not in r.output


def test_a_registry_of_the_wrong_shape_lists_every_problem(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_registry(_write(tmp_path, 'sources = 3\nrun = "x"\n[extra]\n'))
    text = str(e.value)
    assert "sources must be tables" in text and "run must be an array of tables" in text
    assert "unknown table [extra]" in text and "no [[run]] tables" in text


def test_unknown_run_id_is_refused():
    r = CliRunner().invoke(cli, ["validate", "runs", "--run", "no-such-run"])
    assert r.exit_code == 1 and "--run no-such-run: not in the registry" in r.output


def _result(fitted, error_pct, *, run_id="mpt-a100-1b-8"):
    run = dataclasses.replace(next(r for r in REGISTRY.runs if r.id == run_id), fitted=fitted)
    measured = measured_iteration_s(run)
    # a tokens/s metric: +x % in the metric is a time of measured / (1 + x)
    predicted = None if error_pct is None else measured / (1 + error_pct / 100)
    return RunResult(run, "overlap-all", "", measured, predicted)


def test_targets_separate_fitted_and_held_out_rows():
    ok = summarize([_result(True, 5.0), _result(False, -7.0), _result(False, 7.0)])
    assert ok["fitted"]["runs"] == 1 and ok["held_out"]["mean_abs_error_pct"] == pytest.approx(7.0)
    assert outside_targets(ok, Targets()) == []
    bad = summarize([_result(True, 9.0), _result(False, 30.0), _result(False, None)])
    misses = " ".join(outside_targets(bad, Targets()))
    assert "fitted max |error| 9.0% > 8%" in misses and "held-out max |error| 30.0% > 25%" in misses
    assert "1 held-out runs infeasible" in misses
    assert bad["held_out"]["mean_time_error_pct"] == pytest.approx(100 * (1 / 1.30 - 1))


def test_each_gpu_framework_and_moe_group_is_held_to_its_own_mean():
    """An overall mean within target can hide one group far off; the search would go there."""
    rows = [_result(False, 1.0)] * 9 + [_result(False, -15.0, run_id="deepseek-v3-2048")]
    summary = summarize(rows)
    moe = summary["by_model"]["moe"]["held_out"]["mean_abs_error_pct"]
    assert moe > 12.0 and summary["held_out"]["mean_abs_error_pct"] < 8.0
    misses = outside_targets(summary, Targets())
    assert misses == [
        f"gpu h800 held-out mean |error| {moe:.1f}% > 12%",
        f"framework deepseek-2024 held-out mean |error| {moe:.1f}% > 12%",
        f"model moe held-out mean |error| {moe:.1f}% > 12%",
    ]
    assert outside_targets(summary, Targets(group_mean_pct=moe + 1)) == []


def test_two_rows_through_the_cli():
    """The Table 5 22B row (as `validate megatron` predicts it) and a small FSDP row."""
    ids = ["korthikanti-t5-22b-full", "mpt-a100-1b-8"]
    r = CliRunner().invoke(
        cli, ["validate", "runs", "--json", *sum((["--run", i] for i in ids), [])]
    )
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.output[: r.output.rindex("}") + 1])
    rows = {row["id"]: row for row in doc["rows"]}
    assert list(rows) == ids
    t5 = rows["korthikanti-t5-22b-full"]
    assert t5["fitted"] and t5["profile_used"] == "megatron-2022" and t5["arch"] == "a100"
    # validate megatron's figure for this row: 1.418 s against the published 1.42 s
    assert t5["predicted_iteration_s"] == pytest.approx(1.418, abs=0.002)
    mpt = rows["mpt-a100-1b-8"]
    assert mpt["framework"] == "fsdp1-2023" and mpt["profile_used"] == "fsdp1-2023"
    assert not mpt["profile_note"] and not mpt["fitted"]
    assert mpt["error_pct"] == pytest.approx(100 * (mpt["predicted"] / mpt["measured"] - 1))
    assert mpt["predicted"] == pytest.approx(2048 * 448 / (mpt["predicted_iteration_s"] * 8))
    assert doc["summary"]["fitted"]["runs"] == 1 and doc["summary"]["held_out"]["runs"] == 1
    assert set(doc["summary"]["by_gpu"]) == {"a100"}
    assert doc["summary"]["by_framework"]["fsdp1-2023"]["held_out"]["runs"] == 1
    assert doc["summary"]["by_framework"]["megatron-2022"]["held_out"]["runs"] == 0
    assert doc["within_targets"] == (r.exit_code == 0)


@pytest.mark.slow
def test_the_whole_registry_is_evaluated():
    r = CliRunner().invoke(cli, ["validate", "runs", "--json"])
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.output[: r.output.rindex("}") + 1])
    assert len(doc["rows"]) == len(REGISTRY.runs)
    assert all(row["predicted_iteration_s"] for row in doc["rows"]), "a published run is infeasible"
    summary = doc["summary"]
    assert summary["fitted"]["runs"] + summary["held_out"]["runs"] == len(REGISTRY.runs)
    counts = Counter(row["arch"] for row in doc["rows"])
    by_gpu = summary["by_gpu"].items()
    assert {k: v["fitted"]["runs"] + v["held_out"]["runs"] for k, v in by_gpu} == dict(counts)
    # the fitted rows are those `validate megatron` fits: within its tolerance
    assert summary["fitted"]["max_abs_error_pct"] < 8.0
    assert r.exit_code == (0 if doc["within_targets"] else 3)


def test_fp8_runs_are_held_out_rows_of_the_registry():
    """Published FP8 runs train with their recipes at their layouts, none fitted: NeMo's and
    MLPerf's on H100 and B200 with Transformer Engine's, DeepSeek-V3's on H800 block-wise; the
    V100 runs (Megatron-LM 2019-2020) in fp16, the only format of Volta's tensor cores."""
    fp8 = [r for r in REGISTRY.runs if r.precision not in ("bf16", "fp16")]
    # the B200's training clock is fitted to its dense FP8 runs (no B200 run is BF16 dense)
    assert len(fp8) >= 5 and {r.arch for r in fp8 if r.fitted} == {"b200"}
    assert not any(r.fitted for r in fp8 if model_kind(r) == "moe")
    assert {r.precision for r in REGISTRY.runs if r.arch == "v100"} == {"fp16"}
    te = [r for r in fp8 if r.precision in ("fp8-te", "fp8-te-current")]
    assert len(te) >= 4 and {r.arch for r in te} == {"h100", "b200"}
    # NeMo 25.09-26.04 (Megatron-Bridge) ran Transformer Engine's current scaling (FP8-CS),
    # NeMo 24.x and MLPerf v4.0 its delayed scaling
    for r in te:
        current = r.framework == "megatron-bridge-2025"
        assert r.precision == ("fp8-te-current" if current else "fp8-te"), r.id
    assert {(r.arch, r.precision) for r in fp8 if r not in te} == {("h800", "fp8-blockwise")}


def _fp8_source_row(case: str) -> dict:
    text = (Path(__file__).parents[1] / "arch_space" / "data" / "fp8_runs.toml").read_text()
    return next(r for r in tomllib.loads(text)["run"] if r["case"] == case)


def test_deepseek_v3_is_a_held_out_moe_row_at_its_published_layout():
    """The report's pre-training (arch_space/data/fp8_runs.toml's row) as `phaze evaluate`
    runs it: PP 16, EP 64, ZeRO-1 DP, no TP, its recomputed modules, block-wise FP8, BF16
    moments beside FP32 master weights and gradients, DualPipe, the stated links."""
    src = _fp8_source_row("deepseek-v3 pretraining 2048xH800")
    (run,) = [r for r in REGISTRY.runs if r.model == "deepseek-v3" and r.arch == "h800"]
    assert not run.fitted and model_kind(run) == "moe"
    assert (run.arch, run.gpus, run.framework) == ("h800", src["gpus"], "deepseek-2024")
    assert (run.seq_len, run.global_batch) == (src["seq_len_tokens"], src["global_batch"])
    # Table 1's 2,664K pre-training device-hours for 14.8T tokens: the source row's rate
    assert (run.metric, run.measured, run.train_tokens) == ("device_hours", 2.664e6, 14.8e12)
    rate = run.train_tokens / (run.measured * 3600.0)  # tokens/s per GPU
    assert rate == pytest.approx(src["tokens_per_s_per_gpu"], rel=1e-4)
    lay = parse_strategy(run.strategy)
    got = (lay.t, lay.p, lay.d, lay.ep, lay.cp, lay.zero, lay.precision, lay.sp)
    assert got == (src["tp"], src["pp"], 128, src["ep"], src["cp"], 1, "fp8-blockwise", False)
    assert f"recompute={lay.recompute}" in src["recompute"]
    parts = parse_optimizer_state(run.optimizer_state, OptimizerState(weight_bytes=2))
    assert parts.state_bytes_per_parameter == 14 and run.state_bytes is None
    system = run.system
    assert system.devices_per_node == src["gpus_per_node"]
    links = (system.intra_node_bandwidth_bytes_per_s, system.inter_node_bandwidth_bytes_per_s)
    assert links == (160e9, 50e9)
    assert run.assumed == ("micro_batch",)


def test_the_registry_holds_out_moe_and_blackwell_rows():
    """Where the search goes: at least 10 MoE runs, none fitted, and 4 on a Blackwell part (the
    b200 preset: DGX B200, and GB200 NVL72 as its NeMo runs use it) held out beside the dense
    ones its clock is fitted to."""
    moe = [r for r in REGISTRY.runs if model_kind(r) == "moe"]
    blackwell = [r for r in REGISTRY.runs if r.arch == "b200"]
    assert len(moe) >= 10 and not any(r.fitted for r in moe)
    assert sum(not r.fitted for r in blackwell) >= 4
    assert all(model_kind(r) == "dense" for r in blackwell if r.fitted)
    assert {r.system.key for r in blackwell} == {"dgx-b200", "gb200-nvl72"}
    assert {r.model for r in moe} >= {"deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b"}


@pytest.mark.parametrize(
    ("run_id", "commit", "measured", "layout"),
    [
        ("nemo-2511-gb200-dsv3-bf16", "5776a6d90", 3139.0, (1, 4, 4, 64, 64, 1, "bf16")),
        ("nemo-2509-h100-dsv3-fp8", "5776a6d90", 1297.0, (2, 8, 4, 64, 64, 1, "fp8-te-current")),
        (
            "nemo-2509-b200-qwen3-235b-fp8",
            "5776a6d90",
            4104.0,
            (1, 8, 2, 8, 8, 1, "fp8-te-current"),
        ),
        (
            "nemo-2604-h100-qwen3-30b-fp8",
            "74695a06d",
            8901.0,
            (1, 1, 1, 16, 16, 1, "fp8-te-current"),
        ),
        (
            "nemo-2511-b200-llama3-405b-fp8",
            "5776a6d90",
            661.0,
            (4, 8, 8, 2, 1, 2, "fp8-te-current"),
        ),
    ],
)
def test_nemo_bridge_rows_cite_their_edition_and_layout(run_id, commit, measured, layout):
    """Each Megatron-Bridge row names the summary's commit and keeps the table's TP, PP, VP,
    DP, EP, CP and precision; the stack has its own profile, megatron-bridge-2025."""
    (run,) = [r for r in REGISTRY.runs if r.id == run_id]
    assert commit in run.source.url and commit in run.source.title and not run.fitted
    assert run.metric == "tokens_per_s_per_gpu" and run.measured == measured
    lay = parse_strategy(run.strategy)
    assert (lay.t, lay.p, lay.v, lay.d, lay.ep, lay.cp, lay.precision) == layout
    assert REGISTRY.profile_for(run.framework) == ("megatron-bridge-2025", "")


def test_the_summary_groups_dense_and_moe_rows():
    dsv3 = next(r for r in REGISTRY.runs if r.model == "deepseek-v3")
    moe = RunResult(dsv3, "deepseek-2024", "", measured_iteration_s(dsv3), None)
    s = summarize([_result(False, 5.0), moe])
    assert s["by_model"]["dense"]["held_out"]["mean_abs_error_pct"] == pytest.approx(5.0)
    assert s["by_model"]["moe"]["held_out"]["infeasible"] == 1
    r = CliRunner().invoke(cli, ["validate", "runs", "--run", "mpt-a100-1b-8"])
    assert r.exit_code in (0, 3), r.output
    assert re.search(r"^model dense, held out +1 ", r.output, re.M), r.output
    assert "model moe" not in r.output


@pytest.mark.slow
def test_the_deepseek_v3_row_runs_what_phaze_evaluate_runs():
    """The row's prediction is `phaze evaluate` with the report's layout as options."""
    r = CliRunner().invoke(cli, ["validate", "runs", "--json", "--run", "deepseek-v3-2048"])
    assert r.exit_code in (0, 3), r.output
    (row,) = json.loads(r.output[: r.output.rindex("}") + 1])["rows"]
    args = [
        *("evaluate", "--workload", "deepseek-v3", "--arch", "h800", "--devices", "2048"),
        "--strategy",
        "t=1,p=16,d=128,ep=64,zero=1,recompute=modules:layernorm+mla_up_proj+moe_act",
        *("--precision", "fp8-blockwise", "--framework", "deepseek-2024"),
        *("--optimizer-state", "master=fp32,moments=bf16,grads=fp32"),
        *("--global-batch", "15360", "--seq-len", "4096", "--json"),
        *("--intra-node-gbps", "160", "--inter-node-gbps", "50"),
    ]
    e = CliRunner().invoke(cli, args)
    assert e.exit_code == 0, e.output
    doc = json.loads(e.output[: e.output.rindex("}") + 1])
    assert row["predicted_iteration_s"] == pytest.approx(doc["iteration_s"], rel=1e-9)
    assert doc["placement"]["strategy"] == row["strategy"]


def test_an_fp8_row_runs_its_gemms_in_fp8_and_is_grouped_by_precision():
    ids = ["nemo-fp8-llama3-8b-8"]
    r = CliRunner().invoke(cli, ["validate", "runs", "--json", "--run", ids[0]])
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.output[: r.output.rindex("}") + 1])
    (row,) = doc["rows"]
    assert set(doc["summary"]["by_precision"]) == {"fp8-te"}
    # the same layout in bf16 is slower: the recipe reaches the op costs
    (run,) = [r for r in REGISTRY.runs if r.id == ids[0]]
    bf16 = dataclasses.replace(run, strategy=run.strategy.replace("fp8-te", "bf16"))
    assert bf16.precision == "bf16"
    slower = evaluate_run(bf16, REGISTRY).predicted_iteration_s
    assert slower > row["predicted_iteration_s"] * 1.1


def test_llama3_8k_rows_run_as_the_paper_states_and_fit_only_so():
    """Llama 3 section 3.3.2: FSDP shards the optimizer state and the gradients, not the
    weights (ZeRO-2), and 8K sequences pre-train without activation checkpointing. The rows
    say so, and the no-checkpointing layout fits only with the gradients sharded."""
    runs = {r.id: r for r in REGISTRY.runs}
    for rid in ("llama3-405b-8192", "llama3-405b-16384"):
        lay = parse_strategy(runs[rid].strategy)
        assert (str(lay.recompute), lay.zero) == ("none", 2), rid
        assert not {"recompute", "zero"} & set(runs[rid].assumed), rid
        assert evaluate_run(runs[rid], REGISTRY).predicted_iteration_s is not None
    # the 131K row's checkpointing is not stated: it stays an assumption
    assert "recompute" in runs["llama3-405b-16384-cp16"].assumed
    replicated = dataclasses.replace(
        runs["llama3-405b-8192"],
        strategy=runs["llama3-405b-8192"].strategy.replace("zero=2", "zero=1"),
    )
    result = evaluate_run(replicated, REGISTRY)
    assert result.predicted_iteration_s is None and "needs" in result.reason


def test_fsdp_rows_lose_throughput_with_the_data_parallel_degree():
    """llm-foundry's weak scaling (the same recipe per GPU on 128, 256 and 512 H100) loses
    rate with the ranks; the model does too, through each prefetched unit's ring latency."""
    for size in ("1b", "7b", "30b", "70b"):
        rate = {}
        for gpus in (128, 256, 512):
            run = next(r for r in REGISTRY.runs if r.id == f"mpt-h100-{size}-{gpus}")
            rate[gpus] = evaluate_run(run, REGISTRY).predicted
        assert rate[128] > rate[256] > rate[512], size
        # the runs lose 3.8-9.7 % from 128 to 512; the model at least 1 % (it lost at most
        # 0.7 % while every unit's latency hid behind compute)
        assert rate[512] < 0.99 * rate[128], size
