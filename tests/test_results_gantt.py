"""The Gantt chart of a layer pass: lanes per core kind on big accelerators, bounded size."""

from __future__ import annotations

import pytest
from PIL import Image

from arch_space.accelerator import Cluster
from arch_space.presets import preset
from ilp.timing import pass_schedule
from results.gantt import PER_CORE_MAX, draw_gantt, gantt_figure
from workloads import TrainingSetup, build_layer_graph, resolve_model


def _schedule(arch: str, tp: int = 1):
    model = resolve_model("gpt3-125m")
    graph = build_layer_graph(model, TrainingSetup(seq_len=256, global_batch=1, micro_batch=1), tp)
    return pass_schedule(
        graph.op_graphs["block"].forward, preset(arch), Cluster(devices=tp), solver="list"
    )


@pytest.mark.parametrize(("arch", "rows"), [("a100", 3), ("tpuv4", 8 + 2 + 1)])
def test_lanes_per_kind_past_the_per_core_limit(arch, rows, tmp_path):
    s = _schedule(arch)
    assert (sum(s.capacity[k] for k in s.core_kinds) > PER_CORE_MAX) == (arch == "a100")
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


def test_collectives_on_their_channel_share_the_network_row():
    """At t > 1 each collective holds its group's channel (a further kind): it is drawn on
    the network row, beside the rows of the compute units only."""
    s = _schedule("tpuv4", tp=2)
    colls = [v for v, ids in s.core_ids.items() if ids.startswith("channel:")]
    assert colls
    (ax,) = gantt_figure(s, "tpuv4").axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [*(f"TC{c}" for c in range(8)), "VC0", "VC1", "net"]
    net = labels.index("net")
    ys = [y for c in ax.collections for p in c.get_paths() for y in p.vertices[:, 1]]
    assert sum(net < y < net + 1 for y in ys) >= 4 * len(colls)  # every corner of each
