"""``phaze serve --show-config`` and ``--config FILE``: the command's effective settings as
TOML, and that TOML given back.

``--show-config`` writes every option of the command in one ``[serve]`` table, in the
option's own units (``ttft_ms`` in milliseconds, ``intra_node_gbps`` in GB/s, as the flag
takes it), each with where its value came from: ``default``, ``file`` (``--config``) or
``flag``; an unset value is written as a comment. Its header gives the config hash, a
content hash of those values. ``--config`` reads such a file as the options' defaults (a flag
given as well wins), so the text shown, given back, runs the same serve with the same hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import click
from click.core import ParameterSource

from phaze.config import unknown_keys
from phaze.config_toml import toml_value
from phaze_common.errors import ConfigError
from phaze_common.files import read_toml

__all__ = ["config_options", "serve_config_hash", "serve_config_toml"]

#: The command's parameters that are no setting: how it prints, and these two options.
_NOT_SETTINGS: Final = ("config", "show_config", "as_json", "verbose")
_SOURCES: Final = {
    ParameterSource.COMMANDLINE: "flag",
    ParameterSource.ENVIRONMENT: "flag",
    ParameterSource.DEFAULT_MAP: "file",
}


def _settings(ctx: click.Context) -> list[str]:
    return [p.name for p in ctx.command.params if p.name and p.name not in _NOT_SETTINGS]


def _read_config(ctx: click.Context, _param: click.Parameter, value: Path | None) -> Path | None:
    """``--config``: the file's ``[serve]`` table becomes the options' defaults; an unknown
    table or key is one error naming the nearest known one."""
    if value is None:
        return None
    data = read_toml(value, "serve config")
    known = tuple(_settings(ctx))
    problems = unknown_keys(value.name, "top level", data, ("serve",))
    table = data.get("serve", {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"{value.name}: serve = {table!r} must be a table [serve]")
    problems += unknown_keys(value.name, "serve", table, known)
    if problems:
        raise ConfigError("; ".join(problems))
    ctx.default_map = {**(ctx.default_map or {}), **table}
    return value


def config_options(f: Callable) -> Callable:
    """``--config FILE`` (read before the other options) and ``--show-config``."""
    f = click.option(
        "--show-config",
        is_flag=True,
        help="Print the effective settings as TOML, each value's source in a comment, and "
        "exit; --config reads the text back.",
    )(f)
    return click.option(
        "--config",
        type=click.Path(dir_okay=False, path_type=Path),
        is_eager=True,
        expose_value=False,
        callback=_read_config,
        help="TOML file whose [serve] table (as --show-config prints it) gives the options' "
        "defaults; flags given as well win.",
    )(f)


def _values(ctx: click.Context) -> dict[str, Any]:
    return {
        name: str(v) if isinstance(v := ctx.params[name], Path) else v for name in _settings(ctx)
    }


def serve_config_hash(ctx: click.Context) -> str:
    """A content hash of the command's effective settings."""
    text = json.dumps(_values(ctx), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def serve_config_toml(ctx: click.Context) -> str:
    """The ``[serve]`` table of the effective settings, each value's source in a comment."""
    digest = serve_config_hash(ctx)
    lines = [
        "# The effective settings of this `phaze serve`: give them back with --config FILE to",
        f"# serve the same (config hash {digest}). Values are in the options' own units.",
        "# Each value's source: default, file (--config) or flag.",
        "",
        "[serve]",
    ]
    for name, value in _values(ctx).items():
        source = _SOURCES.get(ctx.get_parameter_source(name), "default")
        if value is None:
            lines.append(f"# {name} is unset  # {source}")
        else:
            lines.append(f"{name} = {toml_value(value)}  # {source}")
    return "\n".join(lines) + "\n"
