"""Whole-run answers of `phaze evaluate --tokens`, `phaze validate energy`, token budgets."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from arch_space.system import host_w_per_node
from phaze.cli import cli
from phaze.config import sweep_config_from_mapping
from phaze.model.run import parse_tokens
from phaze_common.errors import ConfigError

BASE = ["evaluate", "--workload", "gpt3-1.3b", "--arch", "a100", "--devices", "8"]
BASE += ["--global-batch", "64"]
RUN_KEYS = (
    "time_to_train_s",
    "device_hours",
    "energy_j",
    "avg_device_power_w",
    "avg_node_power_w",
    "operational_kgco2e",
    "embodied_kgco2e",
    "total_kgco2e",
    "tcdp_kgco2e_s",
    "capex_usd",
    "usd_per_device_hour",
    "cost_breakdown",
    "energy_tdp_accounting_kwh",
    "electricity_usd",
    "tco_usd",
)


def _json(*args: str) -> dict:
    r = CliRunner().invoke(cli, [*BASE, "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("2e12", 2 * 10**12), ("2T", 2 * 10**12), ("300B", 3 * 10**11), ("1.5k", 1500), ("7", 7)],
)
def test_token_notation(text, tokens):
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["0", "-5", "2X", "", "abc", "0.1"])
def test_bad_token_counts_are_one_error(text):
    with pytest.raises(ConfigError, match="must be a positive count"):
        parse_tokens(text)


def test_whole_run_answers_scale_with_the_budget():
    small, big = _json("--tokens", "300B"), _json("--tokens", "600B")
    assert all(k in small for k in RUN_KEYS) and small["tokens_source"] == "--tokens"
    for key in ("time_to_train_s", "device_hours", "energy_j", "electricity_usd", "tco_usd"):
        assert big[key] == pytest.approx(2 * small[key])
    # power does not depend on the budget; a node is its 8 devices and its host server
    assert big["avg_device_power_w"] == pytest.approx(small["avg_device_power_w"])
    node_w = 8 * small["avg_device_power_w"] + host_w_per_node("dgx-a100")
    assert small["avg_node_power_w"] == pytest.approx(node_w)
    # facility energy = IT energy x PUE; each term is in the breakdown and they sum
    assert small["energy_j"] == pytest.approx(small["it_energy_j"] * 1.10)
    terms = small["energy_breakdown"]
    parts = ("compute_j", "memory_j", "static_j", "idle_j", "network_j", "host_j")
    assert sum(terms[k] for k in parts) == pytest.approx(terms["it_j"])
    assert terms["host_j"] > 0 and terms["idle_j"] >= 0
    hours = small["time_to_train_s"] * 8 / 3600
    assert small["device_hours"] == pytest.approx(hours)


def test_options_change_the_answers():
    base = _json("--tokens", "2T")
    clean = _json("--tokens", "2T", "--grid", "france")
    assert clean["operational_kgco2e"] < base["operational_kgco2e"]
    priced = _json("--tokens", "2T", "--usd-per-kwh", "0.2")
    assert priced["electricity_usd"] == pytest.approx(base["electricity_usd"] * 0.2 / 0.0806)
    whole = _json("--tokens", "2T", "--embodied-mode", "whole-life", "--pue", "1.5")
    assert whole["embodied_kgco2e"] > base["embodied_kgco2e"]
    assert whole["energy_j"] == pytest.approx(base["it_energy_j"] * 1.5)
    assert _json("--tokens", "2T", "--grid-gco2e-per-kwh", "0")["operational_kgco2e"] == 0


def test_default_budget_is_published_else_one_iteration():
    assert _json()["tokens_source"] == "the model's published budget"
    r = CliRunner().invoke(
        cli,
        ["evaluate", "--workload", "gpt2-xl", "--arch", "a100", "--devices", "8"]
        + ["--global-batch", "16", "--seq-len", "1024", "--json"],
    )
    doc = json.loads(r.output)
    assert doc["tokens_source"].startswith("one iteration")
    assert doc["tokens_to_train"] == 16 * 1024


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokens", "0"], "must be a positive count"),
        (["--tokens", "-2T"], "must be a positive count"),
        (["--pue", "0.9"], "'--pue': 0.9 is not a finite number in [1, 4]"),
        (["--pue", "nan"], "'--pue': nan is not a finite number in [1, 4]"),
        (["--grid", "franse"], "did you mean france"),
        (["--grid", "FRANSE"], "did you mean france"),
        (["--grid-gco2e-per-kwh", "nan"], "nan is not a finite number in [0, 2000]"),
        (["--usd-per-kwh", "-1"], "'--usd-per-kwh': -1 is not a finite number in [0, 10]"),
        (["--usd-per-kwh", "inf"], "'--usd-per-kwh': inf is not a finite number in [0, 10]"),
        (["--lifetime-years", "0"], "'--lifetime-years': 0 is not a finite number in (0, 30]"),
        (["--lifetime-years", "nan"], "'--lifetime-years': nan is not a finite number"),
        (["--interest", "1"], "'--interest': 1 is not a finite number in [0, 1)"),
        (["--goodput", "0"], "'--goodput': 0 is not a finite number in (0, 1]"),
        (["--intra-node-gbps", "nan"], "'--intra-node-gbps': nan is not a finite number"),
        (["--inter-node-gbps", "inf"], "'--inter-node-gbps': inf is not a finite number"),
        (["--tokens", "1e40"], "tokens = '1e40' must be at most 1e16"),
        (["--volume", "0"], "'--volume': 0 is not in the range"),
        (["--cost-view", "rent"], "'--cost-view': 'rent' is not one of 'build', 'buy'"),
        (["--host", "dgx-a10"], "did you mean dgx-a100"),
    ],
)
def test_bad_input_is_one_error_line(args, message):
    r = CliRunner().invoke(cli, [*BASE, *args])
    assert r.exit_code != 0 and message in r.output
    assert r.output.count("Error:") == 1 and "Traceback" not in r.output


def test_validate_energy_reports_every_run():
    r = CliRunner().invoke(cli, ["validate", "energy", "--json"])
    doc = json.loads(r.stdout)
    cases = {row["case"]: row for row in doc["rows"]}
    assert set(cases) >= {"gpt3-175b with host W", "gpt3-175b with host", "bloom-176b GPU-hours"}
    assert {"gpt3-175b", "llama2-70b", "bloom-176b"} <= set(cases)  # operational carbon
    runs = {r["run"]: r for r in doc["runs"]}
    for run in runs.values():
        assert 0 < run["board_w"] < run["with_host_w"]
    # each run's energy both ways: modelled, and as a model card counts it (hours x TDP x PUE)
    gpt3 = runs["gpt3-175b"]
    assert gpt3["energy_tdp_accounting_kwh"] == pytest.approx(3_552_000 * 300 / 1000 * 1.10)
    assert gpt3["modelled_energy_j"] == pytest.approx(cases["gpt3-175b with host"]["predicted"])
    text = CliRunner().invoke(cli, ["validate", "energy"]).output
    assert "model-card (GPU-h x TDP x PUE)" in text and "energy, modelled" in text
    assert r.exit_code == (0 if doc["within_tolerance"] else 3)
    # GPT-3's measured system power and energy (Patterson et al. 2021)
    assert abs(cases["gpt3-175b with host W"]["error_pct"]) <= 20
    assert abs(cases["gpt3-175b with host"]["error_pct"]) <= 25
    assert abs(cases["gpt3-175b"]["error_pct"]) <= 25
    # energy is that power times the published GPU-hours (and PUE), carbon that at 429 g/kWh
    row = cases["gpt3-175b with host"]
    power = cases["gpt3-175b with host W"]["predicted"]
    assert row["predicted"] == pytest.approx(power * 3_552_000 * 3600 * 1.10)
    assert cases["gpt3-175b"]["predicted"] == pytest.approx(row["predicted"] / 3.6e6 * 0.429)


def test_tdp_accounted_runs_compare_the_power_limit_times_predicted_hours():
    doc = json.loads(CliRunner().invoke(cli, ["validate", "energy", "--json"]).stdout)
    cases = {row["case"]: row for row in doc["rows"]}
    runs = {r["run"]: r for r in doc["runs"]}
    for name, published_kwh, grid in (("llama2-70b", 688_128, 423.5), ("bloom-176b", 433_196, 57)):
        limit = cases[f"{name} power limit (fit) W"]
        hours = cases[f"{name} GPU-hours"]["predicted"]
        energy = cases[f"{name} power limit (fit)"]
        assert energy["measured"] == pytest.approx(published_kwh * 3.6e6, rel=1e-3)
        assert energy["predicted"] == pytest.approx(limit["predicted"] * hours * 3600)
        assert cases[name]["predicted"] == pytest.approx(energy["predicted"] / 3.6e6 * grid / 1e3)
        # the modelled average draw sits below the limit the publications account at
        assert runs[name]["board_w"] < limit["predicted"]
    # GPU-hours: iteration time x iterations of the published tokens x devices
    assert 1e6 < cases["llama2-70b GPU-hours"]["predicted"] < 3e6


def test_sweep_config_takes_a_token_budget():
    assert (
        sweep_config_from_mapping({"sweep": {"tokens_to_train": "2T"}}).training.tokens_to_train
        == 2e12
    )
    assert (
        sweep_config_from_mapping({"sweep": {"tokens_to_train": 3e11}}).training.tokens_to_train
        == 3e11
    )
    assert sweep_config_from_mapping({}).training.tokens_to_train is None
    with pytest.raises(ConfigError, match=r"tokens_to_train = 'lots' must be a positive token"):
        sweep_config_from_mapping({"sweep": {"tokens_to_train": "lots"}})


def test_sweep_without_a_budget_names_a_key_that_exists(tmp_path):
    import phaze
    from arch_space import Cluster

    with pytest.raises(ConfigError, match=r"set tokens_to_train in \[sweep\]") as e:
        phaze.search(["gpt2-xl"], cluster=Cluster(devices=8), out_dir=tmp_path, seq_len=1024)
    # the key the message names is one [sweep] accepts
    assert "tokens_to_train" in str(e.value)
    sweep_config_from_mapping({"sweep": {"tokens_to_train": 10**9}})


def test_a_preset_runs_in_its_own_host_server_unless_told():
    args = ["evaluate", "--workload", "gpt3-1.3b", "--arch", "h100", "--devices", "8"]
    args += ["--global-batch", "64", "--json"]
    own = json.loads(CliRunner().invoke(cli, args).output)
    told = json.loads(CliRunner().invoke(cli, [*args, "--host", "dgx-a100"]).output)
    for doc, host in ((own, "dgx-h100"), (told, "dgx-a100")):
        node_w = 8 * doc["avg_device_power_w"] + host_w_per_node(host)
        assert doc["avg_node_power_w"] == pytest.approx(node_w)


def test_evaluate_reports_area_and_power_headroom():
    doc = json.loads(CliRunner().invoke(cli, [*BASE, "--json"]).output)
    h = doc["headroom"]
    assert h["area_budget_mm2"] == 858.0 and h["power_budget_w"] == 400.0
    assert h["area_headroom"] == pytest.approx(1 - h["die_area_mm2"] / 858.0)
    assert h["power_headroom"] == pytest.approx(1 - h["power_asked_w"] / 400.0)
    text = CliRunner().invoke(cli, BASE).output
    assert "area headroom" in text and "of 858 mm² (reticle)" in text
    assert "power headroom" in text and "board limit" in text


def test_power_headroom_line_reports_the_drawn_power_and_the_limit():
    """A preset whose limiter holds it (B200: asks more than its 1 kW) draws its limit; the
    line says so, the headroom still measures what it asks for, as the report does."""
    args = ["evaluate", "--workload", "gpt3-125m", "--arch", "b200", "--devices", "8"]
    args += ["--global-batch", "8", "--seq-len", "256"]
    h = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)["headroom"]
    assert h["power_budget_w"] == 1000.0 and h["power_asked_w"] > 1000.0
    assert h["power_drawn_w"] == pytest.approx(1000.0)
    assert h["power_headroom"] == pytest.approx(1 - h["power_asked_w"] / 1000.0)
    line = next(x for x in CliRunner().invoke(cli, args).output.splitlines() if "power head" in x)
    assert "draws 1 kW under tensor load, held at its 1 kW board limit" in line
    assert f"asks {h['power_asked_w'] / 1000:.3g} kW without it" in line
    # under its limit (A100, calibrated to it) a design draws what it asks for
    a100 = json.loads(CliRunner().invoke(cli, [*BASE, "--json"]).output)["headroom"]
    assert a100["power_drawn_w"] == pytest.approx(a100["power_asked_w"])
    assert a100["power_drawn_w"] <= 400.0
    assert "of a 400 W board limit" in CliRunner().invoke(cli, BASE).output


def test_one_device_pays_its_share_of_the_host_not_a_whole_node():
    """The same work per device on 1 and on 8 devices of an H100 node costs about the same
    energy per token: a job on one of a node's eight slots pays an eighth of its host."""
    per_token = {}
    for d in (1, 8):
        args = ["evaluate", "--workload", "gpt3-1.3b", "--arch", "h100", "--devices", str(d)]
        args += ["--global-batch", str(8 * d), "--strategy", f"t=1,p=1,d={d},mbs=4"]
        r = CliRunner().invoke(cli, [*args, "--recompute", "none", "--json"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.output)
        per_token[d] = doc["energy_breakdown"]["it_j"] / (8 * d * doc["seq_len"])
        # a node full of such devices: theirs and the whole host's power
        node_w = 8 * doc["avg_device_power_w"] + host_w_per_node("dgx-h100")
        assert doc["avg_node_power_w"] == pytest.approx(node_w)
    assert per_token[1] == pytest.approx(per_token[8], rel=0.03)
