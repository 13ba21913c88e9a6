"""``phaze serve --rate R --p99-ttft-ms X --p99-tpot-ms Y --capacity``: the fewest devices,
and their serving layout, that serve the arrivals within the p99 limits (docs/serving.md,
"Capacity planning"): its options, checks, progress and output."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import click

from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json, table
from phaze.cli._settings import setting_option
from phaze.cli.serve_load import load_document, print_load
from phaze.executors.progress import Progress
from phaze.model.serving_capacity import CapacityPlan, CapacityTry
from phaze.model.serving_load import load_settings
from phaze.settings import setting
from phaze_common.errors import ConfigError
from phaze_common.units import fmt_noun, fmt_quantity

__all__ = [
    "CAPACITY_KEYS",
    "capacity_options",
    "check_capacity",
    "counting",
    "capacity_document",
    "print_capacity",
    "refuse_capacity",
]

#: The keyword arguments :func:`capacity_options` adds.
CAPACITY_KEYS = ("capacity", "max_devices")
_QUIET_S = 2.0  # s a plan runs before its progress line shows (a quick one stays silent)


def capacity_options(f: Callable) -> Callable:
    """``--capacity`` and ``--max-devices``."""
    f = setting_option(
        "max_devices",
        help=f"{setting('max_devices').help[:-1]} "
        f"[default: {load_settings().capacity_max_devices}].",
    )(f)
    return click.option(
        "--capacity",
        is_flag=True,
        help="Find the fewest devices (and their layout) serving --rate or --trace with the "
        "p99 limits met by 99 % of the requests, instead of serving on --devices.",
    )(f)


def check_capacity(cap: dict[str, Any], load: dict[str, Any], devices: int | None) -> None:
    """One ConfigError naming every conflict among ``--capacity``, ``--max-devices``,
    ``--devices``, the arrivals and the p99 limits."""
    problems = []
    if cap["capacity"]:
        if load["rate"] is None and load["trace"] is None:
            problems.append("--capacity needs --rate or --trace")
        if load["p99_ttft_ms"] is None and load["p99_tpot_ms"] is None:
            problems.append("--capacity needs --p99-ttft-ms or --p99-tpot-ms")
        if devices is not None:
            problems.append(
                "--capacity searches the device count: give --max-devices, not --devices"
            )
    else:
        if cap["max_devices"] is not None:
            problems.append("--max-devices needs --capacity")
        if devices is None:
            problems.append("--devices is required (or --capacity to search it)")
    if problems:
        raise ConfigError("serve: " + "; ".join(problems))


def counting(
    stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A callback told each device count as it is tried, drawing a progress line on a
    terminal (``stream``, stderr by default) once the plan has run for a while, and the
    function that ends it."""
    start = clock()
    out = stream if stream is not None else sys.stderr
    progress = Progress("device counts", stream=out, enabled=out.isatty(), clock=clock)

    def on_count(i: int, total: int) -> None:
        if progress.started:
            progress.advance()
        elif clock() - start > _QUIET_S:
            progress.start(total - i)

    def close() -> None:
        """The counts left are decided (a count was found, or the plan stopped)."""
        if progress.started and progress.total is not None:
            progress.skip(progress.total - progress.done)
        progress.close()

    return on_count, close


def _trail(trail: tuple[CapacityTry, ...]) -> list[dict[str, Any]]:
    return [
        {"devices": t.devices, "simulated": list(t.simulated), "outcome": t.outcome} for t in trail
    ]


def capacity_document(
    plan: CapacityPlan, steady: dict[str, Any], load: dict[str, Any]
) -> dict[str, Any]:
    """``--json``'s document: the count and layout found, the cost per token at the rate,
    the trail, and the run under load as ``serve --rate`` gives it."""
    assert plan.point is not None and plan.load is not None, "a plan found has its run"
    return {
        "capacity_devices": plan.devices,
        "capacity_strategy": str(plan.point.layout),
        "usd_per_million_tokens_at_rate": plan.usd_per_million_tokens,
        "capacity_trail": _trail(plan.trail),
        **load_document(plan.load, plan.point, steady, load),
    }


def print_capacity(plan: CapacityPlan, doc: dict[str, Any]) -> None:
    """The count and layout found, the run under load, and the trail."""
    assert plan.load is not None, "a plan found has its run"
    click.echo(
        f"capacity: {fmt_noun(doc['capacity_devices'], 'device')} serve the arrivals, "
        f"layout {doc['capacity_strategy']}, "
        f"{fmt_quantity(doc['usd_per_million_tokens_at_rate'], 'USD')} per million output "
        "tokens at the rate"
    )
    click.echo("")
    print_load(plan.load, doc)
    click.echo("")
    print_trail(plan.trail)


def print_trail(trail: tuple[CapacityTry, ...]) -> None:
    """The counts tried, the layouts simulated at each and why it failed."""
    rows = [[t.devices, ", ".join(t.simulated) or "-", t.outcome] for t in trail]
    click.echo(table(rows, ["devices", "simulated", "outcome"]))


def refuse_capacity(plan: CapacityPlan, max_devices: int, as_json: bool) -> None:
    """No count up to ``max_devices`` serves the arrivals: print the trail and exit 3 with
    the last count's reason."""
    if as_json:
        echo_json(
            {
                "capacity_devices": None,
                "capacity_strategy": None,
                "capacity_trail": _trail(plan.trail),
            }
        )
    else:
        print_trail(plan.trail)
    last = plan.trail[-1] if plan.trail else None
    why = f" (at {fmt_noun(last.devices, 'device')}: {last.outcome})" if last else ""
    raise NoFeasiblePoint(
        f"no device count up to {max_devices} meets the p99 limits at the rate{why}"
    )
