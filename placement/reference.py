"""The device-placement instance format of Piper and the Phaze reference, and its objective.

The format (msr-fiddle/phaze ``Solver/device_placement``; Tarnawski et al., "Piper",
NeurIPS 2021) is one JSON object::

    {"maxMemoryPerDevice": bytes, "maxDevices": int, "bandwidth": bytes/s,
     "mbsInBatch": int, "activationRecomputation": bool, "optimizerAlgorithm": "SGD"|"Adam",
     "nodes": {"<t>": [{"id", "parameterSize", "activationSize", "optimalLatencyFw",
                        "optimalLatencyBw", "isTensorParallelized"}, ...], ...},
     "edges": {"<t>": [{"sourceId", "destId", "communicationCost"}, ...], ...}}

keyed by tensor-parallel (TMPC) width ``t``; the reference also reads ``fixedPP``,
``fixedTMPC``, ``fixedDP`` and ``numTransformerLayers`` for a baseline and writes an
``energy`` per node, which we accept and ignore. ``mbsInBatch`` may be written as a float
(the reference divides the batch by the micro-batch in Python); it must be whole. The objective, exactly as the reference prices it:

* a stage is a contiguous set of layers; it takes ``t`` devices if it holds a
  tensor-parallel layer, else 1; stages count ``s = 1`` for the last;
* forward time: layers in topological order, each starting when its inputs are ready (an
  input from inside the stage when its producer finishes, from outside at
  ``communicationCost / bandwidth``, transfers starting at 0) and, where the reference refuses
  in-stage branching, after the previous layer of the stage; backward likewise in reverse over
  outgoing edges; load = forward + backward; with recomputation and ``s > 1``, load =
  forward + a combined pass (forward with outside inputs ready at 0, then backward);
* memory ``2P (+P for Adam) + sum(activationSize) + (s - 1) * stash <= maxMemoryPerDevice``,
  stash being all activations, or with recomputation the bytes entering the stage;
* for ``d`` in ``1 .. min(maxDevices, mbsInBatch)``, ``maxDevices // d`` devices per pipeline
  and time per batch ``max load * (ceil(mbsInBatch / d) + S - 1) + 4 (d - 1) P_1 /
  (bandwidth d)``, ``P_1`` the parameter bytes of the first stage; the best (t, d, stages)
  wins.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

import numpy as np

from phaze_common.errors import ConfigError, Infeasible
from phaze_common.files import read_json
from phaze_common.graph import topological_order
from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, over_limit
from phaze_common.units import fmt_bytes, fmt_noun, fmt_pair
from placement.costs import LayerArrays, reference_costs, stage_layers
from placement.dp import DpTask
from placement.dp_order import solve_many

__all__ = [
    "RefNode",
    "RefEdge",
    "ReferenceInstance",
    "ReferenceStage",
    "ReferenceResult",
    "parse_reference_instance",
    "read_reference_instance",
    "solve_reference",
    "reference_document",
]

_REQUIRED: Final = (
    "maxMemoryPerDevice",
    "maxDevices",
    "bandwidth",
    "mbsInBatch",
    "activationRecomputation",
    "optimizerAlgorithm",
    "nodes",
    "edges",
)
_OPTIONAL: Final = ("fixedPP", "fixedTMPC", "fixedDP", "numTransformerLayers")
_NODE_KEYS: Final = (
    "id",
    "parameterSize",
    "activationSize",
    "optimalLatencyFw",
    "optimalLatencyBw",
    "isTensorParallelized",
)
# written by the Phaze reference (Solver/solver.py) or Piper for reading; we ignore them
_NODE_OPTIONAL: Final = ("energy", "name")
_EDGE_KEYS: Final = ("sourceId", "destId", "communicationCost")
_OPTIMIZERS: Final = ("SGD", "Adam")


@dataclass(frozen=True, slots=True)
class RefNode:
    """A layer at one width: bytes and seconds as in the file."""

    id: int
    parameter_size: float
    activation_size: float
    latency_fw_s: float
    latency_bw_s: float
    tensor_parallel: bool


@dataclass(frozen=True, slots=True)
class RefEdge:
    source: int
    dest: int
    bytes: float


@dataclass(frozen=True, slots=True)
class ReferenceInstance:
    """A validated instance; ``order`` lists node ids in the topological order we use."""

    max_memory_per_device: float
    max_devices: int
    bandwidth: float
    mbs_in_batch: int
    activation_recomputation: bool
    optimizer: Literal["SGD", "Adam"]
    nodes: MappingProxyType[int, tuple[RefNode, ...]]
    edges: MappingProxyType[int, tuple[RefEdge, ...]]
    order: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReferenceStage:
    nodes: tuple[int, ...]
    devices: int


@dataclass(frozen=True, slots=True)
class ReferenceResult:
    stages: tuple[ReferenceStage, ...]
    tensor_parallel_degree: int
    data_parallel_degree: int
    final_time_per_batch: float


def read_reference_instance(path: str | Path) -> ReferenceInstance:
    """Read and validate an instance file (see the module docstring)."""
    p = Path(path)
    return parse_reference_instance(read_json(p, "placement instance"), source=str(p))


def _number(problems: list[str], where: str, key: str, value: Any, *, integer=False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if integer:
        ok = ok and float(value).is_integer()
    if not ok:
        kind = "an integer" if integer else "a finite number"
        problems.append(f"{where}: {key} = {value!r} must be {kind}")
        return 0.0
    return float(value)


def _unknown(problems: list[str], where: str, keys, known) -> None:
    for k in keys:
        if k not in known:
            close = difflib.get_close_matches(k, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"{where}: unknown key {k!r}{hint} (known: {', '.join(known)})")


def parse_reference_instance(doc: Any, *, source: str = "instance") -> ReferenceInstance:
    """Validate a decoded instance; every problem is reported in one ConfigError."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{source}: the instance must be a JSON object")
    problems: list[str] = []
    _unknown(problems, source, doc.keys(), _REQUIRED + _OPTIONAL)
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        problems.append(f"{source}: missing required keys {', '.join(missing)}")
        raise ConfigError("; ".join(problems))
    mem = _number(problems, source, "maxMemoryPerDevice", doc["maxMemoryPerDevice"])
    devices = int(_number(problems, source, "maxDevices", doc["maxDevices"], integer=True))
    bandwidth = _number(problems, source, "bandwidth", doc["bandwidth"])
    mbs = int(_number(problems, source, "mbsInBatch", doc["mbsInBatch"], integer=True))
    if mem <= 0:
        problems.append(f"{source}: maxMemoryPerDevice = {doc['maxMemoryPerDevice']!r} must be > 0")
    if devices < 1:
        problems.append(f"{source}: maxDevices = {doc['maxDevices']!r} must be >= 1")
    if bandwidth <= 0:
        problems.append(f"{source}: bandwidth = {doc['bandwidth']!r} must be > 0")
    if mbs < 1:
        problems.append(f"{source}: mbsInBatch = {doc['mbsInBatch']!r} must be >= 1")
    problems += _over_limits(source, devices, mbs)
    recompute = doc["activationRecomputation"]
    if not isinstance(recompute, bool):
        problems.append(f"{source}: activationRecomputation = {recompute!r} must be true or false")
    optimizer = doc["optimizerAlgorithm"]
    if optimizer not in _OPTIMIZERS:
        problems.append(
            f"{source}: optimizerAlgorithm = {optimizer!r} must be one of {', '.join(_OPTIMIZERS)}"
        )
    nodes = _widths(problems, source, "nodes", doc["nodes"], _node, _NODE_KEYS, _NODE_OPTIONAL)
    edges = _widths(problems, source, "edges", doc["edges"], _edge, _EDGE_KEYS, ())
    if not problems:
        _check_graphs(problems, source, nodes, edges)
    order: tuple[int, ...] = ()
    if not problems:
        order = _topological(source, problems, nodes, edges)
    if problems:
        raise ConfigError("; ".join(problems))
    return ReferenceInstance(
        max_memory_per_device=mem,
        max_devices=devices,
        bandwidth=bandwidth,
        mbs_in_batch=mbs,
        activation_recomputation=recompute,
        optimizer=optimizer,
        nodes=MappingProxyType(dict(sorted(nodes.items()))),
        edges=MappingProxyType(dict(sorted(edges.items()))),
        order=order,
    )


