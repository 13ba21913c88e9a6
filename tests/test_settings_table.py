"""Every sweep, evaluate and serve setting is declared once (:mod:`phaze.settings`): the
sweep file's keys and defaults, the two modes' sections, the command-line options of every
command, the API's keywords, the model fields they fill, the store's columns and the point
keys all agree with the declaration."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import re

import click
import pytest

from arch_space import Accelerator, Cluster
from phaze import api
from phaze.cli import cli
from phaze.cli._options import FiniteFloat, RecomputeMode
from phaze.config import (
    ServingSettings,
    SweepConfig,
    TrainingSettings,
    sweep_config_from_mapping,
)
from phaze.model.context import Context
from phaze.model.serving import ServeContext
from phaze.settings import SECTIONS, SETTINGS, flag_of, section_keys
from phaze.sweep.records import point_key
from phaze.sweep.serve_tasks import AtRate, serve_point_key
from phaze_common.errors import ConfigError
from phaze_common.sweep_modes import MODE_KEYS
from placement import Layout, ServingLayout
from results.schema import COLUMN_NAMES
from workloads.serving import RequestBatch

# the classes whose fields the settings fill, by the name the declaration gives them
_FILLED = {
    c.__name__: c
    for c in (Accelerator, AtRate, Cluster, Context, Layout, RequestBatch, ServeContext)
    + (ServingLayout, SweepConfig)
}
# fields named for a reader only: no class of these names holds a field of its own
_NAMED_ONLY = {"Evaluation", "DesignSpace", "Objective", "PairSweep"}


def test_the_keys_and_defaults_are_the_sweep_file_s():
    empty = sweep_config_from_mapping({"sweep": {}}, "empty.toml")
    keys = [k for k in empty.as_dict() if k not in ("solver", "scoring")]
    in_file = {k: s for k, s in SETTINGS.items() if s.in_file}
    assert list(in_file) == keys
    assert {k: s.default for k, s in in_file.items()} == {k: empty.value(k) for k in keys}
    assert list(SETTINGS)[: len(keys)] == keys  # the file's first, then the others


_RECORDS = {"sweep": SweepConfig, "training": TrainingSettings, "serving": ServingSettings}


@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_is_a_record_of_the_declared_keys_and_defaults(section):
    """The configuration's two modes' records hold their sections' keys, in the declared
    order and with the declared defaults; the configuration itself the shared ones."""
    own = [f for f in dataclasses.fields(_RECORDS[section]) if f.name not in _NESTED]
    assert [f.name for f in own] == list(section_keys(section))
    made = SweepConfig().section(section)
    assert {f.name: getattr(made, f.name) for f in own} == {
        k: SETTINGS[k].default for k in section_keys(section)
    }


_NESTED = {"training", "serving", "solver", "scoring"}


def test_settings_given_by_key_land_in_their_sections():
    cfg = SweepConfig.of(seq_len=4096, batches=(8,), devices=16)
    assert (cfg.training.seq_len, cfg.serving.batches, cfg.devices) == (4096, (8,), 16)
    assert cfg.with_settings(seq_len=2048) == SweepConfig.of(batches=(8,), devices=16)
    with pytest.raises(TypeError):
        cfg.with_settings(seq_lem=1)


def test_the_two_modes_sections_are_the_declared_ones():
    assert SECTIONS == ("sweep", "training", "serving")
    assert set(section_keys("training")) == set(MODE_KEYS["train"])
    assert set(section_keys("serving")) == set(MODE_KEYS["serve"])


@pytest.mark.parametrize("s", SETTINGS.values(), ids=list(SETTINGS))
def test_each_setting_fills_a_real_field(s):
    if "(" in s.fills:  # a function's parameter: module.function(parameter)
        module, function, parameter = re.match(r"(\w+)\.(\w+)\((\w+)\)$", s.fills).groups()
        f = getattr(importlib.import_module(f"phaze.model.{module}"), function)
        assert parameter in inspect.signature(f).parameters, s.fills
        return
    owner, name = s.fills.split(".")
    if owner in _NAMED_ONLY:
        return
    assert name in {f.name for f in dataclasses.fields(_FILLED[owner])}, s.fills


@pytest.mark.parametrize(
    ("owner", "made"),
    [(Context, Context(cluster=Cluster(devices=64))), (Cluster, Cluster(devices=64))],
    ids=["Context", "Cluster"],
)
def test_the_model_s_defaults_are_the_declared_ones(owner, made):
    declared = {
        s.fills.split(".")[1]: s.default
        for s in SETTINGS.values()
        if s.fills.startswith(f"{owner.__name__}.") and not s.many
    }
    assert declared and {k: getattr(made, k) for k in declared} == declared


# api.search's keywords that are no setting: where and how it runs, and the nested tables
_SEARCH_ONLY = {"cluster", "executor", "out_dir", "jobs", "solver", "scoring", "progress"}


def _defaults(f) -> dict[str, object]:
    return {n: p.default for n, p in inspect.signature(f).parameters.items()}


def test_api_search_takes_every_setting_with_its_default():
    search = {k: v for k, v in _defaults(api.search).items() if k != "workloads"}
    declared = {
        s.api_name: s
        for s in SETTINGS.values()
        if s.in_file and s.api_name and s.key != "workloads"
    }
    assert set(search) - _SEARCH_ONLY == set(declared)
    got = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in search.items()}
    want = {k: s.default for k, s in declared.items() if k != "hbm_sizes"}
    assert {k: got[k] for k in want} == want
    assert Cluster(devices=64) == Cluster(devices=SETTINGS["devices"].default)


def test_api_evaluate_and_serve_keep_the_declared_defaults():
    evaluate, serve = _defaults(api.evaluate), _defaults(api.serve)
    declared = {
        section: [k for k, s in SETTINGS.items() if s.section == section] for section in SECTIONS
    }
    training = [k for k in declared["training"] if k in evaluate and not SETTINGS[k].many]
    assert len(training) >= 7
    assert {k: evaluate[k] for k in training} == {k: SETTINGS[k].default for k in training}
    serving = [k for k in declared["serving"] if k in serve]
    assert set(serving) >= {"input_tokens", "ttft_limit_s", "disaggregate", "objective", "engine"}
    for k in serving:  # None: the request lengths may come from ``lengths`` instead
        assert serve[k] in (None, SETTINGS[k].default), k


def _keywords(f) -> dict[str, object]:
    params = inspect.signature(f).parameters.values()
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}


def test_api_serve_s_problem_takes_serve_s_keywords_from_its_signature():
    """The serving problem's options are :func:`api.serve`'s keywords, read from its
    signature (stated once), with its defaults; no other keyword is taken."""
    assert dict(api._SERVE_KEYWORDS) == _keywords(api.serve)
    assert set(inspect.signature(api._serving_problem).parameters) == {"cluster", "given"}
    layout, ctx = api._serving_problem(Cluster(devices=8), input_tokens=64, output_tokens=8)
    assert (ctx.objective, ctx.disaggregate) == (SETTINGS["objective"].default, True)
    with pytest.raises(TypeError, match="input_tokenz"):
        api._serving_problem(Cluster(devices=8), input_tokenz=64)


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    found = [(n, cli.get_command(ctx, n)) for n in ("sweep", "serve", "evaluate", "schedule")]
    workloads = cli.get_command(ctx, "workloads")
    return [*found, ("workloads show", workloads.get_command(ctx, "show"))]


# evaluate's framework also takes changes to the profile (NAME:key=value)
_ANOTHER_KNOB = {("evaluate", "--framework")}


def _setting_of(p: click.Parameter):
    """The setting an option sets: by its parameter name, else by its flag where only one
    setting has that flag (``--micro-batch`` read as ``micro_batch``)."""
    if p.name is None:
        return None
    if (s := flag_of(p.name) or SETTINGS.get(p.name)) is not None:
        return s
    (s, *more) = [s for s in SETTINGS.values() if s.flag in p.opts] or [None]
    return None if more else s


def _range(t: click.ParamType):
    if isinstance(t, click.IntRange):
        return (t.min, t.max)
    if isinstance(t, FiniteFloat):
        return (t.lo, t.hi, t.lo_open, t.hi_open)
    if isinstance(t, click.Choice):
        return tuple(t.choices)
    return type(t)


def _declared_range(s):
    if s.kind == "int":
        return (s.lo, s.hi)
    if s.kind == "float":
        return (s.in_flag_units(s.lo), s.in_flag_units(s.hi), s.lo_open, s.hi_open)
    if s.kind == "recompute":
        return RecomputeMode
    if s.kind == "path":
        return click.Path
    return s.allowed() or click.types.StringParamType


@pytest.mark.parametrize(("path", "cmd"), _commands(), ids=[p for p, _ in _commands()])
def test_every_command_s_setting_options_are_the_declared_ones(path, cmd):
    """An option with a setting's flag takes the declared range or names in the flag's
    units; a sweep option that is no setting is one of the run's own."""
    seen = 0
    for p in cmd.params:
        s = _setting_of(p)
        if s is None or s.kind == "bool" or (path, s.flag) in _ANOTHER_KNOB:
            continue
        seen += 1
        assert _range(p.type) == _declared_range(s), (path, p.opts)
    assert seen
    if path == "sweep":
        own = {"config", "out", "jobs", "executor", "address", "no_report", "as_json", "verbose"}
        others = {p.name for p in cmd.params if flag_of(p.name) is None}
        assert others == own | {"show_config"}


