"""What a new user typed and got a traceback or silent nonsense for: each is now one
``Error:`` line naming the problem, or the sensible default said aloud."""

from __future__ import annotations

import json

import pytest
from spaces import space_toml


def _one_error(r, *words: str, code: int = 1) -> str:
    """The output of a failed command: exactly one ``Error:`` line holding ``words``, nothing
    before it (no banner), no traceback."""
    assert r.exit_code == code, r.output
    assert isinstance(r.exception, SystemExit), r.output
    lines = r.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), r.output
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def _sweep(cli_run, tmp_path, *args):
    return cli_run("sweep", *args, "--out", tmp_path / "o", "--executor", "serial", "--no-report")


def test_a_sweep_over_a_short_context_model_fails_before_any_worker(cli_run, tmp_path):
    r = _sweep(cli_run, tmp_path, "--workload", "gpt2-xl", "--space", "tiny", "--devices", "8")
    _one_error(r, "workload 'gpt2-xl'", "seq_len = 2048", "max_positions = 1024")
    assert not (tmp_path / "o").exists()


def test_evaluate_clamps_the_default_sequence_to_the_context_and_says_so(cli_run):
    args = ["evaluate", "--workload", "bert-large", "--arch", "a100", "--devices", "1"]
    args += ["--global-batch", "1", "--strategy", "t=1,p=1,d=1,mbs=1,recompute=none", "--json"]
    r = cli_run(*args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["seq_len"] == 512
    assert "seq_len 512, the model's context" in r.stderr
    _one_error(cli_run(*args, "--seq-len", "1024"), "seq_len = 1024", "max_positions = 512")


def test_a_bad_space_name_fails_before_the_banner(cli_run, tmp_path):
    _one_error(_sweep(cli_run, tmp_path, "--space", "tinyy"), "unknown space 'tinyy'", "tiny")


def test_repeated_sweep_values_are_refused_naming_the_list(cli_run, tmp_path):
    config = tmp_path / "s.toml"
    config.write_text(
        '[sweep]\nworkloads = ["gpt3-125m", "gpt3-125m"]\nspace = "tiny"\nmicro_batches = [1, 1]\n'
        'hbm_gib = [16, 16]\nrecompute = ["none"]\nglobal_batch = 16\n'
    )
    line = _one_error(
        _sweep(cli_run, tmp_path, config),
        "workloads lists 'gpt3-125m' 2 times",
        "micro_batches lists 1 2 times",
        "hbm_gib lists 16.0 2 times",
    )
    assert "give each value once" in line


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"hbm_gib": "[4096]"}, ["no design left", "larger than area_fraction_max x budget"]),
        (
            {"budget_mm2": "2000", "num_tc": "[64]", "area_fraction_min": "0.3"},
            ["no design left", "smaller than area_fraction_min x budget = 0.3 x 2000 = 600 mm2"],
        ),
    ],
)
def test_an_empty_space_is_an_error_naming_the_rule(cli_run, tmp_path, change, words):
    text = space_toml("empty", num_tc=(2, 4), tc_rows=(64,))
    for key, value in change.items():
        text = (
            "\n".join(line for line in text.splitlines() if not line.startswith(f"{key} ="))
            + f"\n{key} = {value}\n"
        )
    path = tmp_path / "empty.toml"
    path.write_text(text.replace("keep_single_core = true", "keep_single_core = false"))
    _one_error(cli_run("space", "show", path), *words)
    _one_error(_sweep(cli_run, tmp_path, "--space", path), *words)


def test_state_bytes_must_be_a_sum_of_the_parts(cli_run):
    args = ["evaluate", "--workload", "gpt3-125m", "--arch", "a100", "--devices", "1"]
    args += ["--global-batch", "1", "--seq-len", "64"]
    args += ["--strategy", "t=1,p=1,d=1,mbs=1,recompute=none"]
    for value in ("1", "4", "15", "22"):
        _one_error(
            cli_run(*args, "--state-bytes", value),
            f"state_bytes_per_parameter = {value} is no sum of the parts",
            "at least 6 B per parameter",
        )
    r = cli_run(*args, "--state-bytes", "16", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    memory = doc["memory_breakdown"]
    assert memory["gradients_bytes"] > 0 and memory["weights_bytes"] > 0
    # the precision row reports the state the point ran with, not the recipe's default
    assert doc["precision"]["state_bytes_per_parameter"] == 16
    # ZeRO's 16 B: bf16 gradients, the one part changed from the recipe's 18 B
    assert doc["precision"]["optimizer_state"]["grads"] == "bf16"
    text = cli_run(*args, "--state-bytes", "20").output
    assert "20 B/parameter of state" in text, text


def test_a_model_s_sizes_and_options_are_bounded(cli_run, tmp_path):
    config = {"model_type": "gpt2", "n_layer": 10**12, "n_embd": 64, "n_head": 2}
    config |= {"n_inner": 256, "vocab_size": 128, "n_positions": 256}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    _one_error(
        cli_run("workloads", "show", path),
        "n_layer = 1000000000000 is above the limit of 10000",
    )
    r = cli_run("workloads", "show", "gpt3-125m", "--micro-batch", "100000000000000")
    assert r.exit_code == 2 and "1<=x<=1000000" in r.output


def test_place_names_a_one_byte_memory_as_it_is(cli_run, tmp_path):
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[1] / "examples/placement_gpt_small.json").read_text())
    doc["maxMemoryPerDevice"] = 1
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    _one_error(cli_run("place", path), "needs 104 MiB per device", "= 1 B", code=3)


def test_a_registry_in_another_encoding_is_one_error(cli_run, tmp_path):
    path = tmp_path / "runs.toml"
    path.write_text("[run.x]\n", encoding="utf-16-le")
    _one_error(cli_run("validate", "runs", "--registry", path), "runs.toml", "UTF-16-LE")


