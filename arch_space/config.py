"""Accelerators to and from TOML, and resolving a preset name or a file to an Accelerator.

File layout (sizes in MiB / GiB, rates in SI; ``accelerator_to_toml`` writes it)::

    [accelerator]
    name = "a100"
    num_tc = 432
    tc_rows = 16
    tc_cols = 16
    num_vc = 108
    vc_lanes = 64
    glb_mib = 40
    hbm_gib = 80
    hbm_bandwidth_bytes_per_s = 2.039e12
    clock_hz = 1.41e9
    node_nm = 7              # optional, default 7
    bytes_per_element = 2    # optional, default 2
    hbm_stacks = 5           # optional, default 0 = derived from bandwidth and capacity
    dies = 1                 # optional, default 1: logic dies in the package (B200: 2)
    formats = { bf16 = 1.0, int8 = 2.0 }  # optional, default bf16 alone: tensor-core
                             # formats and their MACs per cycle relative to bf16
    measured_as = "a100"     # optional: the preset whose measured data stands for this
                             # chip's (see below); "" for none

A chip is one file: ``measured_as`` names the preset whose shipped measurements the chip
takes, the sustained rates of ``devices.toml`` (GEMM tables, training clock, collective
curves), its harvesting (``harvest.toml``), host server and board power limit
(``system.toml``) and price (``cost.toml``), each with its source where it is shipped; the
file's own fields (HBM among them) are modelled as written. ``phaze arch show NAME --toml``
writes a preset so. The one rule for a file without the key: a chip with a preset's silicon
(cores, buffer, clock, node, element size, dies; not the HBM or formats) is measured as that
preset when it bears the preset's name, and is refused otherwise (naming the preset), so that
a variant never silently falls back to the generic profile; a chip with no preset's silicon
has none.

Clusters use the Cluster field names (SI units); only ``devices`` is required::

    [cluster]
    devices = 1024
    devices_per_node = 8
    intra_node_bandwidth_bytes_per_s = 3e11
    inter_node_bandwidth_bytes_per_s = 2.5e10
    intra_node_latency_s = 2e-6
    inter_node_latency_s = 5e-6
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from arch_space._data import read_toml, shipped_toml, toml_literal, unknown_keys
from arch_space.accelerator import Accelerator, Cluster, accelerator_problems, cluster_problems
from arch_space.bounds import bound_problem
from arch_space.presets import preset, preset_names
from phaze_common.errors import ConfigError, unknown_name

__all__ = [
    "ACCELERATOR_TOML_KEYS",
    "accelerator_from_mapping",
    "accelerator_from_toml",
    "accelerator_to_toml",
    "preset_to_toml",
    "load_accelerator",
    "cluster_from_mapping",
    "cluster_from_toml",
    "cluster_to_toml",
]

_MIB = 2**20
_GIB = 2**30

#: TOML key -> (Accelerator field, bytes per unit or None for as-is), in file order.
ACCELERATOR_TOML_KEYS: Mapping[str, tuple[str, int | None]] = MappingProxyType(
    {
        "name": ("name", None),
        "num_tc": ("num_tc", None),
        "tc_rows": ("tc_rows", None),
        "tc_cols": ("tc_cols", None),
        "num_vc": ("num_vc", None),
        "vc_lanes": ("vc_lanes", None),
        "glb_mib": ("glb_bytes", _MIB),
        "hbm_gib": ("hbm_bytes", _GIB),
        "hbm_bandwidth_bytes_per_s": ("hbm_bandwidth_bytes_per_s", None),
        "clock_hz": ("clock_hz", None),
        "node_nm": ("node_nm", None),
        "bytes_per_element": ("bytes_per_element", None),
        "hbm_stacks": ("hbm_stacks", None),
        "dies": ("dies", None),
    }
)
_MEASURED_AS = "measured_as"
_MISSING = dataclasses.MISSING
# The TOML keys of the fields without a default, in file order.
_NO_DEFAULT = {f.name for f in fields(Accelerator) if f.default is _MISSING}
_REQUIRED = tuple(k for k, (name, _) in ACCELERATOR_TOML_KEYS.items() if name in _NO_DEFAULT)


def accelerator_from_mapping(data: Mapping[str, Any], source: str = "accelerator") -> Accelerator:
    """An Accelerator from ``{"accelerator": {...}}`` (the TOML layout), reporting every
    unknown key (with the nearest known one), missing key, bad value and value outside its
    physical range (:mod:`arch_space.bounds`) at once."""
    problems = unknown_keys(source, data, ["accelerator"])
    table = data.get("accelerator")
    if not isinstance(table, Mapping):
        raise ConfigError("; ".join([*problems, f"{source}: needs an [accelerator] table"]))
    where = f"{source} [accelerator]"
    problems += unknown_keys(where, table, (*ACCELERATOR_TOML_KEYS, "formats", _MEASURED_AS))
    problems += [f"{where}: missing key {k!r}" for k in _REQUIRED if k not in table]
    values = {f.name: f.default for f in fields(Accelerator)}
    if "formats" in table:
        values["formats"] = _formats(table["formats"])
    for key, raw in table.items():
        if key not in ACCELERATOR_TOML_KEYS:
            continue
        field_name, unit = ACCELERATOR_TOML_KEYS[key]
        if unit is None:
            values[field_name] = raw
        elif not isinstance(raw, numbers.Real) or isinstance(raw, bool) or raw <= 0:
            problems.append(f"{where}: {key} = {raw!r} must be a positive number")
            values[field_name] = 1
        elif (raw * unit) % 1:
            problems.append(f"{where}: {key} = {raw!r} is not a whole number of bytes")
            values[field_name] = 1
        else:
            values[field_name] = int(raw * unit)
    for key in _REQUIRED:
        if key not in table or values[ACCELERATOR_TOML_KEYS[key][0]] is _MISSING:
            values[ACCELERATOR_TOML_KEYS[key][0]] = (
                1  # a valid stand-in, so only real problems are listed
            )
    problems += accelerator_problems(values, where)
    problems += _bound_problems(table, where)
    of = table.get(_MEASURED_AS, "")
    if of != "" and of not in preset_names():
        problems.append(
            f"{where}: {_MEASURED_AS} = {of!r} must name a preset ({', '.join(preset_names())}) "
            'or be "" for none'
        )
    if problems:
        raise ConfigError("; ".join(problems))
    for f in ("hbm_bandwidth_bytes_per_s", "clock_hz"):
        values[f] = float(values[f])
    acc = Accelerator(**values)
    return dataclasses.replace(acc, measured_as=_measured_as(acc, table, where))


def _silicon(acc: Accelerator) -> Accelerator:
    """``acc`` without the fields a variant of a chip's silicon may change: its name, HBM,
    tensor-core formats and measured profile."""
    return dataclasses.replace(
        acc, name="", hbm_bytes=1, hbm_bandwidth_bytes_per_s=1.0, hbm_stacks=0, measured_as=""
    )


def _measured_as(acc: Accelerator, table: Mapping[str, Any], where: str) -> str:
    """The preset a file's chip is measured as: its ``measured_as`` (a preset, or "" for
    none); without one, its own name where that is a preset of the same silicon ("" where
    the file is that preset, which its name measures already); a chip with a preset's
    silicon under another name is refused (the rule in the module docstring)."""
    if _MEASURED_AS in table:  # checked with the other fields
        return str(table[_MEASURED_AS])
    mine = _silicon(acc)
    same = [n for n in preset_names() if _silicon(preset(n)) == mine]
    if not same:
        return ""
    if acc.name in same:  # the preset itself, as its name keys its data; else a variant of it
        return "" if acc == preset(acc.name) else acc.name
    presets = ", ".join(same[:-1]) + " and " + same[-1] if len(same) > 1 else same[0]
    raise ConfigError(
        f"{where}: has the silicon (cores, buffer, clock, node, dies) of preset {presets} but "
        f"is named {acc.name!r}; add {_MEASURED_AS} = {toml_literal(same[0])} to take its "
        f'measured profiles, or {_MEASURED_AS} = "" to model it without them'
    )


def _bound_problems(table: Mapping[str, Any], where: str) -> list[str]:
    """Every value of an ``[accelerator]`` table outside its physical range
    (:mod:`arch_space.bounds`), the tensor-core formats' rates among them."""
    checks = [(key, raw, None) for key, raw in table.items() if key in ACCELERATOR_TOML_KEYS]
    formats = table.get("formats")
    if isinstance(formats, Mapping):
        checks += [("format_rate", r, f"formats.{f}") for f, r in formats.items()]
    found = (bound_problem(where, "accelerator", k, v, name) for k, v, name in checks)
    return [p for p in found if p]


