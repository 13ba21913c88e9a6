"""The Gantt chart of a layer pass: lanes per core kind on big accelerators, bounded size."""

from __future__ import annotations

import pytest
from PIL import Image

from arch_space.accelerator import Cluster
from arch_space.presets import preset
from ilp.timing import pass_schedule
from results.gantt import PER_CORE_MAX, _parts, draw_gantt, gantt_figure
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


def _families() -> dict[str, str]:
    """The smallest catalog model of each family (name up to its size), preferring models
    that t = 8 divides."""
    from workloads import catalog, valid_tp_widths

    best: dict[str, tuple] = {}
    for name, m in catalog().items():
        family = name.rsplit("-", 1)[0] if name.count("-") else name
        key = (8 not in valid_tp_widths(m), m.parameters)
        if family not in best or key < best[family][0]:
            best[family] = (key, name)
    return {f: name for f, (_, name) in sorted(best.items())}


_FAMILIES = _families()
# Per family one chart layout in the default suite (alternating, so both layouts meet the
# channel lanes of t = 8), the other in the slow run.
_LAYOUTS = [
    pytest.param(family, arch, marks=[] if (i + j) % 2 == 0 else [pytest.mark.slow])
    for i, family in enumerate(_FAMILIES)
    for j, arch in enumerate(("tpuv4", "a100"))
]


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize(("family", "arch"), _LAYOUTS)
def test_every_pass_of_every_family_draws_each_lane(family, arch, tp):
    """Every unit an op holds (cores, channels such as ``channel:tp``) lands in a row of its
    kind, on per-core charts (tpuv4) and per-kind lanes (a100), for every pass."""
    from workloads import valid_tp_widths

    model = resolve_model(_FAMILIES[family])
    t = max(w for w in valid_tp_widths(model) if w <= tp)
    graph = build_layer_graph(model, TrainingSetup(seq_len=128, global_batch=1), t)
    drawn_kinds = set()
    for passes in graph.op_graphs.values():
        for name in ("forward", "backward", "recompute"):
            op_graph = getattr(passes, name)
            if not op_graph.ops:
                continue
            s = pass_schedule(
                op_graph, preset(arch), Cluster(devices=t), solver="list", search_nodes=0
            )
            (ax,) = gantt_figure(s, f"{family} {name} t={t}").axes
            labels = [tick.get_text() for tick in ax.get_yticklabels()]
            assert labels[-1] == "net"
            for kind in s.capacity:
                assert any(label.startswith(kind) for label in labels), (kind, labels)
            drawn = sum(len(c.get_paths()) for c in ax.collections)
            assert drawn >= sum(1 for d in s.duration_s.values() if d > 0)
            drawn_kinds |= {
                kind
                for ids in s.core_ids.values()
                if ids
                for kind, _, _ in _parts(ids, tuple(s.capacity))
            }
    assert any(k.startswith("channel:") for k in drawn_kinds) == (t > 1), drawn_kinds
