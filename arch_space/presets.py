"""Named accelerators: real chips for validation and the reference's maximum design.

A preset is one data file, ``arch_space/data/chips/<name>.toml``: its ``[accelerator]`` fields
with the data sheet or paper they come from, the published figures it is checked against
(``[published]``) and every table measured or published about it (sustained rates, core
harvesting, host server and board power, price, tensor peaks; :data:`arch_space._data.CHIP_TABLES`).
Shipping a preset is adding its file. Peak FLOP/s follows from the counts (``2 x MACs x
clock``) and is checked against the data sheet in tests/test_arch_presets.py, as is the
modelled die area where one is published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from arch_space._data import shipped_chips
from arch_space.accelerator import Accelerator
from arch_space.accelerator_table import MEASURED_AS, accelerator_values
from arch_space.formats import peak_format_rates
from phaze_common.errors import ConfigError, unknown_name

__all__ = ["preset", "preset_names", "PUBLISHED", "NVLINK_BYTES_PER_S"]


def _chip(name: str, chip: Mapping[str, Any]) -> Accelerator:
    """The preset of chip file ``name``: its ``[accelerator]`` fields, with the tensor-core
    formats of its ``[[peak]]`` rows where the table lists none."""
    where = f"arch_space/data/chips/{name}.toml [accelerator]"
    table = chip.get("accelerator", {})
    values, problems = accelerator_values(table, where)
    if table.get("name") != name or MEASURED_AS in table:
        problems.append(f"{where}: name must be the file's, {name!r}, with no {MEASURED_AS}")
    if problems:
        raise ConfigError("; ".join(problems))
    acc = Accelerator(**values)
    if "formats" in table:
        return acc
    return replace(acc, formats=peak_format_rates(chip.get("peak", ())) or acc.formats)


_PRESETS: MappingProxyType[str, Accelerator] = MappingProxyType(
    {name: _chip(name, chip) for name, chip in shipped_chips().items()}
)


def _published(key: str) -> dict[str, Any]:
    return {
        name: chip["published"][key]
        for name, chip in shipped_chips().items()
        if key in chip.get("published", {})
    }


#: NVLink bandwidth per device per direction (half the data sheets' bidirectional totals), of
#: the presets with NVLink (``[published] nvlink_bytes_per_s``). The MI300X's Infinity Fabric
#: and the TPUs' ICI are no NVLink and are not listed. A cluster's intra-node links stay the
#: user's (``--intra-node-gbps``): a preset does not set them.
NVLINK_BYTES_PER_S: MappingProxyType[str, float] = MappingProxyType(
    _published("nvlink_bytes_per_s")
)

#: Published figures the presets are checked against: (peak dense bf16 FLOP/s, area of one
#: die mm2 or None, TDP W or None), from each chip file's ``[published]`` table.
PUBLISHED: MappingProxyType[str, tuple[float, float | None, float | None]] = MappingProxyType(
    {
        name: (peak, _published("die_mm2").get(name), _published("tdp_w").get(name))
        for name, peak in _published("peak_bf16_flops_per_s").items()
    }
)


def preset_names() -> tuple[str, ...]:
    """Names of the shipped presets, in a stable order."""
    return tuple(_PRESETS)


def preset(name: str) -> Accelerator:
    """The preset accelerator ``name``; unknown names suggest the nearest.

    Examples
    --------
    >>> preset("a100").peak_flops / 1e12
    311.86944
    """
    try:
        return _PRESETS[name]
    except KeyError:
        raise unknown_name("accelerator preset", name, _PRESETS) from None
