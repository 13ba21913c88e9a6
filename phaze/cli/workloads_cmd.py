"""``phaze workloads``: list the model catalog and show one model's training or serving
workload."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

import click

from phaze.cli._options import RecomputeMode, context_extension_option, default_seq_len
from phaze.cli._render import echo_json, table
from phaze.cli._settings import setting_option
from phaze_common.limits import MAX_DEVICES
from phaze_common.units import fmt_bytes, fmt_quantity
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
from workloads.serving import (
    RequestBatch,
    ServingPass,
    kv_cache_bytes_per_sequence,
    kv_cache_bytes_per_token,
    serving_settings,
)
from workloads.serving_costs import (
    pass_flops,
    pass_kv_read_bytes,
    pass_weight_read_bytes,
    weight_bytes_per_device,
)
from workloads.serving_ops import check_serving, serving_layer_graph

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
@setting_option("seq_len", help="Tokens per sequence [default: min(2048, context)].")
@context_extension_option
@setting_option(
    "micro_batches",
    dest="micro_batch",
    many=False,
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
    type=RecomputeMode(),
    default=Recompute.NONE.value,
    show_default=True,
    help="Activation recomputation: none, selective, full or modules:<groups joined by +>.",
)
@click.option(
    "--serve", is_flag=True, help="Show the serving workload (needs --input/--output-tokens)."
)
@setting_option("input_tokens", help="Prompt tokens (--serve).")
@setting_option("output_tokens", help="Generated tokens (--serve).")
@setting_option(
    "batches", dest="batch", many=False, default=1, show_default=True, help="Requests (--serve)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def show_cmd(
    name: str,
    seq_len: int | None,
    allow_context_extension: bool,
    micro_batch: int,
    tp: int,
    sp: bool,
    recompute: str,
    serve: bool,
    input_tokens: int | None,
    output_tokens: int | None,
    batch: int,
    as_json: bool,
) -> None:
    """Show a model's FLOPs, memory and layer graph; with --serve, its serving workload:
    prefill and decode FLOPs, the KV cache per sequence and per device, a decode step's
    block op graph.

    NAME is a catalog name (see `phaze workloads list`) or a Hugging Face config.json.
    """
    given = (input_tokens is not None, output_tokens is not None)
    if (serve and not all(given)) or (not serve and any(given)):
        raise click.UsageError(
            "--serve needs --input-tokens and --output-tokens (and they need --serve)"
        )
    model = resolve_model(name)
    if serve:
        requests = RequestBatch.of(input_tokens, output_tokens, batch)
        doc = _serve_doc(model, requests, tp)
        echo_json(doc) if as_json else _echo_serve(doc)
        return
    seq_len = seq_len or default_seq_len(model)
    setup = TrainingSetup(
        seq_len=seq_len,
        global_batch=micro_batch,
        micro_batch=micro_batch,
        recompute=recompute,
        sequence_parallel=sp,
        allow_context_extension=allow_context_extension,
    )
    graph = build_layer_graph(model, setup, tp)
    block = next(layer for layer in graph.layers if layer.kind == "block")
    graph_doc = _graph_doc(graph)
    doc = {
        **_model_row(model),
        "norm": model.norm,
        "positions": model.positions,
        "max_positions": model.max_positions,
        "sliding_window": model.sliding_window,
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "tp": tp,
        "sequence_parallel": sp,
        "recompute": setup.recompute_mode,
        "precision_bytes": setup.precision_bytes,
        "state_bytes_per_parameter": setup.state_bytes_per_parameter,
        "valid_tp_widths": list(valid_tp_widths(model)),
        "model_flops_per_sequence": model_flops_per_sequence(model, seq_len),
        "hardware_flops_per_sequence": hardware_flops_per_sequence(
            model, seq_len, setup.recompute_mode
        ),
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


def _echo_pairs(kv: list[tuple[str, str]]) -> None:
    """``name  value`` lines, the values aligned."""
    width = max(len(k) for k, _ in kv)
    for k, v in kv:
        click.echo(f"{k.ljust(width)}  {v}")


def _model_pairs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The model's name, source, shape and parameters, as both views open."""
    return [
        ("model", doc["name"]),
        ("source", doc["source"]),
        (
            "shape",
            f"{doc['layers']} layers, hidden {doc['hidden']}, {doc['heads']} heads "
            f"({doc['kv_heads']} kv), FFN {doc['ffn_hidden']} {doc['ffn_kind']}, vocab {doc['vocab']}"
            + (f", sliding window {doc['sliding_window']}" if doc.get("sliding_window") else ""),
        ),
        (
            "parameters",
            f"{fmt_quantity(doc['parameters'])} (active {fmt_quantity(doc['active_parameters'])})",
        ),
    ]


