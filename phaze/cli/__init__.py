"""The ``phaze`` command line: one click group, commands added explicitly.

Each command module under ``phaze.cli`` is thin: parse, one API call, render. Exit codes:
0 success; 1 a fixable error (one ``Error:`` line, no traceback); 2 a usage error;
3 the command ran but found no feasible point, or ``validate`` is outside tolerance;
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import logging
import sys

import click

from phaze import __version__
from phaze_common.errors import ConfigError, Infeasible, PhazeError

__all__ = ["main", "cli", "NoFeasiblePoint", "INTERRUPTED"]

INTERRUPTED = 130  # the shell's status for a process ended by SIGINT


class NoFeasiblePoint(click.ClickException):
    """Exit status 3: the command ran but nothing was feasible or within tolerance."""

    exit_code = 3


class _PhazeGroup(click.Group):
    """Turns Phaze's own errors into one-line messages with the documented exit codes."""

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
        except OSError as e:
            if e.filename is None:
                raise
            raise click.ClickException(f"cannot use {e.filename} ({e.strerror})") from None


@click.group(cls=_PhazeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="phaze")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Phaze: co-design an ML accelerator and the parallel placement of LLM training."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )


def _register() -> None:
    """Add every command module's command to the group (explicitly, in one place)."""
    from phaze.cli import (
        arch_cmd,
        evaluate_cmd,
        place_cmd,
        report_cmd,
        schedule_cmd,
        space_cmd,
        sweep_cmd,
        validate_cmd,
        validate_energy_cmd,
        validate_megatron_cmd,
        validate_runs_cmd,
        workloads_cmd,
    )

    validate_cmd.validate.add_command(validate_megatron_cmd.megatron)
    validate_cmd.validate.add_command(validate_energy_cmd.energy)
    validate_cmd.validate.add_command(validate_runs_cmd.runs)
    for command in (
        sweep_cmd.sweep,
        evaluate_cmd.evaluate,
        report_cmd.report,
        report_cmd.pareto_cmd,
        report_cmd.export,
        workloads_cmd.workloads,
        arch_cmd.arch,
        space_cmd.space,
        schedule_cmd.schedule,
        place_cmd.place,
        validate_cmd.validate,
    ):
        cli.add_command(command)


_register()


def main() -> None:
    cli(prog_name="phaze")
