"""Capacity planning: ``phaze serve --rate R --p99-ttft-ms X --p99-tpot-ms Y --capacity``
finds the fewest devices and the layout meeting the p99 limits (docs/serving.md, "Capacity
planning"), and the p99 limits judge a run under load without it."""

from __future__ import annotations

import io
import json
from functools import lru_cache

import pytest
from click.testing import CliRunner

from arch_space import Cluster, preset
from phaze.cli import cli
from phaze.cli.serve_capacity import counting
from phaze.model.serving import ServeContext
from phaze.model.serving_capacity import device_counts
from phaze.model.serving_search import ranked, search
from placement import parse_serving
from workloads import get_model
from workloads.serving import RequestBatch

_BASE = "serve --workload llama2-7b --arch h100 --input-tokens 512 --output-tokens 128"
# a rate two devices nearly serve: one count is simulated and fails before the one that meets
_LOAD = "--rate 40 --requests 300 --p99-ttft-ms 25 --p99-tpot-ms 12"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*_BASE.split(), *args])
    return result.exit_code, result.output


@lru_cache(maxsize=1)
def _plan() -> dict:
    code, out = _run(*_LOAD.split(), "--capacity", "--max-devices", "64", "--json")
    assert code == 0, out
    return json.loads(out)


def test_device_counts_are_powers_of_two_then_whole_nodes():
    assert device_counts(64, 8) == (1, 2, 4, 8, 16, 32, 64)
    assert device_counts(40, 6) == (1, 2, 4, 6, 12, 24)
    assert device_counts(3, 8) == (1, 2)


def test_capacity_returns_devices_a_layout_and_the_trail():
    doc = _plan()
    n, trail = doc["capacity_devices"], doc["capacity_trail"]
    assert trail[-1] == {"devices": n, "simulated": trail[-1]["simulated"], "outcome": "met"}
    assert doc["capacity_strategy"] == trail[-1]["simulated"][-1] == doc["strategy"]
    assert [t["devices"] for t in trail] == list(device_counts(n, 8))
    assert all(t["outcome"] != "met" for t in trail[:-1])
    assert doc["devices"] == n and doc["p99_limits_met"] is True
    assert doc["slo_attainment"] >= 0.99 and doc["stable"] is True
    assert doc["ttft_p99_s"] <= 0.025 and doc["tpot_p99_s"] <= 0.012
    hourly = doc["steady_state"]["usd_per_device_hour"] * n
    per_hour = doc["requests_per_s"] * 128 * 3600
    assert doc["usd_per_million_tokens_at_rate"] == pytest.approx(hourly / per_hour * 1e6)
    assert doc["steady_state"]["usd_per_million_tokens"] > 0


def test_simulating_the_layout_found_at_its_count_meets_the_limits():
    doc = _plan()
    args = ["--devices", str(doc["capacity_devices"]), "--strategy", doc["capacity_strategy"]]
    code, out = _run(*args, *_LOAD.split(), "--json")
    assert code == 0, out
    again = json.loads(out)
    assert again["p99_limits_met"] is True
    assert again["ttft_p99_s"] == doc["ttft_p99_s"] and again["tpot_p99_s"] == doc["tpot_p99_s"]


def test_the_count_before_does_not_meet_the_limits():
    doc = _plan()
    before = doc["capacity_trail"][-2]
    assert before["simulated"], "the count before is simulated, not only pruned"
    args = ["--devices", str(before["devices"]), "--strategy", before["simulated"][0]]
    code, out = _run(*args, *_LOAD.split(), "--json")
    assert code == 3
    assert json.loads(out.split("\nError:")[0])["p99_limits_met"] is False
    code, out = _run(*_LOAD.split(), "--capacity", "--max-devices", str(before["devices"]))
    assert code == 3
    assert f"Error: no device count up to {before['devices']} meets the p99 limits" in out


