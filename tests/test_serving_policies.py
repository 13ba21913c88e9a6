"""The engine policies are a registry selected by name (phaze.model.serving_policies): each
batching policy under each KV admission prices a layout exactly as the branches it replaced
did (the figures below were printed by the code before the registry, commit d99c145)."""

from __future__ import annotations

import pytest

from arch_space import Cluster, preset
from phaze.model.serving import ServeContext, evaluate_layout
from phaze.model.serving_policies import (
    BATCHING,
    KV_ADMISSION,
    PREEMPTION,
    batching_policy,
    kv_admission_policy,
)
from phaze_common.errors import ConfigError
from placement import parse_serving
from workloads import get_model
from workloads.serving import KV_ADMISSIONS, PREEMPTIONS, RequestBatch

_STATIC = "t=1,p=1,d=1,ep=1,batch=8,chunk=off,batching=static"
_CONTINUOUS = "t=1,p=1,d=1,ep=1,batch=16,chunk=off,batching=continuous"
_CHUNKED = "t=1,p=2,d=1,ep=1,batch=16,chunk=2048,batching=continuous"
_DISAGG = "prefill:t=1,p=1,d=1,ep=1;decode:t=1,p=1,d=1,ep=1,batch=16,chunk=off,batching=continuous"
# (admission, layout, policy): TTFT s, TPOT s, output tokens/s, memory per device bytes
_BEFORE = {
    ("on-demand", _STATIC, "static"): (0.0786359899475537, 0.005925589247681117, 1231.9748122935332, 16465272832),
    ("on-demand", _CONTINUOUS, "continuous"): (0.01626097454889487, 0.008409753048508238, 1917.533625417099, 18346680320),
    ("on-demand", _CHUNKED, "chunked"): (0.015354431793618811, 0.006047331962939271, 2669.48374450426, 9192943616),
    ("on-demand", _DISAGG, "disaggregated"): (0.019299888014235825, 0.00679738993602249, 2375.392882912727, 23283113984),
    ("whole-request", _STATIC, "static"): (0.0786359899475537, 0.005925589247681117, 1231.9748122935332, 16465272832),
    ("whole-request", _CONTINUOUS, "continuous"): (0.01626097454889487, 0.008409753048508238, 1917.533625417099, 18883551232),
    ("whole-request", _CHUNKED, "chunked"): (0.015354431793618811, 0.006047331962939271, 2669.48374450426, 9461379072),
    ("whole-request", _DISAGG, "disaggregated"): (0.019299888014235825, 0.00679738993602249, 2375.392882912727, 23283113984),
}  # fmt: skip


@pytest.mark.parametrize(("admission", "spec", "policy"), list(_BEFORE))
def test_each_policy_prices_a_layout_as_before_the_registry(admission, spec, policy):
    lay = parse_serving(spec)
    assert batching_policy(lay).name == policy
    ctx = ServeContext(
        Cluster(devices=lay.devices), RequestBatch.of(512, 128), kv_admission=admission
    )
    p = evaluate_layout("m", get_model("llama2-7b"), preset("h100"), lay, ctx)
    got = (p.engine.ttft_s, p.engine.tpot_s, p.engine.output_tokens_per_s)
    assert got == pytest.approx(_BEFORE[admission, spec, policy][:3], rel=1e-12)
    assert p.memory_per_device_bytes == _BEFORE[admission, spec, policy][3]


def test_the_registries_name_every_policy_once():
    assert set(BATCHING) == {"static", "continuous", "chunked", "disaggregated"}
    assert all(p.name == n for n, p in BATCHING.items())
    assert tuple(KV_ADMISSION) == KV_ADMISSIONS
    assert [p.whole_request for p in KV_ADMISSION.values()] == [False, True]
    assert tuple(PREEMPTION) == PREEMPTIONS == ("recompute",)


def test_an_unknown_admission_policy_is_one_error_naming_the_registered_ones():
    with pytest.raises(ConfigError, match="on-demand.*whole-request"):
        kv_admission_policy("lazy")
