"""The training state per parameter as named parts with their formats (docs/models.md).

A data-parallel replica holds, per parameter: the model weights (at the precision recipe's
format), the main gradients (``grads``: fp32 as Megatron-LM's ``main_grad``, bf16, or
DeepSpeed's BF16 optimizer's bf16 gradients beside fp32 accumulators), the optimizer's master
copy (``master``: fp32, or none when the weights are updated in place) and its moments
(``moments``: Adam's two, SGD with momentum's one, each in fp32, bf16 or 8 bits).
Mixed-precision Adam keeps 2 + 4 + 4 + 8 = 18 B (Megatron-LM's distributed-optimizer table);
DeepSeek-V3 keeps bf16 moments beside fp32 master weights and gradients, 2 + 4 + 4 + 4 = 14 B
(arXiv:2412.19437, Sec. 3.3.3). The memory of each part and the HBM bytes of the optimizer
step (:attr:`OptimizerState.step_bytes_per_parameter`) follow from the formats.

The text form names the parts to change: ``master=fp32,moments=bf16,grads=fp32``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from phaze_common.errors import ConfigError

__all__ = ["OptimizerState", "PART_FORMATS", "parse_optimizer_state", "state_from_total"]

# Bytes per element of each part's formats. 8-bit moments: bitsandbytes' block-wise 8-bit
# Adam (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR 2022), one byte
# per state element (its fp32 scale per 2,048-element block, 0.002 B, is left out).
# "bf16+fp32" gradients: DeepSpeed's BF16 optimizer keeps the bf16 gradients the backward
# pass writes beside the fp32 accumulators it steps from (2 + 4 B).
PART_FORMATS: Final = MappingProxyType(
    {
        "master": MappingProxyType({"fp32": 4, "none": 0}),
        "moments": MappingProxyType({"fp32": 4, "bf16": 2, "8bit": 1}),
        "grads": MappingProxyType({"fp32": 4, "bf16": 2, "bf16+fp32": 6}),
    }
)
_PARTS: Final = tuple(PART_FORMATS)
# The order in which a total given alone changes the default parts, when several single
# changes reach it: the moments' format first (DeepSeek-V3's 14 B), then the gradients'.
_PREFERENCE: Final = ("moments", "grads", "master")


@dataclass(frozen=True, slots=True)
class OptimizerState:
    """Per-parameter training state: ``weight_bytes`` (the recipe's) and the formats of the
    gradients, master copy and ``moment_count`` moments (Adam 2, SGD with momentum 1)."""

    weight_bytes: int
    grads: str = "fp32"
    master: str = "fp32"
    moments: str = "fp32"
    moment_count: int = 2

    def __post_init__(self) -> None:
        for part in _PARTS:
            value, allowed = getattr(self, part), PART_FORMATS[part]
            if value not in allowed:
                raise ConfigError(
                    f"optimizer_state: {part} = {value!r} must be one of {', '.join(allowed)}"
                )

    @property
    def grad_bytes(self) -> int:
        return PART_FORMATS["grads"][self.grads]

    @property
    def master_bytes(self) -> int:
        return PART_FORMATS["master"][self.master]

    @property
    def moment_bytes(self) -> int:
        """All the moments together."""
        return self.moment_count * PART_FORMATS["moments"][self.moments]

    @property
    def accumulates_apart(self) -> bool:
        """Are the micro-batches' weight gradients accumulated into fp32 by a pass of their
        own after each backward pass? DeepSpeed's BF16 optimizer's ``bf16+fp32`` gradients
        are: the backward pass writes bf16 gradients afresh and ``update_hp_grads`` casts and
        adds them into the fp32 accumulators (the pipeline engine calls it after every
        micro-batch's backward pass: microsoft/DeepSpeed 56c522386
        deepspeed/runtime/pipe/engine.py l.746-760, runtime/bf16_optimizer.py l.383-399).
        fp32 ``main_grad`` is accumulated in the weight-gradient GEMM (Megatron's
        gradient-accumulation fusion) and bf16 gradients by autograd in place."""
        return self.grads == "bf16+fp32"

    @property
    def reduced_grad_bytes(self) -> int:
        """Bytes per gradient element the data-parallel reduction moves where the state fixes
        it, else 0 (the framework's or the weights' format): DeepSpeed's BF16 optimizer
        all-reduces its fp32 accumulators (``_bf16_reduce_grads`` reduces
        ``get_grads_for_reduction()``, the flat fp32 gradients: microsoft/DeepSpeed 56c522386
        deepspeed/runtime/pipe/engine.py l.250-267, runtime/bf16_optimizer.py l.402-404)."""
        return PART_FORMATS["grads"]["fp32"] if self.accumulates_apart else 0

    @property
    def optimizer_bytes_per_parameter(self) -> int:
        """The optimizer's own state (master copy and moments): what ZeRO stage 1 shards."""
        return self.master_bytes + self.moment_bytes

    @property
    def state_bytes_per_parameter(self) -> int:
        """Weights + gradients + master copy + moments."""
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes_per_parameter

    @property
    def step_bytes_per_parameter(self) -> int:
        """HBM bytes the optimizer step moves per parameter of a device's shard, each pass
        streaming its tensors once (Megatron-LM's Float16OptimizerWithFloat16Params): unscale
        and inf-check the gradients (read and write), their norm for clipping (read), the
        fused step (read the master copy, or the weights without one, the gradients and the
        moments; write the master copy or weights and the moments), copy the master copy to
        the model weights (read it, write them; none without a master copy), and zero the
        gradient buffer (write). fp32 parts: 8 + 4 + 16 + 12 + 6 + 4 = 50 B for Adam."""
        g, m, w = self.grad_bytes, self.master_bytes, self.weight_bytes
        stepped = m or w
        copy = m + w if m else 0
        return (
            2 * g + g + (stepped + g + self.moment_bytes) + (stepped + self.moment_bytes) + copy + g
        )

    @property
    def text(self) -> str:
        """The parts as the option spells them: ``master=fp32,moments=bf16,grads=fp32``."""
        return ",".join(f"{p}={getattr(self, p)}" for p in _PARTS)

    def parts_bytes(self) -> dict[str, int]:
        """Bytes per parameter of each part, named (they sum to the state)."""
        return {
            "weights": self.weight_bytes,
            "grads": self.grad_bytes,
            "master": self.master_bytes,
            "moments": self.moment_bytes,
        }


def parse_optimizer_state(text: str, default: OptimizerState) -> OptimizerState:
    """``default`` with the parts ``text`` names changed (``master=none,moments=8bit``);
    ConfigError naming the part, the value and what is allowed."""
    changes: dict[str, str] = {}
    for item in (s.strip() for s in text.split(",")):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in PART_FORMATS:
            raise ConfigError(
                f"optimizer_state: {item!r} must be part=format with part one of "
                f"{', '.join(_PARTS)} (e.g. master=fp32,moments=bf16,grads=fp32)"
            )
        if name in changes:
            raise ConfigError(f"optimizer_state: {name} is given twice")
        changes[name] = value
    return replace(default, **changes)


def _combinations(default: OptimizerState) -> list[OptimizerState]:
    """Every choice of part formats around ``default``, fewest changes first, then in
    :data:`_PREFERENCE` order."""
    states = [
        replace(default, **dict(zip(_PARTS, choice, strict=True)))
        for choice in itertools.product(*(PART_FORMATS[p] for p in _PARTS))
    ]

    def key(s: OptimizerState) -> tuple[int, tuple[bool, ...]]:
        changed = tuple(getattr(s, p) != getattr(default, p) for p in _PREFERENCE)
        return sum(changed), tuple(not c for c in changed)

    return sorted(states, key=key)


def state_from_total(total: int, default: OptimizerState) -> OptimizerState:
    """The parts a total per parameter (``--state-bytes``) stands for: the combination of
    formats summing to it that changes the fewest of ``default``'s parts (14 from Adam's
    18: bf16 moments; 16: bf16 gradients; 20: DeepSpeed's bf16 + fp32 gradients);
    ConfigError listing the totals the parts can make."""
    states = _combinations(default)
    for s in states:
        if s.state_bytes_per_parameter == total:
            return s
    made = sorted({s.state_bytes_per_parameter for s in states})
    raise ConfigError(
        f"state_bytes_per_parameter = {total} is no sum of the parts: the weights "
        f"({default.weight_bytes} B) and gradients, master copy and {default.moment_count} "
        f"moment(s) in the formats they allow make {', '.join(map(str, made))} B "
        f"(at least {made[0]} B per parameter); name them with optimizer_state"
    )
