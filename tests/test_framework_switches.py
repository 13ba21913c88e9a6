"""Profile switches set from the command line (``--framework NAME:key=value``): the fused
cross entropy, TP-communication overlap, the attention kernel and the MoE dispatcher, each
changing the time (and the cross entropy the memory) by its mechanism."""

import json

import pytest
from click.testing import CliRunner

from arch_space import Cluster
from phaze.cli import cli
from phaze_common.errors import ConfigError
from placement.ep_cp import a2a_bytes
from placement.types import StageGraph, StageLayer
from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.framework import framework_profile
from workloads.memory import head_activation_bytes, padded_vocab

BASE = "megatron-bridge-2025"
LLAMA = [
    *("evaluate", "--workload", "llama3-8b", "--arch", "h100", "--devices", "8"),
    *("--global-batch", "16", "--seq-len", "8192", "--json"),
    *("--strategy", "t=2,p=1,d=4,v=1,mbs=1,recompute=none,sp=on,zero=1,ep=1,cp=1"),
]


def _evaluate(framework: str, args=LLAMA) -> dict:
    r = CliRunner().invoke(cli, [*args, "--framework", framework])
    assert r.exit_code == 0, r.output
    return json.loads(r.output[: r.output.rindex("}") + 1])


@pytest.fixture(scope="module")
def base() -> dict:
    return _evaluate(BASE)


def test_the_switches_parse_as_profile_keys():
    assert framework_profile(f"{BASE}:cross_entropy=unfused-fp32").cross_entropy == "unfused-fp32"
    assert framework_profile(f"{BASE}:attention=unfused").attention == "unfused"
    assert framework_profile(f"{BASE}:tp_overlap=none").tp_overlap == frozenset()
    both = framework_profile(f"{BASE}:tp_overlap=forward+row_backward").tp_overlap
    assert {r.value for r in both} == {"forward", "row_backward"}
    assert framework_profile("none:tp_overlap=all").tp_overlap == framework_profile(BASE).tp_overlap
    assert framework_profile(f"{BASE}:moe_dispatcher=flex").moe_dispatcher == "flex"
    with pytest.raises(ConfigError, match="tp_overlap names unknown roles"):
        framework_profile(f"{BASE}:tp_overlap=forward+sideways")
    with pytest.raises(ConfigError, match="moe_dispatcher = 'deepep' must be one of"):
        framework_profile(f"{BASE}:moe_dispatcher=deepep")


def test_a_bad_switch_is_one_error_line():
    r = CliRunner().invoke(cli, [*LLAMA, "--framework", f"{BASE}:cross_entropy=fast"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "cross_entropy = 'fast' must be one of fused, unfused-fp32" in r.output


def test_the_unfused_cross_entropy_costs_time_and_its_fp32_logits(base):
    unfused = _evaluate(f"{BASE}:cross_entropy=unfused-fp32")
    assert unfused["iteration_s"] > base["iteration_s"]
    # the stash keeps the fp32 softmax (4 B a logit) instead of the bf16 logits (2 B)
    m = get_model("llama3-8b")
    extra = (4 - 2) * 8192 * padded_vocab(m.vocab, 2) // 2
    got = unfused["memory_breakdown"]["activations_bytes"]
    assert got - base["memory_breakdown"]["activations_bytes"] == pytest.approx(extra, rel=1e-6)


def test_the_head_stash_follows_the_cross_entropy_kernel():
    m = get_model("llama3-8b")

    def head(framework):
        setup = TrainingSetup(seq_len=4096, global_batch=1, micro_batch=1, framework=framework)
        return head_activation_bytes(m, setup, 1)

    logits = 4096 * padded_vocab(m.vocab, 1)
    assert head(f"{BASE}:cross_entropy=unfused-fp32") - head(BASE) == 2 * logits


def test_tp_communication_overlap_hides_the_tensor_parallel_collectives(base):
    sync = _evaluate(f"{BASE}:tp_overlap=none")
    assert sync["iteration_s"] > base["iteration_s"]
    exposed = {k: d["breakdown"]["tp_comm_exposed_s"] for k, d in (("on", base), ("off", sync))}
    assert exposed["off"] > exposed["on"]


def test_the_unfused_attention_kernel_is_slower_at_long_sequences():
    args = [*LLAMA, "--seq-len", "4096"]
    base, unfused = _evaluate(BASE, args), _evaluate(f"{BASE}:attention=unfused", args)
    assert unfused["iteration_s"] > 1.1 * base["iteration_s"]
    # and it stashes the s x s scores the flash kernel recomputes
    acts = unfused["memory_breakdown"]["activations_bytes"]
    assert acts > base["memory_breakdown"]["activations_bytes"]


def test_a_flex_dispatcher_crosses_the_network_once_per_node():
    """Qwen3-30B-A3B (no group-limited routing) over two nodes: the alltoall dispatcher sends
    every remote copy over the network, DeepEP/HybridEP one copy per remote node reached."""
    m = get_model("qwen3-30b-a3b")
    cluster = Cluster(devices=16, devices_per_node=8)

    def graph(framework):
        setup = TrainingSetup(seq_len=4096, global_batch=16, micro_batch=1, framework=framework)
        return build_layer_graph(m, setup, 1)

    plain, flex = graph(BASE), graph(f"{BASE}:moe_dispatcher=flex")
    assert (plain.expert_groups, plain.routed_groups) == (0, 0)
    assert (flex.expert_groups, flex.routed_groups) == (1, 1)
    layer = StageLayer("b", 1.0, 2.0, parameters=1, stash_bytes=0.0)
    routing = {"experts": m.experts, "top_k": m.top_k}
    p = StageGraph((layer,), (), **routing)
    f = StageGraph((layer,), (), **routing, expert_groups=1, routed_groups=1)
    net_plain, _ = a2a_bytes(8.0, p, 16, 1, cluster)
    net_flex, nvl_flex = a2a_bytes(8.0, f, 16, 1, cluster)
    # 15/16 of the 8 copies leave the device, all on the network; flex: 2 nodes reached, one
    # copy each, half of them remote, and 7/8 of the copies forwarded over NVLink
    assert (float(net_plain), float(net_flex), float(nvl_flex)) == (7.5, 1.0, 7.0)


def test_a_flex_dispatcher_shortens_an_iteration_whose_experts_span_nodes():
    args = [
        *("evaluate", "--workload", "qwen3-30b-a3b", "--arch", "h100", "--devices", "16"),
        *("--global-batch", "64", "--seq-len", "4096", "--json", "--precision", "fp8-te"),
        *("--intra-node-gbps", "450", "--inter-node-gbps", "50"),
        *("--strategy", "t=1,p=1,d=16,v=1,mbs=1,recompute=none,sp=off,zero=1,ep=16,cp=1"),
    ]
    plain, flex = _evaluate(BASE, args), _evaluate(f"{BASE}:moe_dispatcher=flex", args)
    ep = {k: d["breakdown"]["ep_comm_exposed_s"] for k, d in (("plain", plain), ("flex", flex))}
    # 7.5 against 1 network bytes (NVLink's 7 beside them at 9x the bandwidth), less the
    # latencies both pay
    assert 6.0 < ep["plain"] / ep["flex"] < 7.5
    assert flex["iteration_s"] < plain["iteration_s"]
