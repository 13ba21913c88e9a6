"""Sweep configuration: defaults, TOML loading and every error naming field and value."""

import shutil
from importlib import resources
from pathlib import Path

import pytest

import phaze.config
from phaze.config import (
    MODEL_PACKAGES,
    PRESENTATION,
    SERVE_OBJECTIVES,
    SweepConfig,
    load_sweep_config,
    model_digest,
    quick_sweep_config,
    sweep_config_from_mapping,
)
from phaze_common.errors import ConfigError


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


def test_hash_changes_with_the_models_code(monkeypatch):
    """The same settings under changed model code hash differently, so a sweep directory is
    not resumed by a Phaze that would compute other numbers."""
    cfg = quick_sweep_config()
    before = cfg.config_hash()
    assert len(model_digest()) == 16 and model_digest() == model_digest()
    monkeypatch.setattr(phaze.config, "model_digest", lambda: "0" * 16)
    assert cfg.config_hash() != before


def test_the_sections_keep_the_hash_of_the_flat_settings(monkeypatch):
    """The hash is of every setting by its key, whichever section holds it: the values below
    are those of the configuration when it was one flat record, so a sweep directory made
    then still resumes (the models' code held fixed)."""
    monkeypatch.setattr(phaze.config, "model_digest", lambda: "fixed")
    quick = quick_sweep_config()
    serve = quick.with_settings(mode="serve", objectives=SERVE_OBJECTIVES)
    at_rate = quick.with_settings(mode="serve", rate=3.0, pairs=True, seed=4)
    hashes = [c.config_hash() for c in (quick, serve, at_rate, SweepConfig())]
    assert hashes == [
        "0c3769284bae911d",
        "f35680b9782b0ec0",
        "146115f312d33715",
        "1fa46f6af9c0d1c9",
    ]


def test_a_configuration_round_trips_through_its_settings():
    cfg = quick_sweep_config().with_settings(mode="serve", rate=2.0, seq_len=4096)
    settings = cfg.as_dict()
    del settings["solver"], settings["scoring"]
    assert SweepConfig.of(**settings, solver=cfg.solver, scoring=cfg.scoring) == cfg
    assert (cfg.training.seq_len, cfg.serving.rate, cfg.mode) == (4096, 2.0, "serve")


def test_the_model_digest_reads_every_model_file_and_no_cache(tmp_path):
    """Data files count (a changed catalog changes results); compiled caches do not."""
    pkg = tmp_path / "fakemodel"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "table.json").write_text("[1]")

    def digest():
        phaze.config.tree_digest.cache_clear()
        return phaze.config.tree_digest((("fakemodel", pkg),))

    try:
        first = digest()
        (pkg / "__pycache__").mkdir()
        (pkg / "__pycache__" / "x.pyc").write_bytes(b"\0")
        assert digest() == first
        (pkg / "data" / "table.json").write_text("[2]")
        assert digest() != first
    finally:
        phaze.config.tree_digest.cache_clear()


@pytest.fixture(scope="module")
def model_copy(tmp_path_factory):
    """A copy of the installed model packages, to edit."""
    root = tmp_path_factory.mktemp("models")
    for name in MODEL_PACKAGES:
        src = Path(str(resources.files(name)))
        shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _copy_digest(root: Path) -> str:
    dirs = tuple((name, root / name) for name in MODEL_PACKAGES)
    phaze.config.tree_digest.cache_clear()
    try:
        return phaze.config.tree_digest(dirs, PRESENTATION)
    finally:
        phaze.config.tree_digest.cache_clear()


@pytest.mark.parametrize(
    "rel",
    [
        "phaze/model/context.py",
        "phaze/model/knob_search.py",
        "phaze/model/run.py",
        "phaze/model/pipeline.py",
        "phaze/sweep/run.py",
        "phaze/data/quick.toml",
        "phaze_common/units.py",
        "workloads/data/models.toml",
        "arch_space/data/tech.toml",
        "ilp/timing.py",
        "placement/dp.py",
    ],
)
def test_editing_any_model_file_changes_the_digest(model_copy, rel):
    """Every module and data file of the model packages counts, listed nowhere: a resumed
    sweep never mixes points of an older model with new ones."""
    path = model_copy / rel
    assert path.is_file(), rel
    before = _copy_digest(model_copy)
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"\n# edited\n")
        assert _copy_digest(model_copy) != before
    finally:
        path.write_bytes(original)
    assert _copy_digest(model_copy) == before


def test_a_new_model_module_changes_the_digest_and_a_cli_module_does_not(model_copy):
    before = _copy_digest(model_copy)
    assert before == model_digest()  # the copy is what the sweep hashes
    cli = model_copy / "phaze" / "cli" / "sweep_cmd.py"
    original = cli.read_bytes()
    new = model_copy / "placement" / "new_rule.py"
    try:
        cli.write_bytes(original + b"\n# edited\n")
        (model_copy / "phaze" / "cli" / "new_cmd.py").write_text("")
        assert _copy_digest(model_copy) == before
        new.write_text("")
        assert _copy_digest(model_copy) != before
    finally:
        cli.write_bytes(original)
        (model_copy / "phaze" / "cli" / "new_cmd.py").unlink()
        new.unlink(missing_ok=True)


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


def test_problems_of_every_section_come_together_each_prefixed_once():
    data = {
        "sweep": {"devices": 10**8, "global_batch": 10**9, "micro_batches": [1, 2 * 10**6]},
        "solver": {"name": "cplex"},
        "scoring": {"grid_region": "mars", "pue": 0.5, "utilisation": "all"},
    }
    with pytest.raises(ConfigError) as e:
        sweep_config_from_mapping(data, source="s.toml")
    problems = str(e.value).split("; ")
    assert problems == [
        "s.toml [sweep]: devices = 100000000 is above the limit of 1000000 "
        "(more than any machine has)",
        "s.toml [sweep]: global_batch = 1000000000 is above the limit of 1000000 "
        "(more than any machine has)",
        "s.toml [sweep]: micro_batches = 2000000 is above the limit of 1000000 "
        "(more than any machine has)",
        "s.toml [solver]: name = 'cplex' must be one of highs, cbc, gurobi, list",
        "s.toml [scoring]: utilisation = 'all' must be a number",
        "s.toml [scoring]: grid_region: unknown grid region 'mars' (known: china, eu, "
        "france, germany, iceland, india, taiwan, us, world)",
        "s.toml [scoring]: pue = 0.5 must be a finite number in [1, 4]",
    ]


def test_sizes_at_the_limits_are_accepted():
    cfg = sweep_config_from_mapping(
        {"sweep": {"devices": 10**6, "global_batch": 10**6, "micro_batches": [10**6]}}
    )
    assert (cfg.devices, cfg.training.global_batch, cfg.training.micro_batches) == (
        10**6,
        10**6,
        (10**6,),
    )


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_sweep_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_sweep_config(bad)
