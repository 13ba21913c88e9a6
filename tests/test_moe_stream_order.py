"""A stack running the routed experts as grouped modules (Megatron-Core's TEGroupedMLP over
TransformerEngine's GroupedLinear) issues each op for every local expert before the next
op, on one CUDA stream: the experts' quantizations one after another, then their GEMMs a few
at a time (``expert_gemm_streams``), so one expert's casts never run beside another's GEMMs."""

from __future__ import annotations

import networkx as nx
import pytest

from phaze_common.errors import ConfigError
from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.build import BLOCK_CLASS
from workloads.framework import framework_profile
from workloads.moe_ops import grouped_in_stream_order

GROUPED = "megatron-bridge-2025"
APART = "megatron-bridge-2025:expert_gemm_streams=0"


def _block(framework: str, precision: str = "fp8-te-current"):
    setup = TrainingSetup(4096, 8, expert_parallel=8, framework=framework, precision=precision)
    return build_layer_graph(get_model("qwen3-30b-a3b"), setup, 1).op_graphs[BLOCK_CLASS]


def _dag(graph) -> nx.DiGraph:
    return graph.to_networkx()


def test_megatron_bridge_runs_the_experts_grouped_with_four_gemm_streams():
    assert framework_profile(GROUPED).expert_gemm_streams == 4
    assert framework_profile("megatron-core-2024").expert_gemm_streams == 0


def test_every_expert_s_gemm_waits_for_every_expert_s_cast():
    """TE quantizes all experts' rows (``split_quantize``) before the grouped GEMM starts."""
    g = _dag(_block(GROUPED).forward)
    casts = [n for n in g if n.endswith("fc1.gate.cast")]
    assert len(casts) == 16  # 128 experts over ep 8
    for e in range(16):
        assert set(casts) <= nx.ancestors(g, f"expert{e}.fc1.gate")
    # the quantizations run one after another: each expert's amax after the previous one's,
    # every scale after every amax
    assert "expert0.fc1.gate.amax" in nx.ancestors(g, "expert1.fc1.gate.amax")
    assert "expert15.fc1.gate.amax" in nx.ancestors(g, "expert0.fc1.gate.scale")


def test_experts_apart_keep_their_own_chains():
    """Without grouped modules (0 streams) an expert's GEMM waits only for its own cast."""
    g = _dag(_block(APART).forward)
    assert "expert0.fc1.gate.cast" not in nx.ancestors(g, "expert1.fc1.gate")


def test_four_expert_gemms_run_at_once():
    """A GEMM waits for the same GEMM of the expert four back (round-robin over four
    streams), not for the three experts between."""
    graph = _block(GROUPED, precision="bf16").forward
    index = {o.name: i for i, o in enumerate(graph.ops)}
    edges = set(graph.edges)
    assert (index["expert0.fc1.gate"], index["expert4.fc1.gate"]) in edges
    g = _dag(graph)
    assert "expert3.fc1.gate" not in nx.ancestors(g, "expert4.fc1.gate")
    # the activation over all rows waits for every expert's FC1
    assert {f"expert{e}.fc1.up" for e in range(16)} <= nx.ancestors(g, "expert0.swiglu")


def test_the_reordered_graph_keeps_its_ops_and_points_every_edge_forward():
    apart, grouped = _block(APART).backward, _block(GROUPED).backward
    assert sorted(o.name for o in apart.ops) == sorted(o.name for o in grouped.ops)
    assert all(a < b for a, b in grouped.edges)
    # every order the experts' own graph states still holds (now through their phases)
    g = _dag(grouped)
    later = {u: nx.descendants(g, u) for u in _dag(apart)}
    assert all(v in later[u] for u, v in _dag(apart).edges)


def test_no_experts_no_change():
    graph = _block(GROUPED).forward
    dense = type(graph)(
        ops=tuple(o for o in graph.ops if not o.name.startswith("expert")), edges=()
    )
    assert grouped_in_stream_order(dense, 4) is dense
    assert grouped_in_stream_order(graph, 0) is graph


def test_stream_order_slows_the_fp8_expert_section():
    """The casts no longer hide beside the other experts' GEMMs: the FP8 block's forward
    pass on a B200 takes longer grouped than apart."""
    from arch_space import Cluster, preset
    from arch_space.perf.device import preset_profile
    from ilp.timing import layer_timing

    m, acc = get_model("qwen3-30b-a3b"), preset("b200")
    cluster = Cluster(devices=8, devices_per_node=8)
    times = []
    for fw in (APART, GROUPED):
        setup = TrainingSetup(4096, 8, expert_parallel=8, framework=fw, precision="fp8-te-current")
        lg = build_layer_graph(m, setup, 1)
        timing = layer_timing(lg, acc, cluster, device=preset_profile("b200"))[BLOCK_CLASS]
        times.append(timing.forward.makespan_s)
    assert times[1] > 1.1 * times[0]


@pytest.mark.parametrize("value", ["-1", "1.5", "true"])
def test_a_bad_stream_count_is_refused(value):
    with pytest.raises(ConfigError, match="expert_gemm_streams"):
        framework_profile(f"megatron-bridge-2025:expert_gemm_streams={value}")
