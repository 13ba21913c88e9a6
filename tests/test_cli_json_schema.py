"""Every ``--json`` document carries the schema_version docs/architecture.md documents for its
command, and the ``--help`` texts that quote one agree."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from phaze.cli._render import JSON_SCHEMA_VERSIONS

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"


def _documented() -> dict[str, int]:
    text = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    section = text.split("## JSON documents", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `phaze (.+?) --json` \| .+? \| (\d+) \|$", section, re.M)
    return {re.sub(r" (DIR|FILE)\b", "", cmd): int(v) for cmd, v in rows}


def test_the_documented_table_is_the_code_s():
    assert _documented() == dict(JSON_SCHEMA_VERSIONS)


# The arguments of each command, cheap ones; {dir} is a finished sweep, {config} its file.
_ARGS = {
    "sweep": ["{config}", "--out", "{dir}", "--executor", "serial", "--no-report"],
    "evaluate": ["--workload", "gpt3-125m", "--arch", "a100", "--devices", "1"]
    + ["--global-batch", "1", "--seq-len", "64", "--strategy", "t=1,p=1,d=1,mbs=1,recompute=none"],
    "serve": ["--workload", "gpt3-125m", "--arch", "a100", "--devices", "1"]
    + ["--input-tokens", "64", "--output-tokens", "16", "--strategy", "t=1,batch=4,chunk=off"],
    "export": ["{dir}"],
    "pareto": ["{dir}", "--x", "tokens_per_s", "--y", "tco_usd"],
    "workloads list": [],
    "workloads show": ["gpt3-125m", "--seq-len", "64"],
    "arch list": [],
    "arch show": [str(EXAMPLES / "accelerator_v100.toml")],
    "space list": [],
    "space show": ["tiny"],
    "schedule": [
        "--workload",
        "gpt3-125m",
        "--arch",
        "a100",
        "--seq-len",
        "64",
        "--solver",
        "list",
    ],
    "place": [str(EXAMPLES / "placement_gpt_small.json")],
    "validate gemm": [],
    "validate megatron": [],
    "validate energy": [],
    "validate cost": [],
    "validate runs": [  # the schema, not the targets
        "--held-out-mean-pct",
        "1000",
        "--held-out-max-pct",
        "1000",
        "--group-mean-pct",
        "1000",
    ],  # fmt: skip
    "validate serve": ["--held-out-mean-pct", "100"],  # the schema, not the target
}
_SLOW = {
    "validate gemm",
    "validate megatron",
    "validate energy",
    "validate cost",
    "validate runs",
    "validate serve",
}


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=[pytest.mark.slow] if c in _SLOW else []) for c in _ARGS],
)
def test_every_json_document_has_its_documented_version(command, cli_run, small_sweep, tmp_path):
    config, out = small_sweep
    d = tmp_path / "sweep"
    shutil.copytree(out, d)
    args = [a.format(config=config, dir=d) for a in _ARGS[command]]
    r = cli_run(*command.split(), *args, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert list(doc)[0] == "schema_version"
    assert doc["schema_version"] == _documented()[command]


def test_every_json_command_is_listed():
    import click

    from phaze.cli import cli

    found = []

    def walk(group, prefix):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            path = f"{prefix} {name}".strip()
            if isinstance(cmd, click.Group):
                walk(cmd, path)
            elif any("--json" in p.opts for p in cmd.params):
                found.append(path)

    walk(cli, "")
    assert sorted(found) == sorted(_ARGS) == sorted(_documented())


@pytest.mark.parametrize("command", sorted(_ARGS))
def test_help_texts_quote_the_documented_version(command, cli_run):
    r = cli_run(*command.split(), "--help")
    for quoted in re.findall(r'"schema_version": (\d+)', r.output):
        assert int(quoted) == _documented()[command], r.output
