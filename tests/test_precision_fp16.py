"""fp16 mixed precision: the V100's tensor cores run fp16 only (no bf16), so its base rate is
fp16's; the fp16 recipe runs the GEMMs at the 16-bit base rate as bf16 does."""

import json

import pytest
from click.testing import CliRunner

from arch_space import preset
from arch_space.formats import check_precision, format_problem
from phaze.cli import cli
from phaze_common.errors import ConfigError
from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.precision import apply_precision, recipe

_RUN = ["evaluate", "--workload", "gpt3-1.3b", "--devices", "8", "--global-batch", "64"]
_STRATEGY = "t=1,p=1,d=8,mbs=8,recompute=none"


def test_v100_runs_fp16_only_at_its_125_tflops():
    v100 = preset("v100")
    assert v100.format_names == ("fp16",)
    assert v100.peak_flops * v100.format_rate("fp16") == pytest.approx(125e12, rel=5e-3)
    assert format_problem("x", (("fp16", 1.0), ("int8", 2.0))) is None
    assert format_problem("x", (("fp8", 1.0),)) is not None  # the base must be 16-bit


def test_bf16_on_v100_is_refused_naming_what_it_runs():
    with pytest.raises(ConfigError, match="precision bf16 needs bf16 tensor cores; v100 runs fp16"):
        check_precision(preset("v100"), "bf16")
    r = CliRunner().invoke(cli, [*_RUN, "--arch", "v100", "--strategy", _STRATEGY])
    assert r.exit_code == 1
    assert r.output.strip() == "Error: precision bf16 needs bf16 tensor cores; v100 runs fp16"
    with pytest.raises(ConfigError, match="fp16 tensor cores; tpuv4 runs bf16, int8"):
        check_precision(preset("tpuv4"), "fp16")


def test_fp16_costs_what_bf16_does_at_the_same_16_bit_rate():
    setup = TrainingSetup(seq_len=256, global_batch=1, precision="fp16")
    graph = build_layer_graph(get_model("gpt3-1.3b"), setup, 1).op_graphs["block"].forward
    assert apply_precision(graph, recipe("fp16")) is graph  # no casts, no narrower operands
    times = {}
    for p in ("bf16", "fp16"):
        args = [*_RUN, "--arch", "a100", "--strategy", f"{_STRATEGY},precision={p}", "--json"]
        times[p] = json.loads(CliRunner().invoke(cli, args).output)["iteration_s"]
    assert times["fp16"] == times["bf16"]  # the A100 runs both at 312 TFLOP/s
    # the V100 runs its attention unfused: the s x s scores of 8 sequences would not fit
    v100 = "t=1,p=1,d=8,mbs=1,recompute=full,precision=fp16"
    out = CliRunner().invoke(cli, [*_RUN, "--arch", "v100", "--strategy", v100]).output
    assert "of the fp16 peak" in out and "1x the fp16 rate" in out


def test_an_fp16_mac_costs_a_bf16_one():
    """fp16 and bf16 share the 16-bit MAC, so a preset listing fp16 (every sweep reads each
    listed format's MAC energy) and the V100 price it as bf16's."""
    from arch_space.area import format_mac_pj, mac_pj
    from arch_space.tech import tech_node

    for name in ("a100", "v100"):
        acc = preset(name)
        tech = tech_node(acc.node_nm)
        assert format_mac_pj(acc, tech, "fp16") == mac_pj(acc, tech)
