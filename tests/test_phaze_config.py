"""Sweep configuration: defaults, TOML loading and every error naming field and value."""

import pytest

from phaze.config import load_sweep_config, quick_sweep_config, sweep_config_from_mapping
from phaze.errors import ConfigError


def test_quick_sweep_loads():
    cfg = quick_sweep_config()
    assert cfg.space == "tiny"
    assert len(cfg.workloads) == 2
    assert cfg.scoring.pue == pytest.approx(1.10)


def test_hash_changes_with_content_only():
    a = sweep_config_from_mapping({"sweep": {"devices": 64}})
    b = sweep_config_from_mapping({"sweep": {"devices": 64}})
    c = sweep_config_from_mapping({"sweep": {"devices": 128}})
    assert a.config_hash() == b.config_hash() != c.config_hash()


def test_hbm_gib_to_bytes():
    cfg = sweep_config_from_mapping({"sweep": {"hbm_gib": [32, 80]}})
    assert cfg.hbm_bytes == (32 << 30, 80 << 30)


@pytest.mark.parametrize(
    "data, needles",
    [
        ({"sweep": {"devcies": 8}}, ["unknown key 'devcies'", "did you mean 'devices'"]),
        ({"sweep": {"devices": -4}}, ["devices = -4", "positive integer"]),
        ({"sweep": {"micro_batches": [1, 0]}}, ["micro_batches = [1, 0]"]),
        ({"sweep": {"recompute": ["some"]}}, ["recompute = ['some']", "none, selective, full"]),
        ({"solver": {"name": "cplex"}}, ["name = 'cplex'", "highs, cbc, gurobi, list"]),
        ({"scoring": {"pue": 0.5}}, ["[scoring]", "pue = 0.5"]),
        ({"swep": {}}, ["unknown key 'swep'"]),
    ],
)
def test_errors_name_field_value_and_rule(data, needles):
    with pytest.raises(ConfigError) as e:
        sweep_config_from_mapping(data, source="s.toml")
    for needle in needles:
        assert needle in str(e.value)


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError) as e:
        sweep_config_from_mapping({"sweep": {"devices": 0, "seq_len": "long"}})
    assert "devices = 0" in str(e.value) and "seq_len = 'long'" in str(e.value)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_sweep_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_sweep_config(bad)