def _echo_show(doc: dict[str, Any], graph: LayerGraph) -> None:
    kv = [
        *_model_pairs(doc),
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
    _echo_pairs(kv)
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


def _op_row(op) -> dict[str, Any]:
    return {
        "name": op.name,
        "kind": str(op.kind),
        "core": str(op.core),
        "shape": f"{op.batch}x{op.m}x{op.k}x{op.n}" if op.macs else "",
        "flops": op.flops,
        "bytes_read": op.bytes_read,
        "bytes_written": op.bytes_written,
        "collective_bytes": op.collective_bytes,
    }


def _serve_doc(model: Model, requests: RequestBatch, tp: int) -> dict[str, Any]:
    """The serving workload of ``requests``: its prefill, its decode step at the mean
    context, the KV cache and the decode step's block op graph (workloads.serving)."""
    (prefill,) = requests.prefill_passes()
    decode = requests.decode_pass()
    last = ServingPass.decode(requests.batch, requests.max_kv_tokens)
    check_serving(model, last, tp)  # the model, tp and the longest context
    graphs = [serving_layer_graph(model, p, tp) for p in (prefill, decode) if p is not None]
    isl, osl, b = requests.lengths[0][0], requests.lengths[0][1], requests.batch
    doc: dict[str, Any] = {
        **_model_row(model),
        "input_tokens": isl,
        "output_tokens": osl,
        "batch": b,
        "tp": tp,
        "kv_format": requests.kv_format,
        "page_tokens": serving_settings().page_tokens,
        "valid_tp_widths": list(valid_tp_widths(model)),
        "sliding_window": model.sliding_window,
        "weight_bytes_per_device": weight_bytes_per_device(model, tp),
        "prefill_flops": pass_flops(model, prefill),
        "kv_cache_bytes_per_token_per_device": kv_cache_bytes_per_token(model, tp),
        "kv_cache_bytes_per_sequence_per_device": kv_cache_bytes_per_sequence(
            model, tp, requests.max_kv_tokens
        ),
        "kv_cache_bytes_per_device": b
        * kv_cache_bytes_per_sequence(model, tp, requests.max_kv_tokens),
        "kv_cache_bytes_per_sequence": kv_cache_bytes_per_sequence(
            model, 1, requests.max_kv_tokens
        ),
        "decode": None,
    }
    if decode is not None:
        block = graphs[1].op_graphs["block"].forward
        doc["decode"] = {
            "context_tokens": decode.context_tokens,
            "flops_per_token": pass_flops(model, decode) // b,
            "weight_read_bytes_per_device": pass_weight_read_bytes(model, tp, decode),
            "kv_read_bytes_per_device": pass_kv_read_bytes(model, tp, decode),
            "block_ops": [_op_row(op) for op in block.ops],
        }
    return doc


def _echo_serve(doc: dict[str, Any]) -> None:
    b, tp = doc["batch"], doc["tp"]
    kv = [
        *_model_pairs(doc),
        (
            "requests",
            f"{b} x ({doc['input_tokens']} in, {doc['output_tokens']} out), tp {tp}, "
            f"KV cache {doc['kv_format']} in pages of {doc['page_tokens']} tokens",
        ),
        ("weights", f"{fmt_bytes(doc['weight_bytes_per_device'])} per device"),
        (
            "prefill FLOPs",
            f"{fmt_quantity(doc['prefill_flops'], 'FLOP')} (LM head on the last token only)",
        ),
        (
            "KV cache / token",
            f"{fmt_bytes(doc['kv_cache_bytes_per_token_per_device'])} per device, all blocks",
        ),
        (
            "KV cache / sequence",
            f"{fmt_bytes(doc['kv_cache_bytes_per_sequence_per_device'])} per device, "
            f"{fmt_bytes(doc['kv_cache_bytes_per_sequence'])} in all (one copy)",
        ),
        ("KV cache / batch", f"{fmt_bytes(doc['kv_cache_bytes_per_device'])} per device"),
    ]
    decode = doc["decode"]
    if decode is not None:
        kv += [
            (
                "decode FLOPs / token",
                f"{fmt_quantity(decode['flops_per_token'], 'FLOP')} "
                f"(mean context {decode['context_tokens']} tokens)",
            ),
            (
                "decode step reads",
                f"{fmt_bytes(decode['weight_read_bytes_per_device'])} of weights, "
                f"{fmt_bytes(decode['kv_read_bytes_per_device'])} of KV cache per device",
            ),
        ]
    _echo_pairs(kv)
    if decode is None:
        return
    click.echo()
    click.echo("decode step, one block on one device:")
    rows = [
        [
            r["name"],
            r["kind"],
            r["core"],
            r["shape"] or "-",
            fmt_quantity(r["flops"], "FLOP"),
            fmt_bytes(r["bytes_read"]),
            fmt_bytes(r["bytes_written"]),
            fmt_bytes(r["collective_bytes"]) if r["collective_bytes"] else "-",
        ]
        for r in decode["block_ops"]
    ]
    heads = ["op", "kind", "core", "b x m x k x n", "FLOPs", "read", "written", "collective"]
    click.echo(table(rows, heads))
