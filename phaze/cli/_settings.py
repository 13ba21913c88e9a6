"""Command-line options generated from the settings' one declaration (:mod:`phaze.settings`).

:func:`setting_option` makes a setting's option: its flag, the parameter name the command
reads, the type checking the declared range or names, and the declared help; a command
changes only what is its own (the help's wording, a single value where the sweep takes a
list, ``required``, a default of its own, a ``type`` reading more than the declared names),
and ``declared_default=True`` gives the declared default.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from phaze.settings import Setting, setting

__all__ = ["option_type", "setting_option", "setting_options"]


def option_type(s: Setting) -> click.ParamType | None:
    """The click type of ``s``'s flag: its range in the flag's units, or its names."""
    from phaze.cli._options import FiniteFloat, RecomputeMode  # which build on these options

    if s.kind == "int":
        return click.IntRange(s.lo, s.hi)
    if s.kind == "float":
        lo = -math.inf if s.lo is None else s.in_flag_units(s.lo)
        hi = math.inf if s.hi is None else s.in_flag_units(s.hi)
        return FiniteFloat(lo, hi, lo_open=s.lo_open, hi_open=s.hi_open)
    if s.kind == "recompute":
        return RecomputeMode()
    if s.kind == "path":
        return click.Path(path_type=Path)
    return click.Choice(s.allowed()) if s.choices else None


def setting_option(
    key: str | Setting,
    *,
    dest: str | None = None,
    help: str | None = None,
    many: bool | None = None,
    declared_default: bool = False,
    **click_kw: Any,
) -> Callable:
    """The option of setting ``key`` (its name, or a :class:`~phaze.settings.Setting`): a
    list when ``many`` (None: when the ``[sweep]`` key is one), read as ``dest`` (None:
    :attr:`~phaze.settings.Setting.dest`), with ``help`` (None: the declared help) and,
    with ``declared_default``, the declared default (in the flag's units) shown."""
    s = setting(key) if isinstance(key, str) else key
    name = dest or s.dest
    text = s.help if help is None else help
    if s.kind == "bool" and "/" in str(s.flag):  # on, off or unset
        return click.option(s.flag, name, default=None, help=text, **click_kw)
    if s.kind == "bool":
        return click.option(s.flag, name, is_flag=True, help=text, **click_kw)
    if declared_default:
        default = s.default
        if s.kind == "float" and default is not None:
            default = s.in_flag_units(default)
        click_kw.update(default=default, show_default=True)
    many = s.many if many is None else many
    click_kw.setdefault("type", option_type(s))
    return click.option(s.flag, name, multiple=many, help=text, **click_kw)


def setting_options(*keys: str) -> Callable:
    """The options of the settings ``keys`` as declared, in that order."""

    def apply(f: Callable) -> Callable:
        for key in reversed(keys):
            f = setting_option(key)(f)
        return f

    return apply
