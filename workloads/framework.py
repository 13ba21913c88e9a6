"""Framework overlap profiles: which collectives a training framework runs beside compute.

A profile (``workloads/data/frameworks.toml``) names the tensor-parallel collective roles
that run asynchronously, and whether the data-parallel gradient reduction and the pipeline's
point-to-point sends overlap compute. :func:`apply_framework` turns it into structure in a
pass's op graph, which every scheduler then respects:

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
from workloads.ops import CommRole, CoreType, Op, OpGraph, OpKind

__all__ = [
    "ATTENTION_KERNELS",
    "DEFAULT_FRAMEWORK",
    "FrameworkProfile",
    "framework_names",
    "framework_profile",
    "apply_framework",
]

DEFAULT_FRAMEWORK: Final = "overlap-all"
_DATA_FILE: Final = "frameworks.toml"
#: How a framework runs the attention core: ``unfused`` (QK^T, a materialised softmax and
#: dropout, AV) or ``flash`` (one fused kernel per pass, :mod:`workloads.attention_ops`).
ATTENTION_KERNELS: Final = ("unfused", "flash")


@dataclass(frozen=True, slots=True)
class FrameworkProfile:
    """Which collectives a framework overlaps with compute, and its attention kernel (one of
    :data:`ATTENTION_KERNELS`)."""

    name: str
    description: str
    tp_overlap: frozenset[CommRole]
    dp_overlap: bool
    p2p_overlap: bool
    attention: str = "unfused"


def _data() -> Mapping[str, Any]:
    text = resources.files("workloads").joinpath("data", _DATA_FILE).read_text("utf-8")
    return tomllib.loads(text)


@cache
def _profiles() -> Mapping[str, FrameworkProfile]:
    out = {}
    roles = {r.value: r for r in CommRole}
    for name, table in _data().items():
        bad = [r for r in table["tp_overlap"] if r not in roles]
        if bad:
            raise ConfigError(
                f"{_DATA_FILE} [{name}]: tp_overlap names unknown roles {bad} "
                f"(known: {', '.join(roles)})"
            )
        attention = table.get("attention", "unfused")
        if attention not in ATTENTION_KERNELS:
            raise ConfigError(
                f"{_DATA_FILE} [{name}]: attention = {attention!r} must be one of "
                f"{', '.join(ATTENTION_KERNELS)}"
            )
        out[name] = FrameworkProfile(
            name=name,
            description=str(table["description"]),
            tp_overlap=frozenset(roles[r] for r in table["tp_overlap"]),
            dp_overlap=bool(table["dp_overlap"]),
            p2p_overlap=bool(table["p2p_overlap"]),
            attention=attention,
        )
    return out


def framework_names() -> tuple[str, ...]:
    """The known profiles, in the data file's order."""
    return tuple(_profiles())


def framework_profile(name: str) -> FrameworkProfile:
    """The profile called ``name``; an unknown name lists the known ones."""
    try:
        return _profiles()[name]
    except (KeyError, TypeError):
        raise unknown_name("framework profile", str(name), _profiles()) from None


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
