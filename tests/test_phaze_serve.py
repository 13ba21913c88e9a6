"""Serving a model on a design: the command's document, the search against evaluating every
candidate, memory, energy, cost and carbon against their formulas, expert parallelism."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import phaze
from arch_space import Cluster, load_accelerator, preset, static_power_w
from arch_space.tco import SECONDS_PER_YEAR, device_hour_cost
from phaze.cli import cli
from phaze.model.scoring import ScoringParams, electricity_usd, system_capex
from phaze.model.serving import ServeContext, evaluate_layout
from phaze.model.serving_search import candidates, search
from phaze_common.errors import ConfigError, Infeasible
from placement import parse_serving
from workloads import get_model
from workloads.serving import RequestBatch
from workloads.serving_costs import weight_bytes_per_device

_KEYS = (
    "ttft_s",
    "tpot_s",
    "output_tokens_per_s",
    "tokens_per_s_per_device",
    "kv_cache_bytes_per_device",
    "memory_per_device_bytes",
    "energy_per_token_j",
    "usd_per_million_tokens",
    "kgco2e_per_million_tokens",
    "strategy",
    "layout",
)


def test_serve_json_prints_the_figures_and_the_layout():
    args = "serve --workload llama2-70b --arch h100 --devices 8 --input-tokens 2048 "
    args += "--output-tokens 128 --json"
    result = CliRunner().invoke(cli, args.split())
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert all(doc[k] is not None for k in _KEYS)
    lay = parse_serving(doc["strategy"])
    assert lay.complete and lay.devices == 8
    assert doc["output_tokens_per_s"] == pytest.approx(8 * doc["tokens_per_s_per_device"])
    assert 0 < doc["memory_per_device_bytes"] <= doc["hbm_bytes"]


def _ctx(devices: int = 2, **kw) -> ServeContext:
    return ServeContext(Cluster(devices=devices), RequestBatch.of(512, 64), **kw)


@pytest.mark.parametrize("objective", ["tokens_per_s_per_device", "usd_per_million_tokens"])
def test_the_search_finds_what_evaluating_every_candidate_finds(objective):
    model, acc = get_model("llama2-7b"), preset("a100")
    ctx = _ctx(batches=(1, 8, 64, 256), chunks=(None, 2048), tpot_limit_s=0.03, objective=objective)
    layout = parse_serving("")
    points = []
    for cand in candidates(model, layout, ctx):
        try:
            points.append(evaluate_layout("m", model, acc, cand, ctx))
        except (Infeasible, ConfigError):
            continue
    meeting = [p for p in points if p.meets_slo]
    assert meeting and len(meeting) < len(points)  # the limit binds
    if objective == "tokens_per_s_per_device":
        best = max(p.score.tokens_per_s_per_device for p in meeting)
        assert search("m", model, acc, layout, ctx).score.tokens_per_s_per_device == best
    else:
        best = min(p.score.usd_per_million_tokens for p in meeting)
        assert search("m", model, acc, layout, ctx).score.usd_per_million_tokens == best


def test_with_no_layout_meeting_the_limits_the_closest_is_returned():
    model, acc = get_model("llama2-7b"), preset("a100")
    ctx = _ctx(batches=(1, 8), chunks=(None,), tpot_limit_s=1e-4)
    point = search("m", model, acc, parse_serving(""), ctx)
    assert point.slo == ("tpot",)
    every = [
        evaluate_layout("m", model, acc, c, ctx).engine.tpot_s
        for c in candidates(model, parse_serving(""), ctx)
    ]
    assert point.engine.tpot_s == min(every)


def test_energy_cost_and_carbon_per_token_follow_their_formulas():
    model, acc = get_model("llama2-7b"), preset("a100")
    scoring = ScoringParams(host_profile="dgx-a100")
    ctx = _ctx(scoring=scoring)
    lay = parse_serving("t=1,p=1,d=2,ep=1,batch=32,chunk=off,batching=continuous")
    p = evaluate_layout("m", model, acc, lay, ctx)
    rate, sc = p.engine.output_tokens_per_s, p.score
    e = sc.energy
    # static power over the wall clock, split by busy and waiting
    assert e.static_j + e.idle_j == pytest.approx(2 * static_power_w(acc) / rate)
    # two of a node's eight devices pay two eighths of its host
    assert e.host_j == pytest.approx(2 / 8 * scoring.host_w_per_node / rate)
    assert sc.energy_per_token_j == pytest.approx(sum(e.terms().values()))
    # a million tokens: the devices' hours at the cost per device-hour, plus electricity
    capex = system_capex(acc, 2, scoring)
    per_hour = device_hour_cost(capex, lifetime_s=scoring.lifetime_s, interest=scoring.interest)
    hours = 2 * 1e6 / rate / 3600
    usd = hours * per_hour.total + electricity_usd(1e6 * sc.energy_per_token_j, scoring)
    assert sc.usd_per_million_tokens == pytest.approx(usd)
    # tCDP of the workload: its carbon times the time to serve it
    assert sc.tcdp == pytest.approx(sc.total_kgco2e * sc.tokens_to_serve / rate)
    assert sc.serve_time_s == pytest.approx(sc.tokens_to_serve / rate)


def test_the_kv_cache_must_fit_beside_the_weights():
    model, acc = get_model("llama2-70b"), preset("a100")
    ctx = ServeContext(Cluster(devices=2), RequestBatch.of(4000, 64))
    lay = parse_serving("t=2,p=1,d=1,ep=1,batch=64,chunk=off,batching=continuous")
    with pytest.raises(Infeasible, match="KV cache: 64 sequences of 4032 tokens need"):
        evaluate_layout("m", model, acc, lay, ctx)
    small = dataclasses.replace(lay, batch=4)
    p = evaluate_layout("m", model, acc, small, ctx)
    m = p.memory[0]
    assert m.weights_bytes == weight_bytes_per_device(model, 2)
    assert m.total_bytes <= 0.9 * acc.hbm_bytes


def test_decode_at_batch_one_against_weights_over_bandwidth():
    model, acc = get_model("llama2-70b"), preset("h100")
    ctx = ServeContext(Cluster(devices=8), RequestBatch.of(2048, 128))
    lay = parse_serving("t=8,p=1,d=1,ep=1,batch=1,chunk=off,batching=static")
    p = evaluate_layout("m", model, acc, lay, ctx)
    floor = weight_bytes_per_device(model, 8) / acc.hbm_bandwidth_bytes_per_s
    assert 1.0 <= p.engine.tpot_s / floor <= 2.5


def test_expert_parallelism_holds_a_share_of_the_experts_and_reads_fewer():
    model, acc = get_model("mixtral-8x7b"), preset("h100")
    ctx = ServeContext(Cluster(devices=8), RequestBatch.of(512, 64))
    kw = "batch=64,chunk=off,batching=continuous"
    tp = evaluate_layout("m", model, acc, parse_serving(f"t=2,p=1,d=4,ep=1,{kw}"), ctx)
    ep = evaluate_layout("m", model, acc, parse_serving(f"t=2,p=1,d=4,ep=4,{kw}"), ctx)
    experts = model.expert_parameters(2) * model.layers * 2
    assert tp.memory[0].weights_bytes - ep.memory[0].weights_bytes == experts * 3 // 4
    # a decode step reads all eight experts' shards at ep = 1 (every expert reached), two at
    # ep = 4, and pays two token all-to-alls per block
    assert ep.engine.tpot_s < tp.engine.tpot_s


def test_disaggregated_pools_move_the_kv_cache():
    model, acc = get_model("llama2-7b"), preset("h100")
    ctx = ServeContext(Cluster(devices=4), RequestBatch.of(1024, 128))
    lay = parse_serving("prefill:t=1,p=1,d=1,ep=1;decode:t=1,p=1,d=3,ep=1,batch=64")
    lay = dataclasses.replace(lay, open=frozenset())
    p = evaluate_layout("m", model, acc, lay, ctx)
    assert p.engine.transfer_s > 0 and p.engine.transfer_w > 0
    assert {x.name for x in p.engine.pools} == {"prefill", "decode"}
    assert len(p.memory) == 2


def test_the_weights_format_of_a_strategy_is_the_weight_format_argument():
    common = {"input_tokens": 256, "output_tokens": 32, "batch": 16}
    args = ("llama2-7b", preset("h100"), Cluster(devices=1))
    plain = phaze.serve(*args, **common)
    by_arg = phaze.serve(*args, weight_format="fp8", **common)
    by_strategy = phaze.serve(*args, strategy="weights=fp8", **common)
    assert plain.layout.weights is None and "weights" not in str(plain.layout)
    assert by_arg.layout == by_strategy.layout and by_arg.layout.weights == "fp8"
    assert parse_serving(str(by_arg.layout)) == by_arg.layout
    assert by_arg.engine.tpot_s == by_strategy.engine.tpot_s < plain.engine.tpot_s
    # the layout's format wins over the batch's when evaluated on its own
    ctx = ServeContext(Cluster(devices=1), RequestBatch.of(256, 32))
    again = evaluate_layout("m", get_model("llama2-7b"), preset("h100"), by_arg.layout, ctx)
    assert again.engine.tpot_s == by_arg.engine.tpot_s
    with pytest.raises(ConfigError, match="strategy weights=fp8 conflicts with weight_format=bf16"):
        phaze.serve(*args, weight_format="bf16", strategy="weights=fp8", **common)


def test_the_api_serves_with_a_fixed_batch_and_refuses_a_clash():
    got = phaze.serve(
        "llama2-7b", preset("a100"), Cluster(devices=1), input_tokens=256, output_tokens=32,
        batch=16,
    )  # fmt: skip
    assert got.layout.batch == 16 and got.meets_slo
    with pytest.raises(ConfigError, match="strategy batch=8 conflicts with batch=16"):
        phaze.serve(
            "llama2-7b", preset("a100"), Cluster(devices=1), input_tokens=256,
            output_tokens=32, batch=16, strategy="batch=8",
        )  # fmt: skip


def test_serve_prices_the_device_hour_at_the_given_lifetime_interest_and_volume(tmp_path):
    # a design that is not a preset (the V100 example measured as no preset), built: its NRE
    # spread over --volume units
    example = Path(__file__).parents[1] / "examples" / "accelerator_v100.toml"
    design = tmp_path / "design.toml"
    text = example.read_text()
    assert 'measured_as = "v100"' in text
    design.write_text(text.replace('measured_as = "v100"', 'measured_as = ""'))
    base = "serve --workload llama2-7b --devices 1 --input-tokens 256 --output-tokens 32 "
    base += "--batch 8 --weight-format fp16 --cost-view build --json --arch "
    runs = {}
    for name, extra in {
        "default": [],
        "owned": ["--lifetime-years", "3", "--interest", "0.12", "--volume", "1000"],
    }.items():
        result = CliRunner().invoke(cli, (base + str(design)).split() + extra)
        assert result.exit_code == 0, result.output
        runs[name] = json.loads(result.output)
    acc, capital = load_accelerator(str(design)), {}
    for name, kw in {
        "default": {},
        "owned": {"lifetime_s": 3 * SECONDS_PER_YEAR, "interest": 0.12, "volume_units": 1000},
    }.items():
        scoring = ScoringParams(host_profile="dgx-a100", cost_view="build", **kw)
        capex = system_capex(acc, 1, scoring)
        per_hour = device_hour_cost(capex, lifetime_s=scoring.lifetime_s, interest=scoring.interest)
        capital[name] = per_hour.total
    # the same electricity per hour in both: the difference is the capital's
    got = runs["owned"]["usd_per_device_hour"] - runs["default"]["usd_per_device_hour"]
    assert got == pytest.approx(capital["owned"] - capital["default"]) and got > 0


def test_decodes_riding_on_a_chunk_never_stretch_a_row_past_the_model_s_positions():
    # gpt3-125m holds 2048 positions: 4096 decodes beside one 128-token prompt used to make
    # one 4224-token row and refuse the model; they ride on more rows, the same tokens
    model, acc = get_model("gpt3-125m"), preset("h100")
    ctx = ServeContext(Cluster(devices=1), RequestBatch.of(128, 128))
    rates = {}
    for b in (1024, 4096):
        lay = parse_serving(f"t=1,p=1,d=1,ep=1,batch={b},chunk=16384,batching=continuous")
        rates[b] = evaluate_layout("m", model, acc, lay, ctx).engine.output_tokens_per_s
    assert model.max_positions < 128 + 4096 and rates[4096] > rates[1024]


_SERVE = ("serve", "--arch", "h100", "--input-tokens", "128", "--output-tokens", "32")


@pytest.mark.parametrize(
    ("workload", "devices", "extra", "message"),
    [
        ("llama2-7b", 1, ("--strategy", "t=2"), "t=2 needs 2 devices per pool; 1 given"),
        ("llama2-7b", 8, ("--strategy", "t=3"), "t = 3 must divide heads = 32"),
        ("llama2-7b", 8, ("--strategy", "ep=2"), "ep = 2 needs a mixture-of-experts model"),
        ("llama2-7b", 8, ("--strategy", "t=4,d=4"), "t=4 x d=4 needs 16 devices per pool"),
        (
            "llama2-7b",
            8,
            ("--strategy", "prefill:t=8;decode:t=4"),
            "prefill t=8 and decode t=4 need 12 devices; 8 given",
        ),
        ("llama2-7b", 8, ("--strategy", "t=2,p=1,d=1"), "uses 2 devices; one pool uses all 8"),
        ("bert-large", 1, (), "bert-large is an encoder"),
        (
            "llama2-7b",
            8,
            ("--no-disaggregate", "--strategy", "prefill:t=4;decode:t=4"),
            "gives a prefill pool and a decode pool, but disaggregate is off",
        ),
    ],
)
def test_a_strategy_contradicting_the_model_or_devices_is_one_error_line(
    workload, devices, extra, message
):
    args = [*_SERVE, "--workload", workload, "--devices", str(devices), *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]


def test_check_strategy_names_every_problem_at_once():
    from phaze.model.serving_search import check_strategy

    ctx = _ctx(devices=8)
    with pytest.raises(ConfigError, match=r"p = 64 must be at most the 32 blocks; p=64 needs 64"):
        check_strategy(get_model("llama2-7b"), parse_serving("p=64"), ctx)
    check_strategy(get_model("llama2-7b"), parse_serving("t=4"), ctx)  # two replicas of 4


def test_one_device_pays_its_share_of_the_host_not_a_whole_node():
    """A 1-device job at the per-device rate of a full node costs the same energy per token:
    the host's power is charged per device, so the other seven slots do not fall on it."""
    base = "serve --workload llama3-8b --arch h100 --input-tokens 1024 --output-tokens 256 --json"
    docs = {}
    for d in (1, 8):
        args = f"{base} --devices {d} --strategy t=1,p=1,d={d},batch=64".split()
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        docs[d] = json.loads(result.output)
    one, eight = docs[1], docs[8]
    assert one["tokens_per_s_per_device"] == pytest.approx(eight["tokens_per_s_per_device"])
    assert one["energy_per_token_j"] == pytest.approx(eight["energy_per_token_j"], rel=0.03)
