"""Serving sweeps: every design serves every workload at every batch, stored like training
points and resumable; the report draws the throughput-latency fronts and ranks the designs
at the latency limits; the design-space knobs that matter for serving reach the points."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from spaces import space_toml
from sweeps import points, run, sweep_table

import phaze
from phaze.cli import cli
from phaze.config import MODE_KEYS, SERVE_OBJECTIVES, load_sweep_config
from phaze_common.errors import ConfigError
from placement import parse_serving
from results.report import render_report
from results.schema import AT_RATE_COLUMNS, SERVE_COLUMNS
from results.store import load

_SPACE = space_toml("serve", num_tc=(2, 4), tc_rows=(128,))
_SERVE = {
    "mode": "serve",
    "workloads": ["gpt3-125m"],
    "devices": 2,
    "devices_per_node": 2,
    "input_tokens": 256,
    "output_tokens": 32,
    "batches": [1, 8, 64],
    "tpot_limit_s": 0.02,
    "hbm_tbps": [0.6, 1.2],
}


def _serve_table(table: dict) -> dict:
    """A serving sweep's [sweep] table: its own objectives, no training key."""
    return {k: v for k, v in table.items() if k not in ("objectives", *MODE_KEYS["train"])}


def _config(d, **over):
    table = _serve_table(
        sweep_table(d / "space.toml", **{**_SERVE, "presets": ["a100", "h100"], **over})
    )
    lines = ["[sweep]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    path = d / "sweep.toml"
    path.write_text("\n".join([*lines, "[solver]", 'name = "list"', ""]))
    return path


@pytest.fixture(scope="module")
def serve_sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    (d / "space.toml").write_text(_SPACE)
    table = _serve_table(sweep_table(d / "space.toml", **_SERVE))
    lines = ["[sweep]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    (d / "sweep.toml").write_text("\n".join([*lines, "[solver]", 'name = "list"', ""]))
    cfg = load_sweep_config(d / "sweep.toml")
    out = d / "out"
    result = run(cfg, out)
    return cfg, out, result


def test_a_serving_sweep_stores_one_point_per_design_and_batch(serve_sweep):
    cfg, out, result = serve_sweep
    assert cfg.mode == "serve" and cfg.objectives == SERVE_OBJECTIVES
    pts = points(out)
    designs = {p["design_id"] for p in pts}
    assert len(designs) == 2 * 2  # the space's two designs at each HBM bandwidth
    assert len(pts) == result.points == len(designs) * 3  # no aggregate rows
    assert {p["hbm_bandwidth_bytes_per_s"] for p in pts} == {0.6e12, 1.2e12}
    for p in pts:
        assert p["mode"] == "serve" and p["micro_batch"] is None
        if p["feasible"]:
            filled = (c for c in SERVE_COLUMNS if c not in AT_RATE_COLUMNS)
            assert all(p[c] is not None for c in filled), p["key"]
            assert all(p[c] is None for c in AT_RATE_COLUMNS), p["key"]
            lay = parse_serving(json.loads(p["placement"])["strategy"])
            assert lay.complete and lay.batch == p["batch"] and lay.devices == 2
            assert p["meets_slo"] == (p["tpot_s"] <= 0.02)
    # twice the HBM bandwidth, the same design otherwise: whatever layout met the limit
    # still does, so the best throughput at the limit never falls
    by = {
        (p["num_tc"], p["batch"], p["hbm_bandwidth_bytes_per_s"]): p for p in pts if p["feasible"]
    }
    compared = 0
    for (tc, b, bw), slow in by.items():
        fast = by.get((tc, b, 1.2e12))
        if bw == 0.6e12 and fast is not None and slow["meets_slo"]:
            assert fast["meets_slo"]
            rate = "tokens_per_s_per_device"
            assert fast[rate] >= slow[rate] * (1 - 1e-9)
            compared += 1
    assert compared


def test_a_serving_sweep_serves_each_design_at_the_weight_formats_it_runs(tmp_path):
    (tmp_path / "space.toml").write_text(_SPACE)
    cfg = load_sweep_config(_config(tmp_path, weight_formats=["bf16", "fp8"], batches=[8]))
    out = tmp_path / "out"
    run(cfg, out)
    pts = [p for p in points(out) if p["feasible"]]
    formats = {}
    for p in pts:
        formats.setdefault(p["design_name"] or p["design_id"], set()).add(p["precision"])
        weights = parse_serving(json.loads(p["placement"])["strategy"]).weights
        assert (weights or "bf16") == {"bf16": "bf16", "fp8-weights": "fp8"}[p["precision"]]
        assert p["key"].endswith("|weights=fp8") == (weights == "fp8")
    h100 = {p["precision"]: p for p in pts if p["design_name"] == "h100"}
    assert formats.pop("h100") == {"bf16", "fp8-weights"}
    assert formats and all(f == {"bf16"} for f in formats.values())  # no fp8 tensor cores
    # the blocks' weights in one byte: less memory for the same sequences
    mem = "memory_per_device_bytes"
    assert h100["fp8-weights"][mem] < h100["bf16"][mem]
    bad = _config(tmp_path, weight_formats=["fp4"])
    with pytest.raises(ConfigError, match=r"weight_formats = \['fp4'\] must be"):
        load_sweep_config(bad)
    with pytest.raises(ConfigError, match=r"weight_formats = \['fp4'\] must be"):
        phaze.search(["gpt3-125m"], mode="serve", weight_formats=["fp4"], out_dir=tmp_path)


def test_a_serving_sweep_resumes_without_evaluating_again(serve_sweep):
    cfg, out, _ = serve_sweep
    again = run(cfg, out)
    assert again.skipped_designs == 4 and again.evaluated_designs == 0


def test_the_serving_report_draws_the_fronts_and_ranks_at_the_limits(serve_sweep):
    _, out, _ = serve_sweep
    with load(out) as store:
        text = render_report(store)
    for words in (
        "The answer at the latency limits",
        "Throughput against latency",
        "serving Pareto front",
        "Designs at the latency limits by cost and carbon",
        "by $ per million output tokens",
        "mean TPOT &le; 20 ms",
    ):
        assert words in text, words
    assert text.count("<img") == 2


def test_phaze_sweep_mode_serve_on_the_command_line(serve_sweep, tmp_path):
    _, out, _ = serve_sweep
    args = ["sweep", str(out.parent / "sweep.toml"), "--out", str(out), "--no-report"]
    r = CliRunner().invoke(cli, [*args, "--executor", "serial"])
    assert r.exit_code == 0, r.output
    assert "best by tokens_per_s_per_device (max) at the limits" in r.output
    assert "batch=" in r.output  # the layouts as strategy strings
    bad = CliRunner().invoke(cli, ["sweep", "--mode", "serve", "--output-tokens", "1"])
    assert bad.exit_code == 2 and "--output-tokens" in bad.output


def _serving_point(key, design, tput, usd, co2):
    return {
        "key": key,
        "workload": "w",
        "design_id": design,
        "design_name": design,
        "feasible": 1,
        "meets_slo": 1,
        "tokens_per_s_per_device": tput,
        "usd_per_million_tokens": usd,
        "kgco2e_per_million_tokens": co2,
    }


def test_the_answer_gives_one_row_per_point_with_every_objective_it_wins():
    from results.report_serving import best_rows

    one = _serving_point("a", "a", 10.0, 1.0, 1.0)
    rows = best_rows([one, _serving_point("b", "b", 5.0, 2.0, 2.0)])
    assert [(p["key"], ms) for p, ms in rows] == [
        ("a", ["tokens_per_s_per_device", "usd_per_million_tokens", "kgco2e_per_million_tokens"])
    ]
    rows = best_rows([one, _serving_point("b", "b", 5.0, 0.5, 2.0)])
    assert [(p["key"], ms) for p, ms in rows] == [
        ("a", ["tokens_per_s_per_device", "kgco2e_per_million_tokens"]),
        ("b", ["usd_per_million_tokens"]),
    ]


def _section(text, sid):
    return text.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]


def test_the_serving_report_says_what_each_row_is_best_for_and_only_serving_inputs(serve_sweep):
    _, out, _ = serve_sweep
    with load(out) as store:
        text = render_report(store)
    answer = _section(text, "answer")
    rows = answer.count("<tr>") - 1
    assert answer.count("<th>best for</th>") == 1 and rows >= 1
    for title in ("highest output tokens/s per device", "lowest $ per Mtoken"):
        assert answer.count(title) == 1, title  # each objective in exactly one row
    assert ",<wbr>" in answer  # the layout may wrap
    # no empty schedule section; the answer says why
    assert 'id="schedules"' not in text and "no section on how exact" in answer
    inputs = _section(text, "inputs")
    for key in ("input_tokens", "batches", "ttft_limit_s"):
        assert f"<th>{key}</th>" in inputs, key
    for key in ("seq_len", "micro_batches", "recompute", "global_batch", "zero"):
        assert f"<th>{key}</th>" not in inputs, key


def test_the_mode_keys_of_the_report_cover_the_sweep_config():

    from phaze.config import SweepConfig
    from results import report

    fields = set(SweepConfig().as_dict())
    assert report._TRAINING_KEYS <= fields and report._SERVING_KEYS <= fields
    assert not report._TRAINING_KEYS & report._SERVING_KEYS
    serving_defaults = {"input_tokens", "output_tokens", "batches", "weight_formats"}
    assert serving_defaults <= report._SERVING_KEYS


def test_the_bar_labels_are_whole_designs_wrapped():
    from results.plots_serving import cost_carbon_figure

    p = {
        **_serving_point("a", "d1", 10.0, 1.0, 1.0),
        "design_name": None,
        "num_tc": 16,
        "tc_rows": 128,
        "tc_cols": 128,
        "num_vc": 8,
        "vc_lanes": 1024,
        "glb_bytes": 16 * 2**20,
        "hbm_bytes": 32 * 2**30,
    }
    fig = cost_carbon_figure([p])
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["16x128x128 TC, 8x1024 VC,\n16 MiB GLB, 32 GiB HBM"]


def test_pareto_of_a_serving_sweep_shows_the_batch_and_layout(serve_sweep):
    _, out, _ = serve_sweep
    args = ["pareto", str(out), "--x", "tokens_per_s_per_device", "--y", "tpot_s"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    header = r.output.splitlines()[1].split()
    assert header[:3] == ["design", "batch", "layout"], header
    assert "micro-batch" not in r.output and "recompute" not in r.output
    assert "batch=" in r.output  # each point's serving layout


def test_pareto_columns_follow_the_sweep_mode():
    from results.display import knob_columns

    train = {"mode": "train", "micro_batch": 2, "recompute": "full", "tp": 2, "pp": 4, "dp": 8}
    assert knob_columns([train]) == (["layout"], [["t2 p4 d8 mbs2 full"]])
    serve = {"mode": "serve", "batch": 64, "placement": json.dumps({"strategy": "t=2,batch=64"})}
    assert knob_columns([serve]) == (["batch", "layout"], [["64", "t=2,batch=64"]])
