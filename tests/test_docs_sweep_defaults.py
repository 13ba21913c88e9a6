"""docs/cli.md's table of ``[sweep]`` keys says exactly what an empty ``[sweep]`` gets and
names every key the loader accepts; the micro-batch sizes tried by default are one constant."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

from phaze import api
from phaze.config import (
    _TOP_KEYS,
    MICRO_BATCHES,
    SERVE_OBJECTIVES,
    SweepConfig,
    sweep_config_from_mapping,
)
from phaze.model import knob_search

CLI_MD = Path(__file__).parents[1] / "docs" / "cli.md"
_ROW = re.compile(r"^\| `(\w+)` \| `([^`]*)` \| (.*) \|$", re.M)


def _doc_table() -> dict[str, tuple[str, str]]:
    text = CLI_MD.read_text("utf-8")
    section = text[text.index("### Sweep configuration") :]
    section = section[: section.index("\n## ")]
    return {m[1]: (m[2], m[3]) for m in _ROW.finditer(section)}


def _value(cell: str):
    """A default cell's value: a TOML value, or ``unset`` for None."""
    return None if cell == "unset" else tomllib.loads(f"v = {cell}")["v"]


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def test_the_table_is_found():
    assert "devices" in _doc_table()


def test_the_table_names_every_key_the_loader_accepts_and_no_other():
    assert sorted(_doc_table()) == sorted(_TOP_KEYS)
    assert set(_TOP_KEYS) == set(SweepConfig().as_dict()) - {"solver", "scoring"}


def test_the_table_gives_what_an_empty_sweep_table_gets():
    empty = sweep_config_from_mapping({"sweep": {}}, "empty.toml")
    documented = {k: _value(cell) for k, (cell, _) in _doc_table().items()}
    actual = {k: _plain(empty.value(k)) for k in _TOP_KEYS}
    assert documented == actual


def test_the_serving_objectives_default_is_stated():
    _, what = _doc_table()["objectives"]
    listed = re.findall(r"`(\[[^`]*\])`", what)
    assert [_value(x) for x in listed] == [list(SERVE_OBJECTIVES)]
    serve = sweep_config_from_mapping({"sweep": {"mode": "serve"}}, "serve.toml")
    assert serve.objectives == SERVE_OBJECTIVES


def test_the_default_micro_batches_are_one_constant():
    def default(fn, name):
        return inspect.signature(fn).parameters[name].default

    assert SweepConfig().training.micro_batches is MICRO_BATCHES
    assert default(api.search, "micro_batches") is MICRO_BATCHES
    assert default(knob_search.evaluate_best_knobs, "micro_batches") is MICRO_BATCHES


def test_the_serve_json_keys_are_the_documented_ones(cli_run):
    """docs/cli.md's ``phaze serve`` section lists exactly the keys of its ``--json``."""
    import json

    text = CLI_MD.read_text("utf-8")
    section = text[text.index("## phaze serve") :]
    section = section[: section.index("\n## ")]
    listed = section[section.index("`--json` keys:") :]
    listed = listed[: listed.index("\n\n")]  # the steady state's paragraph; --rate's follows
    documented = set(re.findall(r"`(\w+)`", listed))
    r = cli_run(
        "serve", "--workload", "gpt3-125m", "--arch", "h100", "--devices", "1",
        "--input-tokens", "128", "--output-tokens", "16", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    keys = set(json.loads(r.output)) - {"schema_version"}
    assert documented == keys