@pytest.mark.parametrize(
    "s",
    [s for s in SETTINGS.values() if s.in_file and s.kind in ("int", "float")],
    ids=lambda s: s.key,
)
def test_a_sweep_file_takes_the_declared_range(s):
    def accepts(value) -> bool:
        try:
            sweep_config_from_mapping({"sweep": {s.key: [value] if s.many else value}})
        except ConfigError:
            return False
        return True

    assert s.lo is not None
    assert accepts(s.lo) is not s.lo_open
    below = s.lo if s.lo_open else s.lo - (1 if s.kind == "int" else 1e-9)
    assert not accepts(below)
    if s.hi is not None and math.isfinite(s.hi):
        assert accepts(s.hi) and not accepts(s.hi + (1 if s.kind == "int" else s.hi))


def test_the_declared_columns_are_stored():
    columns = {s.column for s in SETTINGS.values() if s.column}
    assert columns and columns <= set(COLUMN_NAMES)


def test_the_declared_key_labels_are_in_the_point_keys():
    """A point's key holds every knob that tells two points of one design apart."""
    training = point_key("w", "d", Layout(mbs=2, recompute="full", precision="fp8-te"))
    ctx = ServeContext(Cluster(devices=8), RequestBatch.of(512, 64))
    serving = serve_point_key("w", "d", 4, ctx, "fp8", AtRate(2.0, 100, 1, 0.5, 0.1))
    labels = {s.key_label for s in SETTINGS.values() if s.key_label}
    assert {label for label in labels if f"|{label}=" not in training + serving} == set()