def test_a_gantt_file_in_no_image_format_is_refused_before_the_schedule(cli_run, tmp_path):
    path = tmp_path / "g.txt"
    args = ("schedule", "--workload", "gpt3-125m", "--arch", "a100", "--solver", "list")
    line = _one_error(cli_run(*args, "--gantt", path), f"--gantt {path}", ".png", ".svg", ".pdf")
    assert ".txt" in line and not path.exists()


def test_output_files_in_a_missing_directory_are_refused_and_nothing_is_created(
    cli_run, tmp_path, small_sweep
):
    _, sweep_dir = small_sweep
    missing = tmp_path / "missing"
    schedule = ("schedule", "--workload", "gpt3-125m", "--arch", "a100", "--solver", "list")
    for args, path, option in (
        ((*schedule, "--gantt", missing / "g.png"), missing / "g.png", "--gantt"),
        (("report", sweep_dir, "--out", missing / "r.html"), missing / "r.html", "--out"),
        (("report", sweep_dir, "--plots", missing / "plots"), missing / "plots", "--plots"),
        (("export", sweep_dir, "--csv", "--out", missing / "x.csv"), missing / "x.csv", "--out"),
    ):
        _one_error(cli_run(*args), f"cannot write {path}", f"directory {missing} does not exist")
        assert option in cli_run(*args).output
        assert not missing.exists()
    r = cli_run("sweep", "--executor", "serial", "--no-report", "--out", missing / "o")
    _one_error(r, f"cannot write {missing / 'o'}", "does not exist", "--out")
    assert not missing.exists()


def test_place_with_a_missing_file_exits_1_as_the_other_commands(cli_run, tmp_path):
    _one_error(cli_run("place", tmp_path / "none.json"), "none.json", "no such file")
    _one_error(cli_run("place", tmp_path), "is a directory")


@pytest.mark.parametrize(
    ("strategy", "extra", "words"),
    [
        ("t=1,sp=on", (), "sp=on needs t > 1 (t=1)"),
        ("tp=1,p=1,d=1,sp=true", (), "sp=true needs t > 1 (tp=1)"),
        ("t=1,p=1,d=1", ("--sp",), "--sp needs t > 1 (t=1)"),
    ],
)
def test_sequence_parallelism_without_tensor_parallelism_is_refused(
    cli_run, strategy, extra, words
):
    args = ["evaluate", "--workload", "gpt3-125m", "--arch", "a100", "--devices", "1"]
    args += ["--global-batch", "1", "--seq-len", "64", "--strategy", strategy, *extra]
    _one_error(cli_run(*args), words, "give t > 1 or sp=off")
    from placement import parse_strategy

    assert parse_strategy("t=2,sp=on").sp and parse_strategy("sp=on").sp  # t searched


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--ttft-ms", "100", "--weight-format", "fp8", "--batch", "4"],
            "--ttft-ms, --batch, --weight-format only apply to --mode serve; this sweep runs "
            "--mode train",
        ),
        (
            ["--mode", "serve", "--micro-batch", "2", "--recompute", "full", "--zero", "3"]
            + ["--precision", "fp8-te"],
            "--micro-batch, --recompute, --precision, --zero only apply to --mode train; this "
            "sweep runs --mode serve",
        ),
    ],
)
def test_sweep_options_of_the_other_mode_are_refused(cli_run, tmp_path, args, words):
    _one_error(_sweep(cli_run, tmp_path, *args), words)
    assert not (tmp_path / "o").exists()


def test_sweep_file_keys_of_the_other_mode_are_refused(cli_run, tmp_path):
    config = tmp_path / "s.toml"
    config.write_text('[sweep]\nmode = "serve"\nmicro_batches = [2]\nrecompute = ["full"]\n')
    _one_error(
        _sweep(cli_run, tmp_path, config),
        "s.toml [sweep]: micro_batches, recompute only apply to mode = 'train'",
        "this sweep has mode = 'serve'",
    )
    config.write_text('[sweep]\nmode = "train"\nbatches = [4]\n')
    _one_error(_sweep(cli_run, tmp_path, config), "batches only apply to mode = 'serve'")
    # a file that names no mode may be run in either (the quick sweep with --mode serve)
    config.write_text('[sweep]\nworkloads = ["gpt3-125m"]\nbatches = [4]\n')
    from phaze.config import load_sweep_config

    assert load_sweep_config(config).serving.batches == (4,)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--executor", "serial", "--jobs", "2"], "jobs = 2 needs executor 'local' or 'ray'"),
        (["--executor", "local", "--address", "auto"], "address = 'auto' is only used by"),
    ],
)
def test_executor_errors_come_before_the_sweep_plan(cli_run, tmp_path, args, words):
    r = cli_run("sweep", "--out", tmp_path / "o", "--no-report", *args)
    _one_error(r, words)  # nothing printed before it: no banner, no scoring defaults


def test_a_ray_sweep_without_ray_fails_before_the_plan(cli_run, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    r = cli_run("sweep", "--out", tmp_path / "o", "--no-report", "--executor", "ray")
    _one_error(r, "the ray executor needs the ray extra")


@pytest.mark.parametrize(
    "args",
    [
        ("sweep", "{d}"),
        ("arch", "show", "a100", "--cost-params", "{d}"),
        ("arch", "list", "--tech-params", "{d}"),
        ("validate", "megatron", "--calibration", "{d}"),
        ("validate", "runs", "--registry", "{d}"),
    ],
)
def test_a_directory_given_for_an_input_file_exits_1_naming_it(cli_run, tmp_path, args):
    _one_error(cli_run(*(a.format(d=tmp_path) for a in args)), f"{tmp_path}: is a directory")
