"""DeepSpeed's BF16 optimizer accumulates each micro-batch's weight gradients into fp32 in a
pass of its own (``bf16+fp32`` gradients); fp32 ``main_grad`` is accumulated in the GEMM."""

from __future__ import annotations

import pytest

from phaze.model.problem import dp_bytes_per_parameter
from workloads.catalog import get_model
from workloads.op_graphs import block_pass_graphs
from workloads.ops import OpKind
from workloads.setup import TrainingSetup


def _backward(state_bytes: int | None):
    setup = TrainingSetup(512, 1, precision="bf16", state_bytes_per_parameter=state_bytes)
    return block_pass_graphs(get_model("gpt3-1.3b"), setup, 2).backward


def _weight_elements(graph) -> int:
    return sum(op.batch * op.m * op.n for op in graph.ops if op.name.endswith(".wgrad"))


def test_bf16_optimizer_accumulates_every_weight_gradient_apart():
    split = _backward(20)  # 2 + (2 + 4) + 4 + 8: DeepSpeed's BF16 optimizer
    added = [op for op in split.ops if op.name.endswith(".wgrad.accumulate")]
    assert added and all(op.kind is OpKind.ELEMENTWISE for op in added)
    n = _weight_elements(split)
    assert sum(op.elements for op in added) == n
    # per weight element: the GEMM writes bf16 (2), the cast reads 2 and writes 4, the
    # add reads 4 + 4 and writes 4
    wgrad_out = sum(op.bytes_written for op in split.ops if op.name.endswith(".wgrad"))
    assert wgrad_out == 2 * n
    moved = sum(op.bytes_read + op.bytes_written for op in added)
    assert moved == pytest.approx(18 * n)


def test_fp32_main_grad_accumulates_in_the_gemm():
    fused = _backward(None)  # 18 B: fp32 main_grad
    assert not [op for op in fused.ops if op.name.endswith(".accumulate")]
    n = _weight_elements(fused)
    wgrad_out = sum(op.bytes_written for op in fused.ops if op.name.endswith(".wgrad"))
    assert wgrad_out == 4 * n


def test_bf16_optimizer_reduces_its_fp32_accumulators():
    deepspeed = TrainingSetup(512, 1, precision="bf16", state_bytes_per_parameter=20)
    megatron = TrainingSetup(512, 1, precision="bf16")
    assert dp_bytes_per_parameter(deepspeed) == (4.0, 2.0)
    assert dp_bytes_per_parameter(megatron) == (2.0, 2.0)
