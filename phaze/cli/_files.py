"""Output files of the commands: checked before the work starts, failures as one error line.

A command that writes a file (``--out``, ``--gantt``, the report) calls
:func:`check_writable` first, so an unwritable place fails in a second rather than after
minutes of work, and :func:`cannot_write` turns a failure while writing into the same
ConfigError naming the path and the option to change. A missing parent directory is refused
(:func:`check_parent`), never created: a mistyped path must not leave directories behind.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from phaze_common.errors import ConfigError

__all__ = ["cannot_write", "check_parent", "check_writable", "check_writable_dir"]


def check_writable(path: Path, option: str) -> None:
    """Raise a ConfigError unless the file ``path`` can be created or replaced.

    Its directory must exist (:func:`check_parent`); a probe file is created beside
    ``path`` and removed at once: the one test that holds for every user, root included, and
    every file system (read-only mounts, full disks, ACLs).
    """
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory: give a file name")
    check_parent(path, option)
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise cannot_write(path, e, option) from None


def check_writable_dir(path: Path, option: str) -> None:
    """Raise a ConfigError unless files can be written into the directory ``path``
    (created if missing, in a directory that exists)."""
    check_parent(path, option)
    try:
        path.mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".phaze.", suffix=".probe"):
            pass
    except OSError as e:
        raise cannot_write(path, e, option) from None


def check_parent(path: Path, option: str) -> None:
    """Raise a ConfigError naming ``option`` when the directory that would hold ``path`` does
    not exist (a parent that is a file is left to the write, which names it)."""
    parent = path.parent
    if not parent.exists():
        raise ConfigError(
            f"cannot write {path} (directory {parent} does not exist): create it, or give "
            f"{option} a path in an existing directory"
        )


def cannot_write(path: Path, error: OSError, option: str) -> ConfigError:
    """The ConfigError for ``error`` while writing ``path`` (given with ``option``)."""
    reason = error.strerror or str(error)
    return ConfigError(f"cannot write {path} ({reason}): give {option} a writable path")
