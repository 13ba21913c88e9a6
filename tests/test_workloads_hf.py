"""Hugging Face config.json import: real configs, round trip, clear errors."""

import json
import re
from dataclasses import replace

import pytest

from phaze_common.errors import ConfigError
from workloads import get_model, load_hf_config, model_names, resolve_model, to_hf_config

# Architecture keys of published config.json files (Hugging Face Hub, main branches).
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
    "torch_dtype": "float16",
}
MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "sliding_window": None,
    "attention_dropout": 0.0,
}
MISTRAL_7B = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 32768,
    "hidden_act": "silu",
    "sliding_window": 4096,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
GPT2_XL = {
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 1600,
    "n_head": 25,
    "n_layer": 48,
    "n_positions": 1024,
    "vocab_size": 50257,
    "activation_function": "gelu_new",
    "n_inner": None,
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
}
OPT_350M = {
    "model_type": "opt",
    "hidden_size": 1024,
    "ffn_dim": 4096,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "max_position_embeddings": 2048,
    "vocab_size": 50272,
    "word_embed_proj_dim": 512,
    "do_layer_norm_before": False,
    "activation_function": "relu",
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "enable_bias": True,
}
BERT_LARGE = {
    "model_type": "bert",
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "vocab_size": 30522,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
}


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def same_architecture(a, b):
    return replace(a, name="x", source="", tokens_to_train=None) == replace(
        b, name="x", source="", tokens_to_train=None
    )


@pytest.mark.parametrize(
    ("config", "catalog_name", "parameters"),
    [
        (LLAMA2_7B, "llama2-7b", 6_738_415_616),
        (MIXTRAL, "mixtral-8x7b", 46_702_792_704),
        (GPT2_XL, "gpt2-xl", 1_557_611_200),
        (OPT_350M, "opt-350m", None),
        (BERT_LARGE, "bert-large", None),
    ],
)
def test_published_configs_import_as_the_catalog_models(tmp_path, config, catalog_name, parameters):
    folder = tmp_path / catalog_name
    folder.mkdir()
    m = load_hf_config(write(folder, config))
    assert m.name == catalog_name  # named after its directory
    assert resolve_model(str(folder)) == m
    assert same_architecture(m, get_model(catalog_name))
    if parameters:
        assert m.parameters == parameters


def test_mistral_7b(tmp_path):
    # 7,241,732,096 parameters (Hugging Face mistralai/Mistral-7B-v0.1 checkpoint)
    m = load_hf_config(write(tmp_path, MISTRAL_7B, "mistral-7b.json"))
    assert m.name == "mistral-7b" and m.kv_heads == 8 and m.ffn_kind == "swiglu"
    assert m.parameters == 7_241_732_096 and not m.dropout


# MaxText's synthetic models (its own configs: a ReLU FFN with rotary positions and RMSNorm)
# have no Hugging Face family to be written as
_NO_HF_FAMILY = tuple(n for n in model_names() if n.startswith("maxtext-"))


@pytest.mark.parametrize("name", [n for n in model_names() if n not in _NO_HF_FAMILY])
def test_round_trip_every_catalog_model(tmp_path, name):
    m = get_model(name)
    path = write(tmp_path, to_hf_config(m), f"{name}.json")
    back = load_hf_config(path)
    assert back.name == name  # from _name_or_path
    assert same_architecture(back, m)
    assert resolve_model(str(path)) == back


@pytest.mark.parametrize("name", _NO_HF_FAMILY)
def test_maxtext_models_are_refused_by_the_writer(name):
    with pytest.raises(ConfigError, match="no supported config.json family"):
        to_hf_config(get_model(name))


def test_unexpressible_model_is_refused():
    m = replace(get_model("llama2-7b"), positions="learned")
    with pytest.raises(ConfigError, match="can express positions = <PositionKind.LEARNED"):
        to_hf_config(m)


def test_malformed_json_names_line_and_column(tmp_path):
    path = write(tmp_path, '{"model_type": "gpt2",\n "n_layer": 4,,}')
    with pytest.raises(ConfigError, match=r"config.json: malformed JSON at line 2 column 15"):
        load_hf_config(path)


