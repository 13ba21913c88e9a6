"""docs/extending.md, "An engine policy", followed on a toy: a batching policy written from
the public pieces, priced before it is registered. Given the prompts per prefill step the
registered continuous policy takes, it prices a layout exactly as that policy does; with one
prompt per step its first tokens come sooner and it serves fewer tokens per second."""

from __future__ import annotations

from arch_space import Cluster, preset
from phaze.model.serving import ServeContext, pool_memory, prefill_cost
from phaze.model.serving_policies import BATCHING, BatchingPolicy, price_layout
from placement import parse_serving
from placement.serving_engine import prefill_batch, prefill_first
from workloads import get_model
from workloads.serving import RequestBatch, ServingPass


def prompts_per_step(k_of):
    """The walk-through's policy: continuous batching with ``k_of(batch, lengths)`` prompts
    in each prefill step."""

    def memory(model, acc, layout, ctx, admission, decode_pass):
        kw, k = ctx.requests.pass_formats(), k_of(layout.batch, ctx.lengths)
        passes = [
            decode_pass,
            *(ServingPass.prefill(k, i, **kw) for i, _, _ in ctx.requests.lengths),
        ]
        held = admission.in_flight_tokens(ctx.lengths)
        return (pool_memory(model, acc, layout.decode, passes, layout.batch, held, ctx),)

    def price(model, acc, layout, ctx, decode_pass, decode):
        dec, k = layout.decode, k_of(layout.batch, ctx.lengths)
        return prefill_first(
            decode,
            prefill_cost(model, acc, dec, k, ctx),
            batch=layout.batch,
            prefill_prompts=k,
            stages=dec.p,
            replicas=dec.d,
            replica_devices=dec.t * dec.p,
            lengths=ctx.lengths,
        )

    return BatchingPolicy("toy", memory, price)


_LAYOUT = parse_serving("t=1,p=1,d=1,ep=1,batch=64,chunk=off,batching=continuous")
_CTX = ServeContext(Cluster(devices=1), RequestBatch.of(512, 16))


def _priced(policy):
    return price_layout(get_model("llama2-7b"), preset("h100"), _LAYOUT, _CTX, policy)


def test_the_toy_with_continuous_prompts_per_step_is_the_continuous_policy():
    toy_engine, toy_memory = _priced(prompts_per_step(prefill_batch))
    engine, memory = _priced(BATCHING["continuous"])
    assert toy_engine == engine
    assert toy_memory == memory


def test_one_prompt_per_step_answers_sooner_and_serves_less():
    one, _ = _priced(prompts_per_step(lambda batch, lengths: 1))
    continuous, _ = _priced(None)  # the layout's own policy: continuous
    assert prefill_batch(_LAYOUT.batch, _CTX.lengths) == 4
    assert one.output_tokens_per_s < continuous.output_tokens_per_s
    assert one.ttft_s < continuous.ttft_s  # a prompt waits for no others in its step
