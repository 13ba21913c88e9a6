"""`phaze report`, `phaze pareto` and `phaze export` (phaze/cli/report_cmd.py) with CliRunner."""

from __future__ import annotations

import csv
import io
import json

import pytest
from reports import make_store

from results.export import export_record, write_csv
from results.pareto import pareto
from results.schema import COLUMN_NAMES, SCHEMA_VERSION
from results.store import Store, load


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("cli"))


def test_export_json_has_every_column_and_round_trips(store_dir, cli_run):
    r = cli_run("export", store_dir, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert list(doc) == ["schema_version", "units", "points"]
    assert doc["units"]["tcdp"] == "kgCO2e·s" and doc["units"]["tco_usd"] == "USD"
    stored = load(store_dir).points()
    assert len(doc["points"]) == len(stored)
    assert all(list(p) == list(COLUMN_NAMES) for p in doc["points"])
    first = next(
        p for p, s in zip(doc["points"], stored, strict=True) if s["feasible"] and s["placement"]
    )
    s = next(s for s in stored if s["key"] == first["key"])
    assert first["tokens_per_s"] == s["tokens_per_s"] and first["feasible"] is True
    assert first["placement"] == json.loads(s["placement"])


def test_export_csv_and_out_file(store_dir, tmp_path, cli_run):
    r = cli_run("export", store_dir, "--csv", "--feasible-only")
    assert r.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(r.output)))
    feasible = load(store_dir).points(feasible_only=True)
    assert len(rows) == len(feasible) and list(rows[0]) == list(COLUMN_NAMES)
    assert {row["feasible"] for row in rows} == {"1"}
    assert float(rows[0]["tcdp"]) == feasible[0]["tcdp"]  # full precision
    r = cli_run("export", store_dir, "--json", "--out", tmp_path / "p.json")
    assert r.exit_code == 0 and r.stdout == ""
    assert len(json.loads((tmp_path / "p.json").read_text())["points"]) == len(
        load(store_dir).points()
    )


def test_export_needs_a_format(store_dir, cli_run):
    r = cli_run("export", str(store_dir))
    assert r.exit_code == 2 and "give --csv or --json" in r.output


@pytest.mark.parametrize(
    "cmd", [["export", "--json"], ["pareto", "--x", "tcdp", "--y", "mfu"], ["report"]]
)
def test_missing_directory_or_store_is_one_error_line(tmp_path, cmd, cli_run):
    for where, words in (
        (tmp_path / "nope", "does not exist"),
        (tmp_path, "no Phaze results store"),
    ):
        r = cli_run(cmd[0], where, *cmd[1:])
        assert r.exit_code == 1, r.output
        assert r.output.startswith("Error: ") and words in r.output and "Traceback" not in r.output


