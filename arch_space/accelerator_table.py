"""An ``[accelerator]`` TOML table to Accelerator fields and back: the one parser of the
shipped chip files (:mod:`arch_space.presets`) and of a user's (:mod:`arch_space.config`)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import MISSING, fields
from types import MappingProxyType
from typing import Any

from arch_space._data import toml_literal, unknown_keys
from arch_space.accelerator import Accelerator, accelerator_problems
from arch_space.bounds import bound_problem

__all__ = ["ACCELERATOR_TOML_KEYS", "MEASURED_AS", "accelerator_values", "accelerator_to_toml"]

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
MEASURED_AS = "measured_as"
# The TOML keys of the fields without a default, in file order.
_NO_DEFAULT = {f.name for f in fields(Accelerator) if f.default is MISSING}
_REQUIRED = tuple(k for k, (name, _) in ACCELERATOR_TOML_KEYS.items() if name in _NO_DEFAULT)


def accelerator_values(table: Mapping[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """The Accelerator fields of an ``[accelerator]`` table and every problem with it (unknown
    key with the nearest known one, missing key, bad value, value outside its physical range
    of :mod:`arch_space.bounds`); ``measured_as`` is left to the caller."""
    problems = unknown_keys(where, table, (*ACCELERATOR_TOML_KEYS, "formats", MEASURED_AS))
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
        if key not in table or values[ACCELERATOR_TOML_KEYS[key][0]] is MISSING:
            values[ACCELERATOR_TOML_KEYS[key][0]] = 1  # a valid stand-in: only real problems
    problems += accelerator_problems(values, where)
    problems += _bound_problems(table, where)
    if not problems:
        for f in ("hbm_bandwidth_bytes_per_s", "clock_hz"):
            values[f] = float(values[f])
    return values, problems


def _bound_problems(table: Mapping[str, Any], where: str) -> list[str]:
    """Every value of an ``[accelerator]`` table outside its physical range
    (:mod:`arch_space.bounds`), the tensor-core formats' rates among them."""
    checks = [(key, raw, None) for key, raw in table.items() if key in ACCELERATOR_TOML_KEYS]
    formats = table.get("formats")
    if isinstance(formats, Mapping):
        checks += [("format_rate", r, f"formats.{f}") for f, r in formats.items()]
    found = (bound_problem(where, "accelerator", k, v, name) for k, v, name in checks)
    return [p for p in found if p]


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


def accelerator_to_toml(acc: Accelerator) -> str:
    """``acc`` as an ``[accelerator]`` table that reads back to an equal value."""
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
        lines.append(f"{MEASURED_AS} = {toml_literal(acc.measured_as)}")
    return "\n".join(lines) + "\n"
