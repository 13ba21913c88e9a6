"""Each preset's MFU on Llama 2 7B (8 devices, global batch 64) against the highest MFU
published for its chip in dense LLM training plus a margin (phaze/data/mfu_caps.toml)."""

import tomllib
from importlib import resources

import pytest

import phaze
from arch_space import Cluster, preset
from arch_space.presets import preset_names

_DATA = tomllib.loads(resources.files("phaze").joinpath("data", "mfu_caps.toml").read_text())
_WORKLOAD = _DATA["workload"]
_CAPS = {c["preset"]: c for c in _DATA["cap"]}


def test_every_preset_is_capped_or_says_why_not():
    uncapped = {u["preset"]: u["reason"] for u in _DATA["uncapped"]}
    assert set(_CAPS) | set(uncapped) == set(preset_names())
    assert not set(_CAPS) & set(uncapped)
    assert all(reason.strip() for reason in uncapped.values())


def test_caps_are_published_figures_with_sources():
    assert 0 < _WORKLOAD["margin"] < 0.1
    for cap in _CAPS.values():
        assert 0.2 < cap["published_mfu"] < 0.9, cap
        assert len(cap["source"]) > 40, cap
        if "same_chip_as" in cap:
            twin = _CAPS[cap["same_chip_as"]]
            assert cap["published_mfu"] == twin["published_mfu"]
            assert preset(cap["preset"]).peak_flops == preset(twin["preset"]).peak_flops


def _case(cap):
    if "open" in cap:  # the model still misses a mechanism of this chip; strict: passing fails
        return pytest.param(cap, marks=pytest.mark.xfail(reason=cap["open"], strict=True))
    return cap


@pytest.mark.slow
@pytest.mark.parametrize("cap", [_case(c) for c in _CAPS.values()], ids=list(_CAPS))
def test_mfu_stays_under_the_published_figure_plus_the_margin(cap):
    ev = phaze.evaluate(
        _WORKLOAD["model"],
        preset(cap["preset"]),
        Cluster(devices=_WORKLOAD["devices"]),
        seq_len=_WORKLOAD["seq_len"],
        global_batch=_WORKLOAD["global_batch"],
        framework=_WORKLOAD["framework"],
        precision=cap.get("precision"),
    )
    assert ev.score.mfu <= cap["published_mfu"] + _WORKLOAD["margin"], (
        f"{cap['preset']}: MFU {ev.score.mfu:.3f} above {cap['published_mfu']} + "
        f"{_WORKLOAD['margin']} ({cap['source']})"
    )
