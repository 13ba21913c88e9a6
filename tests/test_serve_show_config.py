"""``phaze serve --show-config``: the effective settings as TOML, each value's source in a
comment; given back with ``--config``, the same settings, the same config hash and the same
serve."""

from __future__ import annotations

import json
import re
import tomllib

from click.testing import CliRunner

from phaze.cli import cli

_HASH = re.compile(r"config hash ([0-9a-f]{16})")
_LINE = re.compile(r"^(#\s*)?(\w+)(?: = (.*?)| is unset)  # (\w+)$")
_SERVE = ("serve", "--workload", "gpt3-125m", "--arch", "h100", "--devices", "8")
_SERVE += ("--input-tokens", "512", "--output-tokens", "64")


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _sources(text: str) -> dict[str, str]:
    return {m[2]: m[4] for line in text.splitlines() if (m := _LINE.match(line))}


def test_the_settings_shown_read_back_with_their_hash(tmp_path):
    text = _run(*_SERVE, "--ttft-ms", "250", "--pue", "1.2", "--show-config")
    sources = _sources(text)
    assert sources["ttft_ms"] == sources["workload"] == sources["pue"] == "flag"
    assert sources["tpot_ms"] == sources["kv_format"] == "default"
    table = tomllib.loads(text)["serve"]
    assert table["ttft_ms"] == 250.0 and "tpot_ms" not in table  # unset: a comment
    shown = tmp_path / "serve.toml"
    shown.write_text(text, encoding="utf-8")
    again = _run("serve", "--config", str(shown), "--show-config")
    assert _HASH.search(again)[1] == _HASH.search(text)[1]
    assert set(_sources(again).values()) == {"file", "default"}
    assert _sources(again)["ttft_ms"] == "file"


def test_a_flag_over_the_file_wins_and_changes_the_hash(tmp_path):
    shown = tmp_path / "serve.toml"
    shown.write_text(_run(*_SERVE, "--show-config"), encoding="utf-8")
    text = _run("serve", "--config", str(shown), "--tpot-ms", "40", "--show-config")
    assert _sources(text)["tpot_ms"] == "flag" and tomllib.loads(text)["serve"]["tpot_ms"] == 40
    assert _HASH.search(text)[1] != _HASH.search(shown.read_text())[1]


def test_the_file_serves_as_the_flags_do(tmp_path):
    shown = tmp_path / "serve.toml"
    shown.write_text(_run(*_SERVE, "--batch", "8", "--show-config"), encoding="utf-8")
    by_flags = json.loads(_run(*_SERVE, "--batch", "8", "--json"))
    by_file = json.loads(_run("serve", "--config", str(shown), "--json"))
    assert by_file == by_flags


def test_an_unknown_key_is_one_error_naming_the_nearest(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[serve]\nttft = 200\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["serve", "--config", str(bad), "--show-config"])
    assert result.exit_code == 1
    assert "bad.toml [serve]: unknown key 'ttft' (did you mean 'ttft_ms'?)" in result.output
    assert "Traceback" not in result.output
