"""The ``phaze`` command line: one click group, commands added explicitly.

Each command module under ``phaze.cli`` is thin: parse, one API call, render. Exit codes:
0 success, or stdout's reader gone (``phaze ... | head``: the rest of the output is dropped
without a word, as Unix tools do); 1 a fixable error (one ``Error:`` line, no traceback);
2 a usage error; 3 the command ran but found no feasible point, or ``validate`` is outside
tolerance; 130 interrupted (Ctrl-C). Every command takes ``-v``/``--verbose`` too, adding to
the group's.

The commands are listed in one place, :data:`COMMANDS`, with the one-line help that
``phaze --help`` shows; a command's module (and with it numpy, matplotlib and the models) is
imported only when that command runs, so the command line starts at once.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from types import MappingProxyType
from typing import Final

import click

from phaze import __version__
from phaze_common.errors import ConfigError, Infeasible, PhazeError

__all__ = ["main", "cli", "NoFeasiblePoint", "INTERRUPTED", "COMMANDS"]

#: Every command: (module:attribute, the first sentence of its help). A test holds the text
#: to the command's own.
COMMANDS: Final = MappingProxyType(
    {
        "sweep": (
            "phaze.cli.sweep_cmd:sweep",
            "Sweep designs x workloads x training knobs; with no arguments, the built-in quick "
            "sweep.",
        ),
        "evaluate": (
            "phaze.cli.evaluate_cmd:evaluate",
            "Iteration time, throughput, MFU and memory of one design, and its placement.",
        ),
        "serve": (
            "phaze.cli.serve_cmd:serve",
            "TTFT, TPOT, throughput, memory, energy, cost and carbon of serving a model on one "
            "design, with the serving layout that meets the latency limits.",
        ),
        "report": (
            "phaze.cli.report_cmd:report",
            "Write the self-contained HTML report of the sweep in DIR and print its path.",
        ),
        "pareto": (
            "phaze.cli.report_cmd:pareto_cmd",
            "Print the Pareto-optimal points of the sweep in DIR.",
        ),
        "export": (
            "phaze.cli.report_cmd:export",
            "Export every stored point of the sweep in DIR (all columns, SI units), or with "
            "--pairs its prefill-decode design pairs (--feasible-only: those meeting the SLO at "
            "the rate).",
        ),
        "workloads": (
            "phaze.cli.workloads_cmd:workloads",
            "LLM workloads: the model catalog, FLOPs, memory and layer graphs.",
        ),
        "arch": (
            "phaze.cli.arch_cmd:arch",
            "Accelerators: presets, custom designs, and their area, power, cost and carbon.",
        ),
        "space": (
            "phaze.cli.space_cmd:space",
            "Accelerator design spaces: the shipped ones (default, tiny, reticle) or a TOML file.",
        ),
        "schedule": (
            "phaze.cli.schedule_cmd:schedule",
            "Schedule one layer pass's ops on an accelerator's compute units.",
        ),
        "place": (
            "phaze.cli.place_cmd:place",
            "Best pipeline stages, tensor- and data-parallel degree for a placement instance.",
        ),
        "validate": (
            "phaze.cli.validate_cmd:validate",
            "Compare the models with published measurements (exit 3 if outside tolerance).",
        ),
    }
)
# validate's subcommands that live in modules of their own
_VALIDATE_MORE: Final = (
    "phaze.cli.validate_megatron_cmd:megatron",
    "phaze.cli.validate_energy_cmd:energy",
    "phaze.cli.validate_cost_cmd:cost",
    "phaze.cli.validate_runs_cmd:runs",
    "phaze.cli.validate_serve_cmd:serve",
)


def _load(spec: str) -> click.Command:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


INTERRUPTED = 130  # the shell's status for a process ended by SIGINT


class NoFeasiblePoint(click.ClickException):
    """Exit status 3: the command ran but nothing was feasible or within tolerance."""

    exit_code = 3


class _PhazeGroup(click.Group):
    """Turns Phaze's own errors into one-line messages with the documented exit codes, and
    imports a command's module only when it runs (:data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        command = _load(COMMANDS[cmd_name][0])
        if cmd_name == "validate":
            for spec in _VALIDATE_MORE:
                sub = _load(spec)
                command.add_command(sub)  # type: ignore[attr-defined]
        _add_verbose(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from :data:`COMMANDS`, laid out as click does, nothing imported."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [
            (name, click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit))
            for name in sorted(COMMANDS)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ConfigError as e:
            raise click.ClickException(str(e)) from None
        except Infeasible as e:
            raise NoFeasiblePoint(f"infeasible: {e.reason}") from None
        except PhazeError as e:
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            raise click.exceptions.Exit(INTERRUPTED) from None
        except BrokenPipeError:
            _discard_stdout()
            raise click.exceptions.Exit(0) from None
        except OSError as e:
            if e.filename is None:
                raise
            raise click.ClickException(f"cannot use {e.filename} ({e.strerror})") from None


_VERBOSE_HELP: Final = "More log output on stderr (-v info, -vv debug)."


def _log_verbosity(verbose: int) -> None:
    """Log on stderr at WARNING, INFO from ``-v``, DEBUG from ``-vv``."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger().setLevel(level)


def _command_verbose(ctx: click.Context, _param: click.Parameter, count: int) -> None:
    """``-v`` after a command: adds to the ``-v`` given before it (``phaze -v evaluate -v``)."""
    if count:
        _log_verbosity(count + (ctx.find_root().params.get("verbose") or 0))


def _add_verbose(command: click.Command) -> None:
    """Give ``command`` and, for a group, each of its subcommands the group's ``-v``."""
    if not any(p.name == "verbose" for p in command.params):
        command.params.append(
            click.Option(
                ["-v", "--verbose"],
                count=True,
                expose_value=False,
                callback=_command_verbose,
                help=_VERBOSE_HELP,
            )
        )
    for sub in getattr(command, "commands", {}).values():
        _add_verbose(sub)


def _discard_stdout() -> None:
    """Send what is left of stdout to the null device: its reader is gone (``| head``), and
    a flush at exit would fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (captured output)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


@click.group(cls=_PhazeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="phaze")
@click.option("-v", "--verbose", count=True, help=_VERBOSE_HELP)
def cli(verbose: int) -> None:
    """Phaze: co-design an ML accelerator and the parallel placement of LLM training."""
    _log_verbosity(verbose)


def main() -> None:
    """The ``phaze`` entry point. A closed stdout pipe ends it quietly with status 0, however
    far the command got: while it writes (:meth:`_PhazeGroup.invoke`) or when the output
    left in the buffer is flushed at the end."""
    try:
        cli(prog_name="phaze")
    except SystemExit:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _discard_stdout()
            raise SystemExit(0) from None
        raise
