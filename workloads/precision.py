"""Precision recipes: which GEMMs run in which number format, the quantize ops a recipe adds,
and the bytes of every persistent tensor (docs/models.md).

A recipe (``workloads/data/precision_recipes.toml``, ``[model.*]``) names the format of a
transformer block's Linear GEMMs (forward, input gradient and weight gradient), the bytes per
parameter of the weights, main gradients, fp32 master copy and optimizer moments, and the
bytes of each Linear input stashed for the backward pass. :func:`apply_precision` rewrites a
block's op graphs for it: each low-precision GEMM reads its operands at one byte per element
and takes the recipe's format on the tensor cores, and a quantize op on the vector cores
(amax, scale and cast of the high-precision operand, writing the fp8 copies) runs before the
forward GEMM (input and weight; GEMMs reading one input share its cast) and before the
input-gradient GEMM (output gradient); the weight gradient reads copies those two made. A recipe that caches its weight copies
(``caches_weight_copies``: Transformer Engine under Megatron-Core) casts the weights once per
iteration instead (:attr:`Recipe.weight_refresh_bytes_per_parameter`, priced beside the
optimizer step), so its per-micro-batch forward and recomputed GEMMs cast only their input. DeepSeek-V3's blockwise recipe also promotes the
partial sums to fp32 on the vector cores every 128 elements of K, as a fused epilogue of the
GEMM. The embedding, the output head, attention, norms and MoE gating keep bf16, as both
recipes' sources state.

A serving recipe (``use = "serving"``) stores the weights in the GEMM format: its forward
GEMMs cast only their input, the weights being read as they are stored (``weight_bits`` per
element and a ``weight_scale_bytes`` scale per ``weight_scale_group_elements`` weights, or
per output channel), the input at ``input_bits`` and its block scales (NVFP4: 4 bits and one
fp8 scale per 16 elements). A weight-only recipe (int8, int4: its GEMM format bf16, its
weights narrower) dequantizes the weights inside the GEMM (``dequant_flops_per_weight`` on
the vector cores beside the tensor cores) and multiplies at the bf16 rate.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Final

from phaze_common.errors import ConfigError, unknown_name
from workloads.moe_ops import ROUTED_EXPERT
from workloads.ops import FORMATS, HALF_FORMATS, CoreType, Op, OpGraph, OpKind

__all__ = [
    "DEFAULT_PRECISION",
    "Recipe",
    "recipe",
    "recipe_names",
    "apply_precision",
]

DEFAULT_PRECISION: Final = "bf16"
_DATA_FILE: Final = "precision_recipes.toml"
_HIGH_BYTES: Final = 2  # bf16 operands of the GEMMs a recipe lowers
_LOW_BYTES: Final = 1  # an fp8 element
# current scaling's amax pass: an absolute value and a max per element; the fp32 amax it
# writes (zeroed first by a memset of its 4 bytes: te-amax-reset), and the scale kernel's fp32 scale and inverse scale from it (a divide and a clamp)
_AMAX_FLOPS_PER_ELEMENT: Final = 2
_SCALE_BYTES: Final = 4
_SCALE_FLOPS: Final = 2
# MoE gating and the output head stay in high precision (dsv3-report Sec. 3.3.1); only an
# MTP module's head passes through a recipe (:mod:`workloads.mtp_ops`)
_KEPT: Final = ("router", "logits")
_USES: Final = ("training", "serving")
_INT_KEYS: Final = (
    "weight_bytes",
    "grad_bytes",
    "master_bytes",
    "moment_bytes",
    "saved_linear_input_bytes",
    "cast_copies",
    "cast_flops_per_element",
    "promotion_interval_elements",
)
#: Keys of a serving recipe's stored weights and quantized input, with their defaults
#: (0 bits: the recipe's whole ``weight_bytes``, or one byte of input; no scales).
_SERVING_KEYS: Final = (
    ("weight_bits", 0),
    ("weight_scale_group_elements", 0),
    ("weight_scale_bytes", 0),
    ("input_bits", 0),
    ("input_scale_group_elements", 0),
    ("input_scale_bytes", 0),
    ("dequant_flops_per_weight", 0),
)


@dataclass(frozen=True, slots=True)
class Recipe:
    """One precision recipe (see the module docstring); bytes are per parameter or element."""

    name: str
    based_on: str
    gemm_format: str
    weight_bytes: int
    grad_bytes: int
    master_bytes: int
    moment_bytes: int
    saved_linear_input_bytes: int
    cast_copies: int
    cast_flops_per_element: int
    promotion_interval_elements: int
    use: str = "training"
    caches_weight_copies: bool = False
    current_scaling: bool = False
    quantizes_head: bool = False
    weight_bits: int = 0
    weight_scale_group_elements: int = 0
    weight_scale_bytes: int = 0
    input_bits: int = 0
    input_scale_group_elements: int = 0
    input_scale_bytes: int = 0
    dequant_flops_per_weight: int = 0

    @property
    def stored_weight_bits(self) -> int:
        """Bits of one stored block weight element, its scales apart."""
        return self.weight_bits or 8 * self.weight_bytes

    def weight_element_bytes(self, k: int) -> float:
        """Bytes one block weight takes in memory, its share of the scales (and zero points)
        included: ``weight_scale_bytes`` per ``weight_scale_group_elements`` weights, or per
        output channel (a row of ``k`` weights) when the group is 0."""
        group = self.weight_scale_group_elements or k
        return self.stored_weight_bits / 8 + self.weight_scale_bytes / group

    def input_element_bytes(self, k: int) -> float:
        """Bytes of one element of a lowered GEMM's input as its cast writes it (scales
        included, one per ``input_scale_group_elements`` or per row of ``k``)."""
        group = self.input_scale_group_elements or k
        return (self.input_bits or 8 * _LOW_BYTES) / 8 + self.input_scale_bytes / group

    @property
    def dequantizes_weights(self) -> bool:
        """Weight-only quantization: weights stored narrower than bf16, GEMMs in bf16."""
        return not self.lowers_gemms and self.stored_weight_bits < 8 * _HIGH_BYTES

    @property
    def state_bytes_per_parameter(self) -> int:
        """Weights, main gradients, master copy and moments per parameter (bf16: 18)."""
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes_per_parameter

    @property
    def optimizer_bytes_per_parameter(self) -> int:
        """The optimizer's own state (master copy and moments): what ZeRO stage 1 shards."""
        return self.master_bytes + self.moment_bytes

    @property
    def lowers_gemms(self) -> bool:
        """Does the recipe run the block's GEMMs in a format narrower than 16 bits? (fp16
        runs at the base rate as bf16 does, on the parts that have it.)"""
        return self.gemm_format not in HALF_FORMATS

    @property
    def stores_low_weights(self) -> bool:
        """Are the weights stored in the GEMM format (no weight cast before a GEMM)?"""
        return self.lowers_gemms and self.stored_weight_bits < 8 * _HIGH_BYTES

    @property
    def casts_weights_per_micro_batch(self) -> bool:
        """Does every forward GEMM cast its weight (neither stored nor cached low)?"""
        return self.lowers_gemms and not (self.stores_low_weights or self.caches_weight_copies)

    @property
    def weight_refresh_bytes_per_parameter(self) -> int:
        """HBM bytes per parameter of casting the cached weight copies once per iteration:
        one high-precision read, ``cast_copies`` low-precision writes (0 without a cache)."""
        if not (self.lowers_gemms and self.caches_weight_copies):
            return 0
        reads = 2 if self.current_scaling else 1  # current scaling's amax pass reads it first
        return reads * _HIGH_BYTES + self.cast_copies * _LOW_BYTES