def _over_limits(source: str, devices: int, mbs: int) -> list[str]:
    """The sizes above the limits every entry point applies (:mod:`phaze_common.limits`)."""
    checks = (("maxDevices", devices, MAX_DEVICES), ("mbsInBatch", mbs, MAX_GLOBAL_BATCH))
    return [f"{source}: {p}" for n, v, lim in checks if (p := over_limit(n, v, lim)) is not None]


def _widths(problems, source, key, value, parse, keys, optional) -> dict[int, tuple]:
    where = f"{source} [{key}]"
    if not isinstance(value, Mapping) or not value:
        problems.append(f"{where}: must be a non-empty object keyed by tensor-parallel width")
        return {}
    out = {}
    for w, items in value.items():
        try:
            width = int(w)
        except (TypeError, ValueError):
            problems.append(f"{where}: key {w!r} must be a tensor-parallel width (an integer)")
            continue
        if width < 1:
            problems.append(f"{where}: width {w!r} must be >= 1")
            continue
        if not isinstance(items, list):
            problems.append(f"{where}[{w}]: must be a list")
            continue
        parsed = []
        for i, item in enumerate(items):
            loc = f"{where}[{w}][{i}]"
            if not isinstance(item, Mapping):
                problems.append(f"{loc}: must be an object")
                continue
            _unknown(problems, loc, item.keys(), keys + optional)
            absent = [k for k in keys if k not in item]
            if absent:
                problems.append(f"{loc}: missing keys {', '.join(absent)}")
                continue
            parsed.append(parse(problems, loc, item, width))
        out[width] = tuple(parsed)
    return out