def test_missing_fields_are_all_named(tmp_path):
    data = {k: v for k, v in LLAMA2_7B.items() if k not in ("hidden_size", "vocab_size")}
    with pytest.raises(ConfigError) as e:
        load_hf_config(write(tmp_path, data))
    msg = str(e.value)
    assert "missing field 'hidden_size'" in msg and "missing field 'vocab_size'" in msg
    assert "model_type 'llama'" in msg


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "t5"}, "model_type = 't5' is not supported (supported: gpt2, opt"),
        ({"model_type": None}, "missing field 'model_type' is not supported"),
        ({"hidden_act": "gelu"}, "unsupported value hidden_act = 'gelu' (supported: silu"),
        ({"head_dim": 256}, "unsupported value head_dim = 256"),
        ({"num_attention_heads": 0}, "num_attention_heads = 0 must be a positive integer"),
        (
            {"num_key_value_heads": 5},
            "num_attention_heads = 32 must be a multiple of num_key_value_heads = 5",
        ),
        ({"hidden_size": 4100}, "hidden_size = 4100 must be a multiple of num_attention_heads"),
        ({"intermediate_size": 1.5}, "intermediate_size = 1.5 must be a positive integer"),
    ],
)
def test_unsupported_or_invalid_values(tmp_path, change, message):
    data = {**LLAMA2_7B, **change}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as e:
        load_hf_config(write(tmp_path, data))
    # in the file's words: no field of the internal Model
    assert not re.search(r"\b(hidden|ffn_hidden|heads|kv_heads|layers|vocab) = ", str(e.value))


def test_a_bad_size_is_named_once_by_its_key(tmp_path):
    """OPT derives the embedding width from hidden_size: one bad value, one problem."""
    data = {
        "model_type": "opt",
        "hidden_size": -768,
        "num_hidden_layers": 0,
        "num_attention_heads": 12,
        "ffn_dim": 3072,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
    }
    with pytest.raises(ConfigError) as e:
        load_hf_config(write(tmp_path, data))
    msg = str(e.value)
    assert "hidden_size = -768 must be a positive integer" in msg
    assert "num_hidden_layers = 0 must be a positive integer" in msg
    assert msg.count("-768") == 1 and "embedding_dim" not in msg


def test_not_an_object_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        load_hf_config(write(tmp_path, "[1, 2]"))
    with pytest.raises(ConfigError, match="no such file"):
        load_hf_config(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="no such file"):
        resolve_model(str(tmp_path / "nope.json"))


# config.json fields of each family (Hugging Face hub) and the checkpoint's parameter count
_FAMILIES = [
    (
        {
            "model_type": "bloom",
            "n_layer": 70,
            "n_head": 112,
            "hidden_size": 14336,
            "vocab_size": 250880,
        },
        176_247_271_424,  # bigscience/bloom
    ),
    (
        {
            "model_type": "bloom",
            "n_layer": 24,
            "n_head": 16,
            "hidden_size": 1024,
            "vocab_size": 250880,
        },
        559_214_592,  # bigscience/bloom-560m
    ),
    (
        {
            "model_type": "gpt_neox",
            "num_hidden_layers": 44,
            "num_attention_heads": 64,
            "hidden_size": 6144,
            "intermediate_size": 24576,
            "vocab_size": 50432,
            "max_position_embeddings": 2048,
            "rotary_pct": 0.25,
            "hidden_act": "gelu_fast",
        },
        20_554_567_680,  # EleutherAI/gpt-neox-20b
    ),
    (
        {
            "model_type": "qwen2",
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "vocab_size": 152064,
            "max_position_embeddings": 131072,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
        7_615_616_512,  # Qwen/Qwen2-7B
    ),
    (
        {
            "model_type": "phi3",
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "vocab_size": 32064,
            "max_position_embeddings": 4096,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
        3_821_079_552,  # microsoft/Phi-3-mini-4k-instruct
    ),
]


@pytest.mark.parametrize(("config", "published"), _FAMILIES)
def test_families_match_their_published_parameter_counts(tmp_path, config, published):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert load_hf_config(path).parameters == pytest.approx(published, rel=0.001)


def test_an_unsupported_model_type_names_the_supported_ones(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(ConfigError, match="mamba.*supported: .*qwen2.*bloom.*gpt_neox"):
        load_hf_config(path)
