"""Shared helpers for arch_space's TOML data: loading shipped files, checking keys and types.

The shipped data files keep every number as ``{value = ..., source = "..."}``; user files and
override mappings may give plain numbers. Each preset is one file, ``data/chips/<name>.toml``:
its per-chip tables are read from there and joined into the views of the files that hold the
generic tables (:func:`shipped_toml`), so every reader sees one table per chip as before. Every checker returns a list of problems (strings)
so callers can report all of them in one :class:`~phaze_common.errors.ConfigError`.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from numpy import format_float_scientific

from phaze_common.errors import ConfigError
from phaze_common.files import read_toml

__all__ = [
    "shipped_toml",
    "shipped_chips",
    "chip_file_text",
    "CHIP_TABLES",
    "read_toml",
    "unknown_keys",
    "plain_values",
    "number_problem",
    "is_power_of_two",
    "parse_sections",
    "build_params",
    "toml_literal",
    "params_hash",
]


_CHIPS = "chips"

#: The tables of a chip file beside its ``[accelerator]`` that hold what was measured or
#: published about the chip, and the data file whose view each joins: the sustained rates
#: (``[devices]``, as devices.toml's ``[<name>]``), the core harvesting (``[harvest]``), the
#: host server with the board power limit (``[host]``, with its ``profile`` name), the price
#: (``[price] usd``) and the data sheet's tensor peaks (``[[peak]]``).
CHIP_TABLES: Mapping[str, str] = MappingProxyType(
    {
        "devices": "devices.toml",
        "harvest": "harvest.toml",
        "host": "system.toml",
        "price": "cost.toml",
        "peak": "formats.toml",
    }
)


@functools.cache
def shipped_toml(name: str) -> Mapping[str, Any]:
    """The parsed data file ``arch_space/data/<name>``, read-only and cached, with every
    shipped chip's tables of that file (:data:`CHIP_TABLES`) in the place they had there."""
    text = importlib.resources.files("arch_space").joinpath("data", name).read_text("utf-8")
    data = tomllib.loads(text)
    for chip, tables in shipped_chips().items():
        for table, file in CHIP_TABLES.items():
            if file == name and table in tables:
                _join(data, table, chip, tables[table])
    return _frozen(data)


def _join(data: dict[str, Any], table: str, chip: str, value: Any) -> None:
    """Put chip ``chip``'s table ``table`` where its data file kept it."""
    if table == "devices":
        data[chip] = value
    elif table == "harvest":
        data.setdefault("preset", {})[chip] = value
    elif table == "host":
        host = {k: v for k, v in value.items() if k != "profile"}
        data["host"].setdefault("profile", {})[value["profile"]] = {**host, "preset": chip}
    elif table == "price":
        data.setdefault("price", {})[chip] = value["usd"]
    else:
        data.setdefault("peak", []).extend({"preset": chip, **row} for row in value)


@functools.cache
def shipped_chips() -> Mapping[str, Mapping[str, Any]]:
    """Every chip file ``arch_space/data/chips/<name>.toml``, parsed and read-only, by name, in
    the order of their ``order`` keys (then by name)."""
    folder = importlib.resources.files("arch_space").joinpath("data", _CHIPS)
    chips = {
        f.name.removesuffix(".toml"): tomllib.loads(f.read_text("utf-8"))
        for f in folder.iterdir()
        if f.name.endswith(".toml")
    }
    order = sorted(chips, key=lambda n: (chips[n].get("order", math.inf), n))
    return _frozen({n: chips[n] for n in order})


def chip_file_text(name: str) -> str:
    """The text of the shipped chip file of ``name``, its comments and sources included."""
    return (
        importlib.resources.files("arch_space")
        .joinpath("data", _CHIPS, f"{name}.toml")
        .read_text("utf-8")
    )


