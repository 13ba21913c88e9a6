"""Published layouts that only fit with sharded optimizer state, through the public API."""

from __future__ import annotations

import pytest

from arch_space import Cluster, load_accelerator
from phaze.api import evaluate
from phaze.config import SolverSettings

_LIST = SolverSettings(name="list")


def _bloom(zero: int, state_bytes: int | None = 20):
    # BigScience tr11-176B-ml: 384 A100-80GB, TP 4, PP 12, DP 8, ZeRO-1, micro-batch 2,
    # full activation checkpointing, no sequence parallelism; batch 2048 x 2048 tokens.
    # DeepSpeed's BF16 optimizer keeps bf16 gradients beside fp32 accumulators: 20 B/param.
    return evaluate(
        "bloom-176b",
        load_accelerator("a100"),
        Cluster(devices=384),
        global_batch=2048,
        strategy=f"t=4,p=12,d=8,mbs=2,zero={zero},recompute=full,sp=off",
        state_bytes_per_parameter=state_bytes,
        solver=_LIST,
    )


def test_bloom_176b_fits_only_with_zero_1_near_the_published_60_gb():
    """'One copy of the model takes 48 GPUs, using 60 GB of memory on each GPU'."""
    ev = _bloom(zero=1)
    assert ev.feasible, ev.reason
    assert ev.placement.memory_breakdown.total_bytes == pytest.approx(60e9, rel=0.2)
    mem = ev.placement.memory_breakdown
    assert mem.optimizer_bytes * 8 == pytest.approx(mem.weights_bytes * 12 / 2)  # 12 B / d
    assert not _bloom(zero=0).feasible
    assert "needs" in _bloom(zero=0).reason


def test_llama3_405b_published_layout_fits_with_sharded_state():
    """Llama 3 §3.3.2: 16,384 H100-80GB, TP 8, PP 16 with 8 virtual stages (the embedding
    and the head on chunks of their own), DP 128, sequence 8192, 16M tokens per batch;
    optimizer state and gradients sharded over the data-parallel group, weights not (ZeRO-2),
    no activation checkpointing at 8K. It fits only with the gradients sharded."""
    layout = "t=8,p=16,d=128,v=8,mbs=1,zero={},recompute=none,sp=on,split=E|(t|)*126L"

    def run(zero):
        return evaluate(
            "llama3-405b",
            load_accelerator("h100"),
            Cluster(devices=16384),
            seq_len=8192,
            global_batch=2048,
            strategy=layout.format(zero),
            solver=_LIST,
        )

    ev = run(2)
    assert ev.feasible, ev.reason
    assert ev.placement.memory_breakdown.total_bytes <= 80 * 2**30
    assert ev.placement.layout.zero == 2 and ev.placement.layout.d == 128
    assert "needs" in run(1).reason