@cache
def _recipes() -> dict[str, Recipe]:
    text = resources.files("workloads").joinpath("data", _DATA_FILE).read_text("utf-8")
    doc = tomllib.loads(text)
    out, problems = {}, []
    for name, row in doc["model"].items():
        where = f"workloads/data/{_DATA_FILE} [model.{name}]"
        if row.get("based_on") not in doc["recipe"]:
            problems.append(f"{where}: based_on = {row.get('based_on')!r} names no [recipe.*]")
        allowed = (*HALF_FORMATS, *FORMATS[1:])
        if row.get("gemm_format") not in allowed:
            problems.append(f"{where}: gemm_format must be one of {', '.join(allowed)}")
        if row.get("use", "training") not in _USES:
            problems.append(f"{where}: use = {row.get('use')!r} must be one of {', '.join(_USES)}")
        bad = [k for k in _INT_KEYS if not isinstance(row.get(k), int) or row[k] < 0]
        problems += [f"{where}: {k} = {row.get(k)!r} must be an integer >= 0" for k in bad]
        serving = {k: row.get(k, d) for k, d in _SERVING_KEYS}
        bad = [k for k, v in serving.items() if not isinstance(v, int) or v < 0]
        problems += [f"{where}: {k} = {serving[k]!r} must be an integer >= 0" for k in bad]
        cache = row.get("caches_weight_copies", False)
        current = row.get("current_scaling", False)
        head = row.get("quantizes_head", False)
        flags = (("caches_weight_copies", cache), ("current_scaling", current))
        for key, flag in (*flags, ("quantizes_head", head)):
            if not isinstance(flag, bool):
                problems.append(f"{where}: {key} = {flag!r} must be true or false")
        if not problems:
            out[name] = Recipe(
                name=name,
                based_on=row["based_on"],
                gemm_format=row["gemm_format"],
                **{k: row[k] for k in _INT_KEYS},
                use=row.get("use", "training"),
                caches_weight_copies=cache,
                current_scaling=current,
                quantizes_head=head,
                **serving,
            )
    if problems:
        raise ConfigError("; ".join(problems))
    return out


