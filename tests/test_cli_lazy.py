"""The command line imports a command's module only when that command runs: ``phaze --help``
loads neither numpy, matplotlib nor the models, and lists each command with its own help."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from phaze.cli import COMMANDS, cli

_HELP_THEN_MODULES = """
import sys
from phaze.cli import cli
try:
    cli(["--help"], prog_name="phaze")
except SystemExit:
    pass
heavy = ("numpy", "matplotlib", "workloads", "arch_space", "results", "phaze.cli.sweep_cmd")
print(sorted(m for m in heavy if m in sys.modules))
"""


def test_help_imports_no_command_module():
    r = subprocess.run(
        [sys.executable, "-c", _HELP_THEN_MODULES], capture_output=True, text=True, check=True
    )
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
    assert "sweep  " in r.stdout and "workloads  " in r.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_help_is_the_command_s_own(name):
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.name in (name, "pareto")
    assert COMMANDS[name][1] == command.get_short_help_str(limit=10_000)


def test_validate_has_its_subcommands():
    validate = cli.get_command(click.Context(cli), "validate")
    assert {"gemm", "megatron", "energy"} <= set(validate.list_commands(click.Context(validate)))
