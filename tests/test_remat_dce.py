"""Full recompute under a stack that partially evaluates it (JAX's ``jax.checkpoint``,
MaxText's ``remat_policy=full``): the backward pass never reads FC2's output, so the block's
last GEMM, its collective and residual add are not run again; PyTorch's checkpoint
(Megatron) re-runs the whole forward."""

import pytest

from workloads.build import build_layer_graph
from workloads.catalog import get_model
from workloads.framework import framework_profile
from workloads.op_graphs import block_pass_graphs
from workloads.setup import TrainingSetup

_DROPPED_NO_SP = {"fc2", "fc2.allreduce", "mlp.residual"}


def _recomputed(model: str, framework: str, tp: int = 4, sp: bool = False) -> set[str]:
    setup = TrainingSetup(2048, 8, recompute="full", framework=framework, sequence_parallel=sp)
    return {op.name for op in block_pass_graphs(get_model(model), setup, tp).recompute.ops}


def _forward(model: str, framework: str, tp: int = 4, sp: bool = False) -> set[str]:
    setup = TrainingSetup(2048, 8, recompute="none", framework=framework, sequence_parallel=sp)
    return {op.name for op in block_pass_graphs(get_model(model), setup, tp).forward.ops}


def test_maxtext_profile_partially_evaluates_its_full_recompute():
    assert framework_profile("maxtext-2023").recompute_dce
    assert not framework_profile("megatron-2022").recompute_dce
    assert not framework_profile("fsdp2-2024").recompute_dce


@pytest.mark.parametrize("model", ["maxtext-512b", "llama2-7b"])
def test_the_recompute_drops_the_last_gemm_its_collective_and_the_residual(model):
    forward = _forward(model, "maxtext-2023")
    assert forward - _recomputed(model, "maxtext-2023") == _DROPPED_NO_SP
    # FC2's input (the activation, or FC1's fused output) is read by FC2's weight gradient
    assert {"fc1", "ln2", "attn.residual"} & forward <= _recomputed(model, "maxtext-2023")


def test_with_sequence_parallelism_the_reduce_scatter_goes_too():
    forward = _forward("llama2-7b", "maxtext-2023", sp=True)
    dropped = forward - _recomputed("llama2-7b", "maxtext-2023", sp=True)
    assert dropped == {"fc2", "fc2.reduce_scatter", "mlp.residual"}


def test_pytorch_checkpoint_recomputes_the_whole_forward():
    assert _recomputed("maxtext-512b", "megatron-2022") == _forward("maxtext-512b", "megatron-2022")


def test_a_dropout_mask_keeps_the_residual_and_what_feeds_it():
    # GPT-3's blocks train with dropout: the backward reads the residual's mask
    assert get_model("gpt3-125m").dropout
    assert _recomputed("gpt3-125m", "maxtext-2023") == _forward("gpt3-125m", "maxtext-2023")


def test_the_iteration_recomputes_a_third_less_of_a_relu_block():
    # maxtext-512b's FFN (relu, no gate) is two GEMMs of equal size: FC2 is a third of the
    # block's weight FLOPs; the recompute loses its FLOPs and the residual add's
    m = get_model("maxtext-512b")
    flops = {}
    for fw in ("maxtext-2023", "fsdp2-2024"):
        setup = TrainingSetup(2048, 8, recompute="full", framework=fw)
        g = block_pass_graphs(m, setup, 16)
        flops[fw] = sum(op.flops for op in g.recompute.ops)
        fc2, add = (next(o for o in g.forward.ops if o.name == n) for n in ("fc2", "mlp.residual"))
    assert flops["fsdp2-2024"] - flops["maxtext-2023"] == fc2.flops + add.flops
    assert fc2.flops / flops["fsdp2-2024"] > 0.3


def test_the_layer_graph_takes_the_partially_evaluated_recompute():
    m = get_model("llama2-7b")
    for fw, has_fc2 in (("maxtext-2023", False), ("fsdp2-2024", True)):
        setup = TrainingSetup(2048, 8, recompute="full", framework=fw)
        graphs = build_layer_graph(m, setup, 2).op_graphs
        names = {op.name for g in graphs.values() for op in g.recompute.ops}
        assert ("fc2" in names) is has_fc2, fw
