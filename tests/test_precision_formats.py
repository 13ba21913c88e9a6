"""Number formats and precision recipes: recipe memory against closed forms, the fp8 GEMMs
and their quantize ops, per-format rates on the presets, format sets in spaces, the bf16 path
unchanged, refusals in one line, and the knob in strategy strings, sweeps and the CLI."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster, Space, area_mm2, preset
from arch_space._data import shipped_toml
from arch_space.area import area_breakdown_mm2, format_mac_pj, mac_pj
from arch_space.formats import format_lane_factor, format_options, format_set_rates
from arch_space.perf import op_costs
from arch_space.perf.device import device_profile, generic_profile
from arch_space.tech import tech_node
from phaze.cli import cli
from phaze.sweep.planning import Shared, design_knobs
from phaze_common.errors import ConfigError
from phaze_common.units import fmt_percent
from placement import Layout, parse_strategy
from workloads import (
    TrainingSetup,
    build_layer_graph,
    get_model,
    model_flops_per_sequence,
    resolve_model,
)
from workloads.memory import block_activation_bytes
from workloads.ops import CoreType, Op, OpGraph, OpKind
from workloads.precision import apply_precision, recipe, recipe_names

ROOT = Path(__file__).resolve().parent.parent
FORMATS = shipped_toml("formats.toml")  # with every chip file's [[peak]] rows


# -- recipes: memory against closed forms -------------------------------------------------


def test_recipe_state_bytes_follow_their_sources():
    # Megatron's distributed-optimizer table: bf16 params, fp32 grads: 18 = 2 + 4 + 12
    bf16 = TrainingSetup(2048, 8)
    assert (bf16.state_bytes_per_parameter, bf16.optimizer_bytes_per_parameter) == (18, 12)
    # Transformer Engine keeps the persistent state of bf16 training; under Megatron-Core
    # it re-casts the weight and its transpose once per iteration: 2 B read, 2 written
    te = TrainingSetup(2048, 8, precision="fp8-te")
    assert (te.state_bytes_per_parameter, te.optimizer_bytes_per_parameter) == (18, 12)
    assert te.recipe.weight_refresh_bytes_per_parameter == 4
    # DeepSeek-V3: bf16 weights, fp32 grads, fp32 master, bf16 Adam moments: 2 + 4 + 4 + 4
    ds = TrainingSetup(2048, 8, precision="fp8-blockwise")
    assert (ds.state_bytes_per_parameter, ds.optimizer_bytes_per_parameter) == (14, 8)
    assert ds.recipe.weight_refresh_bytes_per_parameter == 0


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_fp8_stashes_linear_inputs_at_one_byte(tp):
    # Korthikanti et al. 2022 with selective recompute, 2-byte activations, 1-byte masks: a
    # GPT block stashes s b h (10 + 24/t), or 34 s b h / t with sequence parallelism. The
    # Q/K/V and MLP inputs (2 s b h each, replicated), the output projection's input
    # (2 s b h) and FC2's (8 s b h, split by t) are Linear inputs: at one byte that is
    # s b h (8 + 19/t), or 27 s b h / t
    m = get_model("gpt3-175b")
    s, b, h = 2048, 1, m.hidden
    for precision in ("fp8-te", "fp8-blockwise"):
        plain = TrainingSetup(s, b, recompute="selective", precision=precision)
        sp = TrainingSetup(s, b, recompute="selective", precision=precision, sequence_parallel=True)
        assert block_activation_bytes(m, plain, tp) == s * b * h * 8 + s * b * h * 19 // tp
        expect_sp = 27 * s * b * h // tp if tp > 1 else s * b * h * (8 + 19)
        assert block_activation_bytes(m, sp, tp) == expect_sp
        bf16 = TrainingSetup(s, b, recompute="selective", sequence_parallel=True)
        assert block_activation_bytes(m, bf16, tp) == 34 * s * b * h // tp


@given(st.sampled_from(["gpt3-1.3b", "llama2-7b", "mixtral-8x7b"]), st.sampled_from([1, 2]))
def test_bf16_recipe_leaves_the_memory_model_as_it_was(name, tp):
    # bf16 is the default: the same bytes as an explicit bf16 recipe, and precision_bytes
    # still scales every term (the pre-recipe formulas)
    m = get_model(name)
    for recompute in ("none", "selective", "full"):
        base = TrainingSetup(2048, 1, recompute=recompute)
        same = TrainingSetup(2048, 1, recompute=recompute, precision="bf16")
        assert block_activation_bytes(m, base, tp) == block_activation_bytes(m, same, tp)
        wide = TrainingSetup(2048, 1, recompute=recompute, precision_bytes=4)
        assert block_activation_bytes(m, wide, tp) >= block_activation_bytes(m, base, tp)


def test_full_recompute_stashes_the_bf16_block_input_in_every_recipe():
    m = get_model("gpt3-175b")
    sizes = {
        block_activation_bytes(m, TrainingSetup(2048, 1, recompute="full", precision=p), 4)
        for p in recipe_names()
    }
    assert sizes == {2 * 2048 * m.hidden}


# -- recipes: the op graphs ---------------------------------------------------------------


def _block(precision: str, tp: int = 4, recompute: str = "none"):
    setup = TrainingSetup(2048, 8, precision=precision, recompute=recompute)
    return build_layer_graph(get_model("gpt3-175b"), setup, tp).op_graphs["block"]


@pytest.mark.parametrize(
    ("precision", "weight_cast"),
    # TE under Megatron-Core casts the weights once per iteration and caches the copies;
    # the blockwise recipe's source does not say so, so it casts them before every GEMM
    [("fp8-te", False), ("fp8-blockwise", True)],
)
def test_fp8_recipes_lower_every_block_gemm_and_add_its_casts(precision, weight_cast):
    bf16, fp8 = _block("bf16", recompute="full"), _block(precision, recompute="full")
    assert fp8.recompute.ops  # the recomputed forward pass casts as the forward pass does
    passes = (bf16.forward, fp8.forward), (bf16.backward, fp8.backward)
    for graph, low in (*passes, (bf16.recompute, fp8.recompute)):
        gemms = [o for o in graph.ops if o.kind is OpKind.MATMUL]
        lowered = [o for o in low.ops if o.kind is OpKind.MATMUL]
        assert [o.name for o in gemms] == [o.name for o in lowered]
        assert all(o.fmt == "bf16" for o in gemms) and all(o.fmt == "fp8" for o in lowered)
        # the same MACs; operands read at one byte
        for a, b in zip(gemms, lowered, strict=True):
            assert (a.m, a.k, a.n, a.flops) == (b.m, b.k, b.n, b.flops)
            assert a.bytes_read - b.bytes_read == a.batch * (a.m * a.k + a.k * a.n)
        casts = [i for i, o in enumerate(low.ops) if o.name.endswith(".cast")]
        # the GEMMs a cast runs before (a weight gradient also reads the dgrad's copies)
        fed = {
            c: [b for a, b in low.edges if a == c and not low.ops[b].name.endswith(".wgrad")]
            for c in casts
        }
        # every forward GEMM and dgrad has exactly one cast before it; a cast feeds only
        # GEMMs reading the same input (Q, K, V share one, as TE's fused QKV Linear does)
        expected = [o.name for o in lowered if not o.name.endswith(".wgrad")]
        assert sorted(low.ops[b].name for c in casts for b in fed[c]) == sorted(expected)
        for c in casts:
            gemms = [low.ops[b] for b in fed[c]]
            g = gemms[0]
            assert {(o.batch, o.m, o.k) for o in gemms} == {(g.batch, g.m, g.k)}
            assert len(gemms) == 1 or not g.name.endswith(".dgrad")
            weight = weight_cast and not g.name.endswith(".dgrad")
            elements = g.m * g.k + (sum(o.k * o.n for o in gemms) if weight else 0)
            cast = low.ops[c]
            assert cast.core is CoreType.VC and cast.elements == elements
            assert (cast.bytes_read, cast.bytes_written, cast.flops) == (  # 2 fp8 copies
                2 * elements,
                2 * elements,
                3 * elements,
            )
        if graph is bf16.forward:  # one cast per distinct input: QKV, proj, FC1, FC2
            assert len(casts) == 4
        # each cast is named after the first GEMM it feeds and precedes it; the op order
        # stays topological
        assert all(a < b for a, b in low.edges)
        assert all(low.ops[c].name == low.ops[min(fed[c])].name + ".cast" for c in casts)


def test_embedding_head_and_attention_stay_bf16():
    setup = TrainingSetup(2048, 8, precision="fp8-te")
    lg = build_layer_graph(get_model("gpt3-175b"), setup, 4)
    for cid in ("embedding", "head"):
        for g in (lg.op_graphs[cid].forward, lg.op_graphs[cid].backward):
            assert all(o.fmt == "bf16" for o in g.ops)
    attention = [o for o in _block("fp8-te").forward.ops if o.kind is not OpKind.MATMUL]
    assert all(o.fmt == "bf16" for o in attention)


def test_blockwise_promotes_partial_sums_on_the_vector_cores():
    # DeepSeek-V3 Sec. 3.3.2: a multiply-add per output element every 128 elements of K
    g = Op("x", OpKind.MATMUL, CoreType.TC, flops=2 * 64 * 300 * 32, m=64, k=300, n=32)
    low = apply_precision(OpGraph((g,), ()), recipe("fp8-blockwise")).ops[-1]
    assert low.core is CoreType.TC_AND_VC and low.epilogue_flops == 2 * 64 * 32 * 3
    assert apply_precision(OpGraph((g,), ()), recipe("bf16")).ops == (g,)


# -- formats on the accelerator -----------------------------------------------------------


def _peak(name: str, fmt: str) -> float:
    rows = [p for p in FORMATS["peak"] if p["preset"] == name and p["format"] == fmt]
    return rows[0]["dense_ops_per_s"]


def test_presets_carry_their_published_peaks_per_format():
    h100 = preset("h100")
    # H100 fp8: 1,979 TFLOP/s dense, within the bf16 preset's rounding (989.3 vs 989)
    assert h100.peak_flops * h100.format_rate("fp8") == pytest.approx(1979e12, rel=1e-3)
    b200 = preset("b200")  # its counts give 2.255 of the data sheet's 2.25 PFLOP/s bf16
    assert b200.peak_flops * b200.format_rate("fp8") == pytest.approx(
        _peak("b200", "fp8"), rel=5e-3
    )
    assert b200.peak_flops * b200.format_rate("fp4") == pytest.approx(
        _peak("b200", "fp4"), rel=5e-3
    )
    a100 = preset("a100")
    assert a100.format_names == ("bf16", "fp16", "int8") and a100.format_rate("int8") == 2.0
    with pytest.raises(ConfigError, match=r"a100 has no fp8 .*runs bf16, fp16, int8"):
        a100.format_rate("fp8")
    assert preset("tpuv4").format_rate("int8") == 1.0  # "275 teraflops (bf16 or int8)"


def test_presets_area_is_their_published_die_with_its_lanes():
    # a preset's fitted die already holds its format lanes; a design adds them
    h100 = preset("h100")
    bare = h100.__class__(**{**{f: getattr(h100, f) for f in h100.__slots__}, "name": ""})
    assert area_breakdown_mm2(h100)["tensor_cores"] < area_breakdown_mm2(bare)["tensor_cores"]
    extra = h100.num_tc * h100.tc_rows * h100.tc_cols * tech_node(h100.node_nm).mac_area_um2 / 1e6
    lanes = format_lane_factor(h100.formats)
    assert area_breakdown_mm2(bare)["tensor_cores"] - area_breakdown_mm2(h100)[
        "tensor_cores"
    ] == pytest.approx(extra * lanes)


def test_format_options_derive_from_their_sources():
    opts = format_options()
    horowitz = {r["format"]: r for r in FORMATS["mac_cost"] if r["study"] == "horowitz-derived"}
    assert opts["int8"].relative_area == horowitz["int8"]["relative_area"]
    assert opts["int8"].relative_energy == horowitz["int8"]["relative_energy"]
    fp8_over_int8 = (1.5 * 2.8) ** 0.5  # van Baalen et al.'s range, geometric mean
    assert opts["fp8"].relative_area == pytest.approx(0.072 * fp8_over_int8, rel=1e-3)
    chen = {r["format"]: r for r in FORMATS["mac_cost"] if r["study"] == "chen-int-vs-fp-2025"}
    ratio = chen["nvfp4"]["relative_area"]
    assert opts["fp4"].relative_area == pytest.approx(opts["fp8"].relative_area * ratio, rel=1e-3)
    assert [f for f, _ in format_set_rates(("fp8", "bf16"))] == ["bf16", "fp8"]


def test_an_fp8_gemm_runs_at_the_fp8_rate_and_its_measured_share():
    h100 = preset("h100")
    cluster = Cluster(devices=8)
    gemm = Op("g", OpKind.MATMUL, CoreType.TC, flops=2 * 8192**3, m=8192, k=8192, n=8192)
    bf16 = op_costs(OpGraph((gemm,), ()), h100, cluster)
    fp8 = op_costs(OpGraph((Op(**{**_fields(gemm), "fmt": "fp8"}),), ()), h100, cluster)
    dev = device_profile(h100)
    # compute-bound at the sustained share: MACs / (rate x share) in each format
    expect = dev.sustained_tensor_fraction / (h100.format_rate("fp8") * dev.format_fraction("fp8"))
    assert fp8.parallel_latency_s[0] / bf16.parallel_latency_s[0] == pytest.approx(expect, rel=0.02)
    assert dev.format_fraction("fp8") == pytest.approx(1402.6 / 1979, abs=1e-3)  # MAMF fp8
    assert generic_profile().format_fraction("fp8") == pytest.approx((0.709 + 0.763) / 2)
    tech = tech_node(h100.node_nm)
    assert format_mac_pj(h100, tech, "fp8") < mac_pj(h100, tech)
    assert fp8.parallel_parts_j[0, 0] < bf16.parallel_parts_j[0, 0]


def test_bf16_ops_cost_the_same_with_or_without_further_formats():
    # the bf16 path is untouched by format lanes: a bf16 block's op times are bit-for-bit
    # those of the design without them (only area and leakage differ)
    graph = _block("bf16", tp=8).backward
    acc = next(Space.named("tiny").enumerate())  # a design: the generic device profile
    with_fp8 = acc.__class__(**{**_fields(acc), "formats": format_set_rates(("bf16", "fp8"))})
    a = op_costs(graph, acc, Cluster(devices=8), static_w=0.0)
    b = op_costs(graph, with_fp8, Cluster(devices=8), static_w=0.0)
    assert (a.parallel_latency_s == b.parallel_latency_s).all()
    assert (a.latency_s == b.latency_s).all() and (a.parts_j == b.parts_j).all()


def _fields(op) -> dict:
    return {f: getattr(op, f) for f in op.__slots__}


# -- spaces -------------------------------------------------------------------------------


def test_a_space_enumerates_each_format_set_with_its_area():
    base = dict(num_tc=(4, 8), tc_rows=(64,), tc_cols=(128,), num_vc=(8,), glb_bytes=(64 << 20,))
    one = Space(**base)
    two = Space(**base, format_sets=(("bf16",), ("fp8", "bf16")))
    assert two.format_sets == (("bf16",), ("bf16", "fp8"))
    a, b = list(one.enumerate()), list(two.enumerate())
    assert b[: len(a)] == a  # bf16 designs as before, in the same order
    fp8 = [d for d in b if "fp8" in d.format_names]
    assert fp8 and all(d.format_rate("fp8") == 2.0 for d in fp8)
    for d in fp8:
        twin = next(x for x in a if x.num_tc == d.num_tc)
        lanes = d.num_tc * d.tc_rows * d.tc_cols * tech_node(7).mac_area_um2 / 1e6 * 0.2952
        assert area_mm2(d) - area_mm2(twin) == pytest.approx(
            lanes * (1 + tech_node(7).overhead_fraction)
        )
    text = two.to_toml()
    assert Space.from_mapping(tomllib.loads(text)) == two


@pytest.mark.parametrize(
    "formats", [[["fp8"]], [["bf16", "fp9"]], [], [["bf16"], ["bf16"]], "bf16"]
)
def test_bad_format_sets_are_named(formats):
    table = {"num_tc": [4], "tc_rows": [64], "tc_cols": [128], "num_vc": [8], "glb_mib": [64]}
    with pytest.raises(ConfigError, match="formats"):
        Space.from_mapping({"space": {**table, "formats": formats}})


def test_sweep_designs_run_the_precisions_their_formats_serve():
    knobs = tuple(
        Layout.searching(mbs=1, recompute="none", precision=p) for p in ("bf16", "fp8-te")
    )
    shared = Shared((), knobs, None, (), (("bf16",), ("bf16", "fp8")))  # type: ignore[arg-type]
    space = Space(
        num_tc=(8,), tc_rows=(64,), tc_cols=(128,), num_vc=(8,), glb_bytes=(64 << 20,),
        format_sets=(("bf16",), ("bf16", "fp8")),
    )  # fmt: skip
    bf16, fp8 = space.enumerate()
    assert [k.precision for k in design_knobs(shared, bf16)] == ["bf16"]
    # bf16 on fp8 lanes is dominated by the bf16 twin: only fp8-te
    assert [k.precision for k in design_knobs(shared, fp8)] == ["fp8-te"]
    assert [k.precision for k in design_knobs(shared, preset("h100"))] == ["bf16", "fp8-te"]
    assert [k.precision for k in design_knobs(shared, preset("a100"))] == ["bf16"]


# -- the knob everywhere ------------------------------------------------------------------


@given(st.sampled_from(recipe_names()))
def test_strategy_strings_round_trip_precision(p):
    lay = parse_strategy(f"t=2,p=1,d=4,mbs=1,precision={p}")
    assert lay.precision == p and parse_strategy(str(lay)) == lay
    assert ("precision=" in str(lay)) == (p != "bf16")  # bf16 strings read as before


def test_strategy_precision_errors_name_the_recipes():
    with pytest.raises(ConfigError, match="precision = .fp9. must be one of bf16, fp16, fp8-te"):
        parse_strategy("t=1,precision=fp9")
    with pytest.raises(ConfigError, match="conflicts with --precision bf16"):
        parse_strategy("precision=fp8-te", {"precision": ("--precision", "bf16")})


def test_a_preset_without_the_format_is_refused_in_one_line():
    r = CliRunner().invoke(
        cli,
        ["evaluate", "--workload", "gpt3-1.3b", "--arch", "a100", "--devices", "8",
         "--global-batch", "64", "--strategy", "t=1,p=1,d=8,mbs=8,recompute=none,precision=fp8-te"],
    )  # fmt: skip
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert lines == ["Error: precision fp8-te needs fp8 tensor cores; a100 runs bf16, fp16, int8"]


@pytest.mark.parametrize(
    ("precision", "compute", "activations"),
    [
        ("bf16", "compute ", "activations "),
        ("fp8-te", "compute (fp8 GEMMs) ", "activations (Linear inputs at 1 B) "),
    ],
)
def test_the_breakdown_names_the_gemm_format_of_its_compute(precision, compute, activations):
    r = CliRunner().invoke(
        cli,
        ["evaluate", "--workload", "gpt3-1.3b", "--arch", "h100", "--devices", "8",
         "--global-batch", "64",
         "--strategy", f"t=1,p=1,d=8,mbs=8,recompute=none,precision={precision}"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(line.startswith(compute) for line in lines), r.output
    assert any(activations in line for line in lines), r.output
    assert any(line.startswith("recompute (fp8 GEMMs)") for line in lines) == (precision != "bf16")
    # fp8-te's cached weight copies are cast once per iteration, in the step term
    fp8 = precision != "bf16"
    assert any(line.startswith("optimizer (and the fp8 weight casts)") for line in lines) == fp8


def test_sweep_config_lists_precisions():
    from phaze.config import sweep_config_from_mapping

    cfg = sweep_config_from_mapping({"sweep": {"precision": ["bf16", "fp8-te"]}}, "s.toml")
    assert cfg.training.precision == ("bf16", "fp8-te")
    with pytest.raises(ConfigError, match="precision"):
        sweep_config_from_mapping({"sweep": {"precision": ["fp9"]}}, "s.toml")


def test_a_sweep_chooses_formats_and_stores_the_precision_of_each_point(tmp_path):
    import phaze

    space = tmp_path / "formats.toml"
    space.write_text(
        "[space]\nnum_tc = [2, 4]\ntc_rows = [64]\ntc_cols = [128]\nnum_vc = [4]\n"
        "vc_lanes = [1024]\nglb_mib = [16]\nhbm_gib = [32]\n"
        'area_fraction_min = 0.0\nformats = [["bf16"], ["bf16", "fp8"]]\n'
    )
    points = phaze.search(
        ["gpt3-125m"],
        space=str(space),
        cluster=Cluster(devices=8),
        micro_batches=[1],
        recompute_modes=["none"],
        precisions=["bf16", "fp8-te"],
        global_batch=16,
        prune=False,
        presets=["a100", "h100"],
        out_dir=tmp_path / "out",
        executor="serial",
    )
    rows = {(p["design_name"] or p["formats"], p["num_tc"], p["precision"]) for p in points}
    # each design at the precisions its formats serve; bf16 on fp8 lanes is left out
    assert rows == {
        ("bf16", 2, "bf16"),
        ("bf16", 4, "bf16"),
        ("bf16+fp8", 2, "fp8-te"),
        ("bf16+fp8", 4, "fp8-te"),
        ("a100", 432, "bf16"),
        ("h100", 528, "bf16"),
        ("h100", 528, "fp8-te"),
    }
    speed = {(p["formats"], p["num_tc"], p["precision"]): p["tokens_per_s"] for p in points}
    assert speed[("bf16+fp8", 4, "fp8-te")] > speed[("bf16", 4, "bf16")]
    assert all(p["feasible"] for p in points)


@pytest.mark.parametrize("precision", ["bf16", "fp8-te"])
def test_mfu_says_which_peak_it_is_against(precision):
    """MFU is against the bf16 peak whatever the recipe (so it says so); an fp8 run also
    gives it against the fp8 peak, in the text and in --json."""
    args = ["evaluate", "--workload", "gpt3-1.3b", "--arch", "h100", "--devices", "8"]
    args += ["--global-batch", "64", "--strategy", f"t=1,p=1,d=8,mbs=8,precision={precision}"]
    doc = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    h100, flops = preset("h100"), doc["tflops_per_device"] * 1e12
    per_sequence = model_flops_per_sequence(resolve_model("gpt3-1.3b"), doc["seq_len"])
    assert flops == pytest.approx(64 * per_sequence / doc["iteration_s"] / 8)
    assert doc["mfu"] == pytest.approx(flops / h100.peak_flops)
    assert doc["mfu_fp8_peak"] == pytest.approx(flops / h100.peak_flops / h100.format_rate("fp8"))
    (row,) = [line for line in CliRunner().invoke(cli, args).output.splitlines() if "MFU" in line]
    bf16 = f"{fmt_percent(doc['mfu'])} of the bf16 peak"
    fp8 = f", {fmt_percent(doc['mfu_fp8_peak'])} of the fp8 peak"
    assert row.split(None, 1)[1] == bf16 + (fp8 if precision != "bf16" else "")