def test_api_search_passes_every_setting_to_the_sweep(monkeypatch):
    """Each keyword reaches the sweep's configuration (the optimizer state once did not)."""
    seen = []

    class _Stop(Exception):
        pass

    def fake_run(cfg, *_a, **_k):
        seen.append(cfg)
        raise _Stop

    monkeypatch.setattr(api, "run_sweep", fake_run)
    given = {"optimizer_state": "moments=bf16", "seq_len": 1024, "batches": (8,), "seed": 3}
    with pytest.raises(_Stop):
        api.search(["gpt3-125m"], **given)
    assert {k: seen[0].value(k) for k in given} == given


def test_a_file_may_give_the_two_modes_settings_in_their_own_tables():
    flat = {"sweep": {"mode": "serve", "devices": 16, "input_tokens": 512, "batches": [8]}}
    split = {"sweep": {"mode": "serve", "devices": 16}}
    split["serving"] = {"input_tokens": 512, "batches": [8]}
    assert sweep_config_from_mapping(split) == sweep_config_from_mapping(flat)
    train = sweep_config_from_mapping({"training": {"seq_len": 4096}})
    assert train == sweep_config_from_mapping({"sweep": {"seq_len": 4096}})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"training": {"input_tokens": 8}}, "[training]: 'input_tokens' is not a training key "
         "(it belongs in [serving])"),
        ({"training": {"seq_lem": 8}}, "[training]: 'seq_lem' is not a training key (did you "
         "mean 'seq_len'?; known keys: seq_len,"),
        ({"sweep": {"seq_len": 8}, "training": {"seq_len": 8}}, "[training]: seq_len is in "
         "[sweep] too; give it once"),
        ({"serving": {"output_tokens": 1}}, "[serving]: output_tokens = 1 must be an integer >= 2"),
        ({"serving": {"rate": 2e9}}, "[serving]: rate = 2000000000.0 must be in (0, 1e+09]"),
        ({"sweep": {"mode": "train"}, "serving": {"rate": 1.0}}, "rate only apply to mode = "
         "'serve'"),
    ],
)  # fmt: skip
def test_a_key_in_the_wrong_table_is_named_with_its_table(data, message):
    with pytest.raises(ConfigError) as e:
        sweep_config_from_mapping(data, "f.toml")
    assert f"f.toml {message}" in str(e.value) or message in str(e.value), str(e.value)


@pytest.mark.parametrize(("path", "cmd"), _commands(), ids=[p for p, _ in _commands()])
def test_every_command_s_defaults_are_the_declared_ones(path, cmd):
    """Where a command gives a setting's option a default, it is the declared one, or one of
    the declared values where the command takes one (a sweep's options have none: the file's
    value stands unless one is given)."""
    for p in cmd.params:
        s = _setting_of(p)
        if s is None:
            continue
        default = None if p.default is getattr(click.core, "UNSET", None) else p.default
        if path == "sweep":
            assert default in (None, False), p.name
        elif default is not None and s.many and not p.multiple:  # one point: one of them
            assert default in s.default, (path, p.name)
        elif default is not None and s.kind == "float":
            assert default == s.in_flag_units(s.default), (path, p.name)
        elif default is not None and (s.kind != "bool" or p.name == s.key):
            assert default == s.default, (path, p.name)


