"""The Gantt chart of a layer pass: lanes per core kind on big accelerators, bounded size."""

from __future__ import annotations

import pytest
from PIL import Image

from arch_space.accelerator import Cluster
from arch_space.presets import preset
from ilp.timing import pass_schedule
from results.gantt import PER_CORE_MAX, draw_gantt, gantt_figure
from workloads import TrainingSetup, build_layer_graph, resolve_model


def _schedule(arch: str):
    model = resolve_model("gpt3-125m")
    graph = build_layer_graph(model, TrainingSetup(seq_len=256, global_batch=1, micro_batch=1), 1)
    return pass_schedule(
        graph.op_graphs["block"].forward, preset(arch), Cluster(devices=1), solver="list"
    )


@pytest.mark.parametrize(("arch", "rows"), [("a100", 3), ("tpuv4", 8 + 2 + 1)])
def test_lanes_per_kind_past_the_per_core_limit(arch, rows, tmp_path):
    s = _schedule(arch)
    assert (s.num_tc + s.num_vc > PER_CORE_MAX) == (arch == "a100")
    fig = gantt_figure(s, arch)
    (ax,) = fig.axes
    assert len(ax.get_yticks()) == rows
    assert ax.get_xlim() == (0, s.makespan_s)  # fixed limits, no autoscale
    drawn = sum(len(c.get_paths()) for c in ax.collections)
    busy = sum(1 for v, d in s.duration_s.items() if d > 0)
    assert drawn >= busy  # every op with a duration is drawn
    png = tmp_path / "g.png"
    draw_gantt(s, png, arch)
    width, height = Image.open(png).size
    assert width <= 2000 and height <= 2000
