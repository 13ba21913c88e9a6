"""The results store: one SQLite file per sweep directory, written point by point.

Why SQLite: one file, no server, atomic transactions. Each evaluated point is committed in
its own transaction as it completes (a sweep's pruned points in batches,
:meth:`Store.put_points`), so a sweep killed at any instant (Ctrl-C or ``kill -9``) leaves
every point either fully stored or absent, and a re-run skips :meth:`Store.done_keys`.
The database runs in WAL mode with ``synchronous=NORMAL``: durable against a crash of the
process (the case that matters here); a power cut may lose the last commits but never
corrupts the file (https://www.sqlite.org/wal.html, "synchronous" in
https://www.sqlite.org/pragma.html). Readers (``phaze report`` while a sweep runs) never
block the writer.

One writer at a time: :meth:`Store.open` holds an exclusive ``flock`` on the sweep directory
until :meth:`Store.close`, and a second writer is refused at once with a ConfigError. The OS
drops the lock when its process dies, so a sweep killed by ``kill -9`` never leaves a stale
lock. Opening checks the file (``PRAGMA quick_check``) and that it can be written before any
work starts; a damaged, foreign or read-only store is a ConfigError naming the file and what
to do, never an ``sqlite3`` traceback, and nothing in it is changed.

Tables
------
``sweep``     one row per configuration written into the store: config hash, inputs (JSON).
``manifest``  key -> JSON value: tool version, config hash, solver and settings, wall times.
``designs``   design_id -> accelerator parameters (columns of ``DESIGN_COLUMNS``) + ``extra`` JSON.
``points``    key -> every column of :data:`results.schema.POINT_COLUMNS`.
``pairs``     key -> every column of :data:`results.schema.PAIR_COLUMNS` (a serving sweep's
              prefill-decode design pairs; empty without pairing).

Examples
--------
>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> with Store.open(d, {"workloads": ["gpt3-1.3b"]}, "abc") as s:
...     s.put_point({"key": "k1", "workload": "gpt3-1.3b", "design_id": "d1", "feasible": True,
...                  "tokens_per_s": 1.5e5})
...     sorted(s.done_keys())
['k1']
>>> load(d).points()[0]["tokens_per_s"]
150000.0
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from phaze_common.errors import ConfigError, unknown_name
from results._plain import dumps
from results._sqlite import (
    MISUSE,
    connect,
    connect_immutable,
    lock_dir,
    sqlite_errors,
    store_error,
    unwritable,
)
from results.schema import (
    COLUMN_NAMES,
    COLUMNS,
    DESIGN_COLUMNS,
    PAIR_COLUMN_NAMES,
    PAIR_COLUMNS,
    POINT_COLUMNS,
    SCHEMA_VERSION,
)

__all__ = ["STORE_FILENAME", "Store", "load", "store_path"]

STORE_FILENAME: Final = "phaze.sqlite"

# "PHAZ" in ASCII: marks the file as a Phaze store (PRAGMA application_id).
_APPLICATION_ID: Final = 0x5048415A
_REQUIRED_POINT_KEYS: Final = ("key", "workload", "design_id", "feasible")

_SCHEMA_SQL: Final = (
    "CREATE TABLE sweep (id INTEGER PRIMARY KEY AUTOINCREMENT, config_hash TEXT NOT NULL, "
    "inputs TEXT NOT NULL)",
    "CREATE TABLE manifest (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE designs ("
    + ", ".join(
        f"{n} {COLUMNS[n].sqltype}" + (" PRIMARY KEY" if n == "design_id" else "")
        for n in DESIGN_COLUMNS
    )
    + ", extra TEXT NOT NULL)",
    "CREATE TABLE points ("
    + ", ".join(
        f"{c.name} {c.sqltype}"
        + (" PRIMARY KEY" if c.name == "key" else "")
        + (" NOT NULL" if c.name in _REQUIRED_POINT_KEYS[1:] else "")
        for c in POINT_COLUMNS
    )
    + ")",
    "CREATE INDEX points_workload ON points (workload, design_id)",
    "CREATE TABLE pairs ("
    + ", ".join(
        f"{c.name} {c.sqltype}" + (" PRIMARY KEY" if c.name == "key" else "") for c in PAIR_COLUMNS
    )
    + ")",
)
_PAIR_COLUMNS: Final = {c.name: c for c in PAIR_COLUMNS}
_INSERT_POINT: Final = (
    f"INSERT OR REPLACE INTO points ({', '.join(COLUMN_NAMES)}) "
    f"VALUES ({', '.join('?' * len(COLUMN_NAMES))})"
)


def store_path(out_dir: str | Path) -> Path:
    """The store file of a sweep directory."""
    return Path(out_dir) / STORE_FILENAME


class Store:
    """A sweep's results store. Open with :meth:`open` (read-write) or :func:`load` (read-only).

    Thread-safe for one writer process: writes are serialised by a lock, and each write (one
    point, or a batch of them) is its own transaction. Records are flat dicts keyed by column names (see ``results.schema``).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        *,
        writable: bool,
        dir_lock: int | None = None,
    ) -> None:
        self._conn = conn
        self._lock = threading.RLock()
        self._dir_lock = dir_lock
        self.path = path
        self.writable = writable

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        out_dir: str | Path,
        config: Mapping[str, Any],
        config_hash: str,
        *,
        allow_config_change: bool = False,
    ) -> Store:
        """Open (creating if needed) the store of ``out_dir`` for a sweep of ``config``.

        An existing store written by a different ``config_hash`` is refused with a ConfigError,
        so results of different configurations never mix silently; ``allow_config_change``
        records the new configuration beside the old one and keeps every stored point.
        """
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"output directory {str(out)!r} exists and is not a directory")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(
                f"cannot create the output directory {str(out)!r} ({e.strerror}): "
                f"choose a writable --out"
            ) from None
        path = store_path(out)
        dir_lock = lock_dir(out, path)
        try:
            existed = path.is_file() and path.stat().st_size > 0
            conn = connect(path, read_only=False)
        except BaseException:
            os.close(dir_lock)
            raise
        store = cls(conn, path, writable=True, dir_lock=dir_lock)
        try:
            if existed and _has_tables(conn):
                _check_store(conn, path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            with store._transaction():
                if not _has_tables(conn):
                    for sql in _SCHEMA_SQL:
                        conn.execute(sql)
                    conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
                # also the write probe of an existing store: it rewrites the same value
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                old = store.config_hash
                if old is not None and old != config_hash and not allow_config_change:
                    raise ConfigError(
                        f"{path} holds results of a sweep with config hash {old[:12]}, "
                        f"but this sweep's hash is {config_hash[:12]}; results of different "
                        f"configurations (settings, or the code of the models) must not mix: "
                        f"choose another output directory or "
                        f"delete {path.name} (the Python API keeps both with "
                        f"allow_config_change=True; a resume then skips every point stored "
                        f"under the old configuration)"
                    )
                if old != config_hash:
                    conn.execute(
                        "INSERT INTO sweep (config_hash, inputs) VALUES (?, ?)",
                        (config_hash, dumps(config)),
                    )
        except BaseException as e:
            store.close()
            if isinstance(e, sqlite3.Error) and not isinstance(e, MISUSE):
                raise store_error(path, e) from None
            raise
        return store

    def close(self) -> None:
        """Close the connection and release the directory's lock (idempotent)."""
        with self._lock:
            self._conn.close()
            if self._dir_lock is not None:
                os.close(self._dir_lock)  # closing the descriptor releases the flock
                self._dir_lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing
    def put_point(self, record: Mapping[str, Any]) -> None:
        """Store one point (insert or replace by ``key``) in its own transaction.

        ``record`` maps column names to values; missing columns are stored as NULL; unknown
        names, missing required keys (key, workload, design_id, feasible) and values of the
        wrong type are reported together in one ConfigError. ``placement`` may be JSON text or
        any JSON-able value (it is serialised with sorted keys).
        """
        row = _point_row(record)
        with self._transaction():
            self._conn.execute(_INSERT_POINT, row)

    def put_points(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Store many points (as :meth:`put_point` each) in one transaction: all of them or,
        should it fail or be interrupted, none. One commit instead of one per point is what
        makes storing a pruned round's many points cheap."""
        rows = [_point_row(r) for r in records]
        if not rows:
            return
        with self._transaction():
            self._conn.executemany(_INSERT_POINT, rows)

    def put_design(self, record: Mapping[str, Any]) -> None:
        """Store one design (insert or replace by ``design_id``).

        Keys named in ``DESIGN_COLUMNS`` become columns; every other key is kept, as given, in
        the JSON column ``extra`` and comes back from :meth:`designs`.
        """
        if not isinstance(record.get("design_id"), str) or not record["design_id"]:
            raise ConfigError(
                f"design record: design_id must be a non-empty string (got {record.get('design_id')!r})"
            )
        problems: list[str] = []
        row = [_cell(n, record.get(n), problems, "design record") for n in DESIGN_COLUMNS]
        if problems:
            raise ConfigError("; ".join(problems))
        extra = {k: v for k, v in record.items() if k not in DESIGN_COLUMNS}
        cols = (*DESIGN_COLUMNS, "extra")
        sql = f"INSERT OR REPLACE INTO designs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        with self._transaction():
            self._conn.execute(sql, (*row, dumps(extra)))

    def put_pairs(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Store prefill-decode pairs (insert or replace by ``key``) in one transaction, so
        that a workload's pairs are all stored or none; bad values are one ConfigError."""
        problems: list[str] = []
        rows = [
            tuple(
                _cell(n, r.get(n), problems, "pair record", _PAIR_COLUMNS)
                for n in PAIR_COLUMN_NAMES
            )
            for r in records
        ]
        problems += [
            f"pair record: {k} is not a pair column"
            for r in records
            for k in r
            if k not in _PAIR_COLUMNS
        ]
        if problems:
            raise ConfigError("; ".join(dict.fromkeys(problems)))
        sql = (
            f"INSERT OR REPLACE INTO pairs ({', '.join(PAIR_COLUMN_NAMES)}) "
            f"VALUES ({', '.join('?' * len(PAIR_COLUMN_NAMES))})"
        )
        with self._transaction():
            self._conn.executemany(sql, rows)

    def set_manifest(self, entries: Mapping[str, Any]) -> None:
        """Set manifest entries (tool version, config hash, solver, wall times per stage, ...).

        Each value is stored as JSON; setting a key again replaces it.
        """
        rows = [(str(k), dumps(v)) for k, v in entries.items()]
        with self._transaction():
            self._conn.executemany(
                "INSERT OR REPLACE INTO manifest (key, value) VALUES (?, ?)", rows
            )

    # ------------------------------------------------------------------ reading
    @property
    def config_hash(self) -> str | None:
        """The hash of the latest configuration written into the store (None if empty)."""
        row = self._read("SELECT config_hash FROM sweep ORDER BY id DESC LIMIT 1")
        return row[0][0] if row else None

    def inputs(self) -> dict[str, Any]:
        """The latest sweep inputs (the ``config`` mapping given to :meth:`open`)."""
        row = self._read("SELECT inputs FROM sweep ORDER BY id DESC LIMIT 1")
        return json.loads(row[0][0]) if row else {}

    def sweeps(self) -> list[dict[str, Any]]:
        """Every configuration written into the store, oldest first (more than one only if
        a change was allowed)."""
        rows = self._read("SELECT config_hash, inputs FROM sweep ORDER BY id")
        return [{"config_hash": h, "inputs": json.loads(i)} for h, i in rows]

    def manifest(self) -> dict[str, Any]:
        """The manifest entries, by key."""
        return {
            k: json.loads(v) for k, v in self._read("SELECT key, value FROM manifest ORDER BY key")
        }

    def done_keys(self) -> frozenset[str]:
        """Keys of every stored point (feasible or not): the work a re-run skips."""
        return frozenset(r[0] for r in self._read("SELECT key FROM points"))

    def points(
        self, feasible_only: bool = False, workload: str | None = None
    ) -> list[dict[str, Any]]:
        """Stored points as records with every column, ordered by (workload, design_id, key).

        ``feasible`` comes back as a bool; ``placement`` as the stored JSON text.
        """
        where, args = [], []
        if feasible_only:
            where.append("feasible = 1")
        if workload is not None:
            where.append("workload = ?")
            args.append(workload)
        sql = f"SELECT {', '.join(COLUMN_NAMES)} FROM points"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY workload, design_id, key"
        out = []
        for row in self._read(sql, args):
            rec = dict(zip(COLUMN_NAMES, row, strict=True))
            rec["feasible"] = bool(rec["feasible"])
            out.append(rec)
        return out

    def pairs(self, workload: str | None = None) -> list[dict[str, Any]]:
        """Stored prefill-decode pairs as records, ordered by (workload, key)."""
        sql = f"SELECT {', '.join(PAIR_COLUMN_NAMES)} FROM pairs"
        args = () if workload is None else (workload,)
        sql += (" WHERE workload = ?" if workload is not None else "") + " ORDER BY workload, key"
        return [dict(zip(PAIR_COLUMN_NAMES, row, strict=True)) for row in self._read(sql, args)]

    def designs(self) -> list[dict[str, Any]]:
        """Stored designs (columns merged with ``extra``), ordered by design_id."""
        cols = (*DESIGN_COLUMNS, "extra")
        out = []
        for row in self._read(f"SELECT {', '.join(cols)} FROM designs ORDER BY design_id"):
            rec = dict(zip(DESIGN_COLUMNS, row[:-1], strict=True))
            rec.update(json.loads(row[-1]))
            out.append(rec)
        return out

    def __len__(self) -> int:
        return self._read("SELECT COUNT(*) FROM points")[0][0]

    def __repr__(self) -> str:
        mode = "rw" if self.writable else "ro"
        return f"Store({str(self.path)!r}, {mode})"

    # ------------------------------------------------------------------ internals
    @contextmanager
    def _transaction(self) -> Iterator[None]:
        if not self.writable:
            raise ConfigError(
                f"{self.path} was opened read-only (results.load); use Store.open to write"
            )
        with self._lock, sqlite_errors(self.path):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, args: Any = ()) -> list[tuple[Any, ...]]:
        with self._lock, sqlite_errors(self.path):
            return self._conn.execute(sql, args).fetchall()


def load(out_dir: str | Path) -> Store:
    """Open the store of a finished (or running) sweep read-only.

    Raises ConfigError when the directory or its store is missing, or the file is not a Phaze
    store of this version.
    """
    out = Path(out_dir)
    if not out.is_dir():
        raise ConfigError(
            f"results directory {str(out)!r} does not exist (give the --out directory of a sweep)"
        )
    path = store_path(out)
    if not path.is_file():
        raise ConfigError(
            f"no Phaze results store in {str(out)!r} (expected {path.name}); "
            f"run `phaze sweep --out {out}` first"
        )
    conn = connect(path, read_only=True)
    try:
        try:
            _check_store(conn, path)
        except ConfigError:
            if not unwritable(conn):
                raise
            # A read-only directory: SQLite cannot create or write the WAL's index. With no
            # WAL content to merge the main file is complete and can be read as immutable.
            conn.close()
            conn = connect_immutable(path)
            _check_store(conn, path)
    except BaseException:
        conn.close()
        raise
    return Store(conn, path, writable=False)


def _has_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] > 0


def _check_store(conn: sqlite3.Connection, path: Path) -> None:
    """A Phaze store of this layout, whole (``PRAGMA quick_check`` reads every page once)."""
    with sqlite_errors(path):
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id != _APPLICATION_ID:
        raise ConfigError(
            f"{path} is an SQLite file but not a Phaze results store: move it away, "
            f"or run with a new --out"
        )
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"{path} has store layout version {version}; this Phaze reads version "
            f"{SCHEMA_VERSION}: re-run the sweep into a new directory"
        )
    with sqlite_errors(path):
        problems = [r[0] for r in conn.execute("PRAGMA quick_check(3)").fetchall()]
    if problems != ["ok"]:
        raise ConfigError(
            f"the results store {path} is damaged ({'; '.join(problems)}): move it away "
            f"(it is left as it is), or run with a new --out"
        )


