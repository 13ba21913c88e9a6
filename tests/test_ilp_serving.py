"""Serving pass times: each layer scheduled by the layer scheduler, decode against the HBM
bandwidth bound (the serving issue's criterion), sums and monotonicity (docs/serving.md)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch_space import Cluster, preset, preset_names
from arch_space.perf.device import device_profile
from ilp.serving import (
    decode_hbm_bound_s,
    serving_device_profile,
    serving_pass_time,
    serving_pass_times,
)
from phaze_common.errors import ConfigError
from workloads import Model, get_model
from workloads.serving import RequestBatch, ServingPass, kv_cache_bytes_per_token
from workloads.serving_costs import weight_bytes_per_device

# a node's link per device: NVLink 4 (H100 whitepaper) on the H100, else the CLI's default
LINKS = {"h100": 450e9}


def cluster(name, tp):
    return Cluster(devices=tp, intra_node_bandwidth_bytes_per_s=LINKS.get(name, 300e9))


def decode_s(name, model, tp, batch=1, context=2048, **kw):
    acc = preset(name)
    p = ServingPass.decode(batch, context)
    return serving_pass_time(get_model(model), acc, cluster(name, tp), p, tp, **kw)


# The TPU v5p's 8 MXUs at 1.75 GHz bound its batch-one decode beyond the window (2.6-2.7x):
# twice its clock or its MXU count brings it to 1.4x, its vector lanes and buffer change
# nothing; its HBM is 2.3x the TPU v4's for 1.7x the tensor clock.
_TENSOR_BOUND = pytest.mark.xfail(
    strict=True, reason="tpuv5p: its tensor arrays, not its HBM, bound decode at batch one"
)


@pytest.mark.parametrize(
    "arch", [pytest.param(n, marks=_TENSOR_BOUND) if n == "tpuv5p" else n for n in preset_names()]
)
@pytest.mark.parametrize(("model", "tp"), [("llama2-70b", 8), ("llama2-7b", 1)])
def test_decode_at_batch_one_is_within_the_weight_bandwidth_window(arch, model, tp):
    # the criterion: 1.0-2.5x the weight bytes per device over the HBM bandwidth
    r = decode_s(arch, model, tp)
    weights_s = (
        weight_bytes_per_device(get_model(model), tp) / preset(arch).hbm_bandwidth_bytes_per_s
    )
    assert 1.0 <= r.latency_s / weights_s <= 2.5


@settings(max_examples=8)
@given(
    model=st.sampled_from(["llama2-7b", "llama3-8b", "mixtral-8x7b", "gpt3-1.3b"]),
    batch=st.integers(1, 64),
    context=st.integers(1, 2048),
)
def test_no_pass_beats_the_bytes_it_must_read_over_the_bandwidth(model, batch, context):
    m, acc = get_model(model), preset("h100")
    p = ServingPass.decode(batch, context)
    r = serving_pass_time(m, acc, cluster("h100", 1), p, 1, solver="list")
    assert r.latency_s >= decode_hbm_bound_s(m, acc, p, 1)
    assert r.hbm_bytes >= 0.999 * (r.weight_read_bytes + r.kv_read_bytes)


def test_a_pass_is_the_sum_of_its_layers():
    r = decode_s("a100", "llama2-70b", 8, batch=4, context=500)
    assert [(x.class_id, x.count) for x in r.layers] == [
        ("embedding", 1),
        ("block", 80),
        ("head", 1),
    ]
    assert r.latency_s == pytest.approx(sum(x.count * x.latency_s for x in r.layers))
    assert r.energy_j == pytest.approx(sum(x.count * x.energy_j for x in r.layers))
    assert r.energy_j > 0 and all(x.timing.status in ("optimal", "time_limit") for x in r.layers)
    per_token = kv_cache_bytes_per_token(get_model("llama2-70b"), 8)
    assert r.kv_read_bytes == 4 * 500 * per_token and r.kv_written_bytes == 4 * per_token
    assert r.layer("block").count == 80
    with pytest.raises(ConfigError, match="unknown layer class 'blok'; did you mean block"):
        r.layer("blok")


@settings(max_examples=6)
@given(context=st.integers(1, 3000), more=st.integers(1, 1000), batch=st.integers(1, 32))
def test_decode_takes_longer_with_more_context_and_more_sequences(context, more, batch):
    base = decode_s("h100", "llama3-8b", 1, batch, context, solver="list").latency_s
    assert decode_s("h100", "llama3-8b", 1, batch, context + more, solver="list").latency_s >= base
    assert decode_s("h100", "llama3-8b", 1, batch + 1, context, solver="list").latency_s >= base


def test_concurrent_memory_bound_experts_do_not_beat_the_bandwidth():
    # 64 tokens route to 128 small experts, one each: the scheduler runs their GEMMs side by
    # side on separate cores as if each had the memory to itself; the layer takes at least
    # its bytes over the sustained bandwidth
    m = Model(
        "many-experts",
        layers=2,
        hidden=2048,
        heads=16,
        ffn_hidden=512,
        vocab=1000,
        experts=128,
        top_k=2,
        ffn_kind="swiglu",
        norm="rmsnorm",
        positions="rotary",
        biases=False,
        dropout=False,
    )
    p = ServingPass.decode(64, 100)
    block = serving_pass_time(m, preset("h100"), Cluster(devices=1), p, 1, solver="list").layer(
        "block"
    )
    assert block.timing.makespan_s < block.hbm_floor_s == block.latency_s


def test_the_engine_all_reduces_with_its_own_kernel_on_the_h100():
    engine = decode_s("h100", "llama2-70b", 8, context=100)
    nccl_device = serving_device_profile(preset("a100"))  # no measured engine kernel
    assert nccl_device.intra_node == nccl_device.for_serving().intra_node
    nccl = decode_s("h100", "llama2-70b", 8, context=100, device=device_profile(preset("h100")))
    # 160 all-reduces of 16 KiB: about 11 us each against NCCL's 40 us
    assert 3e-3 < nccl.latency_s - engine.latency_s < 6e-3


def test_a_request_batch_gives_its_prefill_chunks_and_its_mean_decode_step():
    m, acc = get_model("llama2-7b"), preset("a100")
    r = RequestBatch.of(1000, 64, batch=2)
    times = serving_pass_times(m, acc, Cluster(devices=1), r, 1, chunk_tokens=512, solver="list")
    assert [p.serving_pass.new_tokens for p in times.prefill] == [512, 488]
    assert times.prefill_s == pytest.approx(sum(p.latency_s for p in times.prefill))
    assert times.decode.serving_pass == ServingPass.decode(2, 1032)
    whole = serving_pass_times(m, acc, Cluster(devices=1), r, 1, solver="list")
    assert len(whole.prefill) == 1 and whole.prefill[0].serving_pass.samples


@pytest.mark.parametrize("arch", ["h100", "a100"])
def test_serving_passes_run_at_measured_rates_not_the_training_fitted_clock(arch):
    acc = preset(arch)
    trained, serving = device_profile(acc), serving_device_profile(acc)
    assert "sustained_clock_fraction" in trained.fitted and trained.sustained_clock_fraction < 1
    assert serving.sustained_clock_fraction == 1.0
    assert serving.sustained_tensor_fraction == trained.sustained_tensor_fraction
    # a compute-bound prefill runs faster than at the training clock, by at most its ratio
    m, p = get_model("llama2-7b"), ServingPass(batch=4, new_tokens=2048)
    at_fit = serving_pass_time(m, acc, cluster(arch, 1), p, 1, device=trained, solver="list")
    at_serving = serving_pass_time(m, acc, cluster(arch, 1), p, 1, solver="list")
    ratio = at_serving.latency_s / at_fit.latency_s
    assert trained.sustained_clock_fraction - 1e-9 <= ratio < 0.99
