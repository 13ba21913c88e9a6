"""Transformer Engine's per-tensor current scaling (``fp8-te-current``): each quantization is
a reset of the amax buffer, an amax pass over the high-precision tensor, a scale kernel and
the cast, four kernels where delayed scaling (``fp8-te``) runs the cast alone."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.build import BLOCK_CLASS
from workloads.ops import OpKind
from workloads.precision import recipe


def _block(precision: str, model: str = "gpt3-175b", tp: int = 4):
    setup = TrainingSetup(2048, 8, precision=precision, recompute="full")
    return build_layer_graph(get_model(model), setup, tp).op_graphs[BLOCK_CLASS]


def test_current_scaling_reads_each_quantized_tensor_twice_in_four_kernels():
    delayed, current = _block("fp8-te"), _block("fp8-te-current")
    for d, c in (
        (delayed.forward, current.forward),
        (delayed.backward, current.backward),
        (delayed.recompute, current.recompute),
    ):
        casts = {o.name: o for o in d.ops if o.name.endswith(".cast")}
        assert casts
        index = {o.name: i for i, o in enumerate(c.ops)}
        for name, cast in casts.items():
            base = name[: -len(".cast")]
            amax, scale = c.ops[index[base + ".amax"]], c.ops[index[base + ".scale"]]
            reset = c.ops[index[base + ".reset"]]
            assert c.ops[index[name]] == cast  # the cast itself is delayed scaling's
            # cudaMemsetAsync of the fp32 amax before the amax kernel (launch_amax_kernel)
            assert (reset.elements, reset.bytes_read, reset.bytes_written) == (1, 0, 4)
            assert (amax.bytes_read, amax.elements) == (cast.bytes_read, cast.elements)
            assert scale.elements == 1 and scale.bytes_read < 16
            # reset -> amax -> scale -> cast, and whatever fed the cast now feeds the reset
            r, i, j, k = (index[base + x] for x in (".reset", ".amax", ".scale", ".cast"))
            assert {(r, i), (i, j), (j, k)} <= set(c.edges)
            assert not [a for a, b in c.edges if b in (i, j, k) and a not in (r, i, j)]
        # the same GEMMs, at the same bytes
        gemms = [o for o in c.ops if o.kind is OpKind.MATMUL]
        assert gemms == [o for o in d.ops if o.kind is OpKind.MATMUL]
        assert len(c.ops) == len(d.ops) + 3 * len(casts)
        assert all(a < b for a, b in c.edges)


def test_current_scaling_s_weight_refresh_reads_the_weights_twice():
    assert recipe("fp8-te").weight_refresh_bytes_per_parameter == 2 + 2
    assert recipe("fp8-te-current").weight_refresh_bytes_per_parameter == 2 + 2 + 2


def test_every_expert_quantizes_its_own_rows_under_current_scaling():
    """NeMo's expert Linears quantize each expert's rows as a tensor of its own: an amax
    pass and a scale kernel per expert GEMM input and output gradient."""
    block = _block("fp8-te-current", "qwen3-30b-a3b", 1)
    experts = get_model("qwen3-30b-a3b").experts
    amax = [
        o for o in block.forward.ops if o.name.startswith("expert") and o.name.endswith(".amax")
    ]
    assert len(amax) == 2 * experts  # FC1's input (gate and up share it) and FC2's


def test_a_stack_launching_experts_eagerly_pays_each_expert_kernel_s_launch():
    """megatron-bridge-2025 launches the routed experts' kernels one per expert, eagerly:
    each waits the eager launch beyond the cost model's issue overhead; no other op does."""
    from arch_space import Cluster, preset
    from arch_space.perf import op_costs
    from workloads.framework import framework_profile

    fw = framework_profile("megatron-bridge-2025")
    # an eager launch's wait over a graphed one's, as measured_launch_overhead.toml gives them
    doc = tomllib.loads(
        (Path(__file__).parents[1] / "arch_space/data/measured_launch_overhead.toml").read_text()
    )
    (fig,) = [f for f in doc["figure"] if "eager_per_kernel_s" in f]
    assert fw.expert_launch_s == pytest.approx(
        fig["eager_per_kernel_s"] - fig["graph_per_kernel_s"]
    )
    model = get_model("qwen3-30b-a3b")
    setups = [
        TrainingSetup(4096, 8, precision="fp8-te-current", expert_parallel=8, framework=name)
        for name in ("megatron-core-2024", "megatron-bridge-2025")
    ]
    graphed, eager = (build_layer_graph(model, s, 1).op_graphs[BLOCK_CLASS] for s in setups)
    for g, e in ((graphed.forward, eager.forward), (graphed.backward, eager.backward)):
        experts = [i for i, o in enumerate(e.ops) if o.name.startswith("expert")]
        assert experts and all(e.ops[i].launch_s == fw.expert_launch_s for i in experts)
        assert all(o.launch_s == 0 for o in g.ops)
        assert all(o.launch_s == 0 for i, o in enumerate(e.ops) if i not in experts)
        acc, cluster = preset("b200"), Cluster(devices=8)
        slow = dict(
            zip((o.name for o in e.ops), op_costs(e, acc, cluster).parallel_latency_s, strict=True)
        )
        fast = dict(
            zip((o.name for o in g.ops), op_costs(g, acc, cluster).parallel_latency_s, strict=True)
        )
        # the grouped experts' ops come in stream order there: compare them by name
        names = [e.ops[i].name for i in experts]
        gaps = [slow[n] - fast[n] for n in names]
        assert gaps == pytest.approx([fw.expert_launch_s] * len(names))
