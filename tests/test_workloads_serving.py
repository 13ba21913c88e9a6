"""Serving workloads: KV-cache sizes, pass FLOPs and bytes against closed forms written out
here, the op graphs of prefill and decode passes, request batches, memory (docs/serving.md)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_workloads_hf_deepseek import DEEPSEEK_V2_LITE, DEEPSEEK_V3

from phaze_common.errors import ConfigError
from workloads import OpKind, get_model
from workloads.attention_ops import flash_scores
from workloads.hf import model_from_hf
from workloads.moe_ops import expert_tokens
from workloads.ops import CoreType, Op, OpGraph
from workloads.serving import (
    RequestBatch,
    ServingPass,
    kv_cache_bytes_per_sequence,
    kv_cache_bytes_per_token,
    kv_cache_elements_per_token,
    serving_settings,
)
from workloads.serving_costs import (
    attention_flops,
    kv_cache_capacity,
    pass_flops,
    pass_kv_read_bytes,
    pass_weight_read_bytes,
    weight_bytes_per_device,
)
from workloads.serving_ops import (
    check_serving,
    pass_workspace_bytes,
    peak_live_bytes,
    serving_layer_graph,
)

DENSE = ("llama2-7b", "llama2-70b", "llama3-8b", "falcon-40b", "gpt3-1.3b")
V2_LITE = model_from_hf(DEEPSEEK_V2_LITE, "deepseek-v2-lite")
V3 = model_from_hf(DEEPSEEK_V3, "deepseek-v3")


def llama_matmul_parameters(m, tp=1, active=False):
    """Matmul weights of one block of a model without biases and with RMSNorm (Llama,
    Mixtral): its parameters less its norms' weights (hidden each)."""
    return m.block_parameters(tp, active=active) - m.block_norms * m.hidden


def graph_matmul_flops(m, p, tp=1):
    g = serving_layer_graph(m, p, tp)
    return sum(2 * op.macs for layer in g.layers for op in g.op_graphs[layer.class_id].forward.ops)


# ---- KV cache ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*DENSE, "mixtral-8x7b"])
def test_kv_bytes_per_token_per_layer_are_two_kv_heads_head_dim_bytes(name):
    m = get_model(name)
    d = m.hidden // m.heads
    assert kv_cache_bytes_per_token(m, 1, layers=1) == 2 * m.kv_heads * d * 2
    assert kv_cache_bytes_per_token(m, 1) == m.layers * 2 * m.kv_heads * d * 2
    assert kv_cache_bytes_per_token(m, 1, "fp8", layers=1) == 2 * m.kv_heads * d


