"""``phaze workloads``: list the model catalog and show one model's training workload."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

import click

from phaze.cli._options import default_seq_len
from phaze.cli._render import echo_json, table
from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from results.units import fmt_bytes, fmt_quantity
from workloads import (
    LayerGraph,
    Model,
    OpGraph,
    Recompute,
    TrainingSetup,
    build_layer_graph,
    catalog,
    hardware_flops_per_sequence,
    model_flops_per_sequence,
    resolve_model,
    valid_tp_widths,
)

__all__ = ["workloads"]


@click.group()
def workloads() -> None:
    """LLM workloads: the model catalog, FLOPs, memory and layer graphs."""


def _model_row(m: Model) -> dict[str, Any]:
    return {
        "name": m.name,
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "ffn_kind": m.ffn_kind,
        "vocab": m.vocab,
        "experts": m.experts,
        "top_k": m.top_k,
        "parameters": m.parameters,
        "active_parameters": m.active_parameters,
        "tokens_to_train": m.tokens_to_train,
        "source": m.source,
    }


@workloads.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def list_cmd(as_json: bool) -> None:
    """List the catalog models with their sizes, parameters and token budgets."""
    rows = [_model_row(m) for m in catalog().values()]
    if as_json:
        echo_json({"models": rows})
        return
    click.echo(
        table(
            [
                [
                    r["name"],
                    r["layers"],
                    r["hidden"],
                    r["heads"],
                    r["kv_heads"],
                    r["ffn_hidden"],
                    str(r["ffn_kind"]),
                    r["vocab"],
                    f"{r['experts']}/{r['top_k']}" if r["experts"] > 1 else "-",
                    fmt_quantity(r["parameters"]),
                    fmt_quantity(r["active_parameters"]),
                    fmt_quantity(r["tokens_to_train"]) if r["tokens_to_train"] else "-",
                ]
                for r in rows
            ],
            [
                "name",
                "layers",
                "hidden",
                "heads",
                "kv",
                "ffn",
                "kind",
                "vocab",
                "experts/k",
                "params",
                "active",
                "tokens",
            ],
        )
    )


def _op_counts(g: OpGraph) -> dict[str, int]:
    return dict(sorted(Counter(str(op.kind) for op in g.ops).items()))


def _gemm_flops(g: OpGraph) -> int:
    return sum(2 * op.macs for op in g.ops)  # GEMMs and the matmuls of fused attention


def _graph_doc(graph: LayerGraph) -> dict[str, Any]:
    classes = {
        cid: {
            name: {
                "ops": len(g.ops),
                "edges": len(g.edges),
                "gemm_flops": _gemm_flops(g),
                "vector_flops": g.flops - _gemm_flops(g),
                "op_counts": _op_counts(g),
            }
            for name, g in (
                ("forward", pg.forward),
                ("backward", pg.backward),
                ("recompute", pg.recompute),
            )
        }
        for cid, pg in graph.op_graphs.items()
    }
    return {
        "tp": graph.tp,
        "nodes": [asdict(layer) for layer in graph.layers],
        "edges": [asdict(edge) for edge in graph.edges],
        "classes": classes,
    }


@workloads.command("show")
@click.argument("name")
@click.option(
    "--seq-len",
    type=click.IntRange(1, MAX_SEQ_LEN),
    help="Tokens per sequence [default: min(2048, context)].",
)
@click.option(
    "--micro-batch",
    type=click.IntRange(1, MAX_GLOBAL_BATCH),
    default=1,
    show_default=True,
    help="Sequences per micro-batch.",
)
@click.option(
    "--tp",
    type=click.IntRange(1, MAX_DEVICES),
    default=1,
    show_default=True,
    help="Tensor-parallel width.",
)
@click.option("--sp", is_flag=True, help="Sequence parallelism on the tensor-parallel group.")
@click.option(
    "--recompute",
    type=click.Choice([r.value for r in Recompute]),
    default=Recompute.NONE.value,
    show_default=True,
    help="Activation recomputation.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def show_cmd(
    name: str,
    seq_len: int | None,
    micro_batch: int,
    tp: int,
    sp: bool,
    recompute: str,
    as_json: bool,
) -> None:
    """Show a model's FLOPs, memory and layer graph.

    NAME is a catalog name (see `phaze workloads list`) or a Hugging Face config.json.
    """
    model = resolve_model(name)
    seq_len = seq_len or default_seq_len(model)
    setup = TrainingSetup(
        seq_len=seq_len,
        global_batch=micro_batch,
        micro_batch=micro_batch,
        recompute=Recompute(recompute),
        sequence_parallel=sp,
    )
    graph = build_layer_graph(model, setup, tp)
    block = next(layer for layer in graph.layers if layer.kind == "block")
    graph_doc = _graph_doc(graph)
    doc = {
        **_model_row(model),
        "norm": model.norm,
        "positions": model.positions,
        "max_positions": model.max_positions,
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "tp": tp,
        "sequence_parallel": sp,
        "recompute": setup.recompute,
        "precision_bytes": setup.precision_bytes,
        "state_bytes_per_parameter": setup.state_bytes_per_parameter,
        "valid_tp_widths": list(valid_tp_widths(model)),
        "model_flops_per_sequence": model_flops_per_sequence(model, seq_len),
        "hardware_flops_per_sequence": hardware_flops_per_sequence(model, seq_len, setup.recompute),
        "activation_bytes_per_layer": block.activation_bytes,
        "layer_graph": graph_doc,
        "op_counts": {
            cid: {p: c["op_counts"] for p, c in passes.items()}
            for cid, passes in graph_doc["classes"].items()
        },
    }
    if as_json:
        echo_json(doc)
        return
    _echo_show(doc, graph)


def _echo_show(doc: dict[str, Any], graph: LayerGraph) -> None:
    kv = [
        ("model", doc["name"]),
        ("source", doc["source"]),
        (
            "shape",
            f"{doc['layers']} layers, hidden {doc['hidden']}, {doc['heads']} heads "
            f"({doc['kv_heads']} kv), FFN {doc['ffn_hidden']} {doc['ffn_kind']}, vocab {doc['vocab']}",
        ),
        (
            "parameters",
            f"{fmt_quantity(doc['parameters'])} (active {fmt_quantity(doc['active_parameters'])})",
        ),
        (
            "setup",
            f"seq {doc['seq_len']}, micro-batch {doc['micro_batch']}, tp {doc['tp']}, "
            f"sp {'on' if doc['sequence_parallel'] else 'off'}, recompute {doc['recompute']}",
        ),
        ("model FLOPs / sequence", fmt_quantity(doc["model_flops_per_sequence"], "FLOP")),
        ("hardware FLOPs / sequence", fmt_quantity(doc["hardware_flops_per_sequence"], "FLOP")),
        ("activation / block", f"{fmt_bytes(doc['activation_bytes_per_layer'])} per device"),
        ("valid tp widths", ", ".join(map(str, doc["valid_tp_widths"]))),
    ]
    width = max(len(k) for k, _ in kv)
    for k, v in kv:
        click.echo(f"{k.ljust(width)}  {v}")
    click.echo()
    rows = []
    edge_bytes = {e.src: e.bytes for e in graph.edges}
    layers = graph.layers
    i = 0
    while i < len(layers):
        j = i
        while j + 1 < len(layers) and layers[j + 1].class_id == layers[i].class_id:
            j += 1
        first, last = layers[i], layers[j]
        label = first.name if i == j else f"{first.name}..{last.name} (x{j - i + 1})"
        rows.append(
            [
                label,
                first.class_id,
                fmt_quantity(first.parameters),
                f"{first.activation_bytes / 2**20:.1f}",
                f"{edge_bytes[last.index] / 2**20:.1f}" if last.index in edge_bytes else "-",
            ]
        )
        i = j + 1
    click.echo(table(rows, ["layers", "class", "params/device", "activation MiB", "out MiB"]))
    click.echo()
    rows = []
    for cid, passes in doc["layer_graph"]["classes"].items():
        for name, c in passes.items():
            counts = ", ".join(f"{k} {v}" for k, v in c["op_counts"].items()) or "-"
            rows.append([cid, name, c["ops"], fmt_quantity(c["gemm_flops"], "FLOP"), counts])
    click.echo(table(rows, ["class", "pass", "ops", "GEMM FLOPs/device", "ops by kind"]))
