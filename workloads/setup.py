"""How a model is trained: sequence, batch, precision, optimizer, recompute, SP (docs/models.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from phaze_common.errors import ConfigError
from workloads.framework import DEFAULT_FRAMEWORK, FrameworkProfile, framework_profile
from workloads.optimizer_state import (
    PART_FORMATS,
    OptimizerState,
    parse_optimizer_state,
    state_from_total,
)
from workloads.precision import DEFAULT_PRECISION, Recipe, recipe
from workloads.recompute_modules import MODULES_PREFIX, Recompute, modules_text, parse_modules

__all__ = ["Recompute", "Optimizer", "TrainingSetup", "optimizer_state_bytes"]

Optimizer = Literal["adam", "sgd"]
_OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")


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
    recompute : see :class:`Recompute`; ``"modules:layernorm+mla_up_proj"`` (text) sets
        :attr:`Recompute.MODULES` and ``recompute_modules``.
    recompute_modules : the op groups :attr:`Recompute.MODULES` rebuilds
        (:mod:`workloads.recompute_modules`); empty under any other mode.
    sequence_parallel : Megatron sequence parallelism (Korthikanti et al. 2022) on the
        tensor-parallel group.
    tokens_to_train : overrides the model's published token budget for whole-job figures.
    state_bytes_per_parameter : weights + gradients + optimizer state per parameter, a
        shorthand for the parts that sum to it (:func:`workloads.optimizer_state.state_from_total`);
        None: the sum of :attr:`state_parts`.
    optimizer_state : the parts to change from the recipe's, as text
        (``master=fp32,moments=bf16,grads=fp32``; :mod:`workloads.optimizer_state`).
    framework : the framework overlap profile (:mod:`workloads.framework`).
    precision : the precision recipe (:mod:`workloads.precision`): the format of the blocks'
        GEMMs, the stashed Linear inputs' bytes and, for a recipe other than bf16, the
        training state per parameter.
    expert_parallel : the expert-parallel degree an MoE block's op graphs are built for: a
        device runs ``experts / expert_parallel`` experts on ``expert_parallel`` times the
        rows each (the same FLOPs, but only its own experts' weights to read and, under a
        low-precision recipe, to cast). It must divide the experts; 1 for a dense model and
        where the placement searches the degree.
    allow_context_extension : the run trains past the model's context (RoPE scaling,
        position interpolation); a sequence longer than the context is refused otherwise
        (:meth:`workloads.model.Model.context_problem`).
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
    optimizer_state: str | None = None
    recompute_modules: frozenset[str] = frozenset()
    allow_context_extension: bool = False

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
        if not isinstance(self.allow_context_extension, bool):
            problems.append(
                f"allow_context_extension = {self.allow_context_extension!r} must be true or false"
            )
        if self.optimizer not in _OPTIMIZERS:
            problems.append(
                f"optimizer = {self.optimizer!r} must be one of {', '.join(_OPTIMIZERS)}"
            )
        problems += self._set_recompute()
        for f in ("tokens_to_train", "state_bytes_per_parameter"):
            value = getattr(self, f)
            if value is not None and (not isinstance(value, int) or value <= 0):
                problems.append(f"{f} = {value!r} must be a positive integer or unset")
        if not problems:
            try:
                parts = self.state_parts
            except ConfigError as e:
                problems.append(str(e))
        if not problems and self.global_batch % self.micro_batch:
            problems.append(
                f"global_batch = {self.global_batch} must be a multiple of "
                f"micro_batch = {self.micro_batch}"
            )
        if problems:
            raise ConfigError("training setup: " + "; ".join(problems))
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        object.__setattr__(self, "state_bytes_per_parameter", parts.state_bytes_per_parameter)

    def _set_recompute(self) -> list[str]:
        """Resolve ``recompute`` (a mode, or ``modules:`` text) and ``recompute_modules``."""
        text = self.recompute
        try:
            if isinstance(text, str) and text.startswith(MODULES_PREFIX):
                modules = parse_modules(text)
                object.__setattr__(self, "recompute", Recompute.MODULES)
            else:
                object.__setattr__(self, "recompute", Recompute(text))
                modules = frozenset(self.recompute_modules)
                if self.recompute is not Recompute.MODULES:
                    modules = frozenset()
                elif not modules:
                    return ["recompute = 'modules' needs recompute_modules (or modules:a+b)"]
                else:
                    parse_modules(modules_text(modules))
        except ConfigError as e:
            return [str(e)]
        except ValueError:
            allowed = ", ".join(r.value for r in Recompute if r is not Recompute.MODULES)
            return [f"recompute = {text!r} must be one of {allowed} or modules:<groups>"]
        object.__setattr__(self, "recompute_modules", modules)
        return []

    @property
    def recompute_mode(self) -> str:
        """The recompute mode as text: ``none``, ``selective``, ``full`` or ``modules:a+b``."""
        if self.recompute is Recompute.MODULES:
            return modules_text(self.recompute_modules)
        return self.recompute.value

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
    def default_state_parts(self) -> OptimizerState:
        """The state a recipe that lowers the GEMMs states (DeepSeek-V3's: bf16 moments),
        else :func:`optimizer_state_bytes`'s parts: weights at the activations' precision,
        fp32 gradients, an fp32 master copy when the weights are narrower, fp32 moments."""
        r, count = self.recipe, 2 if self.optimizer == "adam" else 1
        if not r.lowers_gemms:
            master = "fp32" if self.precision_bytes < 4 else "none"
            return OptimizerState(self.precision_bytes, master=master, moment_count=count)

        def named(part: str, nbytes: int) -> str:
            return next((f for f, b in PART_FORMATS[part].items() if b == nbytes), str(nbytes))

        return OptimizerState(
            r.weight_bytes,
            grads=named("grads", r.grad_bytes),
            master=named("master", r.master_bytes),
            moments=named("moments", r.moment_bytes // count),
            moment_count=count,
        )

    @property
    def state_parts(self) -> OptimizerState:
        """Weights, gradients, master copy and moments as trained: the recipe's, changed by
        ``optimizer_state`` or standing for ``state_bytes_per_parameter``; ConfigError when
        the two disagree or no parts make the total."""
        default = self.default_state_parts
        total = self.state_bytes_per_parameter
        if self.optimizer_state is None:
            return default if total is None else state_from_total(total, default)
        parts = parse_optimizer_state(self.optimizer_state, default)
        if total is not None and total != parts.state_bytes_per_parameter:
            raise ConfigError(
                f"state_bytes_per_parameter = {total} disagrees with optimizer_state = "
                f"{self.optimizer_state!r} ({parts.state_bytes_per_parameter} B); give one"
            )
        return parts

    @property
    def optimizer_bytes_per_parameter(self) -> int:
        """The optimizer's own state per parameter (master copy and moments), the part ZeRO
        stage 1 shards."""
        return self.state_parts.optimizer_bytes_per_parameter

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