def test_gqa_splits_the_kv_heads_over_tensor_parallel_ranks():
    m = get_model("llama2-70b")  # 8 KV heads of 128
    for tp in (1, 2, 4, 8):
        assert kv_cache_bytes_per_token(m, tp, layers=1) == 2 * (8 // tp) * 128 * 2


@pytest.mark.parametrize("model", [V2_LITE, V3], ids=["v2-lite", "v3"])
def test_mla_caches_the_latent_and_the_rotary_key_on_every_rank(model):
    # DeepSeek-V2 §2.1.4: (d_c + d_h^R) elements per token per layer: 512 + 64
    assert kv_cache_elements_per_token(model) == 512 + 64
    for tp in (1, 8):
        assert kv_cache_bytes_per_token(model, tp, layers=1) == (512 + 64) * 2


@given(tokens=st.integers(1, 10_000), page=st.sampled_from([1, 8, 16, 64]))
def test_a_sequence_holds_whole_pages(tokens, page):
    m = get_model("llama2-7b")
    per_token = kv_cache_bytes_per_token(m, 1)
    paged = kv_cache_bytes_per_sequence(m, 1, tokens, page_tokens=page)
    assert paged % (page * per_token) == 0
    assert tokens * per_token <= paged < (tokens + page) * per_token


def test_the_default_page_is_vllms_sixteen_tokens():
    assert serving_settings().page_tokens == 16
    m = get_model("llama2-7b")
    assert kv_cache_bytes_per_sequence(m, 1, 17) == 32 * kv_cache_bytes_per_token(m, 1)


def test_capacity_is_the_memory_left_after_weights_and_workspace_in_pages():
    m, tp, hbm = get_model("llama2-70b"), 8, 80 * 2**30
    workspace = 1 << 30
    cap = kv_cache_capacity(m, tp, hbm, workspace)
    page_bytes = 16 * 80 * 2 * 1 * 128 * 2  # 16 tokens, 80 layers, K and V, 1 head of 128
    weights = 2 * (m.embedding_parameters(tp) + 80 * m.block_parameters(tp) + m.head_parameters(tp))
    assert cap.page_bytes == page_bytes and cap.weights_bytes == weights
    assert cap.pages == (int(0.9 * hbm) - weights - workspace) // page_bytes
    assert cap.sequences(2048 + 128) == cap.pages // math.ceil((2048 + 128) / 16)
    assert kv_cache_capacity(m, 1, hbm, workspace).pages == 0  # 138 GB of weights


# ---- FLOPs -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b", "llama3-8b", "mixtral-8x7b"])
@given(b=st.integers(1, 4), c=st.integers(1, 300), cached=st.integers(0, 500))
def test_prefill_flops_are_twice_params_times_tokens_plus_attention(name, b, c, cached):
    m = get_model(name)
    p = ServingPass.prefill(b, c, cached)
    d = m.hidden // m.heads
    # each new token i (0..c-1) attends the cached ones and the new ones up to itself
    scores = sum(cached + i + 1 for i in range(c))
    attention = m.layers * 2 * b * m.heads * scores * 2 * d
    blocks = m.layers * 2 * llama_matmul_parameters(m, active=True) * b * c
    head = 2 * m.hidden * m.vocab * b  # the LM head on each sequence's last token
    assert pass_flops(m, p) == blocks + attention + head
    assert attention_flops(m, p) * m.layers == attention


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b", "mixtral-8x7b"])
@given(b=st.integers(1, 8), context=st.integers(1, 4096))
def test_decode_flops_per_token(name, b, context):
    m = get_model(name)
    d = m.hidden // m.heads
    per_token = (
        2 * (m.layers * llama_matmul_parameters(m, active=True) + m.hidden * m.vocab)
        + m.layers * 2 * m.heads * context * 2 * d
    )
    assert pass_flops(m, ServingPass.decode(b, context)) == b * per_token


def test_mla_decode_attends_in_the_latent_space():
    m, b, context = V2_LITE, 3, 1000
    latent = 2 * 512 + 64  # q.c_KV over d_c + d_rope, then P.c_KV over d_c
    assert attention_flops(m, ServingPass.decode(b, context)) == 2 * b * m.heads * context * latent
    per_head = 128 + 64 + 128  # d_nope + d_rope keys, d_v values, up-projected in a prefill
    prefill = ServingPass.prefill(b, 1, context - 1, samples=False)
    assert prefill.is_decode  # one new token: the absorbed kernel
    assert attention_flops(m, ServingPass.prefill(b, 2)) == 2 * b * m.heads * 3 * per_head


@pytest.mark.parametrize("model", ["llama2-7b", "mixtral-8x7b", "gpt3-1.3b", V2_LITE])
@given(b=st.integers(1, 3), context=st.integers(1, 600))
def test_the_decode_graph_executes_the_closed_form_flops(model, b, context):
    m = get_model(model) if isinstance(model, str) else model
    p = ServingPass.decode(b, context)
    assert graph_matmul_flops(m, p) == pass_flops(m, p)


@pytest.mark.parametrize("model", ["llama2-7b", "falcon-40b", V2_LITE])
@given(b=st.integers(1, 2), c=st.integers(2, 300), cached=st.integers(0, 300))
def test_the_prefill_graph_adds_only_the_flash_kernels_tile_padding(model, b, c, cached):
    m = get_model(model) if isinstance(model, str) else model
    p = ServingPass.prefill(b, c, cached)
    executed = c * (cached + -(-flash_scores(c, True) // c))  # keys per query, rounded up
    exact = c * cached + c * (c + 1) // 2
    width = m.head_dim + m.value_head_dim
    padding = m.layers * 2 * b * m.heads * (executed - exact) * width
    assert graph_matmul_flops(m, p) == pass_flops(m, p) + padding


# ---- weights and cache a pass reads --------------------------------------------------------


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b"])
def test_decode_weight_gemms_read_every_block_weight_once(name):
    m, tp = get_model(name), 8 if name == "llama2-70b" else 1
    g = serving_layer_graph(m, ServingPass.decode(1, 100), tp)
    weights = sum(op.batch * op.k * op.n for op in g.op_graphs["block"].forward.ops if op.is_gemm)
    assert weights == llama_matmul_parameters(m, tp)


def test_mla_absorbed_decode_reads_the_up_projections_as_the_prefill_does():
    m, tp = V2_LITE, 1  # its first block is dense: every weight is read at any batch

    def block(p):
        return serving_layer_graph(m, p, tp).op_graphs["dense_block"].forward

    decode, prefill = block(ServingPass.decode(1, 100)), block(ServingPass.prefill(1, 100))
    assert {"q.absorb", "v.absorb"} <= {op.name for op in decode.ops}
    assert not {"k", "v"} & {op.name for op in decode.ops}
    # the decode's GEMMs are all weight GEMMs (absorbed ones per head); the prefill's weight
    # GEMMs are its plain ones (the attention is a fused kernel in both)
    decode_weights = sum(op.batch * op.k * op.n for op in decode.ops if op.is_gemm)
    prefill_weights = sum(op.k * op.n for op in prefill.ops if op.kind is OpKind.MATMUL)
    latent_norms = 512  # kv_lora_rank (V2-Lite projects queries from the block input)
    assert (
        decode_weights
        == prefill_weights
        == (m.block_parameters(tp, dense=True) - 2 * m.hidden - latent_norms)
    )


def test_moe_decode_at_batch_one_reads_only_the_routed_experts():
    m, tp = get_model("mixtral-8x7b"), 8
    p = ServingPass.decode(1, 100)
    assert sum(1 for n in expert_tokens(1, m) if n) == m.top_k
    per_expert = m.expert_parameters(tp) // m.experts
    blocks = m.layers * (m.block_parameters(tp) - (m.experts - m.top_k) * per_expert)
    head, rows = m.head_parameters(tp), m.hidden
    assert pass_weight_read_bytes(m, tp, p) == 2 * (blocks + head + rows)
    wide = ServingPass.decode(64, 100)  # 128 routed tokens reach every expert
    all_blocks = m.layers * m.block_parameters(tp)
    assert pass_weight_read_bytes(m, tp, wide) == 2 * (all_blocks + head + 64 * rows)


def test_the_decode_kernel_reads_the_whole_cache_and_the_step_writes_one_token():
    m, tp, b, context = get_model("llama2-70b"), 8, 4, 1000
    g = serving_layer_graph(m, ServingPass.decode(b, context), tp).op_graphs["block"].forward
    ops = {op.name: op for op in g.ops}
    per_token = kv_cache_bytes_per_token(m, tp, layers=1)
    kernel = ops["heads0.decode"]
    q_bytes = 2 * b * (m.heads // tp) * 128
    assert kernel.kind is OpKind.ATTENTION_FORWARD
    assert kernel.bytes_read == b * context * per_token + q_bytes
    assert kernel.m == m.heads // m.kv_heads  # the query heads of one KV head in its rows
    assert ops["kv.write"].bytes_written == b * per_token
    assert pass_kv_read_bytes(m, tp, ServingPass.decode(b, context)) == b * context * (
        80 * per_token
    )


def test_the_lm_head_runs_on_each_sequences_last_token_only_when_sampling():
    m = get_model("llama2-7b")
    head = serving_layer_graph(m, ServingPass.prefill(3, 500), 1).op_graphs["head"].forward
    logits = next(op for op in head.ops if op.name == "logits")
    assert (logits.m, logits.k, logits.n) == (3, m.hidden, m.vocab)
    chunk = ServingPass.prefill(3, 256, samples=False)
    assert [op.name for op in serving_layer_graph(m, chunk, 1).op_graphs["head"].forward.ops] == [
        "final_norm"
    ]


def test_a_chunk_reads_the_cached_chunks_keys():
    m = get_model("llama2-7b")
    g = serving_layer_graph(m, ServingPass.prefill(1, 256, cached=512), 1)
    kernels = [op for op in g.op_graphs["block"].forward.ops if op.kind is OpKind.ATTENTION_FORWARD]
    kv = sum(op.bytes_read for op in kernels) - 2 * 256 * m.hidden  # less the queries
    assert kv == (512 + 256) * kv_cache_bytes_per_token(m, 1, layers=1)


@pytest.mark.parametrize("name", ["gpt3-1.3b", "mixtral-8x7b", "bloom-176b"])
def test_inference_has_no_backward_pass_no_dropout_and_no_auxiliary_loss(name):
    m = get_model(name)
    g = serving_layer_graph(m, ServingPass.decode(2, 50), 1)
    for pg in g.op_graphs.values():
        assert pg.backward.ops == () and pg.recompute.ops == ()
        names = {op.name for op in pg.forward.ops}
        assert not any("dropout" in n or "aux_loss" in n for n in names)
    assert all(layer.activation_bytes == 0 for layer in g.layers)


# ---- workspace -----------------------------------------------------------------------------


def _op(name, written):
    return Op(name, OpKind.ELEMENTWISE, CoreType.VC, bytes_written=written)


def test_peak_live_bytes_frees_a_tensor_after_its_last_reader():
    # a -> b -> d, a -> c -> d: a lives until c has run
    g = OpGraph(
        ops=(_op("a", 10), _op("b", 20), _op("c", 40), _op("d", 5)),
        edges=((0, 1), (0, 2), (1, 3), (2, 3)),
    )
    assert peak_live_bytes(g, 100) == 100 + 10 + 20 + 40
    chain = OpGraph(ops=(_op("a", 10), _op("b", 20), _op("c", 40)), edges=((0, 1), (1, 2)))
    assert peak_live_bytes(chain, 0) == 20 + 40
    cache = OpGraph(ops=(_op("kv.write", 1000), _op("b", 1)), edges=((0, 1),))
    assert peak_live_bytes(cache, 0) == 1  # the cache is not workspace


def test_prefill_workspace_holds_the_ffn_intermediates():
    m, b, c = get_model("llama2-7b"), 1, 2048
    ws = pass_workspace_bytes(m, ServingPass.prefill(b, c), 1)
    f = 2 * b * c * m.ffn_hidden  # one (tokens x ffn) tensor in bf16
    assert 3 * f <= ws <= 3 * f + 4 * 2 * b * c * m.hidden


# ---- request batches and passes --------------------------------------------------------


@given(
    lengths=st.lists(
        st.tuples(st.integers(1, 200), st.integers(1, 60), st.integers(1, 5)),
        min_size=1,
        max_size=4,
    )
)
def test_the_decode_context_is_the_mean_over_every_decode_step(lengths):
    r = RequestBatch(tuple(lengths), batch=2)
    steps = [(i + j, w) for i, o, w in lengths for j in range(1, o)]  # step j attends i + j
    total = sum(w for _, w in steps)
    if not total:
        assert r.decode_context_tokens is None and r.decode_pass() is None
        return
    assert r.decode_context_tokens == pytest.approx(sum(c * w for c, w in steps) / total)
    assert r.decode_pass().context_tokens == round(r.decode_context_tokens)


def test_a_chunked_prefill_covers_the_prompt_and_samples_on_its_last_chunk():
    r = RequestBatch.of(1000, 10, batch=4)
    passes = r.prefill_passes(chunk_tokens=256)
    assert [(p.cached_tokens, p.new_tokens, p.samples) for p in passes] == [
        (0, 256, False),
        (256, 256, False),
        (512, 256, False),
        (768, 232, True),
    ]
    assert r.prefill_passes() == (ServingPass(4, 1000),)
    assert r.max_kv_tokens == 1009


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ServingPass(0, 10), "batch = 0"),
        (lambda: ServingPass(1, 10, -1), "cached_tokens = -1"),
        (lambda: ServingPass(1, 10, kv_format="fp4"), "unknown KV-cache format 'fp4'"),
        (lambda: ServingPass(2_000_000, 1), "batch = 2000000 is above the limit"),
        (lambda: RequestBatch(()), "non-empty list"),
        (lambda: RequestBatch(((10, 0, 1.0),)), "output_tokens = 0"),
        (lambda: RequestBatch(((10, 5, -1),)), "weight = -1"),
        (lambda: RequestBatch.of(10, 5, batch=0), "batch = 0"),
    ],
)
def test_bad_passes_and_batches_are_named(make, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        make()


def test_models_that_cannot_serve_a_pass_say_why():
    with pytest.raises(ConfigError, match="causal = false"):
        check_serving(get_model("bert-large"), ServingPass(1, 10), 1)
    with pytest.raises(ConfigError, match=r"tp = 3 .*\(1, 2, 4, 8, 16, 32, 64\)"):
        check_serving(get_model("llama2-70b"), ServingPass(1, 10), 3)
    with pytest.raises(ConfigError, match="context of 5000 tokens exceeds max_positions = 4096"):
        serving_layer_graph(get_model("llama2-7b"), ServingPass.decode(1, 5000), 1)


def test_weights_per_device_are_the_shards_of_every_layer():
    m = get_model("llama2-70b")
    assert weight_bytes_per_device(m, 1) == 2 * m.parameters
    assert weight_bytes_per_device(m, 8) == pytest.approx(2 * m.parameters / 8, rel=1e-3)
