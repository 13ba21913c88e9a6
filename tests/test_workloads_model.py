"""Model, TrainingSetup and catalog: exact parameter counts and input validation."""

from dataclasses import replace

import pytest

from phaze_common.errors import ConfigError
from workloads import (
    Model,
    Recompute,
    TrainingSetup,
    build_layer_graph,
    get_model,
    model_names,
    optimizer_state_bytes,
    resolve_model,
)

# Published parameter counts: (catalog name, total, active, source).
PUBLISHED = [
    ("gpt3-175b", 175e9, 175e9, "Brown et al. 2020, Table 2.1"),
    ("llama3-405b", 405e9, 405e9, "Llama Team 2024, Table 3"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, "Jiang et al. 2024, §2"),
    ("megatron-1t", 1008.0e9, 1008.0e9, "Narayanan et al. 2021, Table 1"),
    ("megatron-145.6b", 145.6e9, 145.6e9, "Narayanan et al. 2021, Table 1"),
]


@pytest.mark.parametrize(("name", "total", "active", "source"), PUBLISHED)
def test_parameter_counts_match_published_within_1_percent(name, total, active, source):
    m = get_model(name)
    assert m.parameters == pytest.approx(total, rel=0.01), source
    assert m.active_parameters == pytest.approx(active, rel=0.01), source


def test_llama2_70b_parameters_exact():
    # The paper's "70B" is nominal (1.5% high); the released checkpoint holds exactly
    # 68,976,648,192 parameters (Hugging Face meta-llama/Llama-2-70b-hf safetensors index).
    assert get_model("llama2-70b").parameters == 68_976_648_192


def test_hf_checkpoint_counts_exact():
    # Counts of the Hugging Face checkpoints (model.num_parameters()):
    assert get_model("gpt2-xl").parameters == 1_557_611_200  # GPT2LMHeadModel, tied
    assert get_model("llama2-7b").parameters == 6_738_415_616
    assert get_model("llama3-8b").parameters == 8_030_261_248
    assert get_model("mixtral-8x7b").parameters == 46_702_792_704
    # 70 blocks of 12h^2 + 13h, the padded 250,880-row tied table, embedding and final norms
    assert get_model("bloom-176b").parameters == 176_247_271_424  # bigscience/bloom


def test_gpt_parameters_closed_form():
    # 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) + final norm 2h (Narayanan et al. 2021 §5.1)
    m = get_model("megatron-1t")
    n_l, h, V, s = m.layers, m.hidden, m.vocab, m.max_positions
    assert m.parameters == 12 * n_l * h * h + 13 * n_l * h + (V + s) * h + 2 * h


def test_tensor_parallel_shards_cover_the_model():
    m = get_model("llama2-70b")
    for t in (2, 4, 8):
        sharded = m.block_parameters(t) * t
        # only the two RMSNorm weights are replicated in a bias-free Llama block
        assert sharded - m.block_parameters() == (t - 1) * 2 * m.hidden


def test_catalog_has_every_model_of_the_issue():
    names = set(model_names())
    wanted = {"gpt2-xl", "bert-large", "mixtral-8x7b"}
    wanted |= {f"gpt3-{s}" for s in ("125m", "350m", "760m", "1.3b", "2.7b", "6.7b", "13b", "175b")}
    wanted |= {f"opt-{s}" for s in ("350m", "1.3b", "6.7b", "13b", "30b", "66b", "175b")}
    wanted |= {"llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b"}
    wanted |= {f"megatron-{s}" for s in ("1.7b", "3.6b", "7.5b", "18.4b", "39.1b", "76.1b")}
    wanted |= {f"megatron-{s}" for s in ("145.6b", "310.1b", "529.6b", "1t")}
    wanted |= {f"korthikanti-{s}" for s in ("22b", "175b", "530b", "1t")}
    assert wanted <= names
    for name in names:
        assert get_model(name).source, name
    assert get_model("gpt3-175b").tokens_to_train == 300_000_000_000
    assert get_model("llama2-7b").tokens_to_train == 2_000_000_000_000


