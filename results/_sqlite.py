"""The SQLite file beneath :mod:`results.store`: the writer's lock, connections, and SQLite
failures told as ConfigErrors that name the file and what to do."""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from phaze_common.errors import ConfigError

__all__ = [
    "MISUSE",
    "connect",
    "connect_immutable",
    "lock_dir",
    "sqlite_errors",
    "store_error",
    "unwritable",
]


# errors of the caller, not of the file: left as they are
MISUSE: Final = (sqlite3.ProgrammingError, sqlite3.IntegrityError, sqlite3.InterfaceError)


def lock_dir(out: Path, path: Path) -> int:
    """An open descriptor of ``out`` holding its exclusive flock, or a ConfigError."""
    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError as e:
        raise ConfigError(f"cannot open the output directory {str(out)!r} ({e.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ConfigError(
                f"another sweep is writing to the results store {path} (its directory is "
                f"locked): wait for it to finish, or choose another --out"
            ) from None
        raise ConfigError(f"cannot lock the output directory {str(out)!r} ({e.strerror})") from None
    return fd


def connect(path: Path, *, read_only: bool) -> sqlite3.Connection:
    target = path.resolve().as_uri() + ("?mode=ro" if read_only else "")
    return _connect_uri(path, target)


def connect_immutable(path: Path) -> sqlite3.Connection:
    """A connection that takes no lock and needs no WAL index (for read-only directories)."""
    wal = path.with_name(path.name + "-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        raise ConfigError(
            f"the results store {path} cannot be read here: its directory is read-only and "
            f"{wal.name} holds results not yet merged into it; copy the directory somewhere "
            f"writable and run the command on the copy"
        )
    return _connect_uri(path, path.resolve().as_uri() + "?mode=ro&immutable=1")


def _connect_uri(path: Path, target: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(target, uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=30000")
    except sqlite3.Error as e:
        raise store_error(path, e) from None
    return conn


def unwritable(conn: sqlite3.Connection) -> bool:
    """Whether the last failure on ``conn`` was a read-only or cannot-open error."""
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:
        code = getattr(e, "sqlite_errorcode", 0) & 0xFF
        return code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN)
    return False


def store_error(path: Path, e: sqlite3.Error) -> ConfigError:
    """The ConfigError for an SQLite failure on the store at ``path``: what broke and what
    to do."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None and code & 0xFF == sqlite3.SQLITE_READONLY:
        return ConfigError(
            f"the results store {path} is read-only ({e}): make it and its directory "
            f"writable, or run with a new --out"
        )
    if code is not None and code & 0xFF == sqlite3.SQLITE_CANTOPEN:
        return ConfigError(
            f"cannot open the results store {path} ({e}): check that it and its directory "
            f"exist and may be read and written"
        )
    if code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return ConfigError(
            f"the results store {path} stayed locked by another process ({e}): "
            f"let it finish, or run with a new --out"
        )
    if code is not None and code & 0xFF == sqlite3.SQLITE_FULL:
        return ConfigError(f"the disk holding the results store {path} is full: free space")
    return ConfigError(
        f"the results store {path} is damaged ({e}): move it away (it is left as it is), "
        f"or run with a new --out"
    )


@contextmanager
def sqlite_errors(path: Path) -> Iterator[None]:
    """Failures of the file as a ConfigError naming the store (see :func:`store_error`);
    misuse of the API (a closed store, a broken constraint) stays as it is."""
    try:
        yield
    except MISUSE:
        raise
    except sqlite3.Error as e:
        raise store_error(path, e) from None