def _node(problems, loc, item, width) -> RefNode:
    vals = {}
    for k in _NODE_KEYS[1:5]:
        vals[k] = _number(problems, loc, k, item[k])
        if vals[k] < 0:
            problems.append(f"{loc}: {k} = {item[k]!r} must be >= 0")
    tp = item["isTensorParallelized"]
    if not isinstance(tp, bool):
        problems.append(f"{loc}: isTensorParallelized = {tp!r} must be true or false")
    elif tp and width == 1:
        problems.append(f"{loc}: isTensorParallelized is true at width 1")
    return RefNode(
        id=int(_number(problems, loc, "id", item["id"], integer=True)),
        parameter_size=vals["parameterSize"],
        activation_size=vals["activationSize"],
        latency_fw_s=vals["optimalLatencyFw"],
        latency_bw_s=vals["optimalLatencyBw"],
        tensor_parallel=bool(tp),
    )


def _edge(problems, loc, item, width) -> RefEdge:
    cost = _number(problems, loc, "communicationCost", item["communicationCost"])
    if cost < 0:
        problems.append(f"{loc}: communicationCost = {item['communicationCost']!r} must be >= 0")
    return RefEdge(
        source=int(_number(problems, loc, "sourceId", item["sourceId"], integer=True)),
        dest=int(_number(problems, loc, "destId", item["destId"], integer=True)),
        bytes=cost,
    )


def _check_graphs(problems, source, nodes, edges) -> None:
    if set(nodes) != set(edges):
        problems.append(
            f"{source}: nodes has widths {sorted(nodes)} but edges has {sorted(edges)}; "
            "they must be the same"
        )
        return
    first = min(nodes)
    ids = [n.id for n in nodes[first]]
    if not ids:
        problems.append(f"{source} [nodes][{first}]: no nodes")
        return
    if len(set(ids)) != len(ids):
        problems.append(f"{source} [nodes][{first}]: node ids are not unique")
    pairs = {(e.source, e.dest) for e in edges[first]}
    for w in sorted(nodes):
        if {n.id for n in nodes[w]} != set(ids) or len(nodes[w]) != len(ids):
            problems.append(f"{source} [nodes][{w}]: node ids differ from width {first}")
        seen = set()
        for e in edges[w]:
            if e.source not in set(ids) or e.dest not in set(ids):
                problems.append(f"{source} [edges][{w}]: edge {e.source}->{e.dest} names no node")
            if e.source == e.dest:
                problems.append(f"{source} [edges][{w}]: self-loop on node {e.source}")
            if (e.source, e.dest) in seen:
                problems.append(f"{source} [edges][{w}]: edge {e.source}->{e.dest} is repeated")
            seen.add((e.source, e.dest))
        if seen != pairs:
            problems.append(f"{source} [edges][{w}]: edges differ from width {first}")


def _topological(source, problems, nodes, edges) -> tuple[int, ...]:
    """The node ids in topological order, smallest id first among ready nodes (deterministic)."""
    first = min(nodes)
    ids = sorted(n.id for n in nodes[first])
    order = topological_order(ids, ((e.source, e.dest) for e in edges[first]))
    if len(order) != len(ids):
        problems.append(f"{source} [edges]: the graph has a cycle; it must be a DAG")
    return tuple(order)


