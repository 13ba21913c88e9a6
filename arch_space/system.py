"""The system around the accelerators: host servers (power, price, embodied carbon), electricity
prices and the default power budget of a design space.

Constants live in ``data/system.toml`` beside their sources; this module only reads them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

from arch_space._data import plain_values, shipped_toml
from arch_space.power_limit import preset_board_limit_w
from phaze_common.errors import unknown_name

__all__ = [
    "board_limit_w",
    "datasheet_board_w",
    "host_profiles",
    "host_w_per_node",
    "host_profile_for",
    "host_embodied_kgco2e_per_device",
    "host_usd_per_device",
    "host_max_w_per_device",
    "typical_load_fraction",
    "electricity_regions",
    "electricity_usd_per_kwh",
    "power_budget_w",
]

_FILE = "system.toml"


@functools.cache
def _profiles() -> Mapping[str, Mapping[str, float]]:
    return {k: plain_values(v) for k, v in shipped_toml(_FILE)["host"]["profile"].items()}


def host_profiles() -> tuple[str, ...]:
    """Names of the shipped host servers, sorted."""
    return tuple(sorted(_profiles()))


def host_profile_for(accelerator: str, default: str = "dgx-a100") -> str:
    """The host server an accelerator preset ships in (``default`` for any other design).

    Examples
    --------
    >>> host_profile_for("h100"), host_profile_for("my-design")
    ('dgx-h100', 'dgx-a100')
    """
    for name, p in _profiles().items():
        if p.get("preset") == accelerator:
            return name
    return default


def board_limit_w(accelerator: str, node_nm: int) -> float:
    """The board power limit (W) of ``accelerator``: its host server's when it is a preset
    one ships in, else the default budget of its node (:func:`power_budget_w`)."""
    limit = preset_board_limit_w(accelerator)
    return limit if math.isfinite(limit) else power_budget_w(node_nm)


def datasheet_board_w(accelerator: str) -> tuple[float, str] | None:
    """The data sheet's board power (its TDP, W) of preset ``accelerator`` and its source:
    the ``device_board_w`` of the host server it ships in (``system.toml``); None for a
    design in no shipped server.

    Examples
    --------
    >>> datasheet_board_w("h100")[0], datasheet_board_w("my-design")
    (700.0, None)
    """
    for p in shipped_toml(_FILE)["host"]["profile"].values():
        if accelerator and p.get("preset") == accelerator:
            entry = p["device_board_w"]
            return float(entry["value"]), str(entry["source"])
    return None


def typical_load_fraction() -> float:
    """The share of a node's maximum it draws under training load (measured, sourced)."""
    return float(plain_values(shipped_toml(_FILE)["host"])["typical_load_fraction"])


def host_w_per_node(profile: str) -> float:
    """Host power (W) of one node of ``profile`` under training load: its datasheet maximum
    less its accelerators' board limits, at the typical-load fraction.

    Examples
    --------
    >>> round(host_w_per_node("dgx-a100"))
    2508
    """
    p = _profile(profile)
    return (p["node_max_w"] - p["devices"] * p["device_board_w"]) * typical_load_fraction()


def _profile(profile: str) -> Mapping[str, float]:
    try:
        return _profiles()[profile]
    except KeyError:
        raise unknown_name("host profile", profile, _profiles()) from None


def host_embodied_kgco2e_per_device(profile: str) -> float:
    """Embodied carbon (kgCO2e) of a ``profile`` server without its accelerators, per
    accelerator slot."""
    p = _profile(profile)
    return p["embodied_kgco2e"] / p["devices"]


def host_usd_per_device(profile: str) -> float:
    """Price (USD) of a ``profile`` server without its accelerators, per accelerator slot:
    the published system price less its accelerators at their price.

    Examples
    --------
    >>> round(host_usd_per_device("dgx-h100"))
    8518
    """
    p = _profile(profile)
    return (p["system_usd"] - p["devices"] * p["device_usd"]) / p["devices"]


def host_max_w_per_device(profile: str) -> float:
    """The maximum power (W) of a ``profile`` server without its accelerators, per slot: its
    datasheet maximum less its accelerators' board limits (what a data centre provisions)."""
    p = _profile(profile)
    return (p["node_max_w"] - p["devices"] * p["device_board_w"]) / p["devices"]


def electricity_regions() -> tuple[str, ...]:
    """Regions with an electricity price, sorted."""
    return tuple(sorted(shipped_toml(_FILE)["electricity"]))


def electricity_usd_per_kwh(region: str) -> float:
    """Electricity price of ``region`` (USD/kWh), whatever its letter case; unknown names
    suggest the nearest."""
    prices = plain_values(shipped_toml(_FILE)["electricity"])
    try:
        return float(prices[region.casefold()])
    except KeyError:
        raise unknown_name("electricity region", region.casefold(), prices) from None


def power_budget_w(node_nm: int) -> float:
    """The default power budget (W) of a design space at ``node_nm``: its era's board limit."""
    budgets = plain_values(shipped_toml(_FILE)["power_budget"])
    try:
        return float(budgets[str(node_nm)])
    except KeyError:
        raise unknown_name("process node for a power budget", str(node_nm), budgets) from None
