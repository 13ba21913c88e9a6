"""The sweep's speed-ups change no result: the quick sweep (``phaze sweep`` with no
arguments) finds the best designs and Pareto fronts, value for value, that main found
before them.

``tests/data/quick_sweep_fingerprint.json`` was written by main before the sweep's speed-ups
(:func:`results.fingerprint.fingerprint` of the quick sweep's store). When a model change
moves the figures on purpose, write it again from the commit before the change and say so
in the commit message. ``benchmarks/bench_sweep.py --check`` compares a sampled default-space
sweep the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from phaze.config import quick_sweep_config
from phaze.sweep import run_sweep
from results.fingerprint import fingerprint
from results.store import load

REFERENCE = Path(__file__).parent / "data" / "quick_sweep_fingerprint.json"


def test_quick_sweep_fronts_and_best_designs_are_main_s(tmp_path):
    cfg = quick_sweep_config()
    run_sweep(cfg, tmp_path / "quick", executor="serial", progress=False)
    with load(tmp_path / "quick") as store:
        now = fingerprint(store, cfg.objectives)
    assert now == json.loads(REFERENCE.read_text())
