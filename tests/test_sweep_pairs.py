"""Prefill-decode design pairs of a serving sweep at a rate: a pair's figures from its two
pools' runs, the pairs' front against a brute-force oracle, the store's pairs table, the
sweep's ``--pairs`` and p99 limits, the report's sections and ``phaze.search(rate=...)``."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner
from spaces import space_toml

import phaze
from arch_space import Cluster
from phaze.cli import cli
from phaze.config import SERVE_OBJECTIVES, SweepConfig
from phaze.model.serving_arrivals import Arrivals
from phaze.model.serving_load import simulate_load
from phaze.sweep.pairs import PoolRun, arrivals_at, pair_records, pool_runs, split_point
from phaze.sweep.planning import plan
from phaze.sweep.serve_tasks import AtRate
from phaze_common.errors import ConfigError
from results import load
from results.pairs import FRONT_AXES, cheapest, front
from results.schema import PAIR_COLUMN_NAMES, SCHEMA_VERSION
from results.store import Store, store_path

_AT = AtRate(1.0, 4, 0)


def _pool(design, role, done, *, devices=1, usd=3600.0, stable=True, transfer=0.0, batch=8):
    return PoolRun(
        "m", "bf16", design, design, role, batch, f"{role}:t={devices}", devices, usd,
        np.asarray(done, dtype=float), stable, transfer,
    )  # fmt: skip


def _arrivals():
    # four requests a second apart, 10 tokens in, 11 out (10 steps after the first token)
    return Arrivals(np.arange(4.0), np.full(4, 10), np.full(4, 11))


class _Ctx:  # the limits come from the AtRate's p99 limits here
    ttft_limit_s = tpot_limit_s = None


def test_a_pairs_figures_come_from_its_two_pools_runs():
    a = np.arange(4.0)
    pre = _pool("P", "prefill", a + 0.1, devices=2, usd=7200.0, transfer=0.02)
    dec = _pool("D", "decode", a + 0.5, devices=1, usd=3600.0)
    at = AtRate(1.0, 4, 0, p99_ttft_limit_s=0.2, p99_tpot_limit_s=0.1)
    (rec,) = pair_records((pre, dec), _arrivals(), _Ctx(), at)
    assert rec["ttft_p99_s"] == pytest.approx(0.1)
    # TPOT: the transfer and the decode pool's 0.5 s over the 10 tokens after the first
    assert rec["tpot_p99_s"] == pytest.approx((0.02 + 0.5) / 10)
    assert rec["devices"] == 3 and rec["stable"] == 1 and rec["slo_attainment"] == 1.0
    # the last request finishes at 3 + 0.1 + 0.52: 44 tokens over 3.62 s; $2 + $1 an hour
    span = 3.62
    assert rec["goodput_requests_per_s"] == pytest.approx(4 / span)
    usd_per_s = (2 * 7200.0 + 1 * 3600.0) / 3600
    assert rec["usd_per_million_tokens_at_rate"] == pytest.approx(usd_per_s / (44 / span) * 1e6)
    assert rec["feasible_at_rate"] == 1
    # a tighter TPOT limit: no request meets it, the pair misses the SLO and has no cost
    tight = AtRate(1.0, 4, 0, p99_tpot_limit_s=0.05)
    (missed,) = pair_records((pre, dec), _arrivals(), _Ctx(), tight)
    assert missed["slo_attainment"] == 0.0 and missed["feasible_at_rate"] == 0
    assert missed["usd_per_million_tokens_at_rate"] is None
    # an unstable pool makes the pair unstable: no latencies, no cost
    slow = _pool("D", "decode", a + 0.5, stable=False)
    (unstable,) = pair_records((pre, slow), _arrivals(), _Ctx(), at)
    assert unstable["stable"] == 0 and unstable["tpot_p99_s"] is None
    assert unstable["usd_per_million_tokens_at_rate"] is None


def _oracle_front(records):
    """Brute force: the records meeting the SLO that no other such record dominates."""
    ok = [r for r in records if r["feasible_at_rate"]]
    x, y = FRONT_AXES

    def dominates(q, r):
        return q[x] <= r[x] and q[y] <= r[y] and (q[x] < r[x] or q[y] < r[y])

    return {r["key"] for r in ok if not any(dominates(q, r) for q in ok)}


def test_the_pairs_front_of_two_by_two_pools_by_hand():
    # prefill: P0 one device at $1/h, P1 two at $1/h; decode: D0 slow at $1/h, D1 fast at $4/h.
    # TPOT comes from the decode pool (the same transfer), so each P1 pair costs more than
    # the P0 pair with the same decode pool at the same TPOT: the front is P0+D0 (cheapest)
    # and P0+D1 (fastest).
    a = np.arange(4.0)
    runs = (
        _pool("P0", "prefill", a + 0.1, devices=1, usd=1.0, transfer=0.01),
        _pool("P1", "prefill", a + 0.05, devices=2, usd=1.0, transfer=0.01),
        _pool("D0", "decode", a + 0.5, devices=1, usd=1.0),
        _pool("D1", "decode", a + 0.2, devices=1, usd=4.0),
    )
    records = pair_records(runs, _arrivals(), _Ctx(), _AT)
    named = {(r["prefill_design_id"], r["decode_design_id"]): r for r in records}
    assert named["P0", "D0"]["tpot_p99_s"] == pytest.approx(0.051)
    assert named["P0", "D1"]["tpot_p99_s"] == pytest.approx(0.021)
    got = [(r["prefill_design_id"], r["decode_design_id"]) for r in front(records)]
    assert got == [("P0", "D0"), ("P0", "D1")]
    assert {r["key"] for r in front(records)} == _oracle_front(records)


def test_the_pairs_front_is_the_brute_force_one():
    a = np.arange(4.0)
    rng = np.random.default_rng(5)
    runs = []
    for i in range(4):  # prefill pools of 4 designs, decode pools of 5, costs and speeds apart
        runs.append(
            _pool(f"P{i}", "prefill", a + rng.uniform(0.01, 0.3), devices=1 + i % 2,
                  usd=float(rng.uniform(1e3, 9e3)), transfer=0.01)
        )  # fmt: skip
    for j in range(5):
        runs.append(
            _pool(f"D{j}", "decode", a + rng.uniform(0.1, 1.0), devices=1 + j % 3,
                  usd=float(rng.uniform(1e3, 9e3)), stable=j != 4)
        )  # fmt: skip
    at = AtRate(1.0, 4, 0, p99_tpot_limit_s=0.08)
    records = pair_records(tuple(runs), _arrivals(), _Ctx(), at)
    assert len(records) == 20 and len({r["key"] for r in records}) == 20
    missing = [r for r in records if not r["feasible_at_rate"]]
    assert missing  # the unstable decode pool and the slow ones miss the SLO
    got = front(records)
    assert {r["key"] for r in got} == _oracle_front(records)
    assert [r[FRONT_AXES[0]] for r in got] == sorted(r[FRONT_AXES[0]] for r in got)
    best = cheapest(records)
    assert best is got[0]
    assert best[FRONT_AXES[0]] == min(r[FRONT_AXES[0]] for r in records if r["feasible_at_rate"])


def test_the_store_keeps_pairs_and_refuses_an_older_layout(tmp_path):
    a = np.arange(4.0)
    runs = (_pool("P", "prefill", a + 0.1), _pool("D", "decode", a + 0.3))
    records = pair_records(runs, _arrivals(), _Ctx(), _AT)
    with Store.open(tmp_path, {"config": {}}, "h") as s:
        s.put_pairs(records)
        with pytest.raises(ConfigError, match="not a pair column"):
            s.put_pairs([{**records[0], "bogus": 1}])
    with load(tmp_path) as s:
        back = s.pairs()
    assert back == [{k: r.get(k) for k in PAIR_COLUMN_NAMES} for r in records]
    # a store of the layout before pairs is refused with one clear error
    with sqlite3.connect(store_path(tmp_path)) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION - 1}")
    with pytest.raises(ConfigError, match=f"layout version {SCHEMA_VERSION - 1}.*new directory"):
        load(tmp_path)


_SWEEP = {
    "mode": "serve",
    "workloads": ["gpt3-125m"],
    "devices": 4,
    "devices_per_node": 2,
    "input_tokens": 256,
    "output_tokens": 16,
    "batches": [8],
    "tpot_limit_s": 0.02,
    "presets": [],
}


def _config(d, **over):
    (d / "space.toml").write_text(space_toml("pairs", num_tc=(2, 4), tc_rows=(128,)))
    table = {**_SWEEP, "space": str(d / "space.toml"), **over}
    lines = ["[sweep]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    path = d / "sweep.toml"
    path.write_text("\n".join([*lines, "[solver]", 'name = "list"', ""]))
    return path


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    d = tmp_path_factory.mktemp("pairs")
    path = _config(d)
    args = ["sweep", str(path), "--out", str(d / "out"), "--executor", "serial"]
    rate = ["--rate", "100", "--requests", "60", "--p99-tpot-ms", "30", "--pairs"]
    r = CliRunner().invoke(cli, [*args, *rate])
    assert r.exit_code == 0, r.output
    return path, d, r


def test_a_paired_sweep_stores_every_pair_of_its_pools(paired):
    _, d, r = paired
    with load(d / "out") as s:
        pts, pairs = s.points(), s.pairs()
    assert len(pts) == 2 and all(p["key"].endswith("|p99_tpot=0.03") for p in pts)
    prefill = {(p["prefill_design_id"], p["prefill_strategy"]) for p in pairs}
    decode = {(p["decode_design_id"], p["decode_strategy"]) for p in pairs}
    # every prefill pool with every decode pool, a design with itself too
    assert len(pairs) == len(prefill) * len(decode) and len(decode) == 2
    assert {p["prefill_design_id"] for p in pairs} == {p["design_id"] for p in pts}
    for p in pairs:
        assert p["prefill_strategy"].startswith("prefill:")
        assert p["decode_strategy"].startswith("decode:") and p["batch"] == 8
        assert p["kv_transfer_s"] > 0 and p["devices"] == p["prefill_devices"] + p["decode_devices"]
        if p["feasible_at_rate"]:
            assert p["tpot_p99_s"] <= 0.03 and p["slo_attainment"] >= 0.99
    assert any(p["feasible_at_rate"] for p in pairs)
    assert "best by usd_per_million_tokens_at_rate (min) meeting the SLO at the rate" in r.output
    assert f"{len(pairs)} prefill-decode pairs" in r.output
    assert "(the cheapest single design: $" in r.output


def test_a_paired_sweep_repeats_exactly_and_resumes_without_pairing_again(
    paired, tmp_path, monkeypatch
):
    path, d, _ = paired
    out = tmp_path / "again"
    args = ["sweep", str(path), "--out", str(out), "--executor", "serial", "--no-report"]
    rate = ["--rate", "100", "--requests", "60", "--p99-tpot-ms", "30", "--pairs"]
    assert CliRunner().invoke(cli, [*args, *rate]).exit_code == 0
    with load(d / "out") as s1, load(out) as s2:
        assert s1.pairs() == s2.pairs()

    def refuse(*_):
        raise AssertionError("a resumed sweep paired its designs again")

    monkeypatch.setattr("phaze.sweep.pairs.pool_runs", refuse)
    again = CliRunner().invoke(cli, [*args, *rate])
    assert again.exit_code == 0, again.output
    with load(d / "out") as s1, load(out) as s2:
        assert s1.pairs() == s2.pairs()


def test_the_report_shows_the_rate_and_the_pairs_front(paired):
    _, d, _ = paired
    text = (d / "out" / "report.html").read_text()
    assert '<section id="at_rate">' in text and '<section id="pairs">' in text
    pairs_html = text.split('<section id="pairs">')[1].split("</section>")[0]
    assert "The pairs&#x27; front" in pairs_html or "The pairs' front" in pairs_html
    assert "cheapest single design" in pairs_html and "<img" in pairs_html
    rate_html = text.split('<section id="at_rate">')[1].split("</section>")[0]
    assert "p99 TPOT &le; 30 ms" in rate_html and "goodput" in rate_html


def test_export_and_pareto_give_the_stored_pairs_and_the_reports_front(paired):
    _, d, _ = paired
    out = str(d / "out")
    with load(d / "out") as s:
        stored = s.pairs()
    r = CliRunner().invoke(cli, ["export", out, "--pairs", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema_version"] == SCHEMA_VERSION and doc["units"]["kv_transfer_s"] == "s"
    assert doc["pairs"] == [{k: p[k] for k in PAIR_COLUMN_NAMES} for p in stored]
    rows = CliRunner().invoke(cli, ["export", out, "--pairs", "--csv"]).output.splitlines()
    assert rows[0].split(",") == list(PAIR_COLUMN_NAMES) and len(rows) == 1 + len(stored)
    r = CliRunner().invoke(cli, ["export", out, "--pairs", "--csv", "--feasible-only"])
    meeting = [p for p in stored if p["feasible_at_rate"]]
    assert meeting and len(r.output.splitlines()) == 1 + len(meeting)
    # pareto --pairs: the report's pair front (the same axes, the pairs meeting the SLO)
    r = CliRunner().invoke(cli, ["pareto", out, "--pairs", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [o["metric"] for o in doc["objectives"]] == list(FRONT_AXES)
    assert [p["key"] for p in doc["pairs"]] == [p["key"] for p in front(stored)]
    text = CliRunner().invoke(cli, ["pareto", out, "--pairs"]).output
    assert f"{len(front(stored))} of {len(stored)} prefill-decode pairs on the front" in text
    assert "prefill pool" in text and stored[0]["decode_strategy"].split(",")[0] in text


def test_export_and_pareto_of_pairs_refuse_a_sweep_without_pairs(tmp_path):
    Store.open(tmp_path, {"config": {}}, "h").close()
    for args in (["export", "--pairs", "--json"], ["pareto", "--pairs"]):
        r = CliRunner().invoke(cli, [args[0], str(tmp_path), *args[1:]])
        assert r.exit_code == 1 and "no prefill-decode pairs are stored" in r.output
    r = CliRunner().invoke(cli, ["pareto", str(tmp_path), "--x", "tcdp"])
    assert r.exit_code == 2 and "give --x and --y" in r.output


def test_pairs_and_p99_limits_need_a_rate(tmp_path):
    path = _config(tmp_path)
    for extra, said in (
        (["--pairs"], "pairs = true needs rate"),
        (["--p99-ttft-ms", "100"], "p99_ttft_limit_s = 0.1 needs rate"),
    ):
        r = CliRunner().invoke(cli, ["sweep", str(path), "--out", str(tmp_path / "o"), *extra])
        assert r.exit_code != 0 and said in r.output, r.output
        assert r.output.startswith("Error: ") and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(cli, ["sweep", "--pairs", "--out", str(tmp_path / "t")])
    assert r.exit_code != 0 and "--pairs" in r.output and "--mode serve" in r.output


def test_search_at_a_rate_runs_the_serving_search_the_cli_runs(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text(space_toml("api", num_tc=(4,), tc_rows=(128,)))
    pts = phaze.search(
        ["gpt3-125m"],
        space=str(space),
        cluster=Cluster(devices=2, devices_per_node=2),
        presets=(),
        mode="serve",
        input_tokens=256,
        output_tokens=16,
        batches=(8,),
        tpot_limit_s=0.02,
        rate=100.0,
        requests=60,
        p99_tpot_limit_s=0.03,
        pairs=True,
        executor="serial",
        out_dir=tmp_path / "out",
    )
    assert len(pts) == 1 and pts[0]["feasible_at_rate"] in (0, 1)
    assert pts[0]["key"].endswith("|rate=100|requests=60|seed=0|p99_tpot=0.03")
    with load(tmp_path / "out") as s:
        assert s.inputs()["config"]["objectives"][0] == "usd_per_million_tokens_at_rate"
        assert len(s.pairs()) == 1  # the one design's prefill pool with its decode pool
    with pytest.raises(ConfigError, match="pairs = true needs rate"):
        phaze.search(["gpt3-125m"], space=str(space), mode="serve", pairs=True,
                     out_dir=tmp_path / "o2")  # fmt: skip


def test_the_p99_limits_replace_the_mean_ones_at_the_rate():
    ctx = _Ctx()
    ctx.ttft_limit_s, ctx.tpot_limit_s = 0.5, 0.02
    assert AtRate(1.0, 4, 0).limits(ctx) == (0.5, 0.02)
    assert AtRate(1.0, 4, 0, p99_tpot_limit_s=0.03).limits(ctx) == (None, 0.03)
    assert AtRate(1.0, 4, 0).key() == "|rate=1|requests=4|seed=0"
    assert AtRate(1.0, 4, 0, 0.2, 0.03).key().endswith("|p99_ttft=0.2|p99_tpot=0.03")


def test_a_design_paired_with_itself_is_its_own_disaggregated_layout_under_load():
    """Pooled runs against the whole layout's simulation (the decode pool fed by the
    prefill pool's completions): TTFT is the same run; TPOT differs only by how the
    prefill pool's queueing shifts the decode pool's arrivals."""
    cfg = SweepConfig.of(
        mode="serve", workloads=("gpt3-125m",), space="tiny", presets=("a100",), devices=4,
        devices_per_node=2, input_tokens=256, output_tokens=16, batches=(8,), rate=100.0,
        requests=200, objectives=SERVE_OBJECTIVES,
    )  # fmt: skip
    shared, designs = plan(cfg)
    (acc,) = (a for a in designs if a.name == "a100")
    name, model = shared.workloads[0]
    (rec,) = pair_records(
        pool_runs(shared, acc), arrivals_at(shared.at_rate, shared.serve), shared.serve,
        shared.at_rate,
    )  # fmt: skip
    point = split_point(name, model, acc, 8, "bf16", shared.serve)
    assert shared.serve.cluster.spans_nodes(point.layout.devices)  # the same link as a pair's
    whole = simulate_load(model, point, shared.serve, arrivals_at(shared.at_rate, shared.serve))
    assert whole.stable and rec["stable"] == 1
    assert rec["kv_transfer_s"] == pytest.approx(point.engine.transfer_s)
    assert rec["ttft_p99_s"] == pytest.approx(whole.ttft_s[2])
    assert rec["tpot_p99_s"] == pytest.approx(whole.tpot_s[2], rel=0.02)
    assert rec["tpot_p50_s"] == pytest.approx(whole.tpot_s[0], rel=0.02)
