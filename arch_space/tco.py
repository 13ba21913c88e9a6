"""What a training system costs to own, per device-hour: the accelerator, its share of the host
server, of the scale-out network and of the data centre, the cost of the capital tied up in
them, and their upkeep.

Two views price the accelerator (:func:`accelerator_usd`): ``build``, what it costs to make
(chip, board, and for a new design its non-recurring cost over a production volume), and
``buy``, what an owner pays (a product's published price, a new design's build cost over one
minus a gross margin). Hosts, network and building are bought in both views.

The network is a non-blocking folded Clos (fat tree) with one port per accelerator, whose tiers
follow the cluster size (:func:`fat_tree`). Capital is paid off over its life at an interest
rate (the capital recovery factor); the data centre is built per watt of IT load it must
supply and lives longer than the IT equipment. Every constant is in ``data/system.toml`` and
``data/cost.toml`` beside its source. The functions are pure arithmetic on floats or numpy
arrays (one entry per design), so the sweep's bounds price many designs at once.

References
----------
Barroso, Clidaras, Hoelzle, "The Datacenter as a Computer", 2nd ed. (2013), ch. 6 (TCO:
capital amortised with interest, datacenter opex per watt, server opex as a share); Al-Fares
et al., "A Scalable, Commodity Data Center Network Architecture", SIGCOMM 2008 (fat trees of
k-port switches: 2 (k/2)^t hosts in t tiers).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Literal, get_args

import numpy as np

from arch_space._data import plain_values, shipped_toml
from arch_space.accelerator import Accelerator
from arch_space.cost import CostParams, device_cost_usd
from arch_space.system import board_limit_w, host_max_w_per_device, host_usd_per_device
from phaze_common.errors import ConfigError

__all__ = [
    "SECONDS_PER_YEAR",
    "COST_VIEWS",
    "CostView",
    "TcoConstants",
    "FatTree",
    "DeviceCapex",
    "DeviceHourCost",
    "fat_tree",
    "capital_recovery_factor",
    "nre_usd",
    "build_cost_usd",
    "buy_price_usd",
    "accelerator_usd",
    "provisioned_w",
    "device_capex",
    "stack_capex",
    "device_hour_cost",
]

CostView = Literal["build", "buy"]
COST_VIEWS: Final = get_args(CostView)
# Julian year, the convention of ACT's lifetime figures
SECONDS_PER_YEAR: Final = 365.25 * 24 * 3600
_HOURS_PER_YEAR: Final = SECONDS_PER_YEAR / 3600.0


@dataclass(frozen=True, slots=True)
class TcoConstants:
    """The shipped constants of the system's cost (``system.toml``; units in the names)."""

    datacenter_usd_per_w: float
    datacenter_lifetime_s: float
    datacenter_opex_usd_per_w_year: float
    interest: float
    maintenance_share: float
    switch_radix: int
    switch_usd: float
    link_usd: float
    switch_embodied_kgco2e: float
    goodput: float

    @classmethod
    def default(cls) -> TcoConstants:
        return _shipped()


@functools.lru_cache(maxsize=1)
def _shipped() -> TcoConstants:
    data = shipped_toml("system.toml")
    dc, fin = plain_values(data["datacenter"]), plain_values(data["finance"])
    net, good = plain_values(data["network"]), plain_values(data["goodput"])
    return TcoConstants(
        datacenter_usd_per_w=float(dc["capex_usd_per_w"]),
        datacenter_lifetime_s=float(dc["lifetime_years"]) * SECONDS_PER_YEAR,
        datacenter_opex_usd_per_w_year=float(dc["opex_usd_per_w_year"]),
        interest=float(fin["interest"]),
        maintenance_share=float(fin["maintenance_share"]),
        switch_radix=int(net["switch_radix"]),
        switch_usd=float(net["switch_usd"]),
        link_usd=float(net["link_usd"]),
        switch_embodied_kgco2e=float(net["switch_embodied_kgco2e"]),
        goodput=float(good["default"]),
    )


@dataclass(frozen=True, slots=True)
class FatTree:
    """A non-blocking folded Clos of ``radix``-port switches for ``endpoints`` ports:
    its tiers, and per endpoint the switches and links (a link: two transceivers and a
    cable) it takes."""

    endpoints: int
    radix: int
    tiers: int
    switches_per_endpoint: float
    links_per_endpoint: int


