"""Option types and groups shared by the commands: a number that must be finite and in a
range, the design and cluster of one evaluation, and the scoring settings.

click's ``float`` and ``FloatRange`` let ``nan`` and ``inf`` through (no comparison fails on
them); :class:`FiniteFloat` refuses them with click's one usage-error line, naming the option
and the range (exit status 2). :func:`default_seq_len` is the sequence length the commands
use when none is given, :data:`context_extension_option` the flag that lets it exceed the
model's context. :func:`design_options` and :func:`scoring_options` add the options
``phaze evaluate`` and ``phaze serve`` share; :func:`cluster_of` and :func:`scoring_of` read
them back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import click

from phaze.cli._settings import setting_option
from phaze.settings import setting

if TYPE_CHECKING:
    from arch_space import Accelerator, Cluster
    from phaze.model.scoring import ScoringParams
    from workloads import Model

__all__ = [
    "FiniteFloat",
    "RecomputeMode",
    "scoring_float",
    "DEFAULT_SEQ_LEN",
    "default_seq_len",
    "context_extension_option",
    "design_options",
    "scoring_options",
    "cluster_of",
    "scoring_of",
    "optimizer_state_option",
]

DEFAULT_SEQ_LEN: Final = 2048  # tokens; GPT-3's context, used where a model's is at least this


def default_seq_len(model: Model) -> int:
    """The sequence length a command uses when none is given: 2048 tokens, or the model's
    context (its position table) when that is shorter."""
    return min(DEFAULT_SEQ_LEN, model.max_positions)


context_extension_option: Final = setting_option("allow_context_extension")


class RecomputeMode(click.ParamType):
    """A recompute mode: none, selective, full or modules:<groups joined by +>
    (:mod:`workloads.recompute_modules`)."""

    name = "mode"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        from workloads.recompute_modules import recompute_problem

        if (why := recompute_problem(value)) is not None:
            self.fail(why, param, ctx)
        return value


class FiniteFloat(click.ParamType):
    """A finite float in ``[lo, hi]`` (an end is left out when ``lo_open`` / ``hi_open``).

    Examples
    --------
    >>> FiniteFloat(1, 4).convert("1.5", None, None), FiniteFloat(0, 1, lo_open=True).range_text
    (1.5, '(0, 1]')
    """

    name = "number"

    def __init__(self, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False):
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open

    @property
    def range_text(self) -> str:
        return (
            f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        )

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number in {self.range_text}", param, ctx)
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        if not (math.isfinite(x) and above and below):
            self.fail(f"{value} is not a finite number in {self.range_text}", param, ctx)
        return x

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return f"FLOAT {self.range_text}"


def scoring_float(name: str, per_unit: float = 1.0) -> FiniteFloat:
    """The option type of scoring number ``name`` in its range (:data:`phaze.model.scoring.RANGES`),
    given in units of ``per_unit`` SI units (``SECONDS_PER_YEAR`` for a lifetime in years)."""
    from phaze.model.scoring import RANGES

    lo, hi, lo_in, hi_in = RANGES[name]
    return FiniteFloat(lo / per_unit, hi / per_unit, lo_open=not lo_in, hi_open=not hi_in)


def _stack(options: list[Callable]) -> Callable:
    def apply(f: Callable) -> Callable:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def design_options(devices_help: str, devices_required: bool = True) -> Callable:
    """``--workload``, ``--arch``, ``--devices`` and the cluster's nodes and links
    (``devices_required`` False: the command checks ``--devices`` itself)."""
    return _stack(
        [
            click.option(
                "--workload", required=True, help="Catalog name or a Hugging Face config.json."
            ),
            click.option(
                "--arch", "arch", required=True, help="Accelerator preset name or TOML file."
            ),
            setting_option("devices", required=devices_required, help=devices_help),
            setting_option("devices_per_node", declared_default=True),
            setting_option("intra_node_bandwidth_bytes_per_s", declared_default=True),
            setting_option("inter_node_bandwidth_bytes_per_s", declared_default=True),
        ]
    )


def cluster_of(kw: dict[str, Any]) -> Cluster:
    """The cluster the :func:`design_options` in ``kw`` give (they are taken out of it)."""
    from arch_space import Cluster

    links = ("intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s")
    return Cluster(
        devices=kw.pop("devices"),
        devices_per_node=kw.pop("devices_per_node"),
        **{k: setting(k).from_flag(kw.pop(setting(k).dest)) for k in links},
    )


def _site_options() -> list[tuple[Callable, bool]]:
    """Where the energy comes from: the grid region (or its carbon intensity given) and the
    facility's overhead, each with whether only training offers it."""
    return [
        (
            click.option(
                "--grid",
                "grid_region",
                default="world",
                show_default=True,
                help="Grid region (any case).",
            ),
            False,
        ),
        (
            click.option(
                "--grid-gco2e-per-kwh",
                type=scoring_float("grid_gco2e_per_kwh"),
                help="Grid carbon intensity (overrides --grid).",
            ),
            False,
        ),
        (
            click.option(
                "--pue",
                type=scoring_float("pue"),
                default=1.10,
                show_default=True,
                help="Facility PUE.",
            ),
            False,
        ),
    ]


