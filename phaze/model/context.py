"""What every evaluation of a sweep shares (:class:`Context`) and the expert- and
context-parallel degrees the search chooses from. The knobs swept per design are a
:class:`placement.Layout` fixing the micro-batch and recompute mode
(``Layout.searching(mbs=..., recompute=...)``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from arch_space import Cluster
from arch_space.perf.device import DeviceProfile
from ilp import DEFAULT_SEARCH_NODES, HEURISTIC
from phaze.model.scoring import ScoringParams
from workloads.framework import DEFAULT_FRAMEWORK

__all__ = [
    "Context",
    "CP_DEGREES",
    "DEFAULT_SEQUENCE_PARALLEL",
    "MICRO_BATCHES",
    "SolverSettings",
    "search_degrees",
]

#: Sequence parallelism where a run does not fix it: None searches it (on and off at each
#: tensor-parallel width); the sweep file, :class:`phaze.model.context.Context` and the API share it.
DEFAULT_SEQUENCE_PARALLEL: Final[bool | None] = None

#: The micro-batch sizes tried when none is given: an empty ``[sweep]``'s, the Python API's
#: and ``phaze evaluate``'s search (those dividing the batch).
MICRO_BATCHES: Final = (1, 2, 4)


@dataclass(frozen=True, slots=True)
class SolverSettings:
    """The layer scheduler and its limits (recorded in the manifest).

    ``name`` "list" (the default for sweeps) is the deterministic list schedule with local
    search, no MIP: on the block graphs the bounds do not close it mostly matches the best
    schedule of the branch and bound and the HiGHS MIP, and is otherwise close
    (``benchmarks/bench_ilp.py`` measures it), in milliseconds, and its results never depend
    on machine load. "highs", "cbc" or "gurobi" first run the exact branch and bound of
    :mod:`ilp.branch` for ``search_nodes`` nodes, then the ILP of docs/scheduling.md, within
    ``time_limit_s`` per independent part of a graph. ``search_nodes`` defaults to 0 for
    "list" (``benchmarks/bench_sweep.py --search-nodes`` measures what a budget costs) and to
    :data:`ilp.DEFAULT_SEARCH_NODES` for the solvers.
    """

    name: str = "list"
    time_limit_s: float = 1.0
    mip_gap: float = 1e-4
    search_nodes: int | None = None

    def __post_init__(self) -> None:
        if self.search_nodes is None:
            nodes = 0 if self.name == HEURISTIC else DEFAULT_SEARCH_NODES
            object.__setattr__(self, "search_nodes", nodes)


@dataclass(frozen=True, slots=True)
class Context:
    """What every evaluation of a sweep shares: cluster, batch, solver and scoring settings.

    ``max_tp`` caps the tensor-parallel width (default: the devices of one node, as Megatron
    does, since TP across nodes pays inter-node links on every layer). ``framework`` names
    the overlap profile (:mod:`workloads.framework`); ``device`` overrides the sustained
    rates of the designs' preset (:mod:`arch_space.perf.device`; used to fit them).
    ``zero_stages`` are the ZeRO stages the placement search may choose from,
    ``zero_fallback`` those it tries when none of them fits (stages 2 and 3 add collectives
    per micro-batch, so at equal layout they never beat stage 1; searching them only when
    needed keeps sweeps fast; give ``zero_stages=(0, 1, 2, 3)`` for the exact optimum over
    all four); ``state_bytes_per_parameter`` overrides the training state per parameter
    (e.g. 20 for DeepSpeed's BF16 optimizer), a shorthand for the parts ``optimizer_state``
    names (``master=fp32,moments=bf16,grads=fp32``: :mod:`workloads.optimizer_state`). ``ep_degrees`` and ``cp_degrees`` are the
    expert- and context-parallel degrees the search may choose from (None:
    :func:`search_degrees`). ``sequence_parallel`` None searches it (on and off at each
    width ``t > 1``: :func:`variant_keys`); True or False fixes it.
    ``allow_context_extension`` lets ``seq_len`` exceed a rotary or ALiBi model's context
    (:meth:`workloads.model.Model.context_problem`).
    """

    cluster: Cluster
    seq_len: int = 2048
    global_batch: int = 512
    sequence_parallel: bool | None = DEFAULT_SEQUENCE_PARALLEL
    max_tp: int | None = None
    zero_stages: tuple[int, ...] = (0, 1)
    zero_fallback: tuple[int, ...] = (2, 3)
    state_bytes_per_parameter: int | None = None
    optimizer_state: str | None = None
    tokens_to_train: int | None = None
    solver: SolverSettings = dataclasses.field(default_factory=SolverSettings)
    scoring: ScoringParams = dataclasses.field(default_factory=ScoringParams)
    framework: str = DEFAULT_FRAMEWORK
    device: DeviceProfile | None = None
    ep_degrees: tuple[int, ...] | None = None
    cp_degrees: tuple[int, ...] | None = None
    allow_context_extension: bool = False


# Context parallelism pays off for long sequences: Megatron-LM recommends it from 8K tokens
# (docs/api-guide/context_parallel.md); below, the search leaves it off to stay fast.
_CP_FROM_SEQ: Final = 8192
CP_DEGREES: Final = (1, 2, 4, 8)


def search_degrees(experts: int, ctx: Context) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (ep, cp) degrees the search chooses from: the context's, or by default every
    divisor of the experts up to the devices (1 for a dense model) and, from 8K tokens,
    cp in 1, 2, 4, 8 dividing the sequence and the devices (else 1)."""
    devices = ctx.cluster.devices
    eps = ctx.ep_degrees or tuple(
        e for e in range(1, min(experts, devices) + 1) if experts % e == 0
    )
    if ctx.cp_degrees is not None:
        cps = ctx.cp_degrees
    elif ctx.seq_len >= _CP_FROM_SEQ:
        cps = tuple(c for c in CP_DEGREES if ctx.seq_len % c == 0 and devices % c == 0)
    else:
        cps = (1,)
    return tuple(e for e in eps if experts % e == 0) or (1,), cps
