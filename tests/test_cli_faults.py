"""Faults on the command line end in one ``Error:`` line with the documented exit status, in
seconds, and leave every stored result as it was: damaged and read-only results stores,
unwritable outputs, a second writer, sizes beyond any machine, an unreachable Ray cluster.

Read-only places are made two ways. Paths whose parent is a regular file (so ``mkdir`` and
``open`` fail with ENOTDIR) fail for every user, root included, in this process. True
read-only directories and files (mode 0555 / 0444) are used in a child process: as root,
permission bits do not stop writes, so the child runs under ``setpriv`` without the
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH capabilities, which makes root obey them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from results.store import STORE_FILENAME, Store, load


@pytest.fixture(scope="module")
def config(small_sweep) -> Path:
    return small_sweep[0]


@pytest.fixture(scope="module")
def sweep_dir(small_sweep) -> Path:
    return small_sweep[1]


def _sweep(cli_run, config: Path, out: Path, *extra):
    return cli_run("sweep", config, "--out", out, "--executor", "serial", "--no-report", *extra)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error(r, *words: str, code: int = 1) -> str:
    """The single ``Error:`` line of a failed command (no traceback), holding ``words``."""
    assert r.exit_code == code, r.output
    assert isinstance(r.exception, SystemExit), r.output  # no exception escaped
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, r.output
    for w in words:
        assert w in errors[0], errors[0]
    return errors[0]


def _damage(store: Path, how: str) -> None:
    data = bytearray(store.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 3]
    elif how == "junk header":
        data[:100] = b"X" * 100
    else:  # junk in the middle: the pages after the schema (manifest, designs, points)
        data[8192:16384] = b"\xff" * 8192
    store.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "junk header", "junk mid-file"])
def test_a_damaged_store_is_one_error_and_is_left_as_it_is(
    cli_run, config, sweep_dir, tmp_path, how
):
    d = tmp_path / "damaged"
    shutil.copytree(sweep_dir, d)
    store = d / STORE_FILENAME
    _damage(store, how)
    before = _digest(store)
    for args in (
        ("report", d),
        ("export", d, "--json"),
        ("pareto", d, "--x", "tcdp", "--y", "mfu"),
    ):
        t0 = time.monotonic()
        r = cli_run(*args)
        _one_error(r, str(store), "damaged", "move it away", "--out")
        assert time.monotonic() - t0 < 10
    r = _sweep(cli_run, config, d)  # resuming
    _one_error(r, str(store), "damaged")
    assert "designs" not in r.output  # refused before any work
    assert _digest(store) == before
    assert not (d / "report.html").exists()


def test_outputs_under_a_regular_file_fail_up_front(cli_run, config, sweep_dir, tmp_path):
    """A path whose parent is a file cannot be created, for root as for anyone."""
    f = tmp_path / "file"
    f.write_text("")
    r = _sweep(cli_run, config, f / "sub")
    _one_error(r, str(f / "sub"), "--out")
    for args, path, option in (
        (("report", sweep_dir, "--out", f / "r.html"), f / "r.html", "--out"),
        (("export", sweep_dir, "--json", "--out", f / "x.json"), f / "x.json", "--out"),
        (("report", sweep_dir, "--plots", f / "plots"), f / "plots", "--plots"),
        (
            ("schedule", "--workload", "gpt3-125m", "--arch", "a100", "--gantt", f / "g.png"),
            f / "g.png",
            "--gantt",
        ),
    ):
        t0 = time.monotonic()
        _one_error(cli_run(*args), f"cannot write {path}", option)
        assert time.monotonic() - t0 < 10
    # a report into a sweep directory where report.html cannot be replaced
    d = tmp_path / "sweep"
    shutil.copytree(sweep_dir, d)
    (d / "report.html").mkdir()
    _one_error(cli_run("report", d), str(d / "report.html"), "--out")


_CHILD = """
import json, sys
from click.testing import CliRunner
from phaze.cli import cli
try:
    open(sys.argv[1], "w").close()
except OSError:
    pass
else:
    print(json.dumps(None))  # this system cannot make the directory read-only
    sys.exit()
print(json.dumps([(r.exit_code, r.output) for r in
                  (CliRunner().invoke(cli, a) for a in json.loads(sys.argv[2]))]))
