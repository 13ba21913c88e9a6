"""How a model is trained: sequence, batch, precision, optimizer, recompute, SP (docs/models.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from phaze_common.errors import ConfigError
from workloads.framework import DEFAULT_FRAMEWORK, FrameworkProfile, framework_profile
from workloads.precision import DEFAULT_PRECISION, Recipe, recipe

__all__ = ["Recompute", "Optimizer", "TrainingSetup", "optimizer_state_bytes"]

Optimizer = Literal["adam", "sgd"]
_OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022, §4)."""

    NONE = "none"  # stash every activation the backward pass needs
    SELECTIVE = "selective"  # drop and recompute the attention core (QK^T, softmax, dropout, AV)
    FULL = "full"  # stash only each block's input; recompute the whole block forward


def optimizer_state_bytes(optimizer: str, precision_bytes: int) -> int:
    """Bytes per parameter for weights + gradients + optimizer state in mixed precision.

    Weights in ``precision_bytes``; gradients accumulated in fp32 (4 B); an fp32 master copy
    (4 B) when the weights are narrower than fp32; Adam keeps two fp32 moments (8 B), SGD with
    momentum one (4 B). Adam with fp16/bf16 weights gives 2 + 4 + 4 + 8 = 18 B
    (Korthikanti et al. 2022 §2; Rajbhandari et al., ZeRO, 2020, counts 16 B with fp16
    gradients).

    >>> optimizer_state_bytes("adam", 2), optimizer_state_bytes("sgd", 4)
    (18, 12)
    """
    master = 4 if precision_bytes < 4 else 0
    moments = 8 if optimizer == "adam" else 4
    return precision_bytes + 4 + master + moments