def recipe_names(use: str = "training") -> tuple[str, ...]:
    """The recipes for ``use``: training (those ``precision=`` may name) or serving."""
    return tuple(n for n, r in _recipes().items() if r.use == use)


def recipe(name: str) -> Recipe:
    """The recipe called ``name`` (a ConfigError naming the known ones otherwise)."""
    recipes = _recipes()
    if name not in recipes:
        raise unknown_name("precision recipe", name, tuple(recipes))
    return recipes[name]


def _lowered(op: Op) -> bool:
    return op.kind is OpKind.MATMUL and not any(op.name.startswith(k) for k in _KEPT)


def _cast(name: str, elements: int, k: int, r: Recipe) -> tuple[Op, ...]:
    """Quantize ``elements`` bf16 values (rows of ``k``): one read, ``cast_copies`` low
    copies written at the recipe's input bytes (an fp8 byte; NVFP4's half byte and scales).
    Current scaling runs four kernels where delayed scaling runs one (Transformer Engine's
    ``Float8CurrentScalingQuantizer::quantize_impl``): a reset of the fp32 amax (the
    ``cudaMemsetAsync`` that ``launch_amax_kernel`` issues before its reduction), an amax
    reduction reading the tensor, a one-thread kernel turning the amax into the scale, then
    the cast reading it again."""
    cast = Op(
        name=f"{name}.cast",
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        flops=r.cast_flops_per_element * elements,
        bytes_read=_HIGH_BYTES * elements,
        bytes_written=round(r.cast_copies * r.input_element_bytes(k) * elements),
        elements=elements,
    )
    if not r.current_scaling:
        return (cast,)
    amax = Op(
        name=f"{name}.amax",
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        flops=_AMAX_FLOPS_PER_ELEMENT * elements,
        bytes_read=_HIGH_BYTES * elements,
        bytes_written=_SCALE_BYTES,
        elements=elements,
    )
    scale = Op(
        name=f"{name}.scale",
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        flops=_SCALE_FLOPS,
        bytes_read=_SCALE_BYTES,
        bytes_written=2 * _SCALE_BYTES,
        elements=1,
    )
    reset = Op(
        name=f"{name}.reset",
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        flops=0,
        bytes_read=0,
        bytes_written=_SCALE_BYTES,
        elements=1,
    )
    return reset, amax, scale, cast


def _stored(op: Op, r: Recipe) -> Op:
    """``op`` reading its weights as ``r`` stores them (a weight-only recipe: dequantized
    in the kernel, ``dequant_flops_per_weight`` each on the vector cores beside the bf16
    multiply)."""
    weights = op.batch * op.k * op.n
    element = r.weight_element_bytes(op.k)
    return replace(
        op,
        core=CoreType.TC_AND_VC,
        bytes_read=op.bytes_read - round((_HIGH_BYTES - element) * weights),
        epilogue_flops=op.epilogue_flops + r.dequant_flops_per_weight * weights,
        weight_element_bytes=element,
    )


