"""A serving sweep at a rate: every point's layout simulated under arriving requests, its
p99 latencies, stability, SLO attainment and cost per token at the rate stored, so that the
fronts rank the designs by the cost that meets the SLO there."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner
from spaces import space_toml
from sweeps import points

from phaze.cli import cli
from phaze.config import MODE_KEYS, SweepConfig, load_sweep_config, model_digest
from phaze_common.errors import ConfigError
from results.schema import AT_RATE_COLUMNS

_SWEEP = {
    "mode": "serve",
    "workloads": ["gpt3-125m"],
    "devices": 2,
    "devices_per_node": 2,
    "input_tokens": 256,
    "output_tokens": 32,
    "batches": [8, 64],
    "tpot_limit_s": 0.02,
    "presets": [],
}


def _config(d, **over):
    (d / "space.toml").write_text(space_toml("serve", num_tc=(2, 4), tc_rows=(128,)))
    table = {**_SWEEP, "space": str(d / "space.toml"), **over}
    lines = ["[sweep]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    path = d / "sweep.toml"
    path.write_text("\n".join([*lines, "[solver]", 'name = "list"', ""]))
    return path


def _sweep(path, out, *extra):
    args = ["sweep", str(path), "--out", str(out), "--no-report", "--executor", "serial"]
    r = CliRunner().invoke(cli, [*args, *extra])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def at_rate(tmp_path_factory):
    d = tmp_path_factory.mktemp("rate")
    path = _config(d)
    objective = ["--objective", "-usd_per_million_tokens_at_rate"]
    r = _sweep(path, d / "out", "--rate", "300", "--requests", "100", *objective)
    return path, d, r


def test_a_serving_sweep_at_a_rate_stores_the_figures_at_the_rate(at_rate):
    _, d, r = at_rate
    pts = points(d / "out")
    assert len(pts) == 4 and all(p["feasible"] for p in pts)
    assert all(p["key"].endswith("|rate=300|requests=100|seed=0") for p in pts)
    kept = [p for p in pts if p["feasible_at_rate"]]
    missed = [p for p in pts if not p["feasible_at_rate"]]
    # near its capacity (about 323 requests/s) the small design at batch 8 queues without bound
    assert kept and missed
    for p in kept:
        assert p["stable"] == 1 and p["slo_attainment"] >= 0.99
        assert p["tpot_p99_s"] <= 0.02 and p["ttft_p99_s"] > 0
        # the devices are paid for while idle: a token costs more at the rate than at capacity
        assert p["usd_per_million_tokens_at_rate"] > p["usd_per_million_tokens"]
    for p in missed:  # kept in the store, marked, with no cost to rank by
        assert p["usd_per_million_tokens_at_rate"] is None
        assert p["stable"] == 0 or p["slo_attainment"] < 0.99
    best = min(kept, key=lambda p: p["usd_per_million_tokens_at_rate"])
    assert "best by usd_per_million_tokens_at_rate (min)" in r.output
    assert best["design_id"] in r.output.split("usd_per_million_tokens_at_rate (min)")[1]


def test_the_fronts_rank_by_the_cost_at_the_rate(at_rate):
    _, d, _ = at_rate
    args = ["pareto", str(d / "out"), "--x", "usd_per_million_tokens_at_rate"]
    r = CliRunner().invoke(cli, [*args, "--y", "tpot_p99_s", "--json"])
    assert r.exit_code == 0, r.output
    front = json.loads(r.output)["points"]
    kept = [p for p in points(d / "out") if p["feasible_at_rate"]]
    cheapest = min(p["usd_per_million_tokens_at_rate"] for p in kept)
    assert front and all(p["feasible_at_rate"] == 1 for p in front)
    assert cheapest in {p["usd_per_million_tokens_at_rate"] for p in front}


def test_the_figures_at_a_rate_follow_the_seed(at_rate, tmp_path):
    path, d, _ = at_rate
    again = tmp_path / "again"
    _sweep(path, again, "--rate", "300", "--requests", "100")
    other = tmp_path / "other"
    _sweep(path, other, "--rate", "300", "--requests", "100", "--seed", "7")
    first, second, third = (
        {p["design_id"] + str(p["batch"]): p for p in points(o)} for o in (d / "out", again, other)
    )
    for k, p in first.items():
        assert [p[c] for c in AT_RATE_COLUMNS] == [second[k][c] for c in AT_RATE_COLUMNS]
    assert any(
        first[k]["ttft_p99_s"] != third[k]["ttft_p99_s"] for k in first if first[k]["stable"]
    )


def test_a_serving_sweep_without_a_rate_leaves_the_columns_empty(at_rate, tmp_path):
    path, _, _ = at_rate
    _sweep(path, tmp_path / "out")
    pts = points(tmp_path / "out")
    assert pts and all(p[c] is None for p in pts for c in AT_RATE_COLUMNS)
    assert not any("rate=" in p["key"] for p in pts)


def test_a_rate_in_a_training_sweep_is_refused_in_one_error_line(tmp_path):
    r = CliRunner().invoke(cli, ["sweep", "--rate", "10", "--out", str(tmp_path / "o")])
    assert r.exit_code != 0
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "--rate" in lines[0], r.output
    assert {"rate", "requests", "seed"} <= set(MODE_KEYS["serve"])
    bad = _config(tmp_path, mode="train", rate=10.0)
    with pytest.raises(ConfigError, match="rate only apply to mode = 'serve'"):
        load_sweep_config(bad)


def test_requests_and_seed_need_a_rate(tmp_path):
    path = _config(tmp_path, requests=100)
    r = CliRunner().invoke(cli, ["sweep", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code != 0 and "requests = 100 needs rate" in r.output, r.output
    with pytest.raises(ConfigError, match=r"rate = -1 must be a finite positive number"):
        load_sweep_config(_config(tmp_path, rate=-1))


def test_the_config_hash_counts_the_load_only_with_a_rate():
    serve = SweepConfig.of(mode="serve")
    at = serve.with_settings(rate=10.0)
    hashes = {
        serve.config_hash(),
        at.config_hash(),
        at.with_settings(seed=1).config_hash(),
        at.with_settings(requests=100).config_hash(),
        at.with_settings(rate=20.0).config_hash(),
        at.with_settings(p99_tpot_limit_s=0.05).config_hash(),
        at.with_settings(pairs=True).config_hash(),
    }
    assert len(hashes) == 7
    # without a rate, the hash is the one of the settings before the load keys existed
    settings = {
        k: v
        for k, v in serve.as_dict().items()
        if k
        not in (
            *MODE_KEYS["train"],
            *("rate", "requests", "seed", "p99_ttft_limit_s", "p99_tpot_limit_s", "pairs"),
        )
    }
    text = json.dumps({**settings, "models": model_digest()}, sort_keys=True, default=str)
    assert serve.config_hash() == hashlib.sha256(text.encode()).hexdigest()[:16]
