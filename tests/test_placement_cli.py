"""`phaze place` on the shipped example instance, with CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "placement_gpt_small.json"


def test_place_prints_stages_and_degrees(cli_run):
    r = cli_run("place", str(EXAMPLE))
    assert r.exit_code == 0, r.output
    assert "tensorParallelDegree: 2" in r.output
    assert "dataParallelDegree: 1" in r.output
    assert "finalTimePerBatch:" in r.output
    assert "node ids" in r.output


def test_place_json_has_the_reference_keys_and_both_paths_agree(cli_run):
    docs = []
    for method in ("chain", "dag"):
        r = cli_run("place", str(EXAMPLE), "--json", "--method", method)
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.output))
    doc = docs[0]
    assert set(doc) == {
        "schema_version",
        "stages",
        "tensorParallelDegree",
        "dataParallelDegree",
        "finalTimePerBatch",
    }
    assert set(doc["stages"][0]) == {"nodes", "devicesForStage"}
    assert sorted(v for s in doc["stages"] for v in s["nodes"]) == list(range(14))
    assert docs[1]["finalTimePerBatch"] == doc["finalTimePerBatch"]


def test_place_infeasible_exits_3(tmp_path, cli_run):
    doc = json.loads(EXAMPLE.read_text())
    doc["maxMemoryPerDevice"] = 2**20
    f = tmp_path / "tiny.json"
    f.write_text(json.dumps(doc))
    r = cli_run("place", str(f))
    assert r.exit_code == 3
    assert "infeasible: needs 104 MiB per device" in r.output  # read "0.1 GiB" before
    assert "has maxMemoryPerDevice = 1 MiB" in r.output  # read "0.0 GiB" before


def test_place_bad_instance_is_one_error_line(tmp_path, cli_run):
    doc = json.loads(EXAMPLE.read_text())
    doc["optimizerAlgorithm"] = "LAMB"
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    r = cli_run("place", str(f))
    assert r.exit_code == 1
    assert r.output.startswith("Error: ")
    assert "optimizerAlgorithm = 'LAMB' must be one of SGD, Adam" in r.output
    f.write_text("{not json")
    r = cli_run("place", str(f))
    assert r.exit_code == 1 and "malformed JSON" in r.output