def _point_row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    problems: list[str] = []
    unknown = sorted(k for k in record if k not in COLUMNS)
    problems += [str(unknown_name("column", str(k), COLUMN_NAMES)) for k in unknown]
    for k in _REQUIRED_POINT_KEYS:
        if record.get(k) is None or record.get(k) == "":
            problems.append(f"point record: {k} is required")
    row = tuple(_cell(n, record.get(n), problems, "point record") for n in COLUMN_NAMES)
    if problems:
        raise ConfigError("; ".join(problems))
    return row


def _cell(
    name: str, value: Any, problems: list[str], source: str, columns: Mapping = COLUMNS
) -> Any:
    """One SQL value for column ``name`` of ``columns``, or None after noting a problem."""
    if value is None:
        return None
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, str):
        value = value.item()  # numpy scalar
    col = columns[name]
    if name == "placement" and not isinstance(value, str):
        return dumps(value)
    if name == "feasible":
        if value in (0, 1) and not isinstance(value, float):
            return int(value)
        problems.append(f"{source}: feasible = {value!r} must be a bool (or 0/1)")
        return None
    if col.sqltype == "TEXT":
        if hasattr(value, "value") and isinstance(value.value, str):  # StrEnum / Enum
            value = value.value
        if isinstance(value, str):
            return value
        problems.append(f"{source}: {name} = {value!r} must be a string")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{source}: {name} = {value!r} must be a number ({col.unit or 'no unit'})")
        return None
    if col.sqltype == "INTEGER" and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