def fat_tree(endpoints: int, radix: int) -> FatTree:
    """The smallest fat tree of ``radix``-port switches that connects ``endpoints``.

    With t tiers it reaches ``2 (k/2)^t`` endpoints (t = 1: one switch of k ports) using
    ``(2t - 1)(k/2)^(t-1)`` switches, so ``(2t - 1) / k`` switches and t links per endpoint
    (Al-Fares et al. 2008). One accelerator alone needs no network.

    Examples
    --------
    >>> t = fat_tree(1024, 64)
    >>> t.tiers, round(t.switches_per_endpoint * 1024), t.links_per_endpoint
    (2, 48, 2)
    >>> fat_tree(1, 64).tiers, fat_tree(64, 64).tiers, fat_tree(65536, 64).tiers
    (0, 1, 3)
    """
    if endpoints < 1 or radix < 4:
        raise ConfigError(
            f"fat tree: endpoints = {endpoints} must be >= 1 and radix = {radix} >= 4"
        )
    tiers = 0 if endpoints == 1 else 1
    while tiers and 2 * (radix // 2) ** tiers < endpoints:
        tiers += 1
    return FatTree(
        endpoints=endpoints,
        radix=radix,
        tiers=tiers,
        switches_per_endpoint=(2 * tiers - 1) / radix if tiers else 0.0,
        links_per_endpoint=tiers,
    )


def capital_recovery_factor(rate: float, years: float) -> float:
    """The yearly payment, per dollar borrowed, that repays a loan over ``years`` at ``rate``:
    ``r (1 + r)^n / ((1 + r)^n - 1)``, ``1 / n`` without interest.

    Examples
    --------
    >>> round(capital_recovery_factor(0.08, 5), 5), capital_recovery_factor(0.0, 4)
    (0.25046, 0.25)
    """
    if rate == 0:
        return 1.0 / years
    # r / (1 - (1 + r)^-n), with expm1/log1p so that tiny rates tend to 1/n without cancelling
    return rate / -math.expm1(-years * math.log1p(rate))


def nre_usd(node_nm: int, params: CostParams | None = None) -> float:
    """Non-recurring cost (USD) of a new chip at ``node_nm``: design, verification, IP,
    masks and prototypes (published per-node estimates)."""
    p = params or CostParams.default()
    if node_nm not in p.nre_usd:
        known = ", ".join(map(str, sorted(p.nre_usd, reverse=True)))
        raise ConfigError(
            f"cost params: no non-recurring cost for node {node_nm} nm (known: {known})"
        )
    return p.nre_usd[node_nm]


def _is_product(acc: Accelerator, params: CostParams) -> bool:
    """True for a product with a published price (its design cost is sunk, not ours)."""
    return bool(acc.profile_name) and acc.profile_name in params.price


def build_cost_usd(
    acc: Accelerator, params: CostParams | None = None, volume_units: float | None = None
) -> float:
    """What one accelerator costs to make (USD): the chip (die, HBM, package, test and
    assembly), its board, and for a new design its non-recurring cost over ``volume_units``
    (default: the shipped production volume)."""
    p = params or CostParams.default()
    made = device_cost_usd(acc, p) + p.board_usd
    if _is_product(acc, p):
        return made
    volume = p.volume_units if volume_units is None else volume_units
    return made + nre_usd(acc.node_nm, p) / volume


def buy_price_usd(
    acc: Accelerator, params: CostParams | None = None, volume_units: float | None = None
) -> float:
    """What an owner pays for one accelerator (USD): a product's published price, else its
    build cost over one minus the gross margin (a price of which the margin is that share)."""
    p = params or CostParams.default()
    if _is_product(acc, p):
        return p.price[acc.profile_name]
    return build_cost_usd(acc, p, volume_units) / (1.0 - p.gross_margin)


def accelerator_usd(
    acc: Accelerator,
    view: CostView,
    params: CostParams | None = None,
    volume_units: float | None = None,
) -> float:
    """The accelerator's price in ``view`` (``build`` or ``buy``)."""
    if view == "build":
        return build_cost_usd(acc, params, volume_units)
    if view == "buy":
        return buy_price_usd(acc, params, volume_units)
    raise ConfigError(f"cost view = {view!r} must be one of {', '.join(COST_VIEWS)}")


def provisioned_w(acc: Accelerator, host_profile: str) -> float:
    """Power (W) the data centre must supply per accelerator: its board limit and its share
    of the host server's maximum."""
    return board_limit_w(acc.profile_name, acc.node_nm) + host_max_w_per_device(host_profile)


@dataclass(frozen=True, slots=True)
class DeviceCapex:
    """Capital cost of one accelerator's share of the system (USD; floats or arrays)."""

    accelerator_usd: Any
    host_usd: float
    network_usd: float
    datacenter_usd: Any
    provisioned_w: Any

    @property
    def it_usd(self) -> Any:
        """The IT equipment: accelerator, host share, network share."""
        return self.accelerator_usd + self.host_usd + self.network_usd

    @property
    def total_usd(self) -> Any:
        return self.it_usd + self.datacenter_usd


def device_capex(
    acc: Accelerator,
    devices: int,
    host_profile: str,
    view: CostView = "buy",
    volume_units: float | None = None,
    constants: TcoConstants | None = None,
) -> DeviceCapex:
    """The capital cost of one of ``devices`` accelerators ``acc`` with its host share, its
    share of a fat tree connecting all of them and of the data centre sized for their power."""
    c = constants or TcoConstants.default()
    tree = fat_tree(devices, c.switch_radix)
    watts = provisioned_w(acc, host_profile)
    return DeviceCapex(
        accelerator_usd=accelerator_usd(acc, view, volume_units=volume_units),
        host_usd=host_usd_per_device(host_profile),
        network_usd=tree.switches_per_endpoint * c.switch_usd
        + tree.links_per_endpoint * c.link_usd,
        datacenter_usd=watts * c.datacenter_usd_per_w,
        provisioned_w=watts,
    )


def stack_capex(capexes: Sequence[DeviceCapex]) -> DeviceCapex:
    """One DeviceCapex of arrays (one entry per design) from many of floats."""
    return DeviceCapex(
        **{
            f.name: np.array([getattr(c, f.name) for c in capexes], dtype=float)
            for f in fields(DeviceCapex)
        }
    )


@dataclass(frozen=True, slots=True)
class DeviceHourCost:
    """Cost (USD) of holding one accelerator for one hour, by term (floats or arrays):
    straight-line depreciation of each capital item, the interest on the capital, IT
    maintenance and the data centre's running cost. Electricity depends on the job and is
    added by the scoring."""

    accelerator: Any
    host: Any
    network: Any
    datacenter: Any
    interest: Any
    maintenance: Any
    datacenter_opex: Any

    @property
    def total(self) -> Any:
        return sum(getattr(self, f.name) for f in fields(self))

    def terms(self) -> dict[str, Any]:
        """``{term: USD per device-hour}`` in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def device_hour_cost(
    capex: DeviceCapex,
    *,
    lifetime_s: float,
    interest: float,
    utilisation: float = 1.0,
    constants: TcoConstants | None = None,
) -> DeviceHourCost:
    """Each term of an accelerator-hour's cost.

    IT capital is paid off over ``lifetime_s``, the data centre over its own life, both at
    ``interest`` (capital recovery factor: depreciation ``P / n`` plus interest
    ``(CRF - 1/n) P`` a year); a device used ``utilisation`` of its life carries the capital
    of the idle rest. Maintenance is a share of the IT depreciation; the data centre's opex is
    per provisioned watt.
    """
    c = constants or TcoConstants.default()
    it_years = lifetime_s / SECONDS_PER_YEAR
    dc_years = c.datacenter_lifetime_s / SECONDS_PER_YEAR
    per_hour = 1.0 / (_HOURS_PER_YEAR * utilisation)
    interest_per_year = (
        capital_recovery_factor(interest, it_years) - 1.0 / it_years
    ) * capex.it_usd
    interest_per_year = (
        interest_per_year
        + (capital_recovery_factor(interest, dc_years) - 1.0 / dc_years) * capex.datacenter_usd
    )
    return DeviceHourCost(
        accelerator=capex.accelerator_usd / it_years * per_hour,
        host=capex.host_usd / it_years * per_hour,
        network=capex.network_usd / it_years * per_hour,
        datacenter=capex.datacenter_usd / dc_years * per_hour,
        interest=interest_per_year * per_hour,
        maintenance=c.maintenance_share * capex.it_usd / it_years * per_hour,
        datacenter_opex=c.datacenter_opex_usd_per_w_year * capex.provisioned_w * per_hour,
    )