def accelerator_from_toml(path: str | Path) -> Accelerator:
    """An Accelerator from a TOML file (layout in the module docstring)."""
    return accelerator_from_mapping(read_toml(path), source=str(path))


def accelerator_to_toml(acc: Accelerator) -> str:
    """``acc`` as TOML text that :func:`accelerator_from_toml` reads back to an equal value."""
    lines = ["[accelerator]"]
    for key, (field_name, unit) in ACCELERATOR_TOML_KEYS.items():
        v = getattr(acc, field_name)
        if key == "dies" and v == 1:
            continue  # the default: single-die files read as before
        if unit is not None:
            v = v // unit if v % unit == 0 else v / unit
        lines.append(f"{key} = {toml_literal(v)}")
    if acc.formats != Accelerator.__dataclass_fields__["formats"].default:
        rates = ", ".join(f"{f} = {toml_literal(r)}" for f, r in acc.formats)
        lines.append(f"formats = {{ {rates} }}")
    if acc.measured_as:
        lines.append(f"{_MEASURED_AS} = {toml_literal(acc.measured_as)}")
    return "\n".join(lines) + "\n"


def preset_to_toml(name: str) -> str:
    """Preset ``name`` as one accelerator file: its fields, and ``measured_as`` naming the
    shipped measurements it takes, each listed with its source in a comment. The file reads
    back (:func:`accelerator_from_toml`) to a chip that evaluates as the preset does."""
    acc = dataclasses.replace(preset(name), measured_as=name)
    notes = [f"# Preset {name} as one file (phaze arch show {name} --toml)."]
    notes += [f"# {_MEASURED_AS} = {toml_literal(name)} takes its shipped measurements:"]
    notes += [f"#   {line}" for line in _measurement_sources(name)]
    return "\n".join(notes) + "\n" + accelerator_to_toml(acc)