def test_the_knob_search_tries_the_declared_micro_batches():
    """``phaze evaluate``'s search and an empty ``[sweep]`` try the same sizes."""
    from phaze.model import knob_search

    tried = inspect.signature(knob_search.evaluate_best_knobs).parameters["micro_batches"]
    assert tried.default == SETTINGS["micro_batches"].default


def test_the_optimizer_state_is_a_training_key():
    """Declared in the training section, it is refused in a serving sweep (it once was
    silently ignored there and counted in the serving sweep's hash)."""
    from click.testing import CliRunner

    with pytest.raises(ConfigError, match="optimizer_state only apply to mode = 'train'"):
        sweep_config_from_mapping({"sweep": {"mode": "serve", "optimizer_state": "moments=bf16"}})
    args = ["sweep", "--mode", "serve", "--optimizer-state", "moments=bf16", "--show-config"]
    refused = CliRunner().invoke(cli, args)
    assert (
        refused.exit_code == 1 and "--optimizer-state only apply to --mode train" in refused.output
    )


# the options of serve and evaluate that are not declared settings: where the design comes
# from, the run's own output, the layout given whole, serve's capacity search (a mode of the
# command) and the scoring table's (ranged by phaze.model.scoring.RANGES)
_SCORING_OPTIONS = {
    "grid_region", "grid_gco2e_per_kwh", "pue", "lifetime_years", "embodied_mode",
    "usd_per_kwh", "cost_view", "interest", "goodput", "volume_units", "host_profile",
}  # fmt: skip
_UNDECLARED = {
    "serve": {"arch", "strategy", "capacity", "as_json", "config", "show_config", "verbose"},
    "evaluate": {"arch", "strategy", "as_json", "verbose"},
}


@pytest.mark.parametrize("path", sorted(_UNDECLARED))
def test_every_other_option_of_serve_and_evaluate_is_a_declared_setting(path):
    """A new option of serve or evaluate is declared in the table (or named here)."""
    cmd = dict(_commands())[path]
    others = {p.name for p in cmd.params if _setting_of(p) is None} - _SCORING_OPTIONS
    assert others == _UNDECLARED[path]


def test_the_cluster_s_link_options_are_given_in_gb_per_s():
    from phaze.cli._options import cluster_of

    kw = {"devices": 8, "devices_per_node": 4, "intra_node_gbps": 450.0, "inter_node_gbps": 50.0}
    cluster = cluster_of(kw)
    assert (cluster.intra_node_bandwidth_bytes_per_s, cluster.inter_node_bandwidth_bytes_per_s) == (
        450e9,
        50e9,
    )
    assert kw == {}
    link = SETTINGS["intra_node_bandwidth_bytes_per_s"]
    assert (link.dest, link.in_flag_units(link.default), link.range_text(1e-9)) == (
        "intra_node_gbps",
        300.0,
        "(0, 1e+06]",
    )


@pytest.mark.parametrize("path", sorted(_UNDECLARED))
def test_the_scoring_options_keep_the_scoring_defaults_and_ranges(path):
    """The scoring options are the ``[scoring]`` table's (:class:`ScoringParams`, ranged by
    its ``RANGES``): each default shown is the table's, in the option's units, and each
    number's range is the one ``RANGES`` gives."""
    from phaze.model.scoring import RANGES, SECONDS_PER_YEAR, ScoringParams

    defaults, per = ScoringParams(), {"lifetime_years": SECONDS_PER_YEAR}
    field = {"lifetime_years": "lifetime_s"}
    options = [p for p in dict(_commands())[path].params if p.name in _SCORING_OPTIONS]
    assert {p.name for p in options} >= _SCORING_OPTIONS - {"embodied_mode", "goodput"}
    for p in options:
        name = field.get(p.name, p.name)
        if p.default is not None and p.default is not getattr(click.core, "UNSET", None):
            value = getattr(defaults, name)
            want = value if isinstance(value, str) else value / per.get(p.name, 1)
            assert p.default == (pytest.approx(want) if isinstance(want, float) else want), p.name
        if isinstance(p.type, FiniteFloat):
            lo, hi, lo_in, hi_in = RANGES[name]
            scale = per.get(p.name, 1)
            assert (p.type.lo, p.type.hi) == (lo / scale, hi / scale), p.name
            assert (p.type.lo_open, p.type.hi_open) == (not lo_in, not hi_in), p.name