def _low(op: Op, r: Recipe) -> Op:
    """``op`` with low operands (fp8: one byte each; NVFP4: the stored and cast bytes with
    their scales) and, for blockwise scaling, the fp32 promotion of its partial sums every
    ``promotion_interval_elements`` of K on the vector cores (one multiply-add per output
    element per interval)."""
    lhs = r.input_element_bytes(op.k)
    rhs = r.weight_element_bytes(op.k) if r.stores_low_weights else lhs
    saved = (_HIGH_BYTES - lhs) * op.m * op.k + (_HIGH_BYTES - rhs) * op.k * op.n
    changes = {"fmt": r.gemm_format, "bytes_read": op.bytes_read - round(op.batch * saved)}
    if r.input_bits or r.weight_bits:  # widths (and scales) the recipe states
        changes.update(input_element_bytes=lhs, weight_element_bytes=rhs)
    if r.promotion_interval_elements:
        intervals = -(-op.k // r.promotion_interval_elements)
        changes.update(
            core=CoreType.TC_AND_VC,
            epilogue_flops=op.epilogue_flops + 2 * op.batch * op.m * op.n * intervals,
            elements=op.batch * op.m * op.n,
        )
    return replace(op, **changes)  # one copy: thousands of GEMMs per MoE block


def apply_precision(graph: OpGraph, r: Recipe) -> OpGraph:
    """``graph`` (a block's forward, backward or recompute graph) under recipe ``r``.

    Forward GEMMs reading one input share a cast of it and of their weights (unless stored
    or cached low) before the first of them; an input-gradient GEMM (``.dgrad``) gets a
    cast of the output gradient; a weight-gradient GEMM (``.wgrad``) waits for its
    input-gradient GEMM's cast. A weight-only recipe keeps the graph's ops, each GEMM
    reading its stored weights (:func:`_stored`); bf16 returns ``graph`` itself.
    """
    if r.dequantizes_weights:
        ops = tuple(_stored(op, r) if _lowered(op) else op for op in graph.ops)
        return OpGraph(ops=ops, edges=graph.edges)
    if not r.lowers_gemms:
        return graph
    lowered = [_lowered(op) for op in graph.ops]
    if not any(lowered):
        return graph
    preds: dict[int, frozenset[int]] = {}
    for a, b in graph.edges:
        preds[b] = preds.get(b, frozenset()) | {a}
    # forward GEMMs reading the same input (Q, K and V; a gated MLP's gate and up) share
    # one cast of it, as Transformer Engine's fused QKV and FC1 Linears do; routed experts
    # read rows of their own from the dispatched tensor, so each casts its own
    inputs: dict[tuple, list[int]] = {}
    for i, op in enumerate(graph.ops):
        if lowered[i] and not op.name.endswith((".wgrad", ".dgrad")):
            expert = ROUTED_EXPERT.match(op.name)
            key = (preds.get(i, frozenset()), op.batch, op.m, op.k, expert and expert.group())
            inputs.setdefault(key, []).append(i)
    shared = {i: group for group in inputs.values() for i in group}
    # each cast goes just before its (first) GEMM, so the op order stays topological
    ops: list[Op] = []
    at: list[int] = []  # old index -> new index
    casts: dict[int, tuple[int, int]] = {}  # old GEMM index -> its cast's first, last op
    edges: set[tuple[int, int]] = set()
    for i, op in enumerate(graph.ops):
        group = shared.get(i, [i])
        if group[0] != i:
            casts[i] = casts[group[0]]
        elif lowered[i] and not op.name.endswith(".wgrad"):
            # forward: the input once and each weight (unless stored or cached in fp8);
            # dgrad: the output gradient (its left operand)
            fprop = i in shared and r.casts_weights_per_micro_batch
            weights = sum(graph.ops[j].k * graph.ops[j].n for j in group) if fprop else 0
            chain = _cast(op.name, op.batch * (op.m * op.k + weights), op.k, r)
            first = len(ops)
            edges |= {(first + c, first + c + 1) for c in range(len(chain) - 1)}
            casts[i] = (first, first + len(chain) - 1)
            ops.extend(chain)
        at.append(len(ops))
        ops.append(_low(op, r) if lowered[i] else op)
    edges |= {(at[a], casts[b][0] if b in casts else at[b]) for a, b in graph.edges}
    edges |= {(c[1], at[i]) for i, c in casts.items()}
    index = {op.name: i for i, op in enumerate(graph.ops)}
    for i, op in enumerate(graph.ops):
        if lowered[i] and op.name.endswith(".wgrad"):
            d = index.get(op.name[: -len(".wgrad")] + ".dgrad")
            if d in casts:
                edges.add((casts[d][1], at[i]))
    return OpGraph(ops=tuple(ops), edges=tuple(sorted(edges)))