def test_the_same_seed_gives_the_same_plan():
    args = ["--rate", "5", "--requests", "300", "--p99-tpot-ms", "50", "--capacity", "--json"]
    docs = [_run(*args, "--seed", "3")[1] for _ in range(2)]
    assert docs[0] == docs[1]
    assert json.loads(docs[0])["capacity_devices"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--capacity --p99-ttft-ms 25", "--capacity needs --rate or --trace"),
        ("--capacity --rate 5", "--capacity needs --p99-ttft-ms or --p99-tpot-ms"),
        ("--capacity --rate 5 --p99-ttft-ms 25 --devices 8", "give --max-devices, not --devices"),
        ("--rate 5", "--devices is required (or --capacity to search it)"),
        ("--devices 1 --rate 5 --max-devices 8", "--max-devices needs --capacity"),
        ("--devices 1 --p99-ttft-ms 25", "--p99-ttft-ms needs --rate or --trace"),
        (
            "--capacity --rate 5 --p99-ttft-ms 25 --strategy t=3",
            "serve llama2-7b: t = 3 must divide heads = 32",
        ),
    ],
)
def test_bad_combinations_are_one_error_line(args, message):
    code, out = _run(*args.split())
    assert code == 1
    assert out.startswith("Error: serve") and out.count("\n") == 1
    assert message in out


def _context(devices: int, **limits) -> ServeContext:
    requests = RequestBatch(((512, 128, 1.0),))
    return ServeContext(cluster=Cluster(devices=devices), requests=requests, **limits)


def test_ranked_is_best_first_and_its_first_is_the_search_result():
    model, acc, layout = get_model("llama2-7b"), preset("h100"), parse_serving("")
    ctx = _context(2, tpot_limit_s=0.012)
    points = ranked("llama2-7b", model, acc, layout, ctx, keep=4, min_requests_per_s=30.0)
    assert len(points) == 4
    assert points[0] == search("llama2-7b", model, acc, layout, ctx)
    per_device = [p.score.tokens_per_s_per_device for p in points]
    assert per_device == sorted(per_device, reverse=True)
    assert all(p.meets_slo and p.engine.requests_per_s >= 30.0 for p in points)
    fast = ranked("llama2-7b", model, acc, layout, ctx, keep=4, min_requests_per_s=1e6)
    assert fast == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_only_once_the_plan_runs_over_two_seconds():
    now = [0.0]
    term = _Terminal()
    on_count, close = counting(term, clock=lambda: now[0])
    on_count(0, 5)
    now[0] = 1.5
    on_count(1, 5)
    assert term.getvalue() == ""
    now[0] = 2.5
    on_count(2, 5)
    on_count(3, 5)
    close()
    assert "device counts 3/3 (100.0%)" in term.getvalue() and term.getvalue().endswith("\n")
    log = io.StringIO()
    on_count, close = counting(log, clock=lambda: now[0])
    now[0] = 10.0
    on_count(0, 5)
    close()
    assert log.getvalue() == ""


def test_p99_limits_replace_the_mean_limits_in_the_attainment_under_load():
    args = ["--devices", "1", "--strategy", "t=1,p=1,d=1,ep=1,batch=32,chunk=2048"]
    args += ["--rate", "5", "--requests", "200", "--ttft-ms", "1000", "--json"]
    code, out = _run(*args)
    assert code == 0, out
    assert json.loads(out)["slo_attainment"] == 1.0
    code, out = _run(*args, "--p99-ttft-ms", "0.001")
    assert code == 3
    doc = json.loads(out.split("\nError:")[0])
    assert doc["slo_attainment"] == 0.0 and doc["p99_limits_met"] is False
    assert doc["p99_ttft_limit_s"] == 1e-6 and doc["p99_tpot_limit_s"] is None
    assert "Error: the p99 limits are missed: 0 % of the requests meet them" in out


def test_the_python_api_plans_as_the_command_does():
    import phaze
    from phaze.model.serving_arrivals import generate

    arrivals = generate(5.0, 300, 512, 128, seed=3)
    plan = phaze.serve_capacity(
        "llama2-7b",
        preset("h100"),
        Cluster(devices=1),
        arrivals,
        p99_ttft_limit_s=None,
        p99_tpot_limit_s=0.05,
        max_devices=8,
        input_tokens=512,
        output_tokens=128,
    )
    assert plan.devices == 1 and plan.trail[-1].outcome == "met"
    assert plan.load.tpot_s[2] <= 0.05 and plan.load.slo_attainment >= 0.99
    assert plan.point.layout.devices == 1


def test_bursty_arrivals_far_below_capacity_are_stable():
    """A burst at the end of the arrivals completes a latency later, not by the last
    arrival: the run is stable whatever the count."""
    args = ["--devices", "16", "--strategy", "t=1,p=1,d=16,ep=1,batch=32,chunk=2048"]
    args += ["--rate", "40", "--burstiness", "3", "--requests", "300", "--json"]
    code, out = _run(*args)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["stable"] is True
    assert doc["rate_per_s"] < doc["capacity_requests_per_s"] / 10