def _frozen(obj: Any) -> Any:
    """Read-only copy of parsed TOML: tables become MappingProxyType, arrays tuples."""
    if isinstance(obj, dict):
        return MappingProxyType({k: _frozen(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return tuple(_frozen(v) for v in obj)
    return obj


def unknown_keys(where: str, keys: Iterable[str], known: Iterable[str]) -> list[str]:
    """One problem per key not in ``known``, each naming the nearest known key."""
    known = sorted(known)
    problems = []
    for key in keys:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        problems.append(f"{where}: unknown key {key!r}{hint} (known: {', '.join(known)})")
    return problems


def plain_values(table: Mapping[str, Any]) -> dict[str, Any]:
    """``{key: value}`` from a table whose entries may be ``{value = ..., source = ...}``."""
    return {
        k: (v["value"] if isinstance(v, Mapping) and "value" in v else v) for k, v in table.items()
    }


def number_problem(
    where: str,
    key: str,
    value: Any,
    *,
    integer: bool = False,
    minimum: float = 0.0,
    strict: bool = True,
) -> str | None:
    """None if ``value`` is a finite number above (or at, if not ``strict``) ``minimum``, else
    a message."""
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if not ok_type or isinstance(value, bool):
        return f"{where}: {key} = {value!r} must be {kind}"
    if not math.isfinite(value):
        return f"{where}: {key} = {value!r} must be a finite number"
    if value < minimum or (strict and value == minimum):
        rel = ">" if strict else ">="
        return f"{where}: {key} = {value!r} must be {rel} {minimum:g}"
    return None


def is_power_of_two(n: Any) -> bool:
    """True for the positive integers 1, 2, 4, ..."""
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def parse_sections(
    data: Mapping[str, Any],
    schema: Mapping[str, Mapping[str, str]],
    node_schema: Mapping[str, str],
    where: str,
    free_sections: tuple[str, ...] = (),
) -> tuple[dict[str, Any], dict[str, dict[int, Any]], dict[str, dict[str, Any]], list[str]]:
    """Split a ``[section] key = value`` mapping into dataclass fields, checking every key.

    ``schema`` maps section -> key -> field name for scalar values; ``[node.N]`` tables map
    ``node_schema`` key -> field name, giving ``{field: {N: value}}``; each section named in
    ``free_sections`` takes any keys (e.g. region names) with positive numbers. Values may be
    numbers or ``{value, source}`` tables. Returns (scalars, per-node, free, problems).
    """
    scalars: dict[str, Any] = {}
    nodes: dict[str, dict[int, Any]] = {}
    free: dict[str, dict[str, Any]] = {}
    problems = unknown_keys(where, data, [*schema, "node", *free_sections])

    def _value(w: str, key: str, raw: Any) -> Any:
        v = raw["value"] if isinstance(raw, Mapping) and "value" in raw else raw
        p = number_problem(w, key, v)
        if p:
            problems.append(p)
        return v

    def _table(w: str, raw: Any) -> Mapping[str, Any]:
        if isinstance(raw, Mapping):
            return raw
        problems.append(f"{w}: must be a table, got {raw!r}")
        return {}

    for section, keys in schema.items():
        w = f"{where} [{section}]"
        table = _table(w, data.get(section, {}))
        problems.extend(unknown_keys(w, table, keys))
        for key, raw in table.items():
            if key in keys:
                scalars[keys[key]] = _value(w, key, raw)
    for section in free_sections:
        w = f"{where} [{section}]"
        free[section] = {k: _value(w, k, v) for k, v in _table(w, data.get(section, {})).items()}
    for name, raw_table in _table(f"{where} [node]", data.get("node", {})).items():
        w = f"{where} [node.{name}]"
        if not name.isdigit() or int(name) <= 0:
            problems.append(f"{w}: node name must be a positive integer (nm), got {name!r}")
            continue
        table = _table(w, raw_table)
        problems.extend(unknown_keys(w, table, node_schema))
        for key, raw in table.items():
            if key in node_schema:
                nodes.setdefault(node_schema[key], {})[int(name)] = _value(w, key, raw)
    return scalars, nodes, free, problems


def build_params(
    cls: type,
    data: Mapping[str, Any],
    source: str,
    base: Any | None,
    schema: Mapping[str, Mapping[str, str]],
    node_schema: Mapping[str, str],
    free_sections: tuple[str, ...] = (),
) -> Any:
    """A frozen params dataclass ``cls`` from ``data`` laid out as ``schema`` (see
    :func:`parse_sections`), over ``base``: scalars replace, per-node and free tables merge.
    Without a base every scalar field must be present."""
    scalars, nodes, free, problems = parse_sections(
        data, schema, node_schema, source, free_sections
    )
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in node_schema.values() or f.name in free_sections:
            old = dict(getattr(base, f.name)) if base is not None else {}
            new = nodes.get(f.name, free.get(f.name, {}))
            values[f.name] = MappingProxyType({**old, **new})
        elif f.name in scalars:
            values[f.name] = scalars[f.name]
        elif base is not None:
            values[f.name] = getattr(base, f.name)
        else:
            problems.append(f"{source}: missing value for {f.name}")
    if problems:
        raise ConfigError("; ".join(problems))
    return cls(**values)


def toml_literal(v: Any) -> str:
    """A TOML literal for a str, bool, int, float or list/tuple of them; floats are written in
    their shortest round-trip form (``1.2e+12``), so parsing gives back the same value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, float):
        return format_float_scientific(v, unique=True, trim="-") if abs(v) >= 1e6 else repr(v)
    if isinstance(v, tuple | list):
        return "[" + ", ".join(toml_literal(x) for x in v) + "]"
    return repr(v)


def params_hash(obj: Any) -> int:
    """Hash of a frozen params dataclass whose fields may be (read-only) mappings, so params
    objects can key caches by content."""
    return hash(
        tuple(
            tuple(sorted(v.items())) if isinstance(v, Mapping) else v
            for v in (getattr(obj, f.name) for f in fields(obj))
        )
    )
