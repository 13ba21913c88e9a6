"""Expert and context parallelism through the public API and the command line: docs/validation.md's
targets and one ``Error:`` line per bad input."""

from __future__ import annotations

import json

import pytest

from arch_space import Cluster, load_accelerator
from phaze.api import evaluate
from phaze.config import SolverSettings, sweep_config_from_mapping
from placement import parse_strategy

_LIST = SolverSettings(name="list")
# H100 HGX: NVLink 450 GB/s per direction per GPU; one 400 Gb/s NIC per GPU
_H100 = dict(
    devices_per_node=8,
    intra_node_bandwidth_bytes_per_s=450e9,
    inter_node_bandwidth_bytes_per_s=50e9,
)


def _mixtral_on_64_h100(**knobs):
    """Mixtral 8x7B on 64 H100 at sequence 4096 and global batch 256, with ``knobs``."""
    return evaluate(
        "mixtral-8x7b",
        load_accelerator("h100"),
        Cluster(devices=64, **_H100),
        seq_len=4096,
        global_batch=256,
        tokens_to_train=10**9,
        solver=_LIST,
        **knobs,
    )


def test_mixtral_8x7b_with_ep_8_fits_and_shows_its_all_to_all():
    """Megatron-Core's Mixtral 8x7B reference: 64 H100, sequence 4096, TP1 EP8 PP4 VP8,
    micro-batch 1, global batch 256 (megatron/core/transformer/moe/README.md)."""
    ev = _mixtral_on_64_h100(strategy="t=1,p=4,d=16,ep=8,v=8,mbs=1,zero=1,recompute=selective")
    assert ev.feasible, ev.reason
    pl = ev.placement
    assert (pl.layout.ep, pl.layout.d, pl.devices_used) == (8, 16, 64)
    assert pl.memory_breakdown.total_bytes <= 80 * 2**30
    assert pl.breakdown.ep_comm_exposed_s > 0
    assert sum(pl.breakdown.terms().values()) == pytest.approx(pl.breakdown.iteration_s)
    # without expert parallelism every device holds all eight experts' state
    whole = evaluate(
        "mixtral-8x7b",
        load_accelerator("h100"),
        Cluster(devices=64, **_H100),
        seq_len=4096,
        global_batch=256,
        strategy="t=1,p=4,d=16,ep=1,v=8,mbs=1,zero=1,recompute=selective",
        tokens_to_train=10**9,
        solver=_LIST,
    )
    assert not whole.feasible


def test_long_sequence_fits_with_context_parallelism_only():
    """Llama-3 8B at 128K tokens on 32 H100 (t=8, full recompute): with the unfused attention
    core (megatron-2022) the backward pass's ``s x s`` scores fit only split four ways by
    cp=4; a flash kernel keeps none, and cp=4 divides what is left by four."""

    def run(cp: int, framework: str = "megatron-2022"):
        return evaluate(
            "llama3-8b",
            load_accelerator("h100"),
            Cluster(devices=32, **_H100),
            seq_len=131072,
            allow_context_extension=True,  # Llama 3.1's 128K context, scaled RoPE
            global_batch=16,
            strategy=f"t=8,p=1,d={4 // cp},cp={cp},mbs=1,zero=1,recompute=full",
            solver=_LIST,
            framework=framework,
        )

    assert not run(1).feasible
    four = run(4)
    assert four.feasible, four.reason
    assert four.placement.layout.cp == 4 and four.placement.devices_used == 32
    flash = [run(cp, "overlap-all").placement for cp in (1, 4)]
    assert flash[0].memory_breakdown.total_bytes <= 80 * 2**30
    assert flash[1].memory_breakdown.total_bytes < four.placement.memory_breakdown.total_bytes
    assert flash[1].memory_breakdown.total_bytes < flash[0].memory_breakdown.total_bytes


