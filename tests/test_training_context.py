"""Training past a model's context: refused with one error naming the workload, its context
and the sequence asked for, unless the run says it extends the context; a learned position
table is refused even then."""

from __future__ import annotations

import json

import pytest

from phaze_common.errors import ConfigError
from workloads import TrainingSetup, build_layer_graph, get_model

# Llama-shaped and small, with a context of 100 tokens (rotary positions).
_SHORT_LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 4,
    "max_position_embeddings": 100,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
}


def _one_error(r, *words: str) -> str:
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), r.output
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_evaluate_refuses_a_sequence_past_a_rotary_model_s_context(cli_run):
    args = ["evaluate", "--workload", "llama2-7b", "--arch", "a100", "--devices", "8"]
    r = cli_run(*args, "--global-batch", "8", "--seq-len", "8192")
    _one_error(
        r, "'llama2-7b'", "seq_len = 8192", "max_positions = 4096", "--allow-context-extension"
    )


def test_a_sweep_refuses_a_config_json_s_short_context_before_any_worker(cli_run, tmp_path):
    path = tmp_path / "short.json"
    path.write_text(json.dumps(_SHORT_LLAMA))
    out = tmp_path / "o"
    r = cli_run(
        "sweep", "--workload", path, "--space", "tiny", "--devices", "8", "--out", out,
        "--executor", "serial", "--no-report",
    )  # fmt: skip
    _one_error(r, "workload 'short'", "seq_len = 2048", "max_positions = 100")
    assert not out.exists()


def test_a_sweep_file_may_allow_the_extension(tmp_path):
    from phaze.config import load_sweep_config
    from phaze.sweep.planning import plan

    path = tmp_path / "short.json"
    path.write_text(json.dumps(_SHORT_LLAMA))
    config = tmp_path / "s.toml"
    text = f'[sweep]\nworkloads = ["{path}"]\nspace = "tiny"\ndevices = 8\nseq_len = 128\ntokens_to_train = 1e9\n'
    config.write_text(text)
    with pytest.raises(ConfigError, match="max_positions = 100"):
        plan(load_sweep_config(config))
    config.write_text(text + "allow_context_extension = true\n")
    assert plan(load_sweep_config(config))
    config.write_text(text + 'allow_context_extension = "yes"\n')
    with pytest.raises(ConfigError, match="allow_context_extension = 'yes' must be true or false"):
        load_sweep_config(config)


def test_the_flag_lets_a_rotary_model_train_past_its_context(cli_run):
    r = cli_run("workloads", "show", "llama2-7b", "--seq-len", "8192", "--json")
    _one_error(r, "seq_len = 8192", "max_positions = 4096")
    r = cli_run(
        "workloads", "show", "llama2-7b", "--seq-len", "8192", "--allow-context-extension", "--json"
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["seq_len"] == 8192


def test_a_learned_position_table_is_refused_even_with_the_flag(cli_run):
    for extra in ((), ("--allow-context-extension",)):
        r = cli_run("workloads", "show", "gpt2-xl", "--seq-len", "2048", *extra)
        line = _one_error(r, "'gpt2-xl'", "seq_len = 2048", "max_positions = 1024")
        assert "learned position table" in line and "cannot be extended" in line
    setup = TrainingSetup(seq_len=2048, global_batch=1, allow_context_extension=True)
    with pytest.raises(ConfigError, match="cannot be extended"):
        build_layer_graph(get_model("gpt2-xl"), setup, 1)


def test_schedule_takes_the_flag(cli_run):
    args = ["schedule", "--workload", "llama2-7b", "--arch", "a100", "--seq-len", "8192"]
    _one_error(cli_run(*args), "seq_len = 8192", "max_positions = 4096")


def test_the_api_refuses_and_allows_as_the_cli_does():
    import phaze
    from arch_space import Cluster, preset

    acc, cluster = preset("a100"), Cluster(devices=8)
    with pytest.raises(ConfigError, match="seq_len = 8192 exceeds max_positions = 4096"):
        phaze.evaluate("llama2-7b", acc, cluster, seq_len=8192, global_batch=8)
    setup = TrainingSetup(seq_len=8192, global_batch=1, allow_context_extension=True)
    assert build_layer_graph(get_model("llama2-7b"), setup, 8).tp == 8


def test_a_serving_sweep_refuses_the_training_flag(cli_run, tmp_path):
    r = cli_run(
        "sweep", "--mode", "serve", "--allow-context-extension", "--workload", "llama2-7b",
        "--space", "tiny", "--devices", "8", "--out", tmp_path / "o", "--executor", "serial",
        "--no-report",
    )  # fmt: skip
    _one_error(r, "--allow-context-extension only apply to --mode train")
