"""Selective recompute of named op groups, as Megatron-Core's ``--recompute-modules`` runs it
(docs/models.md).

A recompute mode is ``none``, ``selective`` (the attention core), ``full`` (the whole block),
or ``modules:`` and a ``+``-joined list of op groups (``modules:layernorm+mla_up_proj``).
The groups are Megatron-Core's (NVIDIA/Megatron-LM megatron/core/transformer/
transformer_config.py, ``TransformerConfig.recompute_modules``): ``core_attn``, ``mlp``,
``moe`` and ``shared_experts`` checkpoint normally (only the group's input is stashed, every
tensor inside it is rebuilt before the backward pass); ``moe_act``, ``layernorm`` and
``mla_up_proj`` discard their output and rebuild it from their stashed input. DeepSeek-V3
recomputes every RMSNorm and the MLA up-projections, and the SwiGLU of its MoE experts
(arXiv:2412.19437, Sec. 3.2.3, 3.3.3): ``modules:layernorm+mla_up_proj+moe_act``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from phaze_common.errors import ConfigError

__all__ = [
    "MODULES_PREFIX",
    "RECOMPUTE_MODULES",
    "RECOMPUTE_WORDS",
    "is_recompute_mode",
    "modules_text",
    "parse_modules",
    "recompute_problem",
    "repeats_attention_core",
    "repeats_dispatch",
]

#: The op groups, what each rebuilds before its backward pass (Megatron-Core's wording).
RECOMPUTE_MODULES: Final = MappingProxyType(
    {
        "core_attn": "the attention core (its inputs Q, K, V stashed)",
        "layernorm": "the block's norms (input_layernorm, pre_mlp_layernorm; output discarded)",
        "mla_up_proj": "MLA's latent norms, up-projections and RoPE (output discarded)",
        "mlp": "a dense block's MLP (its input stashed)",
        "moe": "the MoE layer: router, dispatch, experts, combine (its input stashed)",
        "moe_act": "the routed experts' activation function (output discarded)",
        "shared_experts": "the MoE layer's shared experts (their input stashed)",
    }
)
RECOMPUTE_WORDS: Final = ("none", "selective", "full")
MODULES_PREFIX: Final = "modules:"


def parse_modules(text: str) -> frozenset[str]:
    """The op groups of ``modules:a+b``; ConfigError naming what is wrong and what is allowed."""
    if not text.startswith(MODULES_PREFIX):
        raise ConfigError(_allowed(text))
    names = [n.strip() for n in text[len(MODULES_PREFIX) :].split("+")]
    unknown = [n for n in names if n not in RECOMPUTE_MODULES]
    if unknown or not names:
        raise ConfigError(
            f"recompute = {text!r}: {', '.join(map(repr, unknown))} must be among "
            f"{', '.join(RECOMPUTE_MODULES)} (joined by +, e.g. modules:layernorm+mla_up_proj)"
        )
    return frozenset(names)


def modules_text(modules: frozenset[str]) -> str:
    """``modules:`` and the groups in their canonical order: one spelling per mode."""
    return MODULES_PREFIX + "+".join(m for m in RECOMPUTE_MODULES if m in modules)


def recompute_problem(text: object) -> str | None:
    """Why ``text`` is no recompute mode, or None."""
    if text in RECOMPUTE_WORDS:
        return None
    if not isinstance(text, str) or not text.startswith(MODULES_PREFIX):
        return _allowed(text)
    try:
        parse_modules(text)
    except ConfigError as e:
        return str(e)
    return None


def is_recompute_mode(text: object) -> bool:
    return recompute_problem(text) is None


def repeats_attention_core(mode: str) -> bool:
    """Does the mode rebuild the attention core (so context parallelism's ring runs again)?"""
    if mode.startswith(MODULES_PREFIX):
        return "core_attn" in parse_modules(mode)
    return mode != "none"


def repeats_dispatch(mode: str) -> bool:
    """Does the mode rebuild the MoE layer (so its token all-to-all runs again)?"""
    if mode.startswith(MODULES_PREFIX):
        return "moe" in parse_modules(mode)
    return mode == "full"


def _allowed(text: object) -> str:
    return (
        f"recompute = {text!r} must be one of {', '.join(RECOMPUTE_WORDS)} or "
        f"modules:<groups joined by +> with groups among {', '.join(RECOMPUTE_MODULES)}"
    )