def test_unknown_model_names_the_nearest():
    with pytest.raises(ConfigError, match=r"unknown model 'gpt3-17b'.*did you mean gpt3-175b"):
        get_model("gpt3-17b")
    with pytest.raises(ConfigError, match="known: .*llama2-7b"):
        resolve_model("nonsense")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"heads": 0}, "heads = 0 must be a positive integer"),
        ({"hidden": -8}, "hidden = -8 must be a positive integer"),
        ({"layers": 2.5}, "layers = 2.5 must be a positive integer"),
        ({"kv_heads": 5}, "heads = 96 must be a multiple of kv_heads = 5"),
        ({"heads": 7}, "hidden = 12288 must be a multiple of heads = 7"),
        ({"top_k": 2}, "top_k = 2 must be at most experts = 1"),
        ({"ffn_kind": "tanh"}, "ffn_kind = 'tanh' must be one of gelu, relu, swiglu"),
        ({"causal": "yes"}, "causal = 'yes' must be true or false"),
    ],
)
def test_model_validation_names_field_value_and_rule(change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        replace(get_model("gpt3-175b"), **change)


def test_model_reports_all_problems_at_once():
    with pytest.raises(ConfigError) as e:
        Model("bad", layers=0, hidden=0, heads=1, ffn_hidden=-1, vocab=10)
    assert all(f in str(e.value) for f in ("layers = 0", "hidden = 0", "ffn_hidden = -1"))


def test_from_mapping_rejects_unknown_keys_with_hint():
    with pytest.raises(ConfigError, match=r"unknown key\(s\) 'hiden' \(did you mean 'hidden'\?\)"):
        Model.from_mapping({"name": "x", "hiden": 4})
    with pytest.raises(ConfigError, match="missing key"):
        Model.from_mapping({"name": "x"})


def test_setup_defaults_and_state_bytes():
    s = TrainingSetup(seq_len=2048, global_batch=512, micro_batch=2)
    assert s.state_bytes_per_parameter == 18  # docs/models.md: Adam mixed precision
    assert s.micro_batches == 256 and s.recompute is Recompute.NONE
    assert TrainingSetup(2048, 8, optimizer="sgd").state_bytes_per_parameter == 14
    assert TrainingSetup(2048, 8, state_bytes_per_parameter=16).state_bytes_per_parameter == 16
    assert optimizer_state_bytes("adam", 4) == 16
    assert TrainingSetup(2048, 8, recompute="full").recompute is Recompute.FULL


def test_setup_validation():
    with pytest.raises(ConfigError, match="seq_len = 0 must be a positive integer"):
        TrainingSetup(0, 8)
    with pytest.raises(ConfigError, match="global_batch = 6 must be a multiple of micro_batch = 4"):
        TrainingSetup(128, 6, micro_batch=4)
    with pytest.raises(
        ConfigError, match="recompute = 'some' must be one of none, selective, full"
    ):
        TrainingSetup(128, 4, recompute="some")
    with pytest.raises(ConfigError, match="optimizer = 'lamb'"):
        TrainingSetup(128, 4, optimizer="lamb")


def test_training_tokens():
    s = TrainingSetup(2048, 8)
    assert s.training_tokens(get_model("gpt3-175b").tokens_to_train) == 300_000_000_000
    assert TrainingSetup(2048, 8, tokens_to_train=10).training_tokens(None) == 10
    with pytest.raises(ConfigError, match="tokens_to_train is unset"):
        s.training_tokens(get_model("mixtral-8x7b").tokens_to_train)


def test_alibi_biases_the_scores_with_no_parameters():
    bloom = get_model("bloom-176b")
    unfused = TrainingSetup(seq_len=2048, global_batch=8, framework="megatron-2022")
    lg = build_layer_graph(bloom, unfused, 4)
    block = next(x for x in lg.layers if x.kind == "block")
    fwd = lg.op_graphs[block.class_id].forward
    alibi = [op for op in fwd.ops if op.name.endswith(".alibi")]
    heads, s = 112 // 4, 2048
    assert alibi and sum(op.flops for op in alibi) == heads * s * s  # one add per score
    learned = replace(bloom, positions="learned")
    assert learned.parameters - bloom.parameters == 2048 * 14336  # ALiBi holds no table
