"""What a design costs to own on the command line: `phaze validate cost`, the cost terms and
views of `phaze evaluate --json`, and one Error line for each bad number or name."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from phaze.cli import cli
from phaze.cli.validate_cost_cmd import device_hour_usd
from phaze.config import sweep_config_from_mapping
from phaze_common.errors import ConfigError

SMALL = ["evaluate", "--workload", "gpt3-125m", "--arch", "h100", "--devices", "8"]
SMALL += [
    "--global-batch",
    "8",
    "--tokens",
    "10B",
    "--strategy",
    "t=1,p=1,d=8,mbs=1,recompute=none",
]
TERMS = (
    "accelerator",
    "host",
    "network",
    "datacenter",
    "interest",
    "maintenance",
    "datacenter_opex",
    "electricity",
)


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _json(*args: str) -> dict:
    r = _run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_validate_cost_passes_within_thirty_percent():
    doc = _json("validate", "cost")
    cases = {row["case"]: row for row in doc["rows"]}
    assert doc["within_tolerance"] and all(abs(r["error_pct"]) <= 30 for r in doc["rows"])
    assert {"h100, 6144 devices", "a100, 4480 devices", "v100, 336 devices"} <= set(cases)
    assert {"h100 chip", "b200 chip", "h100 (fit) board", "a100-40gb board"} <= set(cases)
    assert [r["case"] for r in doc["informative"]] == ["tpuv4, 6144 devices"]
    assert {c["case"] for c in doc["cloud"]} >= {"h100-lambda", "tpuv4-gcp"}


def test_validate_cost_exits_3_outside_its_tolerance():
    r = _run("validate", "cost", "--tolerance-pct", "1")
    assert r.exit_code == 3
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "validation outside ±1%" in errors[0]
    assert "cloud rate (context)" in r.output  # the report is printed before the exit


def test_an_h100_hour_costs_what_ownership_analyses_find():
    """Epoch AI's H100 runs ($1.25-$1.52 per chip-hour) and Latent Space's $1.65
    break-even: the modelled hour is within 30 % of each, and below cloud rates ($2-4)."""
    hour = device_hour_usd("h100", 6144)
    assert all(abs(hour / ref - 1) <= 0.30 for ref in (1.519, 1.454, 1.65))
    assert hour < 2.0


def test_evaluate_prints_every_cost_term_and_both_views():
    doc = _json(*SMALL)
    terms = doc["cost_breakdown"]
    assert tuple(terms) == TERMS and all(v >= 0 for v in terms.values())
    assert sum(terms.values()) == pytest.approx(doc["tco_usd"])
    assert doc["usd_per_device_hour"] == pytest.approx(doc["tco_usd"] / doc["device_hours"])
    assert doc["cost_view"] == "buy" and set(doc["accelerator_usd"]) == {"build", "buy"}
    assert doc["accelerator_usd"]["buy"] == 27_500 > doc["accelerator_usd"]["build"]
    assert doc["tco_usd_by_view"]["buy"] == pytest.approx(doc["tco_usd"])
    assert doc["tco_usd_by_view"]["build"] < doc["tco_usd"]
    # capex: 8 accelerators with their host, network and data-centre shares
    assert doc["capex_usd"] > 8 * (27_500 + 8_000)
    build = _json(*SMALL, "--cost-view", "build")
    assert build["tco_usd"] == pytest.approx(doc["tco_usd_by_view"]["build"])
    assert build["cost_breakdown"]["host"] == pytest.approx(terms["host"])


def test_evaluate_reports_model_card_accounting_and_tcdp_with_its_unit():
    doc = _json(*SMALL, "--goodput", "0.5")
    kwh = doc["device_hours"] * 700 / 1000 * doc["pue"]
    assert doc["energy_tdp_accounting_kwh"] == pytest.approx(kwh)
    assert doc["tdp_accounting_kgco2e"] == pytest.approx(kwh * doc["grid_gco2e_per_kwh"] / 1000)
    assert "tcdp" not in doc and doc["tcdp_kgco2e_s"] == pytest.approx(
        doc["total_kgco2e"] * doc["time_to_train_s"]
    )
    assert doc["time_to_train_s"] == pytest.approx(2 * doc["training_s"])
    assert doc["restart_energy_j"] > 0
    parts = doc["embodied_breakdown_kgco2e"]
    assert set(parts) == {"board", "host", "network"}
    assert sum(parts.values()) == pytest.approx(doc["embodied_kgco2e"])


def test_interest_raises_the_cost_and_a_cheaper_grid_name_in_capitals_works():
    base = _json(*SMALL, "--interest", "0")
    dear = _json(*SMALL, "--interest", "0.2")
    assert base["cost_breakdown"]["interest"] == 0 < dear["cost_breakdown"]["interest"]
    loud = _json(*SMALL, "--grid", "FRANCE")
    assert loud["grid_gco2e_per_kwh"] == _json(*SMALL, "--grid", "france")["grid_gco2e_per_kwh"]


def test_the_energy_table_has_one_unit_per_column():
    r = _run(*SMALL)
    assert r.exit_code == 0, r.output
    lines = r.output.split("energy term")[1].split("\n\n")[0].splitlines()[2:]
    units = {line.split()[-3] if line.split()[-1] == "%" else line.split()[-1] for line in lines}
    assert len(units) == 1, lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "--hbm-gib", "inf"], "'--hbm-gib': inf is not a finite number"),
        (["schedule", "--workload", "gpt3-1.3b", "--arch", "h100", "--mip-gap", "nan"], "nan"),
        (["validate", "gemm", "--tolerance-pct", "inf"], "'--tolerance-pct': inf is not"),
    ],
)
def test_bad_numbers_of_other_commands_are_one_usage_error(args, message):
    r = _run(*args)
    assert r.exit_code == 2 and message in r.output
    assert r.output.count("Error:") == 1 and "Traceback" not in r.output


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scoring": {"pue": math.nan}}, "[scoring]: pue = nan must be a finite number in [1, 4]"),
        ({"scoring": {"goodput": 2.0}}, "[scoring]: goodput = 2.0 must be a finite number in"),
        ({"scoring": {"cost_view": "lease"}}, "cost_view = 'lease' must be one of build, buy"),
        (
            {"sweep": {"inter_node_bandwidth_bytes_per_s": math.inf}},
            "inter_node_bandwidth_bytes_per_s = inf must be a finite positive number",
        ),
        ({"sweep": {"tokens_to_train": "1e40"}}, "a positive token count up to 1e16"),
    ],
)
def test_bad_numbers_in_a_sweep_file_name_field_and_range(data, message):
    with pytest.raises(ConfigError) as err:
        sweep_config_from_mapping(data, source="s.toml")
    assert message in str(err.value)


def test_a_sweep_file_may_name_a_host_and_a_cost_view():
    cfg = sweep_config_from_mapping(
        {"scoring": {"host_profile": "dgx-h100", "cost_view": "build", "grid_region": "EU"}}
    )
    assert (cfg.scoring.host_profile, cfg.scoring.cost_view) == ("dgx-h100", "build")
    assert cfg.scoring.grid_region == "eu"


def test_gpt3_on_a_thousand_h100_is_priced_term_by_term():
    """docs/cost.md's run (its searched layout given, to skip the search): every cost term,
    the system capex and both views, each term the run's device-hours at its hourly rate."""
    doc = _json(
        "evaluate",
        "--workload",
        "gpt3-175b",
        "--arch",
        "h100",
        "--devices",
        "1024",
        "--global-batch",
        "1536",
        "--tokens",
        "300B",
        "--strategy",
        "t=4,p=16,d=16,mbs=1,v=6,recompute=none,zero=0,sp=on",
    )
    assert tuple(doc["cost_breakdown"]) == TERMS
    assert doc["usd_per_device_hour"] == pytest.approx(1.58, abs=0.01)
    assert doc["capex_usd"] == pytest.approx(1024 * (27_500 + 8_517.75 + 4_247.5 + 1_275 * 11.7))
    assert doc["accelerator_usd"] == pytest.approx({"build": 6196.2, "buy": 27_500}, abs=1)
    hours = doc["device_hours"]
    assert doc["cost_breakdown"]["accelerator"] == pytest.approx(hours * 27_500 / 5 / 8766)
