"""Each knob is declared once: the recompute modes, sequence parallelism's default and the
data-parallel collectives' bytes per parameter (from the run's formats)."""

from __future__ import annotations

import inspect

import click
import pytest

from arch_space import Cluster
from phaze import api, config
from phaze.cli._options import RecomputeMode
from phaze.model import knob_search
from phaze.model.context import Context
from phaze.model.problem import dp_bytes_per_parameter
from phaze_common.errors import ConfigError
from placement import layout
from placement.layout import Layout
from workloads import TrainingSetup
from workloads.recompute_modules import RECOMPUTE_WORDS, Recompute

#: every mode the one declaration names, and words close to them that no path may accept
ACCEPTED = (*RECOMPUTE_WORDS, "modules:core_attn+mlp")
REFUSED = ("partial", "Full", "modules", "attention", "modules:nothing", "")


def test_the_recompute_words_are_the_enum():
    assert RECOMPUTE_WORDS == tuple(m.value for m in Recompute if m is not Recompute.MODULES)
    assert config.RECOMPUTE_MODES is RECOMPUTE_WORDS
    assert knob_search.RECOMPUTES is RECOMPUTE_WORDS
    assert layout.RECOMPUTE_MODES is RECOMPUTE_WORDS


def _cli(mode: str) -> bool:
    try:
        RecomputeMode().convert(mode, None, None)
    except click.BadParameter:
        return False
    return True


def _config(mode: str) -> bool:
    try:
        config.sweep_config_from_mapping({"sweep": {"recompute": [mode]}})
    except ConfigError:
        return False
    return True


def _api(mode: str) -> bool:
    try:
        Layout.searching().completed(mbs=1, recompute=mode)
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("accepts", [_cli, _config, _api], ids=["cli", "config", "api"])
def test_cli_config_and_api_accept_exactly_the_declared_modes(accepts):
    assert [m for m in ACCEPTED + REFUSED if accepts(m)] == list(ACCEPTED)


def test_sequence_parallel_has_one_default():
    defaults = {
        "context": Context(cluster=Cluster(devices=8)).sequence_parallel,
        "config": config.SweepConfig().training.sequence_parallel,
        "api.search": inspect.signature(api.search).parameters["sequence_parallel"].default,
        "api.evaluate": inspect.signature(api.evaluate).parameters["sequence_parallel"].default,
    }
    assert set(defaults.values()) == {config.DEFAULT_SEQUENCE_PARALLEL}, defaults


@pytest.mark.parametrize(
    ("framework", "want"), [("megatron-core-2024", (2.0, 2.0)), ("fsdp2-2024", (4.0, 2.0))]
)
def test_data_parallel_bytes_come_from_the_run(framework, want):
    """The gradients reduce in the framework's format (FSDP2: fp32) or else the weights',
    which the updated weights gather in (bf16: 2 B)."""
    setup = TrainingSetup(256, 8, micro_batch=1, framework=framework)
    assert setup.state_parts.weight_bytes == 2
    assert dp_bytes_per_parameter(setup) == want


def _recompute_options(command: click.Command, path: str = "phaze"):
    """(command path, option) of every ``--recompute`` under ``command``."""
    ctx = click.Context(command)
    for param in command.params:
        if isinstance(param, click.Option) and param.name == "recompute":
            yield path, param
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            yield from _recompute_options(command.get_command(ctx, name), f"{path} {name}")


def test_every_recompute_option_takes_and_names_the_declared_modes():
    """The help texts are words, not the declaration: each names the modes it accepts."""
    from phaze.cli import cli

    spelled = f"{', '.join(RECOMPUTE_WORDS)} or modules:"
    found = dict(_recompute_options(cli))
    assert {"phaze evaluate", "phaze sweep"} <= set(found), sorted(found)
    for path, opt in found.items():
        assert spelled in (opt.help or ""), path
        assert isinstance(opt.type, RecomputeMode), path
