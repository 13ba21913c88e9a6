"""The training state as named parts: memory and the optimizer step follow from the formats."""

import itertools

import pytest

from arch_space import Cluster, preset
from phaze.api import evaluate
from phaze_common.errors import ConfigError
from placement import OPTIMIZER_STEP_BYTES_PER_PARAMETER
from workloads.optimizer_state import (
    PART_FORMATS,
    OptimizerState,
    parse_optimizer_state,
    state_from_total,
)
from workloads.setup import TrainingSetup

ADAM = OptimizerState(2)


def test_defaults_reproduce_megatron_and_deepseek():
    assert TrainingSetup(64, 1).state_parts == ADAM
    assert ADAM.state_bytes_per_parameter == 18  # Megatron-LM's bf16 param, fp32 grads
    # DeepSeek-V3 (arXiv:2412.19437, Sec. 3.3.3): fp32 master and gradients, bf16 moments
    ds = TrainingSetup(64, 1, precision="fp8-blockwise").state_parts
    assert (ds.master, ds.moments, ds.grads) == ("fp32", "bf16", "fp32")
    assert ds.state_bytes_per_parameter == 14
    assert TrainingSetup(64, 1, optimizer_state="moments=bf16").state_bytes_per_parameter == 14


def test_step_traffic_of_fp32_parts_is_the_published_pass_count():
    assert ADAM.step_bytes_per_parameter == OPTIMIZER_STEP_BYTES_PER_PARAMETER["adam"]
    sgd = TrainingSetup(64, 1, optimizer="sgd").state_parts
    assert sgd.step_bytes_per_parameter == OPTIMIZER_STEP_BYTES_PER_PARAMETER["sgd"]
    # narrower parts move fewer bytes; no master copy: no copy back to the weights
    assert parse_optimizer_state("moments=bf16", ADAM).step_bytes_per_parameter == 42
    no_master = parse_optimizer_state("master=none,grads=bf16,moments=8bit", ADAM)
    # unscale 2+2, norm 2, step reads w 2 + g 2 + m 2, writes w 2 + m 2, zero 2
    assert no_master.step_bytes_per_parameter == 4 + 2 + 6 + 4 + 2


@pytest.mark.parametrize("choice", list(itertools.product(*PART_FORMATS.values())))
def test_every_combination_sums_its_parts(choice):
    parts = OptimizerState(2, **dict(zip(PART_FORMATS, choice, strict=True)))
    closed = 2 + {"fp32": 4, "bf16": 2, "bf16+fp32": 6}[parts.grads]
    closed += {"fp32": 4, "none": 0}[parts.master] + 2 * {"fp32": 4, "bf16": 2, "8bit": 1}[
        parts.moments
    ]
    assert parts.state_bytes_per_parameter == closed == sum(parts.parts_bytes().values())
    # the shorthand accepts every total the parts make
    assert state_from_total(closed, ADAM).state_bytes_per_parameter == closed


def test_the_shorthand_changes_the_fewest_parts():
    assert state_from_total(18, ADAM) == ADAM
    assert state_from_total(14, ADAM).moments == "bf16"
    assert state_from_total(16, ADAM).grads == "bf16"  # ZeRO's 16 B
    assert state_from_total(20, ADAM).grads == "bf16+fp32"  # DeepSpeed's BF16 optimizer
    assert state_from_total(6, ADAM) == OptimizerState(2, "bf16", "none", "8bit")
    for bad in (5, 15, 22):
        with pytest.raises(ConfigError, match=f"= {bad} is no sum of the parts"):
            state_from_total(bad, ADAM)


def test_clear_errors():
    with pytest.raises(ConfigError, match="moments = 'fp16' must be one of fp32, bf16, 8bit"):
        parse_optimizer_state("moments=fp16", ADAM)
    with pytest.raises(ConfigError, match="part=format"):
        parse_optimizer_state("adam", ADAM)
    with pytest.raises(ConfigError, match="disagrees with optimizer_state"):
        TrainingSetup(64, 1, state_bytes_per_parameter=18, optimizer_state="moments=bf16")


def test_memory_of_the_named_parts_is_their_closed_form_sum():
    cluster = Cluster(devices=1)
    common = dict(seq_len=64, global_batch=1, strategy="t=1,p=1,d=1,mbs=1,recompute=none,zero=0")
    ev = evaluate(
        "gpt3-125m",
        preset("a100"),
        cluster,
        optimizer_state="master=none,moments=8bit,grads=bf16",
        **common,
    )
    base = evaluate("gpt3-125m", preset("a100"), cluster, **common)
    m, b = ev.placement.memory_breakdown, base.placement.memory_breakdown
    params = b.weights_bytes / 2
    assert m.weights_bytes == pytest.approx(2 * params)
    assert m.gradients_bytes == pytest.approx(2 * params) and b.gradients_bytes == 4 * params
    assert m.optimizer_bytes == pytest.approx(2 * params) and b.optimizer_bytes == 12 * params
    # the optimizer step moves fewer bytes
    assert ev.placement.breakdown.iteration_s < base.placement.breakdown.iteration_s
