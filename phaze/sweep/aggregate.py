"""Rows of one design over all the sweep's workloads (``*all*``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from results.schema import AGGREGATE_WORKLOAD, DESIGN_COLUMNS

__all__ = ["aggregate_records"]


def aggregate_records(
    points: Sequence[Mapping[str, Any]], workloads: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per design over all workloads, like the reference's "one design for a set
    of models".

    ``throughput_score`` is the geometric mean over workloads of the design's best tokens/s
    divided by the best tokens/s of any design on that workload (1 = best everywhere);
    time to train, energy, carbon, electricity and cost to train are summed over the jobs; the system cost is that of
    the one system that runs them all. tCDP is the summed carbon times the summed time;
    the schedule gap is the worst of the rows'. Only designs feasible on every workload get
    a row.
    """
    if len(workloads) < 2:
        return []
    best: dict[tuple[str, str], Mapping[str, Any]] = {}
    for p in points:
        if p["workload"] == AGGREGATE_WORKLOAD:
            continue
        k = (p["design_id"], p["workload"])
        if k not in best or (p["tokens_per_s"], p["key"]) > (
            best[k]["tokens_per_s"],
            best[k]["key"],
        ):
            best[k] = p
    top = {
        w: max((p["tokens_per_s"] for (_, ww), p in best.items() if ww == w), default=0.0)
        for w in workloads
    }
    out = []
    for did in sorted({d for d, _ in best}):
        rows = [best.get((did, w)) for w in workloads]
        if any(r is None for r in rows):
            continue
        score = math.exp(
            sum(math.log(r["tokens_per_s"] / top[w]) for r, w in zip(rows, workloads, strict=True))
            / len(rows)
        )
        first = rows[0]
        total = math.fsum(r["total_kgco2e"] for r in rows)
        d = math.fsum(r["time_to_train_s"] for r in rows)
        tco = math.fsum(r["tco_usd"] for r in rows)
        tokens = math.fsum(r["tokens_per_usd"] * r["tco_usd"] for r in rows)
        rec = {k: first[k] for k in DESIGN_COLUMNS}
        rec.update(
            key=f"{AGGREGATE_WORKLOAD}|{did}",
            workload=AGGREGATE_WORKLOAD,
            devices=first["devices"],
            feasible=True,
            throughput_score=score,
            time_to_train_s=d,
            system_cost_usd=first["system_cost_usd"],
            job_energy_j=math.fsum(r["job_energy_j"] for r in rows),
            embodied_kgco2e=math.fsum(r["embodied_kgco2e"] for r in rows),
            operational_kgco2e=math.fsum(r["operational_kgco2e"] for r in rows),
            total_kgco2e=total,
            tcdp=total * d,
            tcdp_kgco2e_days=total * d / 86400,
            electricity_usd=math.fsum(r["electricity_usd"] for r in rows),
            tco_usd=tco,
            tokens_per_usd=tokens / tco,
            schedule_gap_max=max(r["schedule_gap_max"] for r in rows),
        )
        out.append(rec)
    return out