def _arrays(ins: ReferenceInstance, width: int) -> LayerArrays:
    pos = {v: i for i, v in enumerate(ins.order)}
    by_id = {n.id: n for n in ins.nodes[width]}
    ns = [by_id[v] for v in ins.order]
    es = sorted(ins.edges[width], key=lambda e: (pos[e.source], pos[e.dest]))

    def arr(values, dtype=np.float64) -> np.ndarray:
        return np.array(values, dtype=dtype)

    src = arr([pos[e.source] for e in es], np.int64)
    dst = arr([pos[e.dest] for e in es], np.int64)
    n = len(ns)
    is_chain = (
        len(es) == n - 1
        and bool(np.all(src == np.arange(n - 1)))
        and bool(np.all(dst == np.arange(1, n)))
    )
    return LayerArrays(
        fwd=arr([x.latency_fw_s for x in ns]),
        bwd=arr([x.latency_bw_s for x in ns]),
        rec=np.zeros(n),
        params=arr([x.parameter_size for x in ns]),
        stash=arr([x.activation_size for x in ns]),
        workspace=np.zeros(n),
        tp=arr([x.tensor_parallel for x in ns], bool),
        src=src,
        dst=dst,
        nbytes=arr([e.bytes for e in es]),
        is_chain=is_chain,
    )


def solve_reference(
    ins: ReferenceInstance, *, method: Literal["auto", "chain", "dag"] = "auto"
) -> ReferenceResult:
    """The best placement under the reference objective; Infeasible when none fits, and
    ConfigError for sizes above :mod:`phaze_common.limits` (as :func:`parse_reference_instance`).

    Ties go to the smaller width, then the smaller ``d``, then fewer stages.
    """
    too_big = _over_limits("instance", ins.max_devices, ins.mbs_in_batch)
    if too_big:
        raise ConfigError("; ".join(too_big))
    best = None
    need = math.inf
    bw = ins.bandwidth

    def allreduce(d: np.ndarray, p1: np.ndarray, _load_s: object = None) -> np.ndarray:
        # the reference format's all-reduce is not hidden behind the load
        return 4.0 * (d - 1) * p1 / bw / d

    prepared = []
    for width in ins.nodes:
        la = _arrays(ins, width)
        if method == "chain" and not la.is_chain:
            raise ConfigError("placement: method = 'chain' needs a chain layer graph")
        chain = la.is_chain if method == "auto" else method == "chain"
        s_max = min(ins.max_devices, la.n)
        costs, figures = reference_costs(
            la,
            chain=chain,
            bandwidth=bw,
            max_memory=ins.max_memory_per_device,
            adam=ins.optimizer == "Adam",
            recompute=ins.activation_recomputation,
            max_stages=s_max,
        )
        task = DpTask(
            costs, width, s_max, ins.max_devices, ins.mbs_in_batch, allreduce, whole_batches=False
        )
        prepared.append((width, la, task, figures))
    sols = solve_many(tuple(task for _, _, task, _ in prepared))
    for (width, la, task, figures), sol in zip(prepared, sols, strict=True):
        if sol is None:
            adam = 1.0 if ins.optimizer == "Adam" else 0.0
            single = (2.0 + adam) * la.params + la.stash  # a stage of one layer, s = 1
            need = min(need, float(single.max()))
            continue
        key = (sol.time_s, width, sol.d, sol.s)
        if best is None or key < best[0]:
            costs = task.costs
            stages = tuple(
                ReferenceStage(
                    nodes=tuple(ins.order[i] for i in stage_layers(costs, figures, q)),
                    devices=1 if (costs.one[q] and width > 1) else width,
                )
                for q in sol.pairs
            )
            best = (key, ReferenceResult(stages, width, sol.d, sol.time_s))
    if best is None:
        have = ins.max_memory_per_device
        if need > have:
            needs, has = fmt_pair(need, have, "B")
            raise Infeasible(
                f"needs {needs} per device for its largest layer alone, "
                f"has maxMemoryPerDevice = {has}"
            )
        raise Infeasible(
            f"no pipeline of at most {fmt_noun(ins.max_devices, 'device')} fits "
            "maxMemoryPerDevice = "
            f"{fmt_bytes(have)} at any width"
        )
    return best[1]


def reference_document(result: ReferenceResult) -> dict[str, Any]:
    """The result with the reference's own output keys."""
    return {
        "stages": [{"nodes": list(s.nodes), "devicesForStage": s.devices} for s in result.stages],
        "dataParallelDegree": result.data_parallel_degree,
        "tensorParallelDegree": result.tensor_parallel_degree,
        "finalTimePerBatch": result.final_time_per_batch,
    }
