"""Serving under load: arrivals, the engine's discrete-event simulation, and the answers of
``phaze serve --rate`` / ``--trace`` (docs/serving.md, "Serving under load")."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest
from click.testing import CliRunner

from arch_space import Cluster, preset
from phaze.cli import cli
from phaze.model import serving_load_price
from phaze.model.serving import ServeContext, evaluate_layout, pass_cost
from phaze.model.serving_arrivals import generate, read_trace
from phaze.model.serving_load import _pricer, simulate_load
from phaze_common.errors import ConfigError
from placement import parse_serving
from placement.serving_sim import EngineSpec, Step, simulate_engine
from workloads import get_model
from workloads.serving import RequestBatch

_SMALL = "serve --workload llama2-7b --arch h100 --devices 1 --input-tokens 512 --output-tokens 64"
_ONE = "t=1,p=1,d=1,ep=1,batch={b},chunk={c},batching=continuous"


class _Flat:
    """A pricer whose steps take fixed times: a prefill 10 ms per prompt plus 1 us per token,
    a decode step 5 ms."""

    def decode(self, seqs, context):
        return Step(5e-3, 5e-3, 1.0)

    def prefill(self, prompts, tokens):
        t = prompts * (1e-2 + 1e-6 * tokens)
        return Step(t, t, 1.0)

    def mixed(self, decodes, context, tokens, prompts):
        t = 5e-3 + 1e-6 * tokens
        return Step(t, t, 1.0)


def _spec(**kw):
    base = dict(
        batch=8, chunk=None, prefill_tokens=4096, kv_pages=1000, page_tokens=16, whole_request=False
    )
    return EngineSpec(**{**base, **kw})


def test_one_request_alone_takes_its_prefill_then_one_decode_step_per_token():
    run = simulate_engine(
        np.array([0.0, 100.0]), np.array([100, 100]), np.array([5, 5]), _spec(), _Flat()
    )
    assert run.first_token_s[0] == pytest.approx(1e-2 + 1e-4)
    assert run.finished_s[0] == pytest.approx(1e-2 + 1e-4 + 4 * 5e-3)
    assert run.first_token_s[1] == pytest.approx(100 + 1e-2 + 1e-4)
    assert run.preemptions == 0


def test_a_scheduler_that_does_not_overlap_its_host_work_adds_it_to_every_step():
    one = (np.array([0.0]), np.array([100]), np.array([5]))
    plain = simulate_engine(*one, _spec(), _Flat())
    host = simulate_engine(*one, _spec(step_cpu_s=1e-3), _Flat())
    # the prefill step and each of the four decode steps take 1 ms more
    assert host.first_token_s[0] == pytest.approx(plain.first_token_s[0] + 1e-3)
    assert host.finished_s[0] == pytest.approx(plain.finished_s[0] + 5e-3)
    assert host.busy_s == pytest.approx(plain.busy_s + 5e-3)


def test_multi_step_scheduling_admits_prompts_only_between_bursts_and_amortises_host_time():
    # the first request is prefilled by 10.1 ms, then decodes in 5 ms steps; the second
    # arrives 2 ms into the first decode step
    arrival, isl, osl = np.array([0.0, 0.0121]), np.array([100, 100]), np.array([40, 5])
    single = simulate_engine(arrival, isl, osl, _spec(step_cpu_s=1e-3), _Flat())
    multi = simulate_engine(arrival, isl, osl, _spec(step_cpu_s=1e-3, scheduler_steps=4), _Flat())
    prefilled = 1e-2 + 1e-4 + 1e-3
    # one step: admitted when the first decode step ends; four: when the burst of four ends,
    # its host time spent once
    assert single.admitted_s[1] == pytest.approx(prefilled + 5e-3 + 1e-3)
    assert multi.admitted_s[1] == pytest.approx(prefilled + 4 * 5e-3 + 1e-3)
    assert multi.first_token_s[1] > single.first_token_s[1]
    # fewer schedulings: the first request's 39 decodes take less host time
    assert multi.finished_s[0] < single.finished_s[0]


def test_the_engines_host_time_and_scheduler_steps_reach_the_simulation():
    model, acc = get_model("llama2-7b"), preset("h100")
    lay = parse_serving(_ONE.format(b=16, c="off"))
    arr = generate(2.0, 40, 128, 64, seed=1)
    runs = {}
    for engine in ("sglang", "sglang-0.3", "vllm-0.6"):
        ctx = ServeContext(Cluster(devices=1), RequestBatch.of(128, 64), engine=engine)
        point = evaluate_layout("m", model, acc, lay, ctx)
        runs[engine] = simulate_load(model, point, ctx, arr)
    # the same passes (CUDA graphs, custom all-reduce); 4 ms more per step without overlap
    assert runs["sglang-0.3"].tpot_s[0] > runs["sglang"].tpot_s[0] + 3e-3
    # a prompt arriving while others decode (one in flight on average: the p90, not the
    # p50, which mostly finds the engine idle) waits for the end of ten decode steps
    assert runs["vllm-0.6"].ttft_s[1] > 2 * runs["sglang-0.3"].ttft_s[1]


def test_steps_are_priced_once_per_grid_point_and_shared_by_runs_of_one_layout(monkeypatch):
    priced = []

    def counting(*args):
        priced.append(args[3])
        return pass_cost(*args)

    monkeypatch.setattr(serving_load_price, "pass_cost", counting)
    model, acc = get_model("llama2-7b"), preset("h100")
    lay = parse_serving(_ONE.format(b=64, c=2048))
    ctx = ServeContext(Cluster(devices=1), RequestBatch.of(512, 128))
    point = evaluate_layout("m", model, acc, lay, ctx)
    _pricer.cache_clear()
    first = simulate_load(model, point, ctx, generate(8.0, 1000, 512, 128, seed=3))
    # thousands of steps, a few dozen passes priced by the op model
    assert first.requests == 1000 and 0 < len(priced) < 100
    # the same layout again prices no new pass, and at another rate only the grid points
    # its batches and contexts reach that the first run did not
    n = len(priced)
    simulate_load(model, point, ctx, generate(8.0, 1000, 512, 128, seed=3))
    assert len(priced) == n and _pricer.cache_info().hits == 1
    simulate_load(model, point, ctx, generate(4.0, 1000, 512, 128, seed=3))
    assert len(priced) - n <= n // 4 and _pricer.cache_info().hits == 2


def test_on_demand_paging_preempts_when_the_cache_fills_and_whole_request_does_not():
    arrival = np.zeros(8)
    isl, osl = np.full(8, 32), np.full(8, 200)
    # 8 requests of 32 + 200 tokens: 15 pages each at the end, 40 pages in all
    paged = simulate_engine(arrival, isl, osl, _spec(kv_pages=40), _Flat())
    whole = simulate_engine(arrival, isl, osl, _spec(kv_pages=40, whole_request=True), _Flat())
    assert paged.preemptions > 0 and whole.preemptions == 0
    assert np.all(np.isfinite(paged.finished_s)) and np.all(np.isfinite(whole.finished_s))
    # whole-request admission runs two requests at a time (15 pages each of 40)
    assert np.sum(whole.admitted_s == 0) == 2


def test_chunked_prefill_splits_a_prompt_over_steps_of_the_budget():
    run = simulate_engine(
        np.array([0.0]), np.array([1000]), np.array([2]), _spec(chunk=256), _Flat()
    )
    # ceil(1000 / 256) = 4 chunk steps, then one decode step
    chunks = 4 * 5e-3 + 1e-6 * 1000
    assert run.first_token_s[0] == pytest.approx(chunks)
    assert run.steps == 5


class _Pipelined(_Flat):
    """A prefill that frees the engine after 10 ms but whose token is out after 50 ms."""

    def prefill(self, prompts, tokens):
        return Step(1e-2, 5e-2, 1.0)


def test_a_request_decodes_only_once_its_token_is_out_of_the_pipeline():
    run = simulate_engine(np.array([0.0]), np.array([100]), np.array([3]), _spec(), _Pipelined())
    assert run.first_token_s[0] == pytest.approx(5e-2)
    assert run.finished_s[0] == pytest.approx(5e-2 + 2 * 5e-3)


@lru_cache(maxsize=8)
def _point(batch: int, chunk: str, isl: int = 512, osl: int = 64):
    ctx = ServeContext(Cluster(devices=1), RequestBatch.of(isl, osl))
    lay = parse_serving(_ONE.format(b=batch, c=chunk))
    model = get_model("llama2-7b")
    return model, evaluate_layout("llama2-7b", model, preset("h100"), lay, ctx), ctx


def test_at_a_low_rate_ttft_is_the_unloaded_steady_state_ttft():
    model, point, ctx = _point(1, "off", 2048, 64)
    r = simulate_load(model, point, ctx, generate(0.01, 50, 2048, 64, seed=1))
    assert r.stable
    # the steady state adds half a decode step of waiting (under 5 % of this prompt's TTFT)
    assert r.ttft_s[0] == pytest.approx(point.engine.ttft_s, rel=0.10)


def test_p99_ttft_rises_with_the_rate_and_littles_law_holds():
    model, point, ctx = _point(64, "2048")
    cap = point.engine.requests_per_s
    p99, runs = [], []
    for share in (0.1, 0.4, 0.7):
        r = simulate_load(model, point, ctx, generate(share * cap, 1000, 512, 64, seed=2))
        assert r.stable, r.explanation
        p99.append(r.ttft_s[2])
        runs.append(r)
    assert p99[0] < p99[1] < p99[2]
    for r in runs:
        assert r.mean_in_flight == pytest.approx(r.rate_per_s * r.e2e_mean_s, rel=0.05)


def test_a_rate_far_above_capacity_is_unstable():
    model, point, ctx = _point(64, "off")
    r = simulate_load(model, point, ctx, generate(5 * point.engine.requests_per_s, 600, 512, 64))
    assert not r.stable
    assert r.explanation.startswith(f"unstable: the rate {r.rate_per_s:.3g} requests/s exceeds")
    doc = r.document()
    assert doc["ttft_p50_s"] is None and doc["stable"] is False


def test_slo_attainment_and_goodput_count_the_requests_meeting_both_limits():
    model, point, ctx = _point(64, "2048")
    arr = generate(0.5 * point.engine.requests_per_s, 500, 512, 64, seed=3)
    loose = simulate_load(model, point, ctx, arr, ttft_limit_s=10.0, tpot_limit_s=10.0)
    tight = simulate_load(model, point, ctx, arr, ttft_limit_s=loose.ttft_s[0])
    assert loose.slo_attainment == 1.0
    assert loose.goodput_requests_per_s == pytest.approx(loose.requests_per_s)
    assert tight.slo_attainment == pytest.approx(0.5, abs=0.01)
    assert simulate_load(model, point, ctx, arr).slo_attainment is None


def test_disaggregated_pools_prefill_then_send_then_decode():
    ctx = ServeContext(Cluster(devices=2), RequestBatch.of(512, 64))
    lay = parse_serving("prefill:t=1,p=1,d=1,ep=1;decode:" + _ONE.format(b=64, c="off"))
    model = get_model("llama2-7b")
    point = evaluate_layout("llama2-7b", model, preset("h100"), lay, ctx)
    r = simulate_load(model, point, ctx, generate(0.01, 30, 512, 64, seed=1))
    alone = _point(1, "off")[1].engine.ttft_s
    assert r.stable and r.ttft_s[0] < alone
    # a request's decodes wait for its KV cache: the transfer spread over its 63 tokens
    assert r.tpot_s[0] > point.engine.transfer_s / 63


def test_gamma_arrivals_keep_the_rate_and_their_coefficient_of_variation():
    a = generate(4.0, 20001, 16, 16, cv=2.0, seed=5)
    gaps = np.diff(a.arrival_s)
    assert a.rate_per_s == pytest.approx(4.0, rel=0.05)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2.0, rel=0.05)


def test_trace_rows_are_read_and_bad_rows_named_by_line(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("arrival_s,input_tokens,output_tokens\n1.5,100,10\n2.0,200,20\n")
    a = read_trace(good)
    assert list(a.arrival_s) == [0.0, 0.5] and list(a.output_tokens) == [10, 20]
    bad = tmp_path / "bad.csv"
    bad.write_text("0,100,10\nx,100,10\n1,0,10\n2,100\n3,100,10\n2.5,100,10\n")
    with pytest.raises(ConfigError) as e:
        read_trace(bad)
    msg = str(e.value)
    assert all(f"line {n}:" in msg for n in (2, 3, 4, 6))
    assert "line 1:" not in msg and "line 5:" not in msg and "before the line above" in msg
    result = CliRunner().invoke(cli, [*_SMALL.split(), "--trace", str(bad)])
    assert result.exit_code == 1
    assert result.output.count("Error:") == 1 and "line 2:" in result.output


def test_options_without_a_rate_are_refused_before_the_search():
    result = CliRunner().invoke(cli, [*_SMALL.split(), "--seed", "3", "--burstiness", "2"])
    assert result.exit_code == 1
    assert "--burstiness needs --rate" in result.output and "--seed needs --rate" in result.output


def test_the_same_seed_gives_the_same_document_and_another_seed_another():
    args = [*_SMALL.split(), "--strategy", _ONE.format(b=32, c="off"), "--rate", "5"]
    args += ["--requests", "300", "--json"]
    docs = [CliRunner().invoke(cli, [*args, "--seed", s]).output for s in ("7", "7", "8")]
    assert docs[0] == docs[1] != docs[2]
    assert json.loads(docs[0])["stable"] is True


def test_the_text_output_says_unstable_and_exits_3():
    args = [*_SMALL.split(), "--strategy", _ONE.format(b=8, c="off"), "--rate", "500"]
    result = CliRunner().invoke(cli, [*args, "--requests", "400"])
    assert result.exit_code == 3
    assert "unstable: the rate" in result.output
    assert "exceeds the layout's capacity of about" in result.output
    assert "TTFT p50" not in result.output


_LOAD_KEYS = {
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "requests_per_s",
    "mean_in_flight",
    "queue_p99",
    "kv_use_mean",
    "stable",
    "explanation",
    "energy_per_token_j",
    "slo_attainment",
    "goodput_requests_per_s",
}


def test_the_load_document_has_the_fields_units_and_limits():
    args = [*_SMALL.split(), "--strategy", _ONE.format(b=32, c="512"), "--rate", "5"]
    args += ["--requests", "200", "--ttft-ms", "100", "--tpot-ms", "50", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert _LOAD_KEYS <= set(doc)
    assert all(doc[k] is not None for k in _LOAD_KEYS)
    assert doc["ttft_p50_s"] <= doc["ttft_p90_s"] <= doc["ttft_p99_s"]
    assert 0 <= doc["slo_attainment"] <= 1 and 0 < doc["kv_use_mean"] < 1


@pytest.mark.slow
def test_the_llama2_70b_command_at_two_requests_per_second():
    args = "serve --workload llama2-70b --arch h100 --devices 8 --input-tokens 1024 "
    args += "--output-tokens 256 --rate 2 --seed 1 --json"
    result = CliRunner().invoke(cli, args.split())
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert _LOAD_KEYS - {"slo_attainment", "goodput_requests_per_s"} <= set(doc)
    assert doc["stable"] is True and doc["slo_attainment"] is None
    assert doc["requests_per_s"] == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("chunk", ["off", "2048"])
def test_an_overloaded_engine_serves_about_the_steady_state_capacity(chunk):
    model, point, ctx = _point(64, chunk)
    cap = point.engine.requests_per_s
    r = simulate_load(model, point, ctx, generate(5 * cap, 1000, 512, 64, seed=4))
    assert not r.stable
    # a full batch runs the steady state's steps; prompts batch differently under a queue
    assert r.requests_per_s == pytest.approx(cap, rel=0.15)
    assert f"capacity of about {r.requests_per_s:.3g} requests/s" in r.explanation
