"""The pipeline stages of a placement as ``phaze evaluate`` shows them: one row per stage.

With interleaving (``v > 1``) a placement's ``stages`` are its ``p * v`` chunks, chunk ``c``
on pipeline rank ``c mod p``; a stage is the rank, running its ``v`` chunks one after the
other each micro-batch and holding all their memory, so its load and memory are its chunks'
sums. Without interleaving each stage is one chunk.
"""

from __future__ import annotations

from typing import Any

from phaze_common.units import fmt_column
from placement import Placement

__all__ = ["pipeline_stages", "stage_table"]


def pipeline_stages(pl: Placement) -> list[dict[str, Any]]:
    """Each pipeline stage (rank) in order: its chunks (layer range, devices, load per
    micro-batch, memory), and their summed load and memory (what ``--json`` prints)."""
    # without interleaving each stage is its own rank, in order
    rank = [s.device if pl.layout.v > 1 else i for i, s in enumerate(pl.stages)]
    out = []
    for r in sorted(set(rank)):
        chunks = [
            {
                "layers": [min(s.layers), max(s.layers)],
                "devices": s.devices,
                "load_s": s.load_s,
                "memory_bytes": s.memory_bytes,
            }
            for s, k in zip(pl.stages, rank, strict=True)
            if k == r
        ]
        out.append(
            {
                "stage": r,
                "devices": max(c["devices"] for c in chunks),
                "load_s": sum(c["load_s"] for c in chunks),
                "memory_bytes": sum(c["memory_bytes"] for c in chunks),
                "chunks": chunks,
            }
        )
    return out


def _ranges(chunks: list[dict[str, Any]]) -> str:
    """The chunks' layer ranges, compact: ``0-1, 9, 17`` (one layer as its index)."""
    return ", ".join(
        f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in (c["layers"] for c in chunks)
    )


def stage_table(pl: Placement) -> tuple[list[list[Any]], list[str]]:
    """Rows and headers of the stage table: one row per stage, and with interleaving the
    number of chunks it runs and the layers of each."""
    stages = pipeline_stages(pl)
    loads = fmt_column([s["load_s"] for s in stages], "s")
    memories = fmt_column([s["memory_bytes"] for s in stages], "B")
    interleaved = pl.layout.v > 1
    rows = []
    for i, s in enumerate(stages):
        if interleaved:
            layers = [len(s["chunks"]), _ranges(s["chunks"])]
        else:
            layers = ["{}-{}".format(*s["chunks"][0]["layers"])]
        rows.append([s["stage"], *layers, s["devices"], loads[i], memories[i]])
    layers = ["chunks", "layers of each chunk"] if interleaved else ["layers"]
    return rows, ["stage", *layers, "devices", "load per micro-batch", "memory"]
