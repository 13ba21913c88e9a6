"""`phaze workloads list|show` through click's CliRunner."""

import json

import pytest

from workloads import get_model, model_names, to_hf_config

SHOW_KEYS = {
    "name",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "vocab",
    "seq_len",
    "parameters",
    "active_parameters",
    "model_flops_per_sequence",
    "hardware_flops_per_sequence",
    "activation_bytes_per_layer",
    "layer_graph",
    "op_counts",
}


def test_help(cli_run):
    for args in ((), ("list", "--help"), ("show", "--help")):
        r = cli_run("workloads", *args) if args else cli_run("workloads", "--help")
        assert r.exit_code == 0 and "Usage" in r.output


def test_list_table_and_json(cli_run):
    r = cli_run("workloads", "list")
    assert r.exit_code == 0
    assert all(name in r.output for name in model_names())
    r = cli_run("workloads", "list", "--json")
    doc = json.loads(r.output)
    assert [m["name"] for m in doc["models"]] == list(model_names())
    mixtral = next(m for m in doc["models"] if m["name"] == "mixtral-8x7b")
    assert mixtral["active_parameters"] == get_model("mixtral-8x7b").active_parameters


def test_show_json_has_the_issue_keys(cli_run):
    r = cli_run(
        "workloads", "show", "gpt3-175b", "--tp", "8", "--sp", "--recompute", "selective", "--json"
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert SHOW_KEYS <= set(doc)
    m, s = get_model("gpt3-175b"), 2048
    assert doc["seq_len"] == s and doc["parameters"] == m.parameters
    assert doc["activation_bytes_per_layer"] == 34 * s * m.hidden // 8  # Korthikanti
    assert doc["hardware_flops_per_sequence"] - doc["model_flops_per_sequence"] == (
        m.layers * 4 * s * s * m.hidden
    )
    lg = doc["layer_graph"]
    assert len(lg["nodes"]) == m.layers + 2 and len(lg["edges"]) == m.layers + 1
    assert lg["edges"][0]["bytes"] == 2 * s * m.hidden // 8
    assert doc["op_counts"]["block"]["forward"]["collective"] == 4


def test_show_table(cli_run):
    r = cli_run(
        "workloads", "show", "mixtral-8x7b", "--seq-len", "1024", "--micro-batch", "2", "--tp", "2"
    )
    assert r.exit_code == 0, r.output
    assert "block1..block32 (x32)" in r.output and "hardware FLOPs" in r.output


def test_show_config_json(tmp_path, cli_run):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(to_hf_config(get_model("llama3-8b"))))
    r = cli_run("workloads", "show", str(path), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["parameters"] == get_model("llama3-8b").parameters


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "gpt-9"), "unknown model 'gpt-9'"),
        (("show", "llama2-70b", "--tp", "3"), "tp = 3 must divide heads = 64"),
        (("show", "gpt3-175b", "--seq-len", "4096"), "seq_len = 4096 exceeds"),
    ],
)
def test_errors_exit_1_with_one_line(args, message, cli_run):
    r = cli_run("workloads", *args)
    assert r.exit_code == 1
    assert r.output.startswith("Error: ") and message in r.output
    assert "Traceback" not in r.output


def test_unknown_name_lists_known_models(cli_run):
    r = cli_run("workloads", "show", "nonsense")
    assert r.exit_code == 1 and "known: " in r.output and "llama3-405b" in r.output


def test_bad_option_is_usage_error(cli_run):
    assert cli_run("workloads", "show", "gpt3-175b", "--recompute", "half").exit_code == 2


SERVE = ("workloads", "show", "llama2-70b", "--serve", "--input-tokens", "2048")


def test_serve_json_gives_the_serving_workload(cli_run):
    r = cli_run(*SERVE, "--output-tokens", "128", "--batch", "4", "--tp", "8", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    m = get_model("llama2-70b")
    per_token = 80 * 2 * 1 * 128 * 2  # 80 blocks, K and V, one KV head of 128 per device
    pages = -(-(2048 + 128 - 1) // 16)
    assert doc["kv_cache_bytes_per_token_per_device"] == per_token
    assert doc["kv_cache_bytes_per_sequence_per_device"] == pages * 16 * per_token
    assert doc["kv_cache_bytes_per_sequence"] == 8 * pages * 16 * per_token
    assert doc["kv_cache_bytes_per_device"] == 4 * pages * 16 * per_token
    assert doc["decode"]["context_tokens"] == 2048 + 64
    assert doc["prefill_flops"] > 2 * m.parameters * 4 * 2048 * 0.99
    names = [op["name"] for op in doc["decode"]["block_ops"]]
    assert "heads0.decode" in names and "kv.write" in names and "fc2.allreduce" in names


def test_serve_table_shows_the_decode_block(cli_run):
    r = cli_run(*SERVE, "--output-tokens", "128", "--tp", "8")
    assert r.exit_code == 0, r.output
    for words in ("prefill FLOPs", "decode FLOPs / token", "KV cache / sequence", "heads0.decode"):
        assert words in r.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ((*SERVE,), 2, "--serve needs --input-tokens and --output-tokens"),
        (("workloads", "show", "llama2-7b", "--input-tokens", "5"), 2, "need --serve"),
        ((*SERVE, "--output-tokens", "8", "--tp", "3"), 1, "tp = 3 must be one of"),
        ((*SERVE, "--output-tokens", "4000"), 1, "exceeds max_positions = 4096"),
        (
            (
                "workloads",
                "show",
                "bert-large",
                "--serve",
                "--input-tokens",
                "5",
                "--output-tokens",
                "5",
            ),
            1,
            "causal decoder",
        ),
    ],
)
def test_serve_errors(args, code, message, cli_run):
    r = cli_run(*args)
    assert r.exit_code == code and message in r.output and "Traceback" not in r.output
