"""The fused (flash) attention core: profiles, executed tiles, op graphs, memory, pricing."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import preset
from arch_space.accelerator import Cluster
from arch_space.perf import default_settings, op_costs
from arch_space.perf.device import preset_profile
from workloads import (
    OpKind,
    TrainingSetup,
    block_activation_bytes,
    build_layer_graph,
    get_model,
)
from workloads.attention_ops import FLASH_BLOCK, flash_scores, head_groups
from workloads.framework import framework_profile

FLASH = (OpKind.ATTENTION_FORWARD, OpKind.ATTENTION_BACKWARD)


def setup(s, b=1, recompute="none", sp=False, framework="overlap-all", extend=False):
    return TrainingSetup(
        seq_len=s,
        global_batch=b,
        micro_batch=b,
        recompute=recompute,
        sequence_parallel=sp,
        framework=framework,
        allow_context_extension=extend,
    )


def block(name, s, b=1, tp=1, framework="overlap-all", recompute="none", extend=False):
    m = get_model(name)
    graph = build_layer_graph(m, setup(s, b, recompute, framework=framework, extend=extend), tp)
    return graph.op_graphs["block"]


def test_profiles_name_their_attention_kernel():
    assert framework_profile("megatron-2022").attention == "unfused"
    assert framework_profile("overlap-all").attention == "flash"
    assert framework_profile("none").attention == "flash"


@given(st.integers(1, 2000), st.sampled_from([16, 64, 128]))
def test_causal_scores_are_the_tiles_at_or_below_the_diagonal(s, block_size):
    tiles = range(0, s, block_size)
    brute = sum(
        min(block_size, s - q) * min(block_size, s - k) for q in tiles for k in tiles if k <= q
    )
    assert flash_scores(s, True, block_size) == brute
    assert flash_scores(s, False, block_size) == s * s
    if s % block_size == 0:
        assert 2 * brute == s * (s + block_size)


@pytest.mark.parametrize(("name", "tp"), [("llama3-8b", 1), ("llama3-8b", 4), ("bert-large", 2)])
def test_flash_graph_executes_its_tiles_and_moves_no_scores(name, tp):
    m, s, b = get_model(name), 512, 2
    pg = block(name, s, b, tp)
    fwd = [op for op in pg.forward.ops if op.kind is OpKind.ATTENTION_FORWARD]
    bwd = [op for op in pg.backward.ops if op.kind is OpKind.ATTENTION_BACKWARD]
    heads = head_groups(m.heads // tp)
    assert len(fwd) == len(bwd) == len(heads)
    keys = -(-flash_scores(s, m.causal) // s)
    assert sum(op.batch * op.m * op.k * op.n for op in fwd) == 2 * b * (m.heads // tp) * (
        s * m.head_dim * keys
    )
    for f, g in zip(fwd, bwd, strict=True):
        assert 2 * g.batch == 5 * f.batch and (g.m, g.k, g.n) == (f.m, f.k, f.n)
        for op in (f, g):  # Q, K, V, O and gradients: linear in s
            assert op.bytes_read + op.bytes_written < 16 * b * s * m.hidden
    # the attention core is the fused ops alone: no softmax, dropout or batched GEMM
    for g in (pg.forward, pg.backward, pg.recompute):
        core = [op for op in g.ops if op.name.startswith("heads")]
        assert all(op.kind in FLASH for op in core)
        assert not any(op.kind in (OpKind.SOFTMAX, OpKind.BATCHED_MATMUL) for op in g.ops)
    unfused = block(name, s, b, tp, framework="megatron-2022")
    qk_av = sum(op.macs for op in unfused.forward.ops if op.name.startswith("heads"))
    executed = sum(op.batch * op.m * op.k * op.n for op in fwd)
    if m.causal:  # the tiles above the diagonal are skipped
        assert executed == qk_av * (s + FLASH_BLOCK) // (2 * s)
    else:
        assert executed == qk_av


def test_selective_recompute_reruns_the_fused_forward():
    pg = block("llama3-8b", 2048, recompute="selective")
    assert {op.kind for op in pg.recompute.ops} == {OpKind.ATTENTION_FORWARD}


@pytest.mark.parametrize("name", ["gpt3-175b", "korthikanti-22b", "llama3-70b"])
@pytest.mark.parametrize(("tp", "sp"), [(1, False), (8, False), (8, True)])
def test_flash_activation_closed_forms(name, tp, sp):
    """Korthikanti's stash without the ``5 a s / h`` score terms, plus the fp32 log-sum-exp
    ``4 a s b``; selective recompute stashes what the unfused core's does."""
    m, s, b = get_model(name), 2048, 2
    flash = setup(s, b, sp=sp)
    unfused = setup(s, b, sp=sp, framework="megatron-2022")
    p, mask = 2, 1 if m.dropout else 0
    scores = (p + (mask + p if m.dropout else 0)) * m.heads * s * s * b // tp
    lse = 4 * m.heads * s * b // tp
    assert block_activation_bytes(m, flash, tp) == (
        block_activation_bytes(m, unfused, tp) - scores + lse
    )
    if name == "gpt3-175b" and sp:  # 34 s b h / t + 4 a s b / t
        assert (
            block_activation_bytes(m, flash, tp)
            == (34 * s * b * m.hidden + 4 * m.heads * s * b) // tp
        )
    for rc in ("selective", "full"):
        assert block_activation_bytes(m, setup(s, b, rc, sp), tp) == block_activation_bytes(
            m, setup(s, b, rc, sp, "megatron-2022"), tp
        )


