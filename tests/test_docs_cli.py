"""docs/cli.md documents every command and option of the command line: a command or option
added to the CLI without its section, or its mention in the section, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from phaze.cli import cli

DOC = (Path(__file__).parents[1] / "docs" / "cli.md").read_text("utf-8")
_HEADING = re.compile(r"^#{2,3} phaze ([a-z -]+)$", re.M)


def _sections() -> dict[str, str]:
    """Each `## phaze X` / `### phaze X Y` section's text, up to the next heading."""
    heads = list(re.finditer(r"^#{1,3} .*$", DOC, re.M))
    out = {}
    for i, h in enumerate(heads):
        m = _HEADING.match(h[0])
        if m:
            end = heads[i + 1].start() if i + 1 < len(heads) else len(DOC)
            out[m[1].strip()] = DOC[h.end() : end]
    return out


def _commands() -> list[tuple[str, click.Command]]:
    """Every command under ``phaze``, groups included, found as the CLI loads them."""
    found = []

    def walk(group: click.Group, prefix: str) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None, name
            path = f"{prefix} {name}".strip()
            found.append((path, cmd))
            if isinstance(cmd, click.Group):
                walk(cmd, path)

    walk(cli, "")
    return found


def _long_options(cmd: click.Command) -> list[str]:
    names = []
    for p in cmd.params:
        if isinstance(p, click.Option):
            names += [o for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
    return names


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


_COMMANDS = _commands()


def test_the_walk_finds_the_lazily_loaded_commands():
    paths = {p for p, _ in _COMMANDS}
    assert {"sweep", "evaluate", "validate runs", "workloads show", "space show"} <= paths


@pytest.mark.parametrize(("path", "cmd"), _COMMANDS, ids=[p for p, _ in _COMMANDS])
def test_every_command_has_a_section(path, cmd):
    assert path in _sections(), f"docs/cli.md has no '## phaze {path}' section"


@pytest.mark.parametrize(("path", "cmd"), _COMMANDS, ids=[p for p, _ in _COMMANDS])
def test_every_option_is_in_its_command_s_section(path, cmd):
    text = _sections().get(path, "")
    common = ("--help", "--verbose")  # every command's, under "Common to every command"
    missing = [o for o in _long_options(cmd) if o not in common and not _mentions(text, o)]
    assert not missing, f"docs/cli.md, section 'phaze {path}', does not mention {missing}"


def test_the_root_options_are_documented():
    common = DOC.split("## Common to every command", 1)[1].split("\n## ", 1)[0]
    for opt in _long_options(cli):
        if opt != "--help":
            assert _mentions(common, opt), opt


def test_no_section_names_a_command_that_does_not_exist():
    paths = {p for p, _ in _COMMANDS}
    assert set(_sections()) <= paths, sorted(set(_sections()) - paths)
