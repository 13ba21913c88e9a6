"""``phaze sweep --show-config``: the effective configuration as TOML, each key's source in a
comment; given back as the sweep's file, it has the same config hash, and nothing is swept."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from phaze.cli import cli
from phaze.config import load_sweep_config, quick_sweep_config, sweep_config_from_mapping
from phaze.config_toml import toml_value

_HASH = re.compile(r"config hash ([0-9a-f]{16})")
_LINE = re.compile(r"^(#\s*)?(\w+)(?: = (.*?))?  # (\w+)")


@pytest.fixture(autouse=True)
def _run_dir(tmp_path, monkeypatch):
    """Each test runs in a directory of its own, where a sweep would write phaze-out/."""
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "run")


def _show(tmp_path: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["sweep", *args, "--show-config"])
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "run").iterdir()) == []  # nothing swept, nothing written
    return result.output


def _sources(text: str) -> dict[tuple[str, str], tuple[str, bool]]:
    """(section, key) -> (source, written as a comment?)."""
    section, out = "", {}
    for line in text.splitlines():
        if m := re.match(r"^(?:# )?\[(\w+)\]", line):  # "# [serving]": the other mode's
            section = m[1]
        elif section and (m := _LINE.match(line)):
            out[(section, m[2])] = (m[4], m[1] is not None)
    return out


def _round_trip(tmp_path: Path, text: str) -> None:
    shown = tmp_path / "shown.toml"
    shown.write_text(text, encoding="utf-8")
    assert load_sweep_config(shown).config_hash() == _HASH.search(text)[1]


def test_the_quick_sweep_shown_reads_back_with_its_hash(tmp_path):
    text = _show(tmp_path)
    assert _HASH.search(text)[1] == quick_sweep_config().config_hash()
    _round_trip(tmp_path, text)
    sources = _sources(text)
    assert sources[("sweep", "devices")] == ("file", False)
    assert sources[("sweep", "presets")] == ("default", False)
    assert sources[("serving", "input_tokens")] == ("default", True)  # serving only
    assert sources[("training", "seq_len")] == ("file", False)
    assert sources[("scoring", "pue")] == ("file", False)
    assert sources[("scoring", "grid_gco2e_per_kwh")] == ("default", True)  # derived


def test_flags_over_a_file_are_marked_and_read_back(tmp_path):
    config = tmp_path / "s.toml"
    config.write_text(
        "[sweep]\nworkloads = ['gpt3-125m']\nspace = 'tiny'\nhbm_gib = [32, 80.5]\n"
        "sequence_parallel = true\ntokens_to_train = '2T'\ninput_tokens = 512\n"
        "[solver]\nname = 'highs'\ntime_limit_s = 3\n"
        "[scoring]\ngrid_region = 'France'\nhost_profile = 'dgx-h100'\npue = 1\n",
        encoding="utf-8",
    )
    text = _show(
        tmp_path,
        str(config),
        *("--devices", "128", "--no-prune", "--recompute", "modules:core_attn+mlp"),
        *("--optimizer-state", "moments=bf16"),
    )
    _round_trip(tmp_path, text)
    sources = _sources(text)
    for key in ("sweep.devices", "sweep.prune", "training.recompute", "training.optimizer_state"):
        assert sources[tuple(key.split("."))] == ("flag", False), key
    for key in ("sweep.workloads", "sweep.hbm_gib", "training.sequence_parallel"):
        assert sources[tuple(key.split("."))] == ("file", False), key
    assert sources[("training", "tokens_to_train")] == ("file", False)
    # a key of the other mode is shown, as a comment, and does not change the hash
    assert sources[("serving", "input_tokens")] == ("file", True)
    assert sources[("solver", "time_limit_s")] == ("file", False)
    assert sources[("solver", "search_nodes")] == ("default", True)
    assert sources[("scoring", "host_w_per_node")] == ("default", True)
    assert 'grid_region = "france"  # file' in text
    assert "tokens_to_train = 2000000000000  # file" in text


def test_a_serving_sweep_of_the_quick_config_reads_back(tmp_path):
    """The quick file names no mode and sets training keys: --mode serve shows them as the
    other mode's, and the shown file (which names its mode) is accepted."""
    text = _show(tmp_path, "--mode", "serve", "--batch", "8", "--ttft-ms", "500")
    _round_trip(tmp_path, text)
    sources = _sources(text)
    assert sources[("sweep", "mode")] == ("flag", False)
    assert sources[("serving", "ttft_limit_s")] == ("flag", False)
    assert sources[("training", "micro_batches")] == ("file", True)
    assert sources[("sweep", "objectives")] == ("default", False)  # the serving ones


def test_the_hash_leaves_out_only_the_other_modes_keys():
    base = sweep_config_from_mapping({"sweep": {}})
    serve_key = sweep_config_from_mapping({"sweep": {"input_tokens": 512}})
    train_key = sweep_config_from_mapping({"sweep": {"seq_len": 4096}})
    assert serve_key.config_hash() == base.config_hash() != train_key.config_hash()
    serve = sweep_config_from_mapping({"sweep": {"mode": "serve"}})
    served = sweep_config_from_mapping({"sweep": {"mode": "serve", "input_tokens": 512}})
    assert serve.config_hash() != served.config_hash()


@pytest.mark.parametrize(
    "value",
    [
        3e11,
        2e-6,
        1e-4,
        1.1,
        157788000.0,
        0.1 + 0.2,
        -5e-7,
        0.0,
        math.inf,
        7,
        True,
        'a"b\\c\x7f\x01é',
        (1, 2.5),
        (),
    ],
)
def test_values_read_back_as_the_same_value_and_type(value):
    back = tomllib.loads(f"x = {toml_value(value)}")["x"]
    back = tuple(back) if isinstance(back, list) else back
    assert back == value and type(back) is type(value)
