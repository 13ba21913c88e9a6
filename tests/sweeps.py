"""Small sweeps of the sweep tests: configs, runs and a brute-force Pareto oracle.

Every sweep here runs on 4 devices with 256-token sequences of gpt3-125m (and gpt3-350m),
with the deterministic "list" scheduler. Evaluations are cached by content within the test
process, so the sweeps after the first of each space cost little.
"""

from __future__ import annotations

import json
from pathlib import Path

from spaces import space_toml

from phaze.config import SweepConfig, sweep_config_from_mapping
from phaze.sweep import run_sweep
from results.pareto import parse_objectives
from results.schema import AGGREGATE_WORKLOAD
from results.store import load

# Six designs (1, 2, 4 tensor cores of 64 or 128 rows), all kept whatever their area.
SMALL_SPACE = space_toml("test", num_tc=(1, 2, 4), tc_rows=(64, 128))

OBJECTIVES = ("tokens_per_s", "system_cost_usd", "total_kgco2e", "tcdp")


def sweep_table(space: Path, **sweep) -> dict:
    """The [sweep] table of a small sweep (overridden by ``sweep``)."""
    return {
        "workloads": ["gpt3-125m"],
        "space": str(space),
        "devices": 4,
        "devices_per_node": 4,
        "seq_len": 256,
        "global_batch": 8,
        "micro_batches": [1],
        "recompute": ["none"],
        "presets": [],
        "objectives": list(OBJECTIVES),
        **sweep,
    }


def config(space: Path, **sweep) -> SweepConfig:
    return sweep_config_from_mapping(
        {"sweep": sweep_table(space, **sweep), "solver": {"name": "list"}}, source="test"
    )


def config_toml(space: Path, **sweep) -> str:
    table = sweep_table(space, **sweep)
    # lists of strings and numbers, strings, bools: JSON == TOML
    lines = ["[sweep]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    return "\n".join([*lines, "", "[solver]", 'name = "list"', ""])


def points(out: Path) -> list[dict]:
    with load(out) as store:
        return store.points()


def run(cfg: SweepConfig, out: Path, **kwargs):
    kwargs.setdefault("executor", "serial")
    return run_sweep(cfg, out, progress=False, **kwargs)


def front(pts, objectives) -> list[dict]:
    """Non-dominated feasible points over any number of objectives (O(n²) oracle)."""
    objs = parse_objectives(objectives)
    rows = [
        (p, [(-1 if o.sense == "max" else 1) * p[o.metric] for o in objs])
        for p in pts
        if p["feasible"] and p["workload"] != AGGREGATE_WORKLOAD
    ]

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b

    return sorted(
        (p for p, v in rows if not any(dominates(w, v) for _, w in rows)), key=lambda p: p["key"]
    )