"""


def _run_read_only(root: Path, commands: list[list[str]]) -> list[tuple[int, str]]:
    """Run ``commands`` in a child process for which ``root`` (mode 0555, files 0444) is
    read-only; skips where this system cannot make it so."""
    for p in [root, *root.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
    try:
        args = [*prefix, sys.executable, "-c", _CHILD, str(root / "probe"), json.dumps(commands)]
        child = subprocess.run(args, capture_output=True, text=True, timeout=120)
    finally:
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
    assert child.returncode == 0, child.stderr
    got = json.loads(child.stdout.splitlines()[-1])
    if got is None:
        pytest.skip("this system lets the test process write into a 0555 directory")
    return [tuple(g) for g in got]


def test_read_only_places_fail_up_front_and_a_read_only_store_is_still_read(
    config, sweep_dir, tmp_path
):
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copytree(sweep_dir, ro / "sweep")
    store = ro / "sweep" / STORE_FILENAME
    before = _digest(store)
    sweep = ["sweep", str(config), "--executor", "serial", "--no-report", "--out"]
    commands = [
        [*sweep, str(ro / "sub")],
        [*sweep, str(ro / "sweep")],  # resuming a read-only store
        ["report", str(ro / "sweep")],
        ["report", str(sweep_dir), "--out", str(ro / "r.html")],
        ["export", str(sweep_dir), "--json", "--out", str(ro / "x.json")],
        ["schedule", "--workload", "gpt3-125m", "--arch", "a100", "--gantt", str(ro / "g.png")],
        ["export", str(ro / "sweep"), "--json"],
    ]
    got = _run_read_only(ro, commands)
    expected = [
        ("cannot create the output directory", "--out"),
        (f"the results store {store} is read-only", "--out"),
        (f"cannot write {ro / 'sweep' / 'report.html'}", "--out"),
        (f"cannot write {ro / 'r.html'}", "--out"),
        (f"cannot write {ro / 'x.json'}", "--out"),
        (f"cannot write {ro / 'g.png'}", "--gantt"),
    ]
    for (code, output), words in zip(got, expected, strict=False):
        errors = [line for line in output.splitlines() if line.startswith("Error:")]
        assert code == 1 and len(errors) == 1 and "Traceback" not in output, output
        assert all(w in errors[0] for w in words), errors[0]
    assert "designs" not in got[1][1]  # the resume was refused before any work
    code, output = got[-1]  # a read-only store (its WAL merged) is still read
    assert code == 0, output
    assert len(json.loads(output)["points"]) == len(load(sweep_dir).points())
    assert _digest(store) == before
    assert [p.name for p in ro.iterdir()] == ["sweep"]  # nothing created


def test_a_second_writer_is_refused_and_the_results_stay_the_same(
    cli_run, config, sweep_dir, tmp_path
):
    d = tmp_path / "locked"
    shutil.copytree(sweep_dir, d)
    before = load(d).points()
    with Store.open(d, {}, load(d).config_hash):  # a sweep writing to d
        r = _sweep(cli_run, config, d)
        _one_error(r, "another sweep is writing", str(d / STORE_FILENAME), "--out")
    r = _sweep(cli_run, config, d)  # once the first has finished
    assert r.exit_code == 0, r.output
    assert load(d).points() == before


_HOLDER = """
import sys, time
from results.store import Store
s = Store.open(sys.argv[1], {}, "h")
print("open", flush=True)
time.sleep(600)
"""


def test_the_lock_of_a_killed_writer_is_gone(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(Exception, match="another sweep is writing"):
            Store.open(tmp_path, {}, "h")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with Store.open(tmp_path, {}, "h") as s:  # the OS released the lock with the process
        assert len(s) == 0


def test_sizes_beyond_any_machine_are_refused_naming_the_limit(cli_run, config, tmp_path):
    r = cli_run("sweep", "--devices", 100_000_000, "--global-batch", 1_000_000_000)
    _one_error(r, "--devices", "1000000", code=2)
    bad = tmp_path / "big.toml"
    text = config.read_text().replace("devices = 4\n", "devices = 100000000\n")
    text = text.replace("global_batch = 8\n", "global_batch = 1000000000\n")
    bad.write_text(text)
    t0 = time.monotonic()
    error = _one_error(_sweep(cli_run, bad, tmp_path / "out"), "limit of 1000000")
    assert "devices = 100000000" in error and "global_batch = 1000000000" in error
    assert time.monotonic() - t0 < 10 and not (tmp_path / "out").exists()
    example = Path(__file__).parent.parent / "examples" / "placement_gpt_small.json"
    doc = json.loads(example.read_text())
    doc.update(maxDevices=10**9, mbsInBatch=10**9)
    (tmp_path / "big.json").write_text(json.dumps(doc))
    error = _one_error(cli_run("place", tmp_path / "big.json"), "limit of 1000000")
    assert "maxDevices = 1000000000" in error and "mbsInBatch = 1000000000" in error


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_ray_address_fails_in_seconds(cli_run, config, tmp_path):
    address = f"127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    r = cli_run("sweep", config, "--out", tmp_path / "o", "--executor", "ray", "--address", address)
    _one_error(r, f"cannot reach the Ray cluster at address = {address!r}", "ray start")
    assert time.monotonic() - t0 < 30 and not (tmp_path / "o").exists()
