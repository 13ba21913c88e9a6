"""A whole run's device-hours as a registry row (DeepSeek-V3's 14.8T pre-training tokens), and
the same figure from `phaze evaluate` given the report's layout and recipe as plain options;
a row's switches of its stack's profile (``framework_settings``)."""

import dataclasses
import re
from importlib import resources

import pytest
from click.testing import CliRunner

from phaze.cli import cli
from phaze.validation.published_runs import (
    default_registry,
    load_registry,
    measured_iteration_s,
    metric_from_iteration_s,
)
from phaze.validation.runs import evaluate_run
from phaze_common.errors import ConfigError

REGISTRY = default_registry()
DSV3 = next(r for r in REGISTRY.runs if r.id == "deepseek-v3-2048")
# DeepSeek-V3 report (arXiv:2412.19437) Table 1: pre-training 2,664K H800 GPU-hours of the
# 2,788K in all (context extension 119K, post-training 5K)
PRETRAINING_DEVICE_HOURS = 2.664e6
ITERATIONS = 14.8e12 / (15360 * 4096)


def test_device_hours_are_iteration_time_times_iterations_times_devices():
    assert DSV3.metric == "device_hours" and DSV3.measured == PRETRAINING_DEVICE_HOURS
    t = measured_iteration_s(DSV3)
    assert t == pytest.approx(PRETRAINING_DEVICE_HOURS * 3600 / (2048 * ITERATIONS), rel=1e-12)
    # 180K GPU-hours per trillion tokens (section 1) is the same run: 16.4 s an iteration
    assert 14.8 * 180e3 == pytest.approx(PRETRAINING_DEVICE_HOURS, rel=1e-3)
    assert metric_from_iteration_s(DSV3, t) == pytest.approx(DSV3.measured, rel=1e-12)
    assert metric_from_iteration_s(DSV3, 2 * t) == pytest.approx(2 * DSV3.measured, rel=1e-12)


def test_the_row_is_held_out_within_twenty_percent():
    r = evaluate_run(DSV3, REGISTRY)
    assert not DSV3.fitted and r.profile_used == "deepseek-2024"
    assert r.error_pct == pytest.approx(r.time_error_pct, rel=1e-9)  # one number
    assert abs(r.error_pct) <= 20.0


def _device_hours(text: str) -> float:
    (value,) = re.findall(r"^device-hours +([0-9.]+)M$", text, re.M)
    return float(value) * 1e6


def test_phaze_evaluate_prints_the_runs_device_hours_from_plain_options():
    """The catalog model, the h800 preset, the deepseek-2024 profile and the report's strategy
    and recipe as options; the tokens default to the model's published 14.8T. The printed
    device-hours (at the default goodput, 0.9) come within 20 % of the whole 2.788M; at
    goodput 1 they are the registry row's prediction, within 20 % of the pre-training's
    2.664M (the published figure has the run's failures and restarts in it already; with
    the MTP module the failure-free figure is above it, so 0.9 lands 20.1 % above)."""
    args = [
        *("evaluate", "--workload", "deepseek-v3", "--arch", "h800", "--devices", "2048"),
        "--strategy",
        "t=1,p=16,d=128,ep=64,zero=1,recompute=modules:layernorm+mla_up_proj+moe_act",
        *("--precision", "fp8-blockwise", "--framework", "deepseek-2024"),
        *("--optimizer-state", "master=fp32,moments=bf16,grads=fp32"),
        *("--global-batch", "15360", "--seq-len", "4096"),
        *("--intra-node-gbps", "160", "--inter-node-gbps", "50"),
    ]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert "14.8T tokens (the model's published budget)" in r.output
    hours = _device_hours(r.output)
    assert abs(hours / 2.788e6 - 1) <= 0.20
    failure_free = CliRunner().invoke(cli, [*args, "--goodput", "1"])
    assert failure_free.exit_code == 0, failure_free.output
    predicted = evaluate_run(DSV3, REGISTRY).predicted
    assert _device_hours(failure_free.output) == pytest.approx(predicted, rel=5e-3)
    assert abs(predicted / PRETRAINING_DEVICE_HOURS - 1) <= 0.20


def test_a_rows_framework_settings_are_its_stacks_switches():
    (h100,) = [r for r in REGISTRY.runs if r.id == "nemo-2509-h100-dsv3-fp8"]
    assert "ep_overlap=true" in h100.framework_settings
    assert "moe_dispatcher=flex" in h100.framework_settings
    profile, note = REGISTRY.run_profile(h100)
    assert profile == f"megatron-bridge-2025:{h100.framework_settings}" and note == ""
    off = evaluate_run(dataclasses.replace(h100, framework_settings=""), REGISTRY)
    on = evaluate_run(h100, REGISTRY)
    # the a2a overlap hides most of the all-to-alls the alltoall dispatcher leaves exposed
    assert on.predicted_iteration_s < 0.8 * off.predicted_iteration_s


def _registry_with(tmp_path, extra: str):
    text = resources.files("phaze").joinpath("data", "published_runs.toml").read_text("utf-8")
    old = 'framework_settings = "moe_dispatcher=flex"'
    assert old in text
    path = tmp_path / "runs.toml"
    path.write_text(text.replace(old, extra), encoding="utf-8")
    return load_registry(path)


def test_a_bad_setting_or_a_device_hours_row_without_tokens_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="framework_settings: .*moe_dispatcher = 'nccl'"):
        _registry_with(tmp_path, 'framework_settings = "moe_dispatcher=nccl"')
    with pytest.raises(ConfigError, match="train_tokens goes with metric device_hours"):
        _registry_with(tmp_path, "train_tokens = 1e12")
