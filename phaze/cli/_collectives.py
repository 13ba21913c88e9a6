"""The iteration's ledger of collectives for ``evaluate``: one JSON row and one table row
per record (:class:`placement.collectives.PricedCollective`)."""

from __future__ import annotations

import dataclasses

from phaze.cli._render import table
from phaze_common.units import fmt_column
from placement.collectives import PricedCollective

__all__ = ["collectives_doc", "collectives_table"]


def collectives_doc(rows: tuple[PricedCollective, ...]) -> list[dict[str, object]]:
    """Each collective's record (kind, parallel dimension, group, bytes, link, runs,
    devices, overlap) with the bytes its devices send, its seconds end to end and its link
    energy over the iteration."""
    return [
        {
            **dataclasses.asdict(r.collective),
            "link": "inter_node" if r.collective.inter else "intra_node",
            "sent_bytes": r.sent_bytes,
            "time_s": r.time_s,
            "energy_j": r.energy_j,
        }
        for r in rows
    ]


def collectives_table(rows: tuple[PricedCollective, ...]) -> str:
    """The ledger as a table: what runs where, how often, and what it costs."""
    sent = fmt_column([r.sent_bytes for r in rows], "B")
    seconds = fmt_column([r.time_s for r in rows], "s")
    joules = fmt_column([r.energy_j for r in rows], "J")
    body = [
        [
            f"{c.parallel} {c.kind.replace('_', '-')}",
            str(c.group),
            "inter-node" if c.inter else "intra-node",
            f"{c.count:g} x {c.devices}",
            c.overlap.replace("_", " "),
            b,
            s,
            j,
        ]
        for r, b, s, j in zip(rows, sent, seconds, joules, strict=True)
        for c in (r.collective,)
    ]
    head = [
        "collective",
        "group",
        "link",
        "runs x devices",
        "runs as",
        "sent",
        "time, all runs",
        "energy",
    ]
    return table(body, head)
