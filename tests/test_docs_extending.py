"""docs/extending.md names real files: every backticked path and every relative link in it
exists, so the page cannot point a contributor at a file that moved or was renamed; its
walk-throughs of adding a chip and a knob run as written."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from doclinks import anchors

from arch_space.config import accelerator_to_toml
from arch_space.presets import preset
from phaze.cli._settings import setting_option
from phaze.settings import SETTINGS, Setting

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs" / "extending.md"
TEXT = DOC.read_text("utf-8")

# a backticked repository path: no spaces, at least one folder
_PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)+/?)`")
_LINK = re.compile(r"\]\((?!https?:)([^)#\s]+)(#[^)]*)?\)")


def test_the_page_names_the_files_of_each_extension():
    names = set(_PATH.findall(TEXT))
    assert {"placement/layout.py", "arch_space/accelerator.py", "workloads/serving.py"} <= names
    assert {"workloads/data/frameworks.toml", "workloads/hf.py", "ilp/timing.py"} <= names


@pytest.mark.parametrize("path", sorted(set(_PATH.findall(TEXT))))
def test_every_backticked_path_exists(path):
    assert (ROOT / path).exists(), f"docs/extending.md names {path}, which does not exist"


@pytest.mark.parametrize(("target", "anchor"), sorted(set(_LINK.findall(TEXT))))
def test_every_relative_link_exists(target, anchor):
    page = DOC.parent / target
    assert page.exists(), f"docs/extending.md links {target}, which is missing"
    if anchor:
        assert anchor[1:] in anchors(page.read_text("utf-8")), f"{target}{anchor}: no such heading"


def _chip_section() -> str:
    return TEXT.split("\n## A chip\n", 1)[1].split("\n## ", 1)[0]


def test_the_chip_walk_through_runs_as_written(cli_run, tmp_path):
    """The "A chip" steps on their toy: the shell block's ``arch show --toml`` writes the
    preset's chip file; the TOML block is its ``[accelerator]`` table with the lines marked
    ``# changed`` edited (so the page cannot drift from the tool); the file so edited keeps
    the preset's measured rates (its iteration is the preset's, HBM capacity aside); the
    table alone (with the preset's formats) is refused, naming the preset, and runs as it
    with ``measured_as``."""
    section = _chip_section()
    command = re.search(r"```bash\nphaze (.*) > (\S+)\n```", section)
    args, out = command[1].split(), tmp_path / command[2]
    shown = cli_run(*args)
    assert shown.exit_code == 0, shown.output
    out.write_text(shown.stdout)
    edited = re.search(r"```toml\n(.*?)```", section, re.S)[1]
    changed = {
        line.split()[0]: line.split("#")[0].strip()
        for line in edited.splitlines()
        if line.endswith("# changed")
    }
    written, documented = (tomllib.loads(t)["accelerator"] for t in (shown.stdout, edited))
    assert set(changed) == {"name", "hbm_gib"} and set(tomllib.loads(edited)) == {"accelerator"}
    assert {k: v for k, v in written.items() if k not in changed} == {
        k: v for k, v in documented.items() if k not in changed
    }
    whole = "".join(
        changed.get(line.split(" ")[0], line) + "\n" for line in shown.stdout.splitlines()
    )
    chip = tmp_path / "chip.toml"
    chip.write_text(whole)
    run = ("evaluate", "--workload", "gpt3-1.3b", "--devices", 8, "--global-batch", 16)
    run += ("--strategy", "t=2,p=1,d=4,mbs=2", "--json", "--arch")
    mine, h100 = (json.loads(cli_run(*run, a).stdout) for a in (chip, written["name"]))
    assert mine["iteration_s"] == h100["iteration_s"]
    # the table alone, with the formats the [[peak]] rows gave
    formats = next(x for x in accelerator_to_toml(preset("h100")).splitlines() if "formats" in x)
    edited += formats + "\n"
    chip.write_text(edited)
    refused = cli_run(*run, chip)
    assert refused.exit_code == 1 and "of preset h100" in refused.output
    assert 'measured_as = "h100"' in refused.output
    chip.write_text(edited + 'measured_as = "h100"\n')
    assert json.loads(cli_run(*run, chip).stdout)["iteration_s"] == h100["iteration_s"]


def test_the_collective_walk_through_runs_as_written():
    """The "A collective" toy runs as the page writes it, and its time is the link
    model's: latency plus the bytes a device sends over the intra-node bandwidth, per run."""
    section = TEXT.split("\n## A collective\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)[1]
    scope: dict[str, object] = {}
    exec(code, scope)  # the page's own example
    node = scope["node"]
    one = node.intra_node_latency_s + 3 / 4 * 1e6 / node.intra_node_bandwidth_bytes_per_s
    assert scope["seconds"] == pytest.approx(3 * one)


def test_the_knob_walk_through_runs_as_written():
    """The "A knob" row, as the page writes it, makes the option it promises: the flag read
    as ``queue_ms``, in milliseconds, its range refused on the command line and in a sweep
    file's terms, and the key's value in seconds."""
    section = TEXT.split("\n## A knob\n", 1)[1].split("\n## ", 1)[0]
    namespace: dict = {}
    exec(re.search(r"```python\n(.*?)```", section, re.S)[1], namespace)
    row = namespace["queue_limit"]
    assert isinstance(row, Setting)
    assert row.dest == "queue_ms" and row.key not in SETTINGS

    @click.command()
    @setting_option(row)
    def toy(queue_ms):
        click.echo(repr(row.from_flag(queue_ms)))

    assert CliRunner().invoke(toy, ["--queue-ms", "250"]).output == "0.25\n"
    refused = CliRunner().invoke(toy, ["--queue-ms", "0"])
    assert refused.exit_code == 2 and "(0, 1e+09]" in refused.output
    assert "(0, 1e+09]" in section and "`0.25` for `--queue-ms 250`" in section
    assert row.range_problem(2e6) == "queue_limit_s = 2000000.0 must be in (0, 1e+06] (s)"
    assert row.range_problem(0.25) is None
