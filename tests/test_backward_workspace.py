"""A layer's backward workspace is live only after the later layers of its stage have freed
their stash for the micro-batch being differentiated (placement.iteration.backward_workspace)."""

import numpy as np
import pytest

import phaze
from arch_space import Cluster, preset
from placement.costs import LayerArrays, _chain, _chain_workspace
from placement.iteration import backward_workspace


def test_a_later_stash_hides_an_earlier_workspace():
    # blocks (workspace 5, stash 1) then a head stashing 3: the last block's 5 overlaps
    # the first block's stash only, since the head's 3 is freed by then
    assert backward_workspace([5.0, 5.0, 0.0], [1.0, 1.0, 3.0]) == 2.0
    assert backward_workspace([5.0, 0.0], [1.0, 6.0]) == 0.0
    assert backward_workspace([0.0, 4.0], [9.0, 9.0]) == 4.0
    assert backward_workspace([], []) == 0.0


def test_the_chain_grid_agrees_with_each_interval_by_hand():
    rng = np.random.default_rng(0)
    n = 7
    ws, stash = rng.uniform(0, 5, n), rng.uniform(0, 3, n)
    zeros = np.zeros(n)
    la = LayerArrays(
        fwd=zeros,
        bwd=zeros,
        rec=zeros,
        params=zeros,
        stash=stash,
        workspace=ws,
        tp=np.zeros(n, dtype=bool),
        src=np.arange(n - 1),
        dst=np.arange(1, n),
        nbytes=np.ones(n - 1),
        is_chain=True,
    )
    grid = _chain_workspace(la, _chain(la))
    for k in range(n + 1):
        for kk in range(k):
            a, b = n - k, n - kk
            assert grid[k, kk] == pytest.approx(backward_workspace(ws[a:b], stash[a:b]))


def test_maxtext_22b_fits_a_tpu_v4_at_its_published_layout():
    # MaxText's 22B on 64 TPU v4 chips (1xv4-128.sh: FSDP over all 64, per-device batch 16,
    # remat_policy=full): the output head's 2.8 GiB of logits are freed by its backward pass
    # before the last block rebuilds its 4.5 GiB; holding both put it at 32.1 GiB of 32
    ev = phaze.evaluate(
        "maxtext-22b",
        preset("tpuv4"),
        Cluster(devices=64, devices_per_node=4096, intra_node_bandwidth_bytes_per_s=300e9),
        seq_len=2048,
        global_batch=1024,
        strategy="t=1,p=1,d=64,v=1,mbs=16,recompute=full,sp=off,zero=3,ep=1,cp=1",
        framework="maxtext-2023",
        state_bytes_per_parameter=16,
        tokens_to_train=2048 * 1024,
    )
    memory = ev.placement.memory_breakdown
    assert memory.total_bytes <= preset("tpuv4").hbm_bytes
    assert memory.workspace_bytes / 2**30 == pytest.approx(3.44, abs=0.01)
