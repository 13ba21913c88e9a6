"""The SQLite results store (results.store): round trips, resume keys, config guard, kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from budget import budget
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from phaze_common.errors import ConfigError
from results.schema import COLUMN_NAMES, POINT_COLUMNS
from results.store import STORE_FILENAME, Store, load

CONFIG = {"workloads": ["gpt3-1.3b"], "formulas": {"tcdp": "tC x D"}, "defaults": {"pue": 1.1}}


def _point(i: int, **over) -> dict:
    rec = {
        "key": f"k{i:04d}",
        "workload": "gpt3-1.3b",
        "design_id": f"d{i % 7}",
        "design_name": None,
        "num_tc": 4,
        "micro_batch": 2,
        "recompute": "full",
        "feasible": True,
        "tokens_per_s": 1e5 + i,
        "tcdp": 3.5 * i,
        "placement": {"tp": 2, "pp": 4, "stages": [[0, 12], [12, 24]]},
    }
    rec.update(over)
    return rec


def test_round_trip_of_every_column(tmp_path):
    full = {}
    for c in POINT_COLUMNS:
        full[c.name] = {"TEXT": f"v-{c.name}", "INTEGER": 7, "REAL": 2.5}[c.sqltype]
    full["feasible"] = True
    full["placement"] = '{"tp": 1}'
    with Store.open(tmp_path, CONFIG, "h1") as s:
        s.put_point(full)
        s.put_point(
            _point(1, feasible=False, reason="does not fit: 90 GiB > 80 GiB", tokens_per_s=None)
        )
    st = load(tmp_path)
    got = {p["key"]: p for p in st.points()}
    assert got["v-key"] == full
    assert list(got["k0001"]) == list(COLUMN_NAMES)
    assert got["k0001"]["feasible"] is False and got["k0001"]["reason"].startswith("does not fit")
    assert got["k0001"]["placement"] == '{"pp": 4, "stages": [[0, 12], [12, 24]], "tp": 2}'
    assert [p["key"] for p in st.points(feasible_only=True)] == ["v-key"]
    assert st.points(workload="v-workload")[0]["key"] == "v-key"
    assert len(st) == 2 and st.done_keys() == frozenset({"v-key", "k0001"})
    assert st.inputs() == CONFIG and st.config_hash == "h1"
    st.close()


def test_numpy_values_enums_and_replace_by_key(tmp_path):
    s = Store.open(tmp_path, CONFIG, "h")
    s.put_point(
        _point(1, num_tc=np.int64(8), tokens_per_s=np.float32(2.0), feasible=np.bool_(True))
    )
    s.put_point(_point(1, tokens_per_s=3.0))  # same key: replaced, not duplicated
    (p,) = s.points()
    assert p["tokens_per_s"] == 3.0 and p["num_tc"] == 4 and isinstance(p["num_tc"], int)
    s.close()


def test_put_points_stores_what_put_point_does_in_one_transaction(tmp_path):
    """A batch stores the rows one put_point each would; a bad record in it stores none."""
    one, many = (
        Store.open(tmp_path / "one", CONFIG, "h"),
        Store.open(tmp_path / "many", CONFIG, "h"),
    )
    batch = [_point(i, tokens_per_s=float(i)) for i in range(5)] + [_point(2, tokens_per_s=9.0)]
    for p in batch:
        one.put_point(p)
    many.put_points(batch)
    assert many.points() == one.points() and len(many) == 5
    with pytest.raises(ConfigError):
        many.put_points([_point(7), {"key": "bad"}])
    assert len(many) == 5
    one.close()
    many.close()


def test_bad_records_report_every_problem_at_once(tmp_path):
    with Store.open(tmp_path, CONFIG, "h") as s:
        with pytest.raises(ConfigError) as e:
            s.put_point(
                {
                    "key": "x",
                    "design_id": "d",
                    "tokens_per_sec": 1.0,
                    "num_tc": "four",
                    "feasible": 2,
                }
            )
        msg = str(e.value)
        assert "unknown column 'tokens_per_sec'; did you mean tokens_per_s" in msg
        assert "workload is required" in msg
        assert "num_tc = 'four' must be a number" in msg
        assert "feasible = 2 must be a bool" in msg
        assert len(s) == 0


def test_designs_keep_extra_keys(tmp_path):
    with Store.open(tmp_path, CONFIG, "h") as s:
        s.put_design(
            {"design_id": "d1", "num_tc": 4, "area_mm2": 410.5, "embodied_kgco2e_per_device": 12.0}
        )
        s.put_design({"design_id": "d0", "design_name": "tpu-like"})
        with pytest.raises(ConfigError, match="design_id must be a non-empty string"):
            s.put_design({"num_tc": 4})
    d = load(tmp_path).designs()
    assert [x["design_id"] for x in d] == ["d0", "d1"]
    assert d[1]["area_mm2"] == 410.5 and d[1]["embodied_kgco2e_per_device"] == 12.0
    assert d[0]["design_name"] == "tpu-like" and d[0]["num_tc"] is None


def test_manifest(tmp_path):
    with Store.open(tmp_path, CONFIG, "h") as s:
        s.set_manifest({"tool_version": "0.1.0", "wall_s": {"ilp": 1.5}})
        s.set_manifest({"wall_s": {"ilp": 2.5, "placement": 0.5}})
    assert load(tmp_path).manifest() == {
        "tool_version": "0.1.0",
        "wall_s": {"ilp": 2.5, "placement": 0.5},
    }


def test_reopen_same_hash_resumes_and_other_hash_is_refused(tmp_path):
    with Store.open(tmp_path, CONFIG, "hash-one") as s:
        s.put_point(_point(1))
    with Store.open(tmp_path, CONFIG, "hash-one") as s:
        assert s.done_keys() == {"k0001"}
        assert len(s.sweeps()) == 1
    with pytest.raises(ConfigError) as e:
        Store.open(tmp_path, {"other": 1}, "hash-two")
    assert "config hash hash-one" in str(e.value) and "hash-two" in str(e.value)
    assert "allow_config_change=True" in str(e.value)  # the way to allow it, named
    with Store.open(tmp_path, {"other": 1}, "hash-two", allow_config_change=True) as s:
        assert s.inputs() == {"other": 1} and s.config_hash == "hash-two"
        assert [w["config_hash"] for w in s.sweeps()] == ["hash-one", "hash-two"]
        assert s.done_keys() == {"k0001"}


def test_read_only_store_refuses_writes(tmp_path):
    Store.open(tmp_path, CONFIG, "h").close()
    st = load(tmp_path)
    assert not st.writable
    with pytest.raises(ConfigError, match="read-only"):
        st.put_point(_point(1))
    st.close()


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load(tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"no Phaze results store .*phaze sweep --out"):
        load(tmp_path)
    (tmp_path / STORE_FILENAME).write_text("not a database")
    with pytest.raises(ConfigError, match="is damaged .file is not a database.: move it away"):
        load(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    sqlite3.connect(other / STORE_FILENAME).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ConfigError, match="SQLite file but not a Phaze results store"):
        load(other)
    with pytest.raises(ConfigError, match="SQLite file but not a Phaze results store"):
        Store.open(other, CONFIG, "h")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        Store.open(tmp_path / "file", CONFIG, "h")


_WRITER = textwrap.dedent(
    """
    import sys
    from results.store import Store
    s = Store.open(sys.argv[1], {"w": 1}, "h")
    i = 0
    while True:
        s.put_point({"key": f"k{i:07d}", "workload": "w", "design_id": "d", "feasible": True,
                     "tokens_per_s": float(i), "tcdp": 2.0 * i, "placement": {"i": i}})
        if i == 50:
            print("ready", flush=True)
        i += 1
    """
)


def test_kill_9_leaves_only_complete_points(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Store.open(tmp_path, {"w": 1}, "h") as s:  # resume: same config
        assert s._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        pts = s.points()
        n = len(pts)
        assert n > 50
        # Points are committed in order: exactly keys 0..n-1, each complete.
        assert [p["key"] for p in pts] == [f"k{i:07d}" for i in range(n)]
        for i, p in enumerate(pts):
            assert (p["tokens_per_s"], p["tcdp"], p["placement"]) == (
                float(i),
                2.0 * i,
                f'{{"i": {i}}}',
            )
        s.put_point(
            {"key": "after", "workload": "w", "design_id": "d", "feasible": False, "reason": "r"}
        )
        assert len(s) == n + 1


_VALUE = {
    "TEXT": st.text(max_size=20),
    "INTEGER": st.integers(-(2**62), 2**62),
    "REAL": st.floats(allow_nan=False, allow_infinity=False, width=64),
}


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    with Store.open(tmp_path_factory.mktemp("rt"), CONFIG, "h") as s:
        yield s


@given(st.data())
@budget(40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_record_round_trips_exactly(shared_store, data):
    rec = {"key": data.draw(st.text(min_size=1, max_size=10)), "workload": "w", "design_id": "d"}
    rec["feasible"] = data.draw(st.booleans())
    for c in POINT_COLUMNS:
        if c.name not in rec and c.name != "placement" and data.draw(st.booleans()):
            rec[c.name] = data.draw(_VALUE[c.sqltype])
    shared_store.put_point(rec)
    (got,) = [p for p in shared_store.points() if p["key"] == rec["key"]]
    assert got == {**dict.fromkeys(COLUMN_NAMES), **rec}