@dataclass(frozen=True, slots=True)
class TrainingSetup:
    """One training configuration, independent of the hardware and of the parallel split.

    Parameters
    ----------
    seq_len : tokens per sequence.
    global_batch : sequences per optimizer step.
    micro_batch : sequences per micro-batch (per pipeline/data-parallel replica step).
    precision_bytes : bytes per weight and activation element (2 = fp16/bf16).
    optimizer : "adam" or "sgd" (with momentum).
    recompute : see :class:`Recompute`.
    sequence_parallel : Megatron sequence parallelism (Korthikanti et al. 2022) on the
        tensor-parallel group.
    tokens_to_train : overrides the model's published token budget for whole-job figures.
    state_bytes_per_parameter : weights + gradients + optimizer state per parameter; None
        derives it with :func:`optimizer_state_bytes` (18 for Adam in mixed precision); at
        least :attr:`least_state_bytes_per_parameter` (16).
    framework : the framework overlap profile (:mod:`workloads.framework`).
    precision : the precision recipe (:mod:`workloads.precision`): the format of the blocks'
        GEMMs, the stashed Linear inputs' bytes and, for a recipe other than bf16, the
        training state per parameter.
    expert_parallel : the expert-parallel degree an MoE block's op graphs are built for: a
        device runs ``experts / expert_parallel`` experts on ``expert_parallel`` times the
        rows each (the same FLOPs, but only its own experts' weights to read and, under a
        low-precision recipe, to cast). It must divide the experts; 1 for a dense model and
        where the placement searches the degree.
    """

    seq_len: int
    global_batch: int
    micro_batch: int = 1
    precision_bytes: int = 2
    optimizer: Optimizer = "adam"
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    tokens_to_train: int | None = None
    state_bytes_per_parameter: int | None = None
    framework: str = DEFAULT_FRAMEWORK
    precision: str = DEFAULT_PRECISION
    expert_parallel: int = 1

    def __post_init__(self) -> None:
        problems: list[str] = []
        try:
            r = self.recipe
        except ConfigError as e:
            problems.append(f"precision: {e}")
        else:
            if r.lowers_gemms and self.optimizer != "adam":
                problems.append(
                    f"precision = {self.precision!r} is an Adam recipe; optimizer = "
                    f"{self.optimizer!r} needs precision = {DEFAULT_PRECISION!r}"
                )
        try:
            self.profile  # noqa: B018 - the name must resolve
        except ConfigError as e:
            problems.append(f"framework: {e}")
        for f in ("seq_len", "global_batch", "micro_batch", "precision_bytes", "expert_parallel"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{f} = {value!r} must be a positive integer")
        if self.optimizer not in _OPTIMIZERS:
            problems.append(
                f"optimizer = {self.optimizer!r} must be one of {', '.join(_OPTIMIZERS)}"
            )
        try:
            object.__setattr__(self, "recompute", Recompute(self.recompute))
        except ValueError:
            allowed = ", ".join(r.value for r in Recompute)
            problems.append(f"recompute = {self.recompute!r} must be one of {allowed}")
        for f in ("tokens_to_train", "state_bytes_per_parameter"):
            value = getattr(self, f)
            if value is not None and (not isinstance(value, int) or value <= 0):
                problems.append(f"{f} = {value!r} must be a positive integer or unset")
        if not problems and self.state_bytes_per_parameter is not None:
            least = self.least_state_bytes_per_parameter
            if self.state_bytes_per_parameter < least:
                problems.append(
                    f"state_bytes_per_parameter = {self.state_bytes_per_parameter} must cover the "
                    f"weights ({self.precision_bytes} B), their gradients (at least "
                    f"{self.precision_bytes} B) and the {self.optimizer} optimizer's state "
                    f"({self.optimizer_bytes_per_parameter} B): at least {least} B per parameter "
                    f"({optimizer_state_bytes(self.optimizer, self.precision_bytes)} with fp32 "
                    "gradients, as Megatron-LM keeps them)"
                )
        if not problems and self.global_batch % self.micro_batch:
            problems.append(
                f"global_batch = {self.global_batch} must be a multiple of "
                f"micro_batch = {self.micro_batch}"
            )
        if problems:
            raise ConfigError("training setup: " + "; ".join(problems))
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        if self.state_bytes_per_parameter is None:
            lowered = self.recipe.lowers_gemms
            object.__setattr__(
                self,
                "state_bytes_per_parameter",
                self.recipe.state_bytes_per_parameter
                if lowered
                else optimizer_state_bytes(self.optimizer, self.precision_bytes),
            )

    @property
    def recipe(self) -> Recipe:
        """The precision recipe: the one place its name is looked up."""
        return recipe(self.precision)

    @property
    def saved_linear_input_bytes(self) -> int:
        """Bytes per element of a Linear input stashed for the backward pass: the
        recipe's for a recipe that lowers the GEMMs, else the activations' own."""
        r = self.recipe
        return r.saved_linear_input_bytes if r.lowers_gemms else self.precision_bytes

    @property
    def profile(self) -> FrameworkProfile:
        """The framework's overlap profile: the one place its name is looked up."""
        return framework_profile(self.framework)

    @property
    def optimizer_bytes_per_parameter(self) -> int:
        """The optimizer's own state per parameter: an fp32 master copy when the weights are
        narrower, and Adam's two fp32 moments (SGD's one), the part ZeRO stage 1 shards; a
        recipe that lowers the GEMMs gives its own (DeepSeek-V3: bf16 moments)."""
        if self.recipe.lowers_gemms:
            return self.recipe.optimizer_bytes_per_parameter
        master = 4 if self.precision_bytes < 4 else 0
        return master + (8 if self.optimizer == "adam" else 4)

    @property
    def least_state_bytes_per_parameter(self) -> int:
        """The least training state per parameter: the weights, gradients in the weights'
        format and the optimizer's state (16 B for Adam in mixed precision: Rajbhandari et al.,
        ZeRO, 2020, §3.1)."""
        return 2 * self.precision_bytes + self.optimizer_bytes_per_parameter

    @property
    def micro_batches(self) -> int:
        """Micro-batches per global batch (before dividing among data-parallel replicas)."""
        return self.global_batch // self.micro_batch

    @property
    def tokens_per_batch(self) -> int:
        return self.global_batch * self.seq_len

    def training_tokens(self, published: int | None) -> int:
        """Tokens of the whole job: this setup's override, else the model's ``published``."""
        tokens = self.tokens_to_train if self.tokens_to_train is not None else published
        if tokens is None:
            raise ConfigError(
                "training setup: tokens_to_train is unset and the model has no published "
                "token budget; set tokens_to_train"
            )
        return tokens