def test_flash_is_priced_at_the_measured_attention_rate():
    acc, s = preset("h100"), 16384  # the FlashAttention-3 paper's sequence, past the context
    pg = block("llama3-8b", s, extend=True)
    costs = op_costs(pg.forward, acc, Cluster(devices=1))
    dev = preset_profile("h100")
    peak = acc.num_tc * acc.tc_rows * acc.tc_cols * acc.clock_hz * dev.sustained_clock_fraction
    for i, op in enumerate(pg.forward.ops):
        if op.kind is OpKind.ATTENTION_FORWARD:
            macs = op.batch * op.m * op.k * op.n
            assert costs.parallel(i).latency_s >= macs / (peak * dev.attention_forward_fraction)
            assert costs.bound(i) == "compute"
            assert costs.hbm_bytes[i] == op.bytes_read + op.bytes_written
    unfused = block("llama3-8b", s, framework="megatron-2022", extend=True)
    time = [
        sum(op_costs(g, acc, Cluster(devices=1)).parallel_latency_s)
        for g in (pg.forward, unfused.forward)
    ]
    assert time[0] < time[1]


def test_flash2_stacks_run_flashattention2_at_its_measured_rate():
    from phaze.model.lower_bounds import stack_device

    h100 = preset_profile("h100")
    assert framework_profile("fsdp2-2024").attention == "flash2"
    assert framework_profile("fsdp1-2023").fused_attention
    fa2 = h100.for_attention("flash2")
    # FlashAttention-3 paper, Figs. 5 and 6: FlashAttention-2 at 335 and 322 of 989 TFLOP/s
    assert (fa2.attention_forward_fraction, fa2.attention_backward_fraction) == (0.339, 0.326)
    assert h100.for_attention("flash") == h100
    # no FlashAttention-2 rate of its own (the A100's figures are FlashAttention-2's)
    assert preset_profile("a100").for_attention("flash2") == preset_profile("a100")
    acc = preset("h100")
    fsdp = stack_device(None, acc, setup(4096, framework="fsdp2-2024"))
    assert fsdp.attention_forward_fraction == 0.339
    assert stack_device(None, acc, setup(4096)) is None
    # the same block is slower under the stack that runs FlashAttention-2, by its attention
    pg = block("llama3-8b", 8192)
    one = Cluster(devices=1)
    fast = op_costs(pg.forward, acc, one, device=h100).parallel_latency_s
    slow = op_costs(pg.forward, acc, one, device=fa2).parallel_latency_s
    issue = default_settings().issue_overhead_s
    kinds = [op.kind for op in pg.forward.ops]
    for i, kind in enumerate(kinds):
        if kind is OpKind.ATTENTION_FORWARD:  # compute-bound: the rate's ratio
            ratio = (slow[i] - issue) / (fast[i] - issue)
            assert ratio == pytest.approx(0.545 / 0.339, rel=1e-6)
        else:
            assert slow[i] == fast[i]
