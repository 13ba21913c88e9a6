"""The serving engine's steady state against hand-worked closed forms, and its invariants:
a decode step reads the weights once whether or not a chunk rides on it, a faster pool idles,
a longer step never raises the throughput."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze_common.errors import ConfigError, Infeasible
from placement.serving_engine import (
    Lengths,
    PassCost,
    chunked,
    disaggregated,
    mixed,
    prefill_batch,
    prefill_first,
    static,
)


def _cost(s: float, devices: int = 1, j: float = 1.0) -> PassCost:
    return PassCost(s, s, devices * s, j, 2 * j, 0.0)


def test_whole_prompts_ahead_of_the_decodes_closed_form():
    # B = 64 in flight, O = 129 (128 decode steps): 0.5 requests finish per round, their
    # prompts prefilled one at a time, each 0.1 s; a decode step 0.02 s.
    lengths = Lengths(2048, 129)
    d, p = _cost(0.02, 8), _cost(0.1, 8)
    assert prefill_batch(64, lengths) == 1
    r = prefill_first(
        d, p, batch=64, prefill_prompts=1, stages=1, replicas=2, replica_devices=8, lengths=lengths
    )
    round_s = 0.02 + 0.5 * 0.1
    assert r.tpot_s == pytest.approx(round_s)
    assert r.ttft_s == pytest.approx(0.01 + 0.1)
    assert r.requests_per_s == pytest.approx(2 * 0.5 / round_s)
    assert r.output_tokens_per_s == pytest.approx(r.requests_per_s * 129)
    (pool,) = r.pools
    assert pool.busy == pytest.approx(1.0) and pool.devices == 16
    # dynamic power: one decode pass and half a prefill per round, on each replica
    assert pool.compute_w == pytest.approx(2 * (1.0 + 0.5) / round_s)


def test_pipeline_stages_run_micro_batches_in_turn():
    # two stages, each 0.01 s per micro-batch; the pipeline's latency 0.025 s with the send
    lengths = Lengths(128, 101)
    d = PassCost(0.01, 0.025, 2 * 2 * 0.01, 1.0, 1.0, 0.0)
    p = PassCost(0.05, 0.11, 2 * 2 * 0.05, 1.0, 1.0, 0.0)
    r = prefill_first(
        d, p, batch=200, prefill_prompts=2, stages=2, replicas=1, replica_devices=4, lengths=lengths
    )
    prefills = 200 / 100 / 2  # prompt batches per round
    # a token waits for the pipeline's latency and the prefills that interrupt it
    assert r.tpot_s == pytest.approx(max(2 * 0.01 + prefills * 0.05, 0.025 + prefills * 0.05))
    assert r.requests_per_s == pytest.approx(2.0 / (2 * 0.01 + prefills * 0.05))


def test_static_batching_closed_form():
    lengths = Lengths(2048, 128)
    r = static(_cost(0.02), _cost(3.0), batch=64, replicas=1, replica_devices=1, lengths=lengths)
    cycle = 3.0 + 127 * 0.02
    assert (r.ttft_s, r.tpot_s) == (3.0, 0.02)
    assert r.output_tokens_per_s == pytest.approx(64 * 128 / cycle)


def test_a_mixed_step_adds_the_decodes_kv_reads_to_the_joint_prefill():
    step = PassCost(0.05, 0.11, 4 * 0.1, 1.0, 2.0, 0.5)
    m = mixed(step, kv_stage_s=0.004, kv_j=0.3, stages=2, devices=2)
    assert (m.stage_s, m.latency_s) == pytest.approx((0.054, 0.118))
    assert m.busy_device_s == pytest.approx(0.4 + 2 * 0.004)
    assert (m.compute_j, m.memory_j, m.network_j) == pytest.approx((1.0, 2.3, 0.5))


def test_chunked_prefill_closed_form_and_its_budget():
    lengths = Lengths(1024, 129)  # 8 prompt tokens per decode per step
    step, first = _cost(0.03), _cost(0.04)
    r = chunked(
        step, first, batch=32, chunk_tokens=2048, stages=1, replicas=1, replica_devices=1,
        lengths=lengths,
    )  # fmt: skip
    assert r.tpot_s == pytest.approx(0.03)
    assert r.requests_per_s == pytest.approx(32 / 128 / 0.03)
    # the prompt's chunks take the 2048 - 32 tokens left: one step
    assert r.ttft_s == pytest.approx(0.015 + 0.04)
    with pytest.raises(Infeasible, match="needs chunk >= 288"):
        chunked(
            step, first, batch=32, chunk_tokens=200, stages=1, replicas=1, replica_devices=1,
            lengths=lengths,
        )  # fmt: skip


def test_disaggregated_pools_the_slower_sets_the_rate():
    lengths = Lengths(1000, 101)
    decode = _cost(0.05, 4)
    # a prefill of k prompts takes 0.05 k s: 20 prompts/s per replica whatever k
    prefills = {k: _cost(0.05 * k, 4) for k in (1, 2, 4)}
    kw = {
        "decode_stages": 1, "decode_replicas": 1, "decode_devices": 4, "prefill_stages": 1,
        "prefill_devices": 4, "transfer_s": 0.01, "transfer_j": 2.0, "lengths": lengths,
    }  # fmt: skip
    # decode: 64 / 100 / 0.05 = 12.8 requests/s; one prefill replica (20/s) keeps up at k = 1
    r = disaggregated(decode, prefills, batch=64, prefill_replicas=1, **kw)
    assert r.bound == "decode" and r.requests_per_s == pytest.approx(12.8)
    pre, dec = r.pools
    assert dec.busy == pytest.approx(1.0) and pre.busy == pytest.approx(12.8 / 20)
    assert r.tpot_s == pytest.approx(0.05 + 0.01 / 100)
    assert r.ttft_s == pytest.approx(0.025 + 0.05)
    assert r.transfer_w == pytest.approx(12.8 * 2.0)
    # twice the decode batch outruns the prefill pool: prefill-bound at its largest batch
    r = disaggregated(decode, prefills, batch=256, prefill_replicas=1, **kw)
    assert r.bound == "prefill" and r.requests_per_s == pytest.approx(20.0)
    assert r.pools[1].busy == pytest.approx(20.0 / (256 / 100 / 0.05))


@given(
    st.floats(0.001, 1.0),
    st.floats(1.0, 3.0),
    st.integers(1, 512),
    st.integers(2, 2048),
    st.integers(1, 4096),
)
def test_a_longer_decode_step_never_raises_throughput(step_s, factor, batch, osl, isl):
    lengths = Lengths(isl, osl)
    p = _cost(0.001 * isl)
    k = prefill_batch(batch, lengths)
    kw = {"batch": batch, "prefill_prompts": k, "stages": 1, "replicas": 1, "replica_devices": 1}
    fast = prefill_first(_cost(step_s), p, lengths=lengths, **kw)
    slow = prefill_first(_cost(step_s * factor), p, lengths=lengths, **kw)
    assert slow.output_tokens_per_s <= fast.output_tokens_per_s * (1 + 1e-12)
    assert slow.tpot_s >= fast.tpot_s and math.isfinite(slow.ttft_s)


def test_requests_need_a_decode_step():
    with pytest.raises(ConfigError, match="output_tokens = 1 must be at least 2"):
        Lengths(128, 1)