def _ownership_options() -> list[tuple[Callable, bool]]:
    """What a device-hour of owned equipment costs: its life and the run's share of it, the
    electricity price, bought or built, the cost of capital, the share of the time spent
    training and the volume a new design's non-recurring cost is spread over, each with
    whether only training offers it."""
    from arch_space.tco import COST_VIEWS, SECONDS_PER_YEAR

    return [
        (
            click.option(
                "--lifetime-years",
                type=scoring_float("lifetime_s", SECONDS_PER_YEAR),
                default=5.0,
                show_default=True,
                help="Life of the IT equipment: its depreciation period and its embodied carbon's.",
            ),
            False,
        ),
        (
            click.option(
                "--embodied-mode",
                type=click.Choice(["amortised", "whole-life"]),
                default="amortised",
                show_default=True,
                help="Embodied carbon and capex: the run's share of the lifetime, or all of it.",
            ),
            True,
        ),
        (
            click.option(
                "--usd-per-kwh",
                type=scoring_float("usd_per_kwh"),
                help="Electricity price (default: the grid region's).",
            ),
            False,
        ),
        (
            click.option(
                "--cost-view",
                type=click.Choice(COST_VIEWS),
                default="buy",
                show_default=True,
                help="Price the accelerator as built (chip, board, a new design's NRE) or bought.",
            ),
            False,
        ),
        (
            click.option(
                "--interest",
                type=scoring_float("interest"),
                help="Yearly cost of capital [default: 0.08, Barroso et al. 2013].",
            ),
            False,
        ),
        (
            click.option(
                "--goodput",
                type=scoring_float("goodput"),
                help="Share of wall-clock time spent training [default: 0.90, Llama 3's large "
                "runs].",
            ),
            True,
        ),
        (
            click.option(
                "--volume",
                "volume_units",
                type=click.IntRange(1, 10**12),
                help="Units a new design's non-recurring cost is spread over [default: 1,200,000].",
            ),
            False,
        ),
    ]


def scoring_options(training: bool) -> Callable:
    """The scoring settings: grid, PUE, electricity price, cost view, host server, and the
    ownership terms (lifetime, interest, production volume) that price a device-hour; with
    ``training``, the embodied mode and goodput too."""
    from arch_space.system import host_profiles

    host = click.option(
        "--host",
        "host_profile",
        help="Host server per node ("
        + ", ".join(host_profiles())
        + ") [default: the preset's own server, else dgx-a100].",
    )
    # (option, training only), in the order the help lists them
    options = [*_site_options(), *_ownership_options(), (host, False)]
    return _stack([option for option, training_only in options if training or not training_only])


def scoring_of(kw: dict[str, Any], acc: Accelerator) -> ScoringParams:
    """The scoring settings the :func:`scoring_options` in ``kw`` give (taken out of it); a
    preset runs in its own host server unless ``--host`` says otherwise
    (:meth:`~phaze.model.scoring.ScoringParams.for_accelerator`); a setting the command does not
    offer keeps :class:`~phaze.model.scoring.ScoringParams`' default."""
    from phaze.model.scoring import SECONDS_PER_YEAR, ScoringParams

    given = {
        k: kw.pop(k) for k in ("embodied_mode", "interest", "goodput", "volume_units") if k in kw
    }
    if "lifetime_years" in kw:
        given["lifetime_s"] = kw.pop("lifetime_years") * SECONDS_PER_YEAR
    return ScoringParams(
        pue=kw.pop("pue"),
        grid_gco2e_per_kwh=kw.pop("grid_gco2e_per_kwh"),
        grid_region=kw.pop("grid_region"),
        host_profile=kw.pop("host_profile"),
        usd_per_kwh=kw.pop("usd_per_kwh"),
        cost_view=kw.pop("cost_view"),
        **given,
    ).for_accelerator(acc.profile_name)


optimizer_state_option: Final = setting_option("optimizer_state")
