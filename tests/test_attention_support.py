"""A stack's fused attention on a chip that cannot run it (the V100, sm_70: no
FlashAttention-2 or cuDNN fused kernel) runs unfused: the layer graphs, the memory and the
iteration follow."""

from arch_space import Cluster, preset
from phaze.api import evaluate
from phaze.model.context import Context
from phaze.model.pipeline import training_setup
from placement import parse_strategy
from workloads.catalog import get_model
from workloads.framework import framework_profile, with_attention

_KNOBS = parse_strategy("t=1,p=1,d=8,mbs=1,recompute=none,precision=fp16")


def _setup(arch: str, framework: str = "overlap-all"):
    ctx = Context(cluster=Cluster(devices=8), seq_len=2048, global_batch=64, framework=framework)
    return training_setup(get_model("llama2-7b"), ctx, _KNOBS, acc=preset(arch))


def test_a_chip_without_the_fused_kernel_runs_the_stack_unfused():
    assert _setup("a100").profile.attention == "flash"
    v100 = _setup("v100").profile
    assert v100.attention == "unfused"
    # the rest of the stack is untouched
    assert v100.tp_overlap == framework_profile("overlap-all").tp_overlap
    assert _setup("v100", "fsdp2-2024").profile.attention == "unfused"
    assert _setup("v100", "megatron-2022").framework == "megatron-2022"  # unfused already


def test_with_attention_names_an_override():
    assert with_attention("overlap-all", "unfused") == "overlap-all:attention=unfused"
    assert with_attention("megatron-2022", "unfused") == "megatron-2022"
    name = with_attention("megatron-core-2024:ep_overlap=true", "unfused")
    assert name == "megatron-core-2024:ep_overlap=true,attention=unfused"
    assert framework_profile(name).ep_overlap and not framework_profile(name).fused_attention


def test_the_v100_iteration_prices_the_unfused_core():
    # the same layout under the default stack and under Megatron's unfused one cost the same
    # on a V100; on an A100 the fused kernel is faster
    times = {}
    for arch in ("v100", "a100"):
        for fw in ("overlap-all", "overlap-all:attention=unfused"):
            ev = evaluate(
                "llama2-7b",
                preset(arch),
                Cluster(devices=8),
                global_batch=16,
                strategy="t=2,p=1,d=4,mbs=1,recompute=full,sp=on,zero=1,precision=fp16",
                framework=fw,
            )
            times[arch, fw] = ev.score.iteration_s
    assert times["v100", "overlap-all"] == times["v100", "overlap-all:attention=unfused"]
    assert times["a100", "overlap-all"] < times["a100", "overlap-all:attention=unfused"]
