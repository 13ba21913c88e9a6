"""The LM head's cross entropy as each stack runs it: fused over bf16 logits, or Megatron-LM's
unfused passes over an fp32 copy."""

import pytest

from arch_space import Cluster
from arch_space.perf import op_costs
from arch_space.perf.device import preset_profile
from arch_space.presets import preset
from phaze_common.errors import ConfigError
from workloads import TrainingSetup, build_layer_graph
from workloads.catalog import get_model
from workloads.framework import framework_profile, profile_from_mapping

# Megatron-LM's vocab_parallel_cross_entropy on logits.float(), counted pass by pass from
# megatron/core/tensor_parallel/cross_entropy.py (core_r0.8.0): bytes per logit element.
FORWARD_PASSES = {  # (read, written)
    "logits.float()": (2, 4),
    "torch.max": (4, 0),
    "logits -= max": (4, 4),
    "torch.exp(out=)": (4, 4),
    "exp.sum": (4, 0),
    "exp.div_": (4, 4),
}
BACKWARD_PASSES = {"grad.mul_": (4, 4), "float() backward cast": (4, 2)}


def _head(framework, model="mcore-gpt-1.7b", seq=4096, tp=1):
    setup = TrainingSetup(seq_len=seq, global_batch=1, micro_batch=1, framework=framework)
    graph = build_layer_graph(get_model(model), setup, tp)
    head = next(x for x in graph.layers if x.kind == "head")
    return graph.pass_graphs(head), setup


def _ce_bytes(graph):
    return sum(op.bytes_read + op.bytes_written for op in graph.ops if op.name.startswith("ce."))


def test_megatron_profiles_run_the_unfused_fp32_cross_entropy():
    assert framework_profile("megatron-2022").cross_entropy == "unfused-fp32"
    assert framework_profile("megatron-core-2024").cross_entropy == "unfused-fp32"
    assert framework_profile("fsdp1-2023").cross_entropy == "fused"


@pytest.mark.parametrize("tp", [1, 2])
def test_unfused_fp32_bytes_are_megatrons_passes(tp):
    passes, setup = _head("megatron-core-2024", tp=tp)
    model = get_model("mcore-gpt-1.7b")
    vocab_shard = -(-model.vocab // (128 * tp)) * 128  # Megatron pads the vocabulary
    n = 4096 * vocab_shard
    forward = sum(r + w for r, w in FORWARD_PASSES.values())
    backward = sum(r + w for r, w in BACKWARD_PASSES.values())
    assert (forward, backward) == (38, 14)
    # the per-token statistics (max, loss) are small beside the logits: within 0.1 %
    assert _ce_bytes(passes.forward) == pytest.approx(forward * n, rel=1e-3)
    assert _ce_bytes(passes.backward) == pytest.approx(backward * n, rel=1e-3)
    # the gradient reaches the logits GEMMs through the cast back to bf16
    names = [op.name for op in passes.backward.ops]
    assert names.index("ce.softmax.bwd") < names.index("ce.float.bwd") < names.index("logits.dgrad")
    cast = passes.backward.ops.index(
        next(o for o in passes.backward.ops if o.name == "ce.float.bwd")
    )
    dgrad = names.index("logits.dgrad")
    assert (cast, dgrad) in passes.backward.edges


def test_the_fused_kernel_reads_the_bf16_logits_once_per_pass():
    fused, _ = _head("fsdp1-2023")
    names = {op.name for op in fused.forward.ops}
    assert "ce.float" not in names and "ce.softmax" in names
    unfused, _ = _head("megatron-core-2024")
    assert _ce_bytes(unfused.forward) > 4 * _ce_bytes(fused.forward)


def test_the_unfused_cross_entropy_takes_its_bytes_at_the_hbm_rate():
    acc, device = preset("h100"), preset_profile("h100")
    cluster = Cluster(devices=8)

    def ce_s(graph):
        t = op_costs(graph, acc, cluster, device=device)
        return sum(
            float(t.parallel_latency_s[i]) for i, n in enumerate(t.names) if n.startswith("ce.")
        )

    unfused, _ = _head("megatron-core-2024")
    fused, _ = _head("fsdp1-2023")
    hbm = acc.hbm_bandwidth_bytes_per_s * 0.88  # arch_space/data/perf.toml hbm_efficiency
    extra = _ce_bytes(unfused.forward) + _ce_bytes(unfused.backward)
    extra -= _ce_bytes(fused.forward) + _ce_bytes(fused.backward)
    slower = ce_s(unfused.forward) + ce_s(unfused.backward)
    slower -= ce_s(fused.forward) + ce_s(fused.backward)
    # memory-bound passes: the extra time is the extra bytes at the sustained HBM rate, give
    # or take the fused softmax's buffer passes and the issue overheads
    assert slower == pytest.approx(extra / hbm, rel=0.15)
    assert slower > 5e-3  # 1.7B at 4096 tokens, vocabulary 131,072: over 5 ms per micro-batch


def test_a_bad_cross_entropy_kernel_is_named():
    table = dict(description="x", tp_overlap=[], dp_overlap=False, cross_entropy="fp32")
    with pytest.raises(ConfigError, match="cross_entropy = 'fp32' must be one of fused"):
        profile_from_mapping("bad", table)