@pytest.mark.parametrize(
    ("workload", "strategy", "message"),
    [
        ("mixtral-8x7b", "t=1,p=4,d=16,ep=3", "ep = 3 must divide the 8 experts and d = 16"),
        ("mixtral-8x7b", "t=1,p=4,d=4,ep=8", "ep = 8 must divide the 8 experts and d = 4"),
        (
            "mixtral-8x7b",
            "t=2,p=4,d=2,ep=8",
            "ep = 8 must divide the 8 experts and d = 2, or at cp = 1 be t = 2 times a divisor",
        ),
        ("gpt3-125m", "t=1,p=1,d=8,ep=2", "ep = 2 needs a mixture-of-experts model"),
        ("gpt3-125m", "t=1,cp=3", "cp = 3 must divide the sequence of 2048 tokens"),
        ("gpt3-125m", "t=4,p=32", "t*p = 128 devices, the cluster has 64"),
        ("gpt3-125m", "t=1,p=1,d=8,cp=16", "t*p*d*cp = 128 devices, the cluster has 64"),
        (
            "mixtral-8x7b",
            "t=1,p=16,ep=8",
            "ep = 8 must divide d (or at cp = 1 be t times a divisor of d), and no such d fits 64",
        ),
    ],
)
def test_bad_ep_cp_is_one_error_line(cli_run, workload, strategy, message):
    r = cli_run(
        "evaluate",
        "--workload",
        workload,
        "--arch",
        "h100",
        "--devices",
        64,
        "--global-batch",
        256,
        "--strategy",
        strategy,
    )
    assert r.exit_code != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], r.stderr


def test_evaluate_json_shows_ep_and_cp(cli_run):
    r = cli_run(
        "evaluate",
        "--workload",
        "mixtral-8x7b",
        "--arch",
        "h100",
        "--devices",
        64,
        "--global-batch",
        256,
        "--seq-len",
        4096,
        "--strategy",
        "t=1,p=4,d=16,ep=8,v=8,mbs=1,zero=1,recompute=full",
        "--json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    lay = parse_strategy(doc["placement"]["strategy"])
    assert (lay.ep, lay.cp) == (8, 1)
    assert doc["breakdown"]["ep_comm_exposed_s"] > 0
    assert "cp_comm_exposed_s" in doc["breakdown"]


def test_sweep_takes_ep_and_cp_lists():
    cfg = sweep_config_from_mapping({"sweep": {"ep": [1, 8], "cp": [1, 2]}})
    assert (cfg.training.ep, cfg.training.cp) == ((1, 8), (1, 2))
    assert sweep_config_from_mapping({"sweep": {}}).training.ep == ()
    with pytest.raises(Exception, match="ep = \\[0\\] must be a list of expert-parallel"):
        sweep_config_from_mapping({"sweep": {"ep": [0]}})


def test_llama3_405b_long_context_layout_fits_with_cp_16():
    """Llama 3 §3.3 (Table 4): 16,384 H100, TP8 CP16 PP16 DP8 at 131,072 tokens, 16M tokens
    per batch; interleaved pipeline."""
    ev = evaluate(
        "llama3-405b",
        load_accelerator("h100"),
        Cluster(devices=16384, **_H100),
        seq_len=131072,
        allow_context_extension=True,  # Llama 3 §3.4.2: the context extended to 128K
        global_batch=128,
        # the first chunk the embedding alone, the last the head alone (Llama 3 §3.3.2)
        strategy="t=8,p=16,d=8,cp=16,v=8,split=E|(t|)*126L,mbs=1,zero=1,recompute=full,sp=on",
        solver=_LIST,
    )
    assert ev.feasible, ev.reason
    assert ev.placement.devices_used == 16384 and ev.placement.layout.cp == 16
    assert ev.placement.memory_breakdown.total_bytes <= 80 * 2**30


def test_sweep_rejects_cp_not_dividing_the_sequence():
    from phaze.sweep.planning import plan
    from phaze_common.errors import ConfigError

    cfg = sweep_config_from_mapping({"sweep": {"cp": [1, 3], "tokens_to_train": "1B"}})
    with pytest.raises(ConfigError, match="cp: 3 must divide seq_len = 2048"):
        plan(cfg)


def test_search_chooses_ep_for_moe_and_cp_only_for_long_sequences():
    from phaze.model.pipeline import Context, search_degrees

    ev = _mixtral_on_64_h100(recompute="selective")
    assert ev.feasible, ev.reason
    assert ev.placement.layout.ep > 1 and ev.placement.layout.d % ev.placement.layout.ep == 0
    ctx = Context(cluster=Cluster(devices=64), seq_len=2048)
    assert search_degrees(1, ctx) == ((1,), (1,))
    assert search_degrees(8, ctx) == ((1, 2, 4, 8), (1,))
    long = Context(cluster=Cluster(devices=64), seq_len=32768)
    assert search_degrees(1, long) == ((1,), (1, 2, 4, 8))
    chosen = Context(cluster=Cluster(devices=64), ep_degrees=(8,), cp_degrees=(2,))
    assert search_degrees(8, chosen) == ((8,), (2,))
