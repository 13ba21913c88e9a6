"""A sweep's effective configuration written back as TOML (``phaze sweep --show-config``).

Every key of ``[sweep]`` (the settings both modes use), ``[training]``, ``[serving]``,
``[solver]`` and ``[scoring]`` is written with its value and, in a trailing comment, where
the value came from: ``default``, ``file`` (the configuration file,
or the built-in quick sweep's) or ``flag`` (the command line). Read back as a sweep's
configuration file, the text gives a :class:`~phaze.config.SweepConfig` with the same
:meth:`~phaze.config.SweepConfig.config_hash`. Three kinds of key are written as comments,
since the file must leave them out to mean the same: a key whose value is unset (None), a
scoring value derived from the others when not given (the grid's intensity and price from
``grid_region``), and the table of the mode the sweep does not run (which that file may not
hold).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any, Final

from phaze.config import MODES, SolverSettings, SweepConfig
from phaze.model.scoring import ScoringParams
from phaze.settings import MODE_SECTIONS, SETTINGS, section_keys
from phaze.settings import SECTIONS as SETTING_SECTIONS

__all__ = ["SOURCES", "config_sources", "config_toml", "toml_value"]

#: Where a value can come from.
SOURCES: Final = ("default", "file", "flag")


def toml_value(value: Any) -> str:
    """``value`` (a bool, number, string or tuple of them) as a TOML value that reads back
    as the same Python value and type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")  # TOML escapes DEL
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML value for {value!r}")


def _float_text(x: float) -> str:
    """A float as TOML, exactly; large and small ones in scientific notation (3e+11)."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if x == 0 or 1e-3 <= abs(x) < 1e9:
        return repr(x)
    return next(t for p in range(17) if float(t := f"{x:.{p}e}") == x)


def _section_values(cfg: SweepConfig) -> dict[str, dict[str, Any]]:
    return {
        **{s: {k: getattr(cfg.section(s), k) for k in section_keys(s)} for s in SETTING_SECTIONS},
        "solver": {f.name: getattr(cfg.solver, f.name) for f in fields(SolverSettings)},
        "scoring": {f.name: getattr(cfg.scoring, f.name) for f in fields(ScoringParams)},
    }


def config_sources(
    cfg: SweepConfig,
    from_file: SweepConfig,
    file_data: Mapping[str, Any],
    flags: Iterable[str],
) -> dict[str, str]:
    """``section.key`` -> its source: ``flag`` for the ``[sweep]`` keys in ``flags`` (given
    on the command line), ``file`` for those ``file_data`` (the parsed file) holds whose value
    in ``cfg`` is still the one ``from_file`` (the file's configuration) has, else
    ``default``."""
    given = set(flags)
    effective, filed = _section_values(cfg), _section_values(from_file)
    sources = {}
    for section, values in effective.items():
        table = file_data.get(section, {})
        if section in SETTING_SECTIONS:  # a setting may be in [sweep] or its own table
            table = {**file_data.get("sweep", {}), **table}
        for key, value in values.items():
            if section in SETTING_SECTIONS and key in given:
                source = "flag"
            elif key in table and value == filed[section][key]:
                source = "file"
            else:
                source = "default"
            sources[f"{section}.{key}"] = source
    return sources


def _unset_default(section: str, key: str) -> bool:
    """Is the key's declared default None (unset, or derived from the others when left out)?"""
    if section in SETTING_SECTIONS:
        return SETTINGS[key].default is None
    kind = {"solver": SolverSettings, "scoring": ScoringParams}[section]
    return next(f for f in fields(kind) if f.name == key).default is None


def config_toml(cfg: SweepConfig, sources: Mapping[str, str], header: Iterable[str] = ()) -> str:
    """The TOML text of ``cfg``, each key followed by ``# <source>`` from ``sources``
    (:func:`config_sources`); ``header`` lines open it as comments."""
    (other,) = (m for m in MODES if m != cfg.mode)
    unused = MODE_SECTIONS[other]
    lines = [f"# {h}" for h in header]
    for section, values in _section_values(cfg).items():
        head = f"[{section}]"
        lines += ["", f"# {head}  # only mode = {other!r} uses it" if section == unused else head]
        for key, value in values.items():
            source = sources.get(f"{section}.{key}", "default")
            if value is None:
                lines.append(f"# {key} is unset  # {source}")
            elif section == unused:
                lines.append(f"# {key} = {toml_value(value)}  # {source}")
            elif source == "default" and _unset_default(section, key):
                lines.append(f"# {key} = {toml_value(value)}  # default, derived when left out")
            else:
                lines.append(f"{key} = {toml_value(value)}  # {source}")
    return "\n".join(lines).lstrip("\n") + "\n"
