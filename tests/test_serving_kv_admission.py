"""How a serving engine's scheduler reserves a request's KV cache: pages on demand (a
sequence's mean length, vLLM) or its whole prompt and output at admission (TensorRT-LLM's
GUARANTEED_NO_EVICT); the TensorRT-LLM v1.0 points run the latter."""

from __future__ import annotations

import pytest

import phaze
from arch_space import Cluster, preset
from phaze.model.serving import ServeContext, evaluate_layout
from phaze.model.serving_engines import engine_profile
from phaze.validation.serving import load_points
from phaze_common.errors import ConfigError, Infeasible
from placement import parse_serving
from workloads import get_model
from workloads.serving import RequestBatch, kv_cache_bytes_per_sequence, serving_settings

_ISL, _OSL, _T = 1000, 1000, 2


def _point(admission: str | None, batch: int):
    ctx = ServeContext(Cluster(devices=_T), RequestBatch.of(_ISL, _OSL), kv_admission=admission)
    lay = parse_serving(f"t={_T},p=1,d=1,ep=1,batch={batch},chunk=off,batching=continuous")
    return evaluate_layout("m", get_model("llama2-7b"), preset("h100"), lay, ctx)


def test_the_default_is_the_serving_files_and_pages_come_on_demand():
    assert serving_settings().kv_admission == "on-demand"
    assert ServeContext(Cluster(devices=1), RequestBatch.of(8, 8)).kv_admission == "on-demand"


@pytest.mark.parametrize(("admission", "tokens"), [("on-demand", 1500), ("whole-request", 2000)])
def test_a_sequence_holds_its_mean_or_its_whole_length(admission, tokens):
    # the cache of 64 sequences of ISL + OSL / 2 tokens on demand, ISL + OSL reserved whole
    got = _point(admission, 64).memory[0].kv_cache_bytes
    assert got == 64 * kv_cache_bytes_per_sequence(get_model("llama2-7b"), _T, tokens, "bf16")


def _fits(admission: str, batch: int) -> bool:
    try:
        _point(admission, batch)
    except Infeasible:
        return False
    return True


def test_reserving_whole_requests_fits_fewer_sequences():
    # the most sequences the cache holds on demand (bisection), then the same batch reserved
    lo, hi = 1, 4096
    assert _fits("on-demand", lo) and not _fits("on-demand", hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits("on-demand", mid) else (lo, mid)
    assert not _fits("whole-request", lo)
    # pages of 16 tokens: 94 per sequence on demand, 125 whole, so about 3/4 as many fit
    assert _fits("whole-request", lo * 94 // 125 - 1)


def test_the_trtllm_v1_rows_reserve_whole_requests_as_their_engine_does():
    rows = load_points()
    trt = [r for r in rows if r.source == "trtllm-perf-overview"]
    assert len(trt) == 8 and all(r.engine == "trtllm" for r in trt)
    assert all(r.kv_admission == "whole-request" for r in trt)
    # the admission is the engine profile's, not the row's
    assert all(r.kv_admission == engine_profile(r.engine).kv_admission for r in rows)
    assert engine_profile("vllm").kv_admission == serving_settings().kv_admission


def test_an_unknown_admission_is_one_config_error_naming_the_choices():
    with pytest.raises(ConfigError, match="kv_admission = 'lazy' must be one of on-demand"):
        ServeContext(Cluster(devices=1), RequestBatch.of(8, 8), kv_admission="lazy")


def test_the_api_passes_the_admission_to_the_engine():
    def kv(admission: str | None) -> int:
        point = phaze.serve(
            "llama2-7b",
            preset("h100"),
            Cluster(devices=_T),
            input_tokens=_ISL,
            output_tokens=_OSL,
            strategy=f"t={_T},p=1,d=1,ep=1,batch=64,chunk=off,batching=continuous",
            kv_admission=admission,
        )
        return point.memory[0].kv_cache_bytes

    assert kv(None) == kv("on-demand") < kv("whole-request")


def test_phaze_serve_takes_the_admission_and_reports_it():
    import json

    from click.testing import CliRunner

    from phaze.cli import cli

    def run(*extra: str) -> dict:
        args = ["serve", "--workload", "llama2-7b", "--arch", "h100", "--devices", str(_T)]
        args += ["--input-tokens", str(_ISL), "--output-tokens", str(_OSL)]
        args += ["--strategy", f"t={_T},p=1,d=1,ep=1,batch=64,chunk=off,batching=continuous"]
        r = CliRunner().invoke(cli, [*args, *extra, "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    default, whole = run(), run("--kv-admission", "whole-request")
    assert (default["kv_admission"], whole["kv_admission"]) == ("on-demand", "whole-request")
    # the same 64 sequences each hold their whole output instead of half of it on average
    assert whole["kv_cache_bytes_per_device"] > default["kv_cache_bytes_per_device"]
    bad = CliRunner().invoke(cli, ["serve", "--workload", "llama2-7b", "--kv-admission", "lazy"])
    assert bad.exit_code == 2 and "'lazy' is not one of 'on-demand', 'whole-request'" in bad.output
