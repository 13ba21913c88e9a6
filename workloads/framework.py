"""Framework overlap profiles: which collectives a training framework runs beside compute.

A profile (``workloads/data/frameworks.toml``) names the tensor-parallel collective roles
that run asynchronously, whether the data-parallel gradient reduction, the all-gather of
updated weights and the pipeline's point-to-point sends overlap compute, whether sharded
data parallelism prefetches each unit's collectives behind the previous unit's compute, and
which layouts the stack can run (its pipeline schedules and ZeRO stages, :func:`layout_rules`).
:func:`apply_framework` turns the collective roles into structure in a pass's op graph,
which every scheduler then respects:

* a synchronous collective is a barrier: every op issued before it ends before it starts,
  every op issued after it starts after it ends;
* an asynchronous collective runs beside the ops that do not depend on it, and holds a share
  of the device's compute while it runs: a companion ``COMM_SHARE`` op (``<name>.share``, on
  the ``TC_AND_VC`` cores) between the same predecessors and successors, which the op model
  prices at the device's collective compute share of the collective's time.

Collectives of one parallel group share its communication channel (one stream): the layer
schedule gives every collective one unit of its group's channel, a resource of one unit
(:func:`ilp.timing.costed_graph`), so they run one at a time in an order the scheduler
chooses; no edge fixes that order here.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

from phaze_common.errors import ConfigError, unknown_name
from workloads.ops import ATTENTION_KERNELS, CommRole, CoreType, Op, OpGraph, OpKind

__all__ = [
    "ATTENTION_KERNELS",
    "CROSS_ENTROPY_KERNELS",
    "ACTIVATION_KERNELS",
    "MOE_DISPATCHERS",
    "PIPELINE_SCHEDULES",
    "P2P_OVERLAP",
    "DEFAULT_FRAMEWORK",
    "FrameworkProfile",
    "framework_names",
    "framework_profile",
    "with_attention",
    "profile_from_mapping",
    "apply_framework",
    "layout_refusals",
    "runnable_zero_stages",
    "search_exclusions",
]

DEFAULT_FRAMEWORK: Final = "overlap-all"
_DATA_FILE: Final = "frameworks.toml"
#: How a framework runs the LM head's cross entropy: ``fused`` (one kernel reads the bf16
#: logits, as fused cross-entropy kernels do) or ``unfused-fp32`` (Megatron-LM's
#: ``vocab_parallel_cross_entropy`` on ``logits.float()``: a cast to an fp32 copy, then max,
#: subtract, exp, sum and divide, each a pass over the fp32 logits in HBM; backward a
#: multiply and the cast back; :func:`workloads.op_graphs.head_pass_graphs`).
CROSS_ENTROPY_KERNELS: Final = ("fused", "unfused-fp32")
#: How a framework runs a non-gated FFN's activation: ``fused`` into FC1's epilogue (bias-GELU
#: fusion) or ``unfused``, its own kernel reading and writing the FFN's hidden tensor (eager
#: PyTorch's ``nn.GELU``); a gated FFN's activation is its own op either way.
ACTIVATION_KERNELS: Final = ("fused", "unfused")
#: How a stack sends MoE tokens to their experts' ranks: ``alltoall`` (Megatron-Core's
#: ``alltoall`` dispatcher, one NCCL all-to-all of the permuted copies, priced by the model's
#: routing: :mod:`placement.ep_cp`) or ``flex`` (DeepEP's or HybridEP's fused kernels,
#: Megatron-Core's ``flex`` dispatcher: a token crosses the network once per node it reaches
#: and is forwarded over NVLink to the ranks holding its experts, with or without
#: group-limited routing; :func:`workloads.build.build_layer_graph`).
MOE_DISPATCHERS: Final = ("alltoall", "flex")
#: The pipeline schedules a stack runs: none, 1F1B without virtual stages, 1F1B with
#: Megatron's interleaved virtual stages (and the plain 1F1B beside it), or DeepSeek's
#: bidirectional DualPipe (:mod:`placement.pipelining`).
PIPELINE_SCHEDULES: Final = ("none", "1f1b", "interleaved", "dualpipe")
#: When a stack overlaps the pipeline's sends with compute: never, always, or only with
#: virtual stages (Megatron-Core's ``overlap_p2p_comm``).
P2P_OVERLAP: Final = ("never", "always", "interleaved")
_ZERO_STAGES: Final = (0, 1, 2, 3)


@dataclass(frozen=True, slots=True)
class FrameworkProfile:
    """Which collectives a framework overlaps with compute, its attention kernel (one of
    :data:`workloads.ops.ATTENTION_KERNELS`) and the layouts it runs.

    ``dp_overlap``: the gradient reduction runs in buckets beside the backward pass;
    ``param_gather_overlap``: the all-gather of the updated weights (ZeRO >= 1) runs in
    buckets beside the next forward pass; ``p2p_overlap``: when pipeline sends overlap
    compute (:data:`P2P_OVERLAP`); ``sharded_prefetch``: sharded data parallelism (ZeRO-2/3)
    gathers unit ``i + 1``'s weights behind unit ``i``'s compute and reduce-scatters
    behind the backward pass (FSDP, DeepSpeed ZeRO-3); ``regather_per_micro_batch``: ZeRO-2
    frees the gathered weights after each backward pass and gathers them again for the next
    micro-batch (FSDP's ``SHARD_GRAD_OP``); ``reduce_bytes_per_parameter``: the
    bytes a gradient reduction moves per parameter (0: the weights' format,
    :func:`phaze.model.problem.dp_bytes_per_parameter`);
    ``pipeline`` the most the stack's pipeline schedule does (:data:`PIPELINE_SCHEDULES`),
    ``zero_stages`` the ZeRO stages it runs; ``host_s_per_kernel`` the host's time to
    dispatch one kernel (0: none modelled), a pass taking at least its kernels times that;
    ``expert_launch_s`` the launch time each routed expert's kernel waits beyond the cost
    model's issue overhead, a stack launching the experts' kernels one per expert, eagerly
    (0: as every other kernel; :func:`workloads.moe_ops.launched_per_expert`);
    ``expert_gemm_streams``: the routed experts run as grouped modules in the order of one
    CUDA stream, each op for all local experts before the next op, with this many expert
    GEMMs at a time (0: each expert's ops independent of the others';
    :func:`workloads.moe_ops.grouped_in_stream_order`);
    ``cross_entropy`` the LM head's cross-entropy kernel (:data:`CROSS_ENTROPY_KERNELS`);
    ``activation`` the FFN activation's (:data:`ACTIVATION_KERNELS`); ``attention_unpad``:
    the stack gathers Q, K and V into unpadded copies before a fused attention kernel and
    scatters its output back (llm-foundry's ``flash_attn_fn``);
    ``p2p_sends`` and ``p2p_gathers`` what one stage runs in turn per pipeline boundary per
    micro-batch: sends of the boundary tensor (its ``1/t`` slice) and all-gathers of it
    (1 and 1: Megatron's paired sends; :attr:`placement.types.PlacementProblem.p2p_sends`);
    ``ep_overlap``: the expert-parallel all-to-alls of one micro-batch run beside another's
    compute, which keeps ``1 - comm_sm_share`` of the SMs (:mod:`placement.ep_cp`);
    ``moe_dispatcher`` how the tokens reach the experts' ranks (:data:`MOE_DISPATCHERS`);
    ``moe_permute_fusion``: the token permutation runs TransformerEngine's fused kernels
    (:mod:`workloads.moe_ops`);
    ``recompute_dce``: a full recompute re-runs only the forward ops the backward pass reads
    (JAX's ``jax.checkpoint``), not the block's last GEMM, its collective and residual add
    (:func:`workloads.op_graphs.block_pass_graphs`); PyTorch's checkpoint re-runs them all.
    """

    name: str
    description: str
    tp_overlap: frozenset[CommRole]
    dp_overlap: bool
    p2p_overlap: str
    attention: str = "unfused"
    param_gather_overlap: bool = False
    sharded_prefetch: bool = False
    regather_per_micro_batch: bool = False
    reduce_bytes_per_parameter: float = 0.0
    pipeline: str = "interleaved"
    zero_stages: tuple[int, ...] = _ZERO_STAGES
    host_s_per_kernel: float = 0.0
    expert_launch_s: float = 0.0
    expert_gemm_streams: int = 0
    cross_entropy: str = "fused"
    activation: str = "fused"
    attention_unpad: bool = False
    p2p_sends: float = 1.0
    p2p_gathers: float = 1.0
    ep_overlap: bool = False
    comm_sm_share: float = 0.0
    moe_dispatcher: str = "alltoall"
    moe_permute_fusion: bool = False
    recompute_dce: bool = False

    @property
    def fused_attention(self) -> bool:
        """Whether the attention core is one fused kernel per pass (no ``s x s`` scores in
        device memory)."""
        return self.attention != "unfused"


def _data() -> Mapping[str, Any]:
    text = resources.files("workloads").joinpath("data", _DATA_FILE).read_text("utf-8")
    return tomllib.loads(text)


_KNOWN_KEYS: Final = frozenset(
    {
        "description",
        "tp_overlap",
        "dp_overlap",
        "p2p_overlap",
        "attention",
        "param_gather_overlap",
        "sharded_prefetch",
        "regather_per_micro_batch",
        "reduce_bytes_per_parameter",
        "pipeline",
        "zero_stages",
        "host_s_per_kernel",
        "expert_launch_s",
        "expert_gemm_streams",
        "cross_entropy",
        "activation",
        "attention_unpad",
        "p2p_sends",
        "p2p_gathers",
        "ep_overlap",
        "comm_sm_share",
        "moe_dispatcher",
        "moe_permute_fusion",
        "recompute_dce",
    }
)


def _choice(name: str, key: str, value: Any, allowed: tuple, problems: list[str]) -> None:
    if value not in allowed:
        problems.append(
            f"{_DATA_FILE} [{name}]: {key} = {value!r} must be one of "
            f"{', '.join(map(str, allowed))}"
        )


def profile_from_mapping(name: str, table: Mapping[str, Any]) -> FrameworkProfile:
    """The profile ``name`` of one table of ``frameworks.toml``, every problem named in one
    ConfigError."""
    problems: list[str] = []
    roles = {r.value: r for r in CommRole}
    for key in table:
        if key not in _KNOWN_KEYS:
            problems.append(f"{_DATA_FILE} [{name}]: {unknown_name('key', key, _KNOWN_KEYS)}")
    tp = table.get("tp_overlap", ())
    if not isinstance(tp, list | tuple):
        problems.append(
            f"{_DATA_FILE} [{name}]: tp_overlap = {tp!r} must be a list of roles "
            f"({', '.join(roles)})"
        )
        tp = ()
    bad = [r for r in tp if r not in roles]
    if bad:
        problems.append(
            f"{_DATA_FILE} [{name}]: tp_overlap names unknown roles {bad} "
            f"(known: {', '.join(roles)})"
        )
    attention = table.get("attention", "unfused")
    _choice(name, "attention", attention, ATTENTION_KERNELS, problems)
    p2p = table.get("p2p_overlap", "never")
    _choice(name, "p2p_overlap", p2p, P2P_OVERLAP, problems)
    pipeline = table.get("pipeline", "interleaved")
    _choice(name, "pipeline", pipeline, PIPELINE_SCHEDULES, problems)
    cross_entropy = table.get("cross_entropy", "fused")
    _choice(name, "cross_entropy", cross_entropy, CROSS_ENTROPY_KERNELS, problems)
    activation = table.get("activation", "fused")
    _choice(name, "activation", activation, ACTIVATION_KERNELS, problems)
    unpad = table.get("attention_unpad", False)
    _choice(name, "attention_unpad", unpad, (False, True), problems)
    ep_overlap = table.get("ep_overlap", False)
    _choice(name, "ep_overlap", ep_overlap, (False, True), problems)
    dispatcher = table.get("moe_dispatcher", "alltoall")
    _choice(name, "moe_dispatcher", dispatcher, MOE_DISPATCHERS, problems)
    permute_fusion = table.get("moe_permute_fusion", False)
    _choice(name, "moe_permute_fusion", permute_fusion, (False, True), problems)
    regather = table.get("regather_per_micro_batch", False)
    _choice(name, "regather_per_micro_batch", regather, (False, True), problems)
    dce = table.get("recompute_dce", False)
    _choice(name, "recompute_dce", dce, (False, True), problems)
    share = table.get("comm_sm_share", 0.0)
    if not (isinstance(share, int | float) and not isinstance(share, bool) and 0 <= share < 1):
        problems.append(f"{_DATA_FILE} [{name}]: comm_sm_share = {share!r} must be in [0, 1)")
    streams = table.get("expert_gemm_streams", 0)
    if not (isinstance(streams, int) and not isinstance(streams, bool) and 0 <= streams < 1e3):
        problems.append(
            f"{_DATA_FILE} [{name}]: expert_gemm_streams = {streams!r} must be an integer >= 0"
        )
    zeros = tuple(table.get("zero_stages", _ZERO_STAGES))
    if not zeros or any(z not in _ZERO_STAGES or isinstance(z, bool) for z in zeros):
        problems.append(
            f"{_DATA_FILE} [{name}]: zero_stages = {list(zeros)!r} must list ZeRO stages "
            "from 0, 1, 2, 3"
        )
    zero_default = ("reduce_bytes_per_parameter", "host_s_per_kernel", "expert_launch_s")
    numbers = {k: table.get(k, 0.0) for k in zero_default}
    numbers |= {k: table.get(k, 1.0) for k in ("p2p_sends", "p2p_gathers")}
    for key, v in numbers.items():
        least = 1 if key == "p2p_sends" else 0
        if not (isinstance(v, int | float) and not isinstance(v, bool) and least <= v < 1e3):
            problems.append(f"{_DATA_FILE} [{name}]: {key} = {v!r} must be a number >= {least}")
    if problems:
        raise ConfigError("; ".join(problems))
    return FrameworkProfile(
        name=name,
        description=str(table["description"]),
        tp_overlap=frozenset(roles[r] for r in tp),
        dp_overlap=bool(table["dp_overlap"]),
        p2p_overlap=p2p,
        attention=attention,
        param_gather_overlap=bool(table.get("param_gather_overlap", False)),
        sharded_prefetch=bool(table.get("sharded_prefetch", False)),
        regather_per_micro_batch=bool(regather),
        reduce_bytes_per_parameter=float(numbers["reduce_bytes_per_parameter"]),
        pipeline=pipeline,
        zero_stages=zeros,
        host_s_per_kernel=float(numbers["host_s_per_kernel"]),
        expert_launch_s=float(numbers["expert_launch_s"]),
        expert_gemm_streams=streams if isinstance(streams, int) else 0,
        cross_entropy=cross_entropy,
        activation=activation,
        attention_unpad=bool(unpad),
        p2p_sends=float(numbers["p2p_sends"]),
        p2p_gathers=float(numbers["p2p_gathers"]),
        ep_overlap=bool(ep_overlap),
        comm_sm_share=float(share) if isinstance(share, int | float) else 0.0,
        moe_dispatcher=dispatcher,
        moe_permute_fusion=bool(permute_fusion),
        recompute_dce=bool(dce),
    )


@cache
def _profiles() -> Mapping[str, FrameworkProfile]:
    return {name: profile_from_mapping(name, table) for name, table in _data().items()}


def framework_names() -> tuple[str, ...]:
    """The known profiles, in the data file's order."""
    return tuple(_profiles())


def framework_profile(name: str) -> FrameworkProfile:
    """The profile called ``name``; an unknown name lists the known ones.

    ``base:key=value,...`` is profile ``base`` with the keys of ``frameworks.toml`` given
    (``megatron-core-2024:ep_overlap=true`` runs Megatron-Core's expert-parallel all-to-all
    overlap); values are ``true``, ``false``, numbers or names, and ``tp_overlap`` takes
    ``all``, ``none`` or roles joined by ``+`` (``tp_overlap=forward+row_backward``).
    """
    base, _, changes = str(name).partition(":")
    try:
        profile = _profiles()[base]
    except (KeyError, TypeError):
        raise unknown_name("framework profile", base, _profiles()) from None
    if not changes:
        return profile
    table = {**_data()[base], **_overrides(name, changes)}
    return profile_from_mapping(name, table)


def with_attention(name: str, kernel: str) -> str:
    """The profile ``name`` (a base name or ``base:key=value,...``) with its attention core
    run by ``kernel`` (:data:`workloads.ops.ATTENTION_KERNELS`): a stack on a chip its fused kernel does
    not support."""
    if framework_profile(name).attention == kernel:
        return name
    return f"{name}{',' if ':' in name else ':'}attention={kernel}"


def _overrides(name: str, text: str) -> dict[str, Any]:
    """The ``key=value`` pairs of a profile override, values read as TOML scalars."""
    out: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = (x.strip() for x in part.partition("="))
        if not eq or not key or not value:
            raise ConfigError(
                f"{name!r}: {part!r} must be key=value (e.g. megatron-core-2024:ep_overlap=true)"
            )
        try:
            out[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value  # a bare name: pipeline=dualpipe
        if key == "tp_overlap" and isinstance(out[key], str):
            out[key] = _roles(out[key])
    return out


def _roles(text: str) -> list[str]:
    """The collective roles of a ``tp_overlap`` override: ``all``, ``none`` or names joined
    by ``+`` (an unknown name is left for :func:`profile_from_mapping` to refuse)."""
    if text == "all":
        return [r.value for r in CommRole]
    return [] if text == "none" else [r for r in text.split("+") if r]


def _share(op: Op) -> Op:
    return dataclasses.replace(
        op, name=f"{op.name}.share", kind=OpKind.COMM_SHARE, core=CoreType.TC_AND_VC
    )


def apply_framework(graph: OpGraph, profile: FrameworkProfile) -> OpGraph:
    """``graph`` with the barriers and compute shares of ``profile``'s collectives (see the
    module docstring); a graph without collectives comes back as is."""
    is_coll = [op.kind is OpKind.COLLECTIVE and op.group > 1 for op in graph.ops]
    if not any(is_coll):
        return graph
    ops: list[Op] = []
    new: list[int] = []  # new index of each old op
    shares: dict[int, int] = {}  # new index of a collective -> its share op's
    for op, coll in zip(graph.ops, is_coll, strict=True):
        new.append(len(ops))
        ops.append(op)
        if coll and op.role in profile.tp_overlap:
            shares[new[-1]] = len(ops)
            ops.append(_share(op))
    edges = {(new[a], new[b]) for a, b in graph.edges}
    for c, s in shares.items():
        edges |= {(a, s) for a, b in list(edges) if b == c}
        edges |= {(s, b) for a, b in list(edges) if a == c and b != s}
    for c in (new[i] for i, coll in enumerate(is_coll) if coll):
        if c not in shares:
            edges |= {(i, c) for i in range(c)} | {(c, j) for j in range(c + 1, len(ops))}
    return OpGraph(ops=tuple(ops), edges=tuple(sorted(edges)))


def layout_refusals(profile: FrameworkProfile, *, p: int, v: int, zero: int) -> list[str]:
    """Each rule of ``profile`` that a layout with ``p`` pipeline stages, ``v`` virtual
    stages and ZeRO stage ``zero`` breaks, in words (empty: the stack runs it)."""
    out = []
    if p > 1 and profile.pipeline == "none":
        out.append(f"pipeline: {profile.name} runs no pipeline parallelism (p = 1; got p = {p})")
    if p > 1 and p % 2 and profile.pipeline == "dualpipe":
        out.append(f"pipeline: DualPipe runs an even number of stages (got p = {p})")
    if v > 1 and profile.pipeline != "interleaved":
        out.append(
            f"interleaving: {profile.name}'s pipeline schedule has no virtual stages "
            f"(v = 1; got v = {v})"
        )
    if zero not in profile.zero_stages:
        allowed = ", ".join(map(str, profile.zero_stages))
        out.append(f"zero: {profile.name} runs ZeRO stages {allowed} (got zero = {zero})")
    return out


def search_exclusions(profile: FrameworkProfile) -> tuple[str, ...]:
    """The rules by which the search of ``profile`` skips layouts, in words."""
    out = []
    if profile.pipeline == "none":
        out.append(f"pipeline: {profile.name} runs no pipeline parallelism: only p = 1")
    elif profile.pipeline == "dualpipe":
        out.append(
            f"pipeline: {profile.name}'s DualPipe schedule is priced for strategies giving "
            "t, p and d (even p, each pipeline's micro-batches even and at least 2 p)"
        )
    elif profile.pipeline == "1f1b":
        out.append(
            f"interleaving: {profile.name}'s 1F1B schedule has no virtual stages: only v = 1"
        )
    else:
        out.append(
            "interleaving: the interleaved schedule needs each pipeline's micro-batches "
            "divisible by p (Megatron-LM schedules.py), and blocks divisible by p * v or split "
            "with fewer on the first and last chunks (Megatron-Core's pipeline layout)"
        )
    if set(profile.zero_stages) != set(_ZERO_STAGES):
        allowed = ", ".join(map(str, profile.zero_stages))
        out.append(f"zero: {profile.name} runs ZeRO stages {allowed} only")
    return tuple(out)


def runnable_zero_stages(stages: tuple[int, ...], profile: FrameworkProfile) -> tuple[int, ...]:
    """The ZeRO stages of ``stages`` that ``profile``'s stack runs, in order."""
    return tuple(z for z in stages if z in profile.zero_stages)
