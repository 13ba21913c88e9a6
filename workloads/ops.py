"""Operators and operator graphs: the unit of work the cost model and the scheduler see.

An :class:`Op` carries everything needed to cost it on any accelerator (GEMM dims, element
counts, FLOPs, bytes moved, collective kind and group) and nothing about the hardware.
An :class:`OpGraph` is an immutable DAG of ops; :meth:`OpGraph.to_networkx` gives the
networkx view the scheduler consumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import networkx as nx

__all__ = [
    "ATTENTION_KERNELS",
    "FORMATS",
    "HALF_FORMATS",
    "OpKind",
    "CoreType",
    "CollectiveKind",
    "CommRole",
    "Op",
    "OpGraph",
]

#: The number formats a GEMM's operands may take (tensor-core input formats; the closed set of
#: ``arch_space/data/formats.toml`` that Phaze models). bf16 is every op's format by default.
FORMATS: tuple[str, ...] = ("bf16", "fp8", "fp4", "int8")
#: How a framework runs the attention core: ``unfused`` (QK^T, a materialised softmax and
#: dropout, AV), ``flash`` (one fused kernel per pass, :mod:`workloads.attention_ops`, at the
#: best fused rate measured on the chip: cuDNN's or TransformerEngine's) or ``flash2`` (the
#: same fused passes run by FlashAttention-2, at its own measured rate where the chip has one:
#: :meth:`arch_space.perf.device.DeviceProfile.for_attention`).
ATTENTION_KERNELS: tuple[str, ...] = ("unfused", "flash", "flash2")

#: The 16-bit formats a tensor core's base rate may be: bf16, or fp16 on a part without bf16
#: (Volta). A GEMM in either carries the default format, run at the base rate.
HALF_FORMATS: tuple[str, ...] = ("bf16", "fp16")


class OpKind(StrEnum):
    """What an op computes."""

    MATMUL = "matmul"
    BATCHED_MATMUL = "batched_matmul"
    ELEMENTWISE = "elementwise"
    SOFTMAX = "softmax"
    NORM = "norm"
    ATTENTION_FORWARD = "attention_forward"  # a fused attention kernel (FlashAttention)
    ATTENTION_BACKWARD = "attention_backward"  # its fused backward (recomputes the scores)
    COLLECTIVE = "collective"
    COMM_SHARE = "comm_share"  # the compute an asynchronous collective holds while it runs
    NOP = "nop"


class CoreType(StrEnum):
    """Which cores an op occupies (the scheduler's resource classes)."""

    TC = "TC"  # tensor (systolic) cores
    VC = "VC"  # vector cores
    TC_AND_VC = "TCandVC"  # a GEMM with a fused elementwise epilogue holds one of each
    NOP = "Nop"  # no core: collectives on the network, graph joins


class CollectiveKind(StrEnum):
    """Collectives Megatron inserts on the tensor-parallel group."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"


class CommRole(StrEnum):
    """Where a tensor-parallel collective is issued, which decides whether a framework
    lets it overlap compute (``workloads/data/frameworks.toml``)."""

    FORWARD = "forward"  # forward and recomputed passes
    ROW_BACKWARD = "row_backward"  # backward of a row-parallel layer's output collective
    COLUMN_BACKWARD = "column_backward"  # a column-parallel layer's input-gradient collective


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of one layer pass, on one tensor-parallel shard.

    GEMMs are ``batch`` independent (m x k) @ (k x n) products (``batch == 1`` for a plain
    matmul). Vector ops touch ``elements`` elements doing ``flops`` FLOPs in all. A fused
    ``TC_AND_VC`` op is a GEMM whose ``epilogue_flops`` run on a vector core as the output
    streams out. Collectives move ``collective_bytes`` (the full tensor, per device) over a
    group of ``group`` devices, the parallel group ``comm_group`` (whose communication
    channel they hold while they run); ``role`` says where they are issued. A ``COMM_SHARE`` op
    (on the ``TC_AND_VC`` cores, with its collective's fields) is the compute an asynchronous
    collective holds while it runs.

    ``flops`` counts a multiply-accumulate as 2 FLOPs. ``bytes_read``/``bytes_written`` are
    the op's operands and results in device memory (the cost model decides how much of it
    really crosses the HBM interface). ``fmt`` is the format of a GEMM's operands on the
    tensor cores (one of :data:`FORMATS`; its rate and energy are the accelerator's for it).
    ``input_element_bytes`` and ``weight_element_bytes`` are the bytes one element of a GEMM's
    left (input) and right (weight) operand takes in device memory, their share of any scale
    (and zero point) included, where they differ from ``fmt``'s element (0: ``fmt``'s); a
    weight-only quantized GEMM reads int8 or int4 weights and runs at its bf16 rate.
    ``launch_s`` is the host's launch time the op waits beyond the cost model's issue overhead
    (0: none; an eagerly launched kernel where the issue overhead is a graphed one's).
    """

    name: str
    kind: OpKind
    core: CoreType
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    batch: int = 1
    m: int = 0
    k: int = 0
    n: int = 0
    elements: int = 0
    epilogue_flops: int = 0
    collective: CollectiveKind | None = None
    collective_bytes: int = 0
    group: int = 1
    role: CommRole | None = None
    comm_group: str = "tp"
    fmt: str = "bf16"
    input_element_bytes: float = 0.0
    weight_element_bytes: float = 0.0
    launch_s: float = 0.0

    @property
    def is_gemm(self) -> bool:
        return self.kind in (OpKind.MATMUL, OpKind.BATCHED_MATMUL)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of a GEMM or a fused attention kernel (0 for other ops)."""
        fused = self.kind in (OpKind.ATTENTION_FORWARD, OpKind.ATTENTION_BACKWARD)
        return self.batch * self.m * self.k * self.n if self.is_gemm or fused else 0


@dataclass(frozen=True, slots=True)
class OpGraph:
    """An immutable DAG of ops; ``edges`` are (producer, consumer) indices into ``ops``.
    ``host_s`` is the least time the pass takes because the host issues its kernels behind a
    synchronisation that leaves it no lead over the device (0: the host runs ahead)."""

    ops: tuple[Op, ...]
    edges: tuple[tuple[int, int], ...]
    host_s: float = 0.0

    def to_networkx(self) -> nx.DiGraph:
        """A frozen DiGraph: nodes are op names with attribute ``op`` (the Op)."""
        g = nx.DiGraph()
        for op in self.ops:
            g.add_node(op.name, op=op)
        g.add_edges_from((self.ops[a].name, self.ops[b].name) for a, b in self.edges)
        return nx.freeze(g)

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)