def _measurement_sources(name: str) -> list[str]:
    """One line per shipped measurement of preset ``name``: where it is and its source."""
    from arch_space.system import datasheet_board_w, host_profile_for

    devices = shipped_toml("devices.toml")
    table = devices.get(name)
    if table is None:
        lines = ["devices.toml: no table; the generic GEMM share and the design clock"]
    elif _MEASURED_AS in table:
        lines = [f"devices.toml [{name}]: the table of [{table[_MEASURED_AS]}]"]
    else:
        fitted = table.get("fitted", {}).get("provenance")
        lines = [f"devices.toml [{name}]" + (f": fitted to {fitted}" if fitted else "")]
    harvest = shipped_toml("harvest.toml")["preset"].get(name)
    if harvest is not None:
        lines.append(f"harvest.toml [preset.{name}]: {harvest['physical_cores']['source']}")
    board = datasheet_board_w(name)
    if board is not None:
        host = host_profile_for(name)
        lines.append(f"system.toml [host.profile.{host}]: {board[0]:g} W, {board[1]}")
    peaks = sorted(
        {r["source"] for r in shipped_toml("formats.toml")["peak"] if r["preset"] == name}
    )
    if peaks:
        lines.append(f"formats.toml [[peak]] of {name} (the formats below): {', '.join(peaks)}")
    price = shipped_toml("cost.toml")["price"].get(name)
    if price is not None:
        lines.append(f"cost.toml [price] {name}: {price['value']:g} USD, {price['source']}")
    return lines


def _formats(raw: Any) -> Any:
    """``{ bf16 = 1.0, fp8 = 2.0 }`` as (format, rate) pairs, bf16 first (anything else is
    passed on for :func:`accelerator_problems` to name)."""
    if not isinstance(raw, Mapping):
        return raw
    order = sorted(raw, key=lambda f: f != "bf16")
    return tuple(
        (
            f,
            float(raw[f])
            if isinstance(raw[f], int | float) and not isinstance(raw[f], bool)
            else raw[f],
        )
        for f in order
    )


def load_accelerator(spec: str) -> Accelerator:
    """A preset by name, or an accelerator TOML file by path (``*.toml`` or an existing file)."""
    if spec.endswith(".toml") or Path(spec).is_file():
        return accelerator_from_toml(spec)
    if spec not in preset_names():
        raise unknown_name("accelerator preset (or a .toml file)", spec, preset_names())
    return preset(spec)


def cluster_from_mapping(data: Mapping[str, Any], source: str = "cluster") -> Cluster:
    """A Cluster from ``{"cluster": {...}}``, reporting every bad key and value at once."""
    problems = unknown_keys(source, data, ["cluster"])
    table = data.get("cluster")
    if not isinstance(table, Mapping):
        raise ConfigError("; ".join([*problems, f"{source}: needs a [cluster] table"]))
    where = f"{source} [cluster]"
    names = [f.name for f in fields(Cluster)]
    problems += unknown_keys(where, table, names)
    values = {f.name: f.default for f in fields(Cluster)}
    values.update((k, v) for k, v in table.items() if k in names)
    if "devices" not in table:
        problems.append(f"{where}: missing key 'devices'")
        values["devices"] = 1  # a valid stand-in, so only real problems are listed
    problems += cluster_problems(values, where)
    if problems:
        raise ConfigError("; ".join(problems))
    return Cluster(**values)


def cluster_from_toml(path: str | Path) -> Cluster:
    """A Cluster from a TOML file with a ``[cluster]`` table."""
    return cluster_from_mapping(read_toml(path), source=str(path))


def cluster_to_toml(cluster: Cluster) -> str:
    """``cluster`` as TOML text that :func:`cluster_from_toml` reads back to an equal value."""
    lines = ["[cluster]"]
    lines += [f"{f.name} = {toml_literal(getattr(cluster, f.name))}" for f in fields(Cluster)]
    return "\n".join(lines) + "\n"
