"""Serving engines are named profiles (phaze/data/serving_engines.toml): their scheduler's
rules are a serving context's defaults, and their passes carry the engine's all-reduce, the
wait before each kernel and the measured small-batch decode bandwidth."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from arch_space import Cluster, preset
from phaze.cli import cli
from phaze.model.serving import ServeContext, evaluate_layout
from phaze.model.serving_engines import _profile, engine_names, engine_profile
from phaze.validation.serving import evaluate_row, load_points
from phaze_common.errors import ConfigError
from placement import parse_serving
from workloads import get_model
from workloads.serving import RequestBatch, serving_settings
from workloads.serving_costs import weight_bytes_per_device


def test_the_four_engines_are_profiles_with_a_version_and_a_source():
    assert {"vllm", "trtllm", "sglang", "gpt-fast"} <= set(engine_names())
    for name in engine_names():
        p = engine_profile(name)
        assert p.label and p.version and p.source
        assert p.kv_admission in ("on-demand", "whole-request") and p.preemption == "recompute"
    # CUDA graphs replay a step's kernels with a shorter wait than launching each
    graph, eager = engine_profile("vllm").kernel_gaps_s
    assert 0 < graph < eager
    assert engine_profile("trtllm-0.6").kernel_gap_s == eager


def test_an_engine_sets_the_contexts_scheduler_defaults():
    ctx = ServeContext(Cluster(devices=2), RequestBatch.of(1000, 1000), engine="trtllm")
    assert ctx.kv_admission == "whole-request" and ctx.chunks == (None,)
    assert 120 in ctx.batches and 96 in ctx.batches and max(ctx.batches) == 2048
    vllm = ServeContext(Cluster(devices=2), RequestBatch.of(1000, 1000), engine="vllm")
    assert vllm.chunks == (None, 2048, 8192, 16384) and vllm.kv_admission == "on-demand"
    # a given admission wins over the engine's
    given = ServeContext(
        Cluster(devices=2), RequestBatch.of(8, 8), engine="trtllm", kv_admission="on-demand"
    )
    assert given.kv_admission == "on-demand"
    generic = ServeContext(Cluster(devices=2), RequestBatch.of(8, 8))
    assert generic.kv_admission == serving_settings().kv_admission
    # a whole-prompt prefill step's token budget: TensorRT-LLM's max_num_tokens, else vLLM's
    assert ctx.token_budget == 8192
    assert generic.token_budget == vllm.token_budget == serving_settings().max_batched_tokens
    gpt_fast = ServeContext(Cluster(devices=1), RequestBatch.of(5, 200), engine="gpt-fast")
    assert gpt_fast.token_budget == serving_settings().max_batched_tokens


def test_an_unknown_engine_is_one_error_naming_the_profiles():
    with pytest.raises(ConfigError, match="unknown serving engine 'tgi'.*gpt-fast"):
        ServeContext(Cluster(devices=1), RequestBatch.of(8, 8), engine="tgi")


def test_a_damaged_profile_names_every_problem():
    good = {
        "label": "x",
        "version": "1",
        "source": "s",
        "cuda_graphs": "yes",
        "all_reduce": "ring",
        "scheduler": {
            "batching": "static",
            "max_num_seqs": 0,
            "chunked_prefill": False,
            "chunk_tokens": [8192],
            "kv_admission": "lazy",
            "preemption": "recompute",
        },
    }
    with pytest.raises(ConfigError) as e:
        _profile("x", good, {"s": "a source"}, (1e-6, 3e-6))
    for text in ("all_reduce = 'ring'", "kv_admission = 'lazy'", "cuda_graphs", "max_num_seqs"):
        assert text in str(e.value)


def test_an_engine_without_an_overlapped_scheduler_adds_its_measured_host_time_per_step():
    # SGLang 0.4 overlaps its scheduler's host work with the GPU; 0.3 and vLLM 0.6 do not,
    # and vLLM 0.6 schedules once per ten decode steps (--num-scheduler-steps 10)
    assert engine_profile("sglang").step_cpu_s == 0
    old, multi = engine_profile("sglang-0.3"), engine_profile("vllm-0.6")
    assert old.step_cpu_s == multi.step_cpu_s == pytest.approx(4e-3)
    assert old.scheduler_steps == 1 and multi.scheduler_steps == 10
    bad = {
        "label": "x",
        "version": "1",
        "source": "s",
        "cuda_graphs": True,
        "all_reduce": "custom",
        "scheduler": {
            "batching": "continuous",
            "max_num_seqs": 8,
            "chunked_prefill": False,
            "chunk_tokens": [8192],
            "kv_admission": "on-demand",
            "preemption": "recompute",
            "step_cpu_s": 4e-3,
            "step_cpu_source": "nowhere",
            "scheduler_steps": 0,
        },
    }
    with pytest.raises(ConfigError) as e:
        _profile("x", bad, {"s": "a source"}, (1e-6, 3e-6))
    assert "step_cpu_source = 'nowhere'" in str(e.value)
    assert "scheduler_steps = 0" in str(e.value)


def _decode(engine: str | None, batch: int, devices: int = 1, model: str = "llama2-7b"):
    ctx = ServeContext(Cluster(devices=devices), RequestBatch.of(5, 200), engine=engine)
    lay = parse_serving(f"t={devices},p=1,d=1,ep=1,batch={batch},chunk=off,batching=static")
    return evaluate_layout("m", get_model(model), preset("a100"), lay, ctx).engine


def test_gpt_fast_decodes_a_small_batch_at_its_measured_bandwidth_only():
    # one sequence streams at torchao's measured share of the A100's bandwidth (0.75 of
    # 2039 GB/s in bf16), below the op model's 0.88; two sequences are past the measured
    # batch and keep the op model's bandwidth, paying only the kernel gaps
    one, generic_one = _decode("gpt-fast", 1), _decode(None, 1)
    assert 1.10 < one.tpot_s / generic_one.tpot_s < 1.25
    two, generic_two = _decode("gpt-fast", 2), _decode(None, 2)
    assert 1.0 < two.tpot_s / generic_two.tpot_s < 1.08


def test_the_one_shot_all_reduce_speeds_up_small_tensor_parallel_decode():
    # gpt-fast's one-shot kernel (about 10 us per all-reduce) against NCCL's measured curve
    # (about 44 us at 32 KiB on eight A100s): 64 all-reduces per token at t = 8
    fast = _decode("gpt-fast", 1, devices=8)
    nccl = dataclasses.replace(engine_profile("gpt-fast"), all_reduce="nccl")
    assert (
        nccl.device(preset("a100")).intra_node
        != engine_profile("gpt-fast").device(preset("a100")).intra_node
    )
    assert fast.tpot_s < 0.8 * _decode(None, 1, devices=8).tpot_s


def test_batch_one_decode_under_gpt_fast_stays_in_the_weight_bandwidth_window():
    # 1.0-2.5x the weight bytes per device over the datasheet HBM bandwidth, as gpt-fast's
    # own rows are (1.1-2.4x), in every weight format the rows run
    rows = [r for r in load_points() if r.kind == "decode-batch1" and r.gpus == 1]
    assert len(rows) == 5
    for row in rows:
        fmt = {"bf16": "bf16"}.get(row.weight_format, row.weight_format.split(" ")[0])
        weights = weight_bytes_per_device(get_model(row.model), 1, weight_format=fmt)
        s_per_token = 1 / evaluate_row(row).predicted
        assert 1.0 <= s_per_token / (weights / preset("a100").hbm_bandwidth_bytes_per_s) <= 2.5


def test_every_validation_row_names_an_engine_and_runs_under_it():
    rows = load_points()
    assert {r.engine for r in rows} == {"trtllm", "trtllm-0.6", "gpt-fast"}
    assert all(r.engine == "gpt-fast" for r in rows if r.kind == "decode-batch1")


def test_phaze_serve_takes_an_engine():
    args = ["serve", "--workload", "llama2-7b", "--arch", "a100", "--devices", "1"]
    args += ["--input-tokens", "5", "--output-tokens", "200", "--json"]
    r = CliRunner().invoke(cli, [*args, "--engine", "gpt-fast"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["engine"] == "gpt-fast" and doc["kv_admission"] == "whole-request"
    assert doc["layout"]["batching"] == "static" and doc["layout"]["batch"] == 1
    generic = json.loads(CliRunner().invoke(cli, args).stdout)
    assert generic["engine"] is None
    bad = CliRunner().invoke(cli, [*args, "--engine", "tgi"])
    assert bad.exit_code == 2 and "'tgi' is not one of" in bad.output


def test_a_chip_row_runs_at_its_presets_measured_rates():
    # the H200 row is the h100 preset with the H200's HBM: its sustained rates are the
    # H100's measured ones, not the generic profile of a design no one measured
    from arch_space.perf.device import device_profile
    from phaze.validation.serving import _device

    row = next(r for r in load_points() if r.chip.startswith("h200") and not r.waiting)
    acc = _device(row)
    assert acc.hbm_bandwidth_bytes_per_s == 4.8e12
    assert device_profile(acc) == device_profile(preset("h100"))
