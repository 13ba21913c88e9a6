"""A sweep on Ray (a local instance of 2 CPUs) stores exactly the points of a local sweep.

The space is the prunable one of test_phaze_sweep.py, so the check covers pruning rounds
and the aggregate rows of two workloads as well as the evaluated points.
"""

from __future__ import annotations

import pytest
from spaces import PRUNABLE_SPACE

from phaze.config import sweep_config_from_mapping
from phaze.sweep import run_sweep
from results.schema import AGGREGATE_WORKLOAD
from results.store import load

ray = pytest.importorskip("ray")

# A whole sweep on a fresh Ray instance (about 10 s); the executor's own equality with the
# local pool stays in the default suite (tests/test_executors_ray.py).
pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPACE = PRUNABLE_SPACE  # 48 designs, of which the 8-row arrays and 128 MiB buffers are pruned


def test_ray_and_local_sweeps_store_identical_points(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text(SPACE)
    cfg = sweep_config_from_mapping(
        {
            "sweep": {
                "workloads": ["gpt3-125m", "gpt3-350m"],
                "space": str(space),
                "devices": 4,
                "devices_per_node": 4,
                "seq_len": 256,
                "global_batch": 8,
                "micro_batches": [1],
                "recompute": ["none"],
                "presets": ["tpuv4"],
            },
            "solver": {"name": "list"},
        }
    )
    assert not ray.is_initialized()
    on_ray = run_sweep(cfg, tmp_path / "ray", executor="ray", jobs=2, progress=False)
    assert not ray.is_initialized()  # the instance the sweep started is shut down
    local = run_sweep(cfg, tmp_path / "local", executor="local", jobs=2, progress=False)
    with load(tmp_path / "ray") as r, load(tmp_path / "local") as loc:
        assert r.manifest()["executor"] == "ray" and loc.manifest()["executor"] == "local"
        ray_points, local_points = r.points(), loc.points()
    assert ray_points == local_points
    assert on_ray.pruned_designs == local.pruned_designs > 0
    assert on_ray.evaluated_designs == local.evaluated_designs > 0
    assert any(p["workload"] == AGGREGATE_WORKLOAD for p in ray_points)
