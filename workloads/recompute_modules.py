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

from enum import StrEnum
from types import MappingProxyType
from typing import Final

from phaze_common.errors import ConfigError
from workloads.model import Model

__all__ = [
    "MODULES_PREFIX",
    "RECOMPUTE_MODULES",
    "RECOMPUTE_WORDS",
    "Recompute",
    "is_recompute_mode",
    "modules_text",
    "op_groups",
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


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022, §4): the one list of the modes."""

    NONE = "none"  # stash every activation the backward pass needs
    SELECTIVE = "selective"  # drop and recompute the attention core (QK^T, softmax, dropout, AV)
    FULL = "full"  # stash only each block's input; recompute the whole block forward
    MODULES = "modules"  # the named op groups, spelled modules:a+b


#: The modes named by one word (the op groups are spelled ``modules:a+b``)
RECOMPUTE_WORDS: Final = tuple(m.value for m in Recompute if m is not Recompute.MODULES)
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


_NORMS = frozenset({"ln1", "ln2", "attn.post_norm", "mlp.post_norm"})
_MLA_UP = frozenset({"q.down.norm", "kv.down.norm", "q", "k", "v", "q.rope", "k.rope"})
_FFN_OPS = frozenset({"fc1", "fc1.gate", "fc1.up", "fc1.act", "fc2"})
_MOE_OPS = ("router", "dispatch", "combine", "expert", "shared.")


def op_groups(name: str, model: Model, core_prefix: str) -> frozenset[str]:
    """The recompute groups (:mod:`workloads.recompute_modules`) a block's op belongs to,
    by its name: an MoE expert's activation is in ``moe_act`` and ``moe``, a shared
    expert's ops in ``shared_experts`` and ``moe`` (``core_prefix``: the attention core's op
    names, :data:`workloads.attention_ops.CORE_PREFIX`); empty for the projections, collectives
    and residual adds no group rebuilds."""
    if name.startswith(core_prefix):
        return frozenset({"core_attn"})
    if name in _NORMS:
        return frozenset({"layernorm"})
    if model.mla and name in _MLA_UP:
        return frozenset({"mla_up_proj"})
    local = name.partition(".")[2] if name.startswith(("expert", "shared.")) else name
    ffn = local in _FFN_OPS or local == str(model.ffn_kind)
    if name.startswith("shared."):
        return frozenset({"shared_experts", "moe"})
    if name.startswith("expert"):
        act = local in ("fc1.act", str(model.ffn_kind))
        return frozenset({"moe_act", "moe"} if act else {"moe"})
    if name.startswith(_MOE_OPS):
        return frozenset({"moe"})
    return frozenset({"mlp"}) if ffn else frozenset()
