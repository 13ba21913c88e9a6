"""``phaze place FILE.json``: solve a Piper / Phaze-reference device-placement instance."""

from __future__ import annotations

from pathlib import Path

import click

from phaze.cli._render import echo_json, table
from phaze.executors.progress import ticking
from placement import read_reference_instance, reference_document, solve_reference

__all__ = ["place"]


@click.command("place")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--method",
    type=click.Choice(["auto", "chain", "dag"]),
    default="auto",
    show_default=True,
    help="auto: the chain fast path when the layer graph is a chain, else the downset DP.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (reference keys).")
def place(file: Path, method: str, as_json: bool) -> None:
    """Best pipeline stages, tensor- and data-parallel degree for a placement instance.

    FILE is a JSON instance in the format of Piper and the Phaze reference (keys
    maxMemoryPerDevice, maxDevices, bandwidth, mbsInBatch, activationRecomputation,
    optimizerAlgorithm, nodes and edges keyed by tensor-parallel width). The time per batch
    is the reference's own objective. Exits 3 when no placement fits the memory.
    """
    instance = read_reference_instance(file)  # sizes above phaze_common.limits are refused there
    result = ticking("phaze place")(solve_reference)(instance, method=method)
    doc = reference_document(result)
    if as_json:
        echo_json(doc)
        return
    rows = [
        (i, s["devicesForStage"], len(s["nodes"]), _ids(s["nodes"]))
        for i, s in enumerate(doc["stages"])
    ]
    click.echo(table(rows, ["stage", "devices", "layers", "node ids"]))
    click.echo(f"tensorParallelDegree: {doc['tensorParallelDegree']}")
    click.echo(f"dataParallelDegree: {doc['dataParallelDegree']}")
    click.echo(f"finalTimePerBatch: {doc['finalTimePerBatch']:.6g} s")


def _ids(ids: list[int]) -> str:
    """Node ids, runs of consecutive ids shortened to a-b."""
    parts, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
