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

A chip is one file. A shipped preset's file (``arch_space/data/chips/<name>.toml``, which
``phaze arch show NAME --toml`` writes out) holds beside ``[accelerator]`` the figures it is
checked against (``[published]``, and ``order``, its place in listings; both read as notes)
and every table measured or published about it, each with its source: the sustained rates
``[devices]`` (GEMM tables, training clock, collective curves), the core harvesting
``[harvest]``, the host server and board power limit ``[host]``, the price ``[price]`` and the
tensor peaks ``[[peak]]`` (whose formats the chip runs where ``formats`` is absent). Such a file
given back is the preset (or, edited, a variant measured as it): its measurement tables must
be those a preset ships (its ``measured_as``, else its name's, else any preset's), as a
chip's own measurements ship as a chip file. A file without them names the preset whose
measurements it takes with ``measured_as``; the file's own fields (HBM among them) are
modelled as written. The one rule for a file with neither: a chip with a preset's silicon
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
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from arch_space._data import (
    CHIP_TABLES,
    chip_file_text,
    read_toml,
    shipped_chips,
    toml_literal,
    unknown_keys,
)
from arch_space.accelerator import Accelerator, Cluster, cluster_problems
from arch_space.accelerator_table import (
    ACCELERATOR_TOML_KEYS,
    MEASURED_AS,
    accelerator_to_toml,
    accelerator_values,
)
from arch_space.formats import peak_format_rates
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

_CHIP_KEYS = ("order", "published", *CHIP_TABLES)


def accelerator_from_mapping(data: Mapping[str, Any], source: str = "accelerator") -> Accelerator:
    """An Accelerator from a chip file's mapping (the layout of the module docstring),
    reporting every unknown key (with the nearest known one), missing key, bad value and value
    outside its physical range (:mod:`arch_space.bounds`) at once."""
    problems = unknown_keys(source, data, ["accelerator", *_CHIP_KEYS])
    table = data.get("accelerator")
    if not isinstance(table, Mapping):
        raise ConfigError("; ".join([*problems, f"{source}: needs an [accelerator] table"]))
    where = f"{source} [accelerator]"
    values, more = accelerator_values(table, where)
    problems += more
    of = table.get(MEASURED_AS, "")
    if of != "" and of not in preset_names():
        problems.append(
            f"{where}: {MEASURED_AS} = {of!r} must name a preset ({', '.join(preset_names())}) "
            'or be "" for none'
        )
    measured = {k: _plain(data[k]) for k in CHIP_TABLES if k in data}
    if measured and not problems:
        of = _measured_by_tables(measured, table, source)
        if "formats" not in table and "peak" in measured:
            values["formats"] = peak_format_rates(measured["peak"]) or values["formats"]
    if problems:
        raise ConfigError("; ".join(problems))
    acc = Accelerator(**values)
    if measured:
        return dataclasses.replace(acc, measured_as="" if acc == preset(of) else of)
    return dataclasses.replace(acc, measured_as=_measured_as(acc, table, where))


def _plain(obj: Any) -> Any:
    """Parsed TOML with read-only tables and tuples as plain dicts and lists, to compare."""
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


def _measured_by_tables(measured: Mapping[str, Any], table: Mapping[str, Any], source: str) -> str:
    """The preset whose shipped tables a file's measurement tables are, every one of them as
    shipped: its ``measured_as``, else its own name's, else any preset's. A user's file takes a
    preset's measurements whole; its own ship as a chip file (arch_space/data/chips/), so
    other tables, or some of a preset's, are refused."""
    chips = shipped_chips()
    if MEASURED_AS in table:
        candidates = [table[MEASURED_AS]] if table[MEASURED_AS] else []
    else:
        candidates = [table.get("name"), *preset_names()]
    for name in candidates:
        shipped = {k: v for k, v in chips.get(name, {}).items() if k in CHIP_TABLES}
        if shipped and measured == _plain(shipped):
            return str(name)
    tables = ", ".join(f"[{k}]" for k in measured)
    raise ConfigError(
        f"{source}: its measurement tables ({tables}) are not those of "
        + (f"preset {candidates[0]}" if len(candidates) == 1 else "any shipped preset")
        + "; a file takes all of a preset's measurement tables as shipped, or none: drop them "
        "and set "
        f'{MEASURED_AS} to a preset (or "" for none), or ship the chip as '
        "arch_space/data/chips/<name>.toml"
    )


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
    if MEASURED_AS in table:  # checked with the other fields
        return str(table[MEASURED_AS])
    mine = _silicon(acc)
    same = [n for n in preset_names() if _silicon(preset(n)) == mine]
    if not same:
        return ""
    if acc.name in same:  # the preset itself, as its name keys its data; else a variant of it
        return "" if acc == preset(acc.name) else acc.name
    presets = ", ".join(same[:-1]) + " and " + same[-1] if len(same) > 1 else same[0]
    raise ConfigError(
        f"{where}: has the silicon (cores, buffer, clock, node, dies) of preset {presets} but "
        f"is named {acc.name!r}; add {MEASURED_AS} = {toml_literal(same[0])} to take its "
        f'measured profiles, or {MEASURED_AS} = "" to model it without them'
    )


def accelerator_from_toml(path: str | Path) -> Accelerator:
    """An Accelerator from a TOML file (layout in the module docstring)."""
    return accelerator_from_mapping(read_toml(path), source=str(path))


def preset_to_toml(name: str) -> str:
    """Preset ``name``'s chip file as shipped: its fields and every table measured or
    published about it, each with its source. It reads back (:func:`accelerator_from_toml`)
    to the preset itself."""
    preset(name)  # an unknown name suggests the nearest
    return chip_file_text(name)


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