def test_pareto_json_matches_the_library_front(store_dir, cli_run):
    r = cli_run("pareto", store_dir, "--x", "system_cost_usd", "--y", "tokens_per_s", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["objectives"] == [
        {"metric": "system_cost_usd", "sense": "min"},
        {"metric": "tokens_per_s", "sense": "max"},
    ]
    pts = load(store_dir).points(feasible_only=True, workload="gpt3-1.3b")
    want = [p["key"] for p in pareto(pts, ["system_cost_usd", "tokens_per_s"])]
    got = [p["key"] for p in doc["points"] if p["workload"] == "gpt3-1.3b"]
    assert got == want and len(want) > 3
    assert all(list(p) == list(COLUMN_NAMES) for p in doc["points"])
    # the aggregate rows get their own front over the throughput score
    agg = [p for p in doc["points"] if p["workload"] == "*all*"]
    assert agg and all(p["throughput_score"] is not None for p in agg)


def test_pareto_text_csv_prefix_and_workload(store_dir, cli_run):
    r = cli_run(
        "pareto",
        store_dir,
        "--x",
        "-tcdp",
        "--y",
        "area_mm2",
        "--z",
        "tokens_per_s",
        "-w",
        "llama2-7b",
    )
    assert r.exit_code == 0, r.output
    assert (
        r.output.startswith("llama2-7b: ")
        and "tcdp (min), area_mm2 (min), tokens_per_s (max)" in r.output
    )
    assert "tCO2e·days" in r.output and "gpt3" not in r.output
    r = cli_run("pareto", store_dir, "--x", "mfu", "--y", "system_cost_usd")
    assert "gpt3-1.3b: " in r.output and "llama2-7b: " in r.output and "aggregate" not in r.output
    r = cli_run(
        "pareto", store_dir, "--x", "+tcdp", "--y", "tokens_per_s", "--csv", "-w", "gpt3-1.3b"
    )
    rows = list(csv.DictReader(io.StringIO(r.output)))
    pts = load(store_dir).points(feasible_only=True, workload="gpt3-1.3b")
    assert [row["key"] for row in rows] == [
        p["key"] for p in pareto(pts, ["+tcdp", "tokens_per_s"])
    ]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--x", "tokens_per_sec", "--y", "tcdp"],
            "unknown metric 'tokens_per_sec'; did you mean tokens_per_s",
        ),
        (["--x", "tcdp", "--y", "num_tc"], "write +num_tc to maximise it or -num_tc"),
        (["--x", "tcdp", "--y", "tcdp"], "tcdp more than once"),
        (["--x", "tcdp", "--y", "mfu", "-w", "gpt2"], "workload 'gpt2' has no feasible point"),
    ],
)
def test_pareto_errors(store_dir, args, words, cli_run):
    r = cli_run("pareto", str(store_dir), *args)
    assert r.exit_code == 1 and r.output.startswith("Error: ") and words in r.output, r.output


def test_pareto_json_and_csv_exclusive_and_nothing_feasible_exits_3(store_dir, tmp_path, cli_run):
    r = cli_run("pareto", store_dir, "--x", "tcdp", "--y", "mfu", "--json", "--csv")
    assert r.exit_code == 2
    with Store.open(tmp_path, {}, "h") as s:
        s.put_point(
            {"key": "a", "workload": "w", "design_id": "d", "feasible": False, "reason": "too big"}
        )
    r = cli_run("pareto", str(tmp_path), "--x", "tcdp", "--y", "mfu")
    assert r.exit_code == 3 and "no feasible point" in r.output


def test_export_record_and_csv_of_odd_values():
    rec = export_record({"key": "k", "feasible": 1, "placement": "not json", "tcdp": float("nan")})
    assert rec["feasible"] is True and rec["placement"] == "not json" and rec["tcdp"] is None
    buf = io.StringIO()
    write_csv([{"key": "k", "feasible": True, "placement": {"tp": 2}}], buf)
    row = next(csv.DictReader(io.StringIO(buf.getvalue())))
    assert row["feasible"] == "1" and row["placement"] == '{"tp": 2}' and row["tcdp"] == ""


def test_pareto_refuses_a_metric_the_sweep_has_no_value_for(store_dir, cli_run):
    """A serving metric of a training sweep is one error naming it and the sweep's metrics,
    not an empty front with exit 0."""
    r = cli_run("pareto", store_dir, "--x", "ttft_s", "--y", "tpot_s")
    assert r.exit_code == 1, r.output
    (line,) = r.output.splitlines()
    assert line.startswith(f"Error: no feasible point of {store_dir} (mode train) has a value")
    assert "of ttft_s, tpot_s: its metrics are " in line, line
    have = line.split("its metrics are ")[1].split(", ")
    assert "tokens_per_s" in have and "tcdp" in have and "ttft_s" not in have


def test_export_refuses_both_formats(store_dir, cli_run):
    r = cli_run("export", store_dir, "--json", "--csv")
    assert r.exit_code == 2 and "give one of --csv and --json, not both" in r.output, r.output
