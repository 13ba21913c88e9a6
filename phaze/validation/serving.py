"""The serving model against published serving measurements (``phaze validate serve``).

Each point of ``phaze/data/serving_points.toml`` (its sources at the top of the file,
docs/sources_formats_serving.md) is evaluated at its published layout through
:func:`phaze.model.serving.evaluate_layout`, and compared in its publication's metric:

* ``decode-batch1`` (gpt-fast): output tokens per second of one sequence, a 5-token prompt
  and gpt-fast's 200 new tokens, as a static batch of one (its tokens per second count the
  prompt's step too); tensor parallel over NCCL's measured all-reduce (gpt-fast runs
  torch.distributed, not an inference engine's own kernel);
* ``ttft-batch1`` (TensorRT-LLM): one prompt's time to its first token;
* ``static-throughput`` (TensorRT-LLM's ``gptSessionBenchmark``): output tokens per second
  per GPU of a static batch;
* ``max-throughput`` and ``mlperf-offline``: output tokens per second of the layout's best
  batch with no latency limit; ``mlperf-server``: the same under its TTFT and TPOT limits.

No parameter is fitted to these rows: every row is held out. A row runs at its published
weight format (``workloads/data/serving.toml`` [weights]): bf16 (fp16 at the same rate on
these GPUs), fp8 or NVFP4 (the blocks' weights and GEMMs in that format), or gpt-fast's
weight-only int8 and int4 (group size 32), and its KV cache in the format the row gives
(``kv_cache_format``: fp8 on TensorRT-LLM v1.0's ModelOpt checkpoints, derived from their
sources; bf16 where the source does not state one); a row that ran any other weight format
is listed as waiting, not evaluated.
MLPerf's rows also need the OpenOrca set's mean input length, which the sources read do not
give.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, Final

from arch_space import Accelerator, Cluster, preset
from arch_space.perf.device import device_profile
from phaze.model.serving import ServeContext, evaluate_layout
from phaze.model.serving_engines import engine_profile
from phaze.model.serving_search import search
from phaze_common.errors import ConfigError, Infeasible
from placement import parse_serving
from workloads import get_model
from workloads.serving import RequestBatch, serving_settings

__all__ = [
    "FORMATS_MODELLED",
    "METRICS",
    "ServingRow",
    "RowResult",
    "chip_device",
    "load_points",
    "evaluate_row",
    "summarize",
]

#: Weight formats the model runs, each with the serving weight format it runs as (fp16 at
#: the bf16 rate and bytes; gpt-fast's weight-only int8 and int4 at group size 32; ModelOpt
#: NVFP4).
FORMATS_MODELLED: Final = {
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "int8 (weight-only)": "int8",
    "int4 (weight-only, group size 32)": "int4",
    "nvfp4": "nvfp4",
}
#: The metric each kind of point publishes, and its unit.
METRICS: Final = {
    "decode-batch1": ("output_tokens_per_s", "tokens/s"),
    "ttft-batch1": ("ttft_s", "s"),
    "static-throughput": ("output_tokens_per_s_per_gpu", "tokens/s"),
    "max-throughput": ("output_tokens_per_s", "tokens/s"),
    "mlperf-offline": ("output_tokens_per_s", "tokens/s"),
    "mlperf-server": ("output_tokens_per_s", "tokens/s"),
}
_DATA = ("data", "serving_points.toml")


@dataclass(frozen=True, slots=True)
class ServingRow:
    """One published serving measurement: what ran (model, preset, GPUs, layout, lengths,
    formats, the engine it was measured with: a profile of :mod:`phaze.model.serving_engines`)
    and its metric (:data:`METRICS`) with the source it cites."""

    case: str
    kind: str
    chip: str
    source: str
    citation: str
    model: str
    preset: str
    gpus: int
    tp: int
    pp: int
    replicas: int
    max_batch: int | None
    input_tokens: int | None
    output_tokens: int | None
    weight_format: str
    kv_format: str
    measured: float
    ttft_limit_s: float | None = None
    tpot_limit_s: float | None = None
    fitted: bool = False
    engine: str = ""

    @property
    def kv_admission(self) -> str:
        """How its engine's scheduler reserved a request's KV cache (the engine's profile)."""
        return engine_profile(self.engine).kv_admission

    @property
    def metric(self) -> str:
        return METRICS[self.kind][0]

    @property
    def unit(self) -> str:
        return METRICS[self.kind][1]

    @property
    def waiting(self) -> str:
        """Why the row cannot be evaluated yet ('' when it can)."""
        if self.weight_format not in FORMATS_MODELLED:
            return f"waits for number formats (weights {self.weight_format})"
        if self.input_tokens is None or (self.output_tokens is None and self.kind != "ttft-batch1"):
            return "its dataset's mean input and output lengths are not collected"
        return ""


def _row(p: Mapping[str, Any], sources: Mapping[str, str]) -> ServingRow:
    kind = p["kind_of_point"]
    osl = p.get("osl_tokens") or p.get("mean_output_tokens")
    return ServingRow(
        case=p["case"],
        kind=kind,
        chip=p["chip"],
        source=p["source"],
        citation=sources[p["source"]],
        model=p["model"],
        preset=p["preset"],
        gpus=p["gpus"],
        tp=p["tp"],
        pp=p["pp"],
        replicas=p["replicas"],
        max_batch=p.get("max_batch"),
        input_tokens=p.get("isl_tokens"),
        output_tokens=None if osl is None else round(osl),
        weight_format=p["weight_format"],
        kv_format=p["kv_cache_format"],
        measured=float(p[METRICS[kind][0]]),
        ttft_limit_s=p.get("ttft_limit_s"),
        tpot_limit_s=p.get("tpot_limit_s"),
        engine=p["engine"],
    )


def _doc() -> dict[str, Any]:
    text = resources.files("phaze").joinpath(*_DATA).read_text("utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"serving_points.toml: unreadable ({type(e).__name__}: {e})") from None


def load_points() -> tuple[ServingRow, ...]:
    """The shipped serving points; a damaged file is one ConfigError naming the problem."""
    doc = _doc()
    try:
        rows = tuple(_row(p, doc["sources"]) for p in doc["point"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"serving_points.toml: unreadable ({type(e).__name__}: {e})") from None
    for r in rows:
        engine_profile(r.engine)  # a row naming no profile is one ConfigError
    return rows


def _device(row: ServingRow) -> Accelerator:
    """The row's preset, with the HBM of its chip when a ``[[chip]]`` row gives it."""
    return chip_device(row.chip, row.preset)


def chip_device(chip: str, preset_name: str) -> Accelerator:
    """``preset_name``, with the HBM of ``chip`` when a ``[[chip]]`` row of
    ``serving_points.toml`` gives it (the H200: the H100's compute with more, faster HBM), and
    the preset's measured rates (``measured_as``, since a preset with other HBM matches none)."""
    acc = preset(preset_name)
    for c in _doc().get("chip", ()):
        if c["chip"] == chip and c["preset"] == preset_name:
            return replace(
                acc,
                hbm_bytes=int(c["hbm_bytes"]),
                hbm_bandwidth_bytes_per_s=float(c["hbm_bandwidth_bytes_per_s"]),
                measured_as=preset_name,
            )
    return acc


@dataclass(frozen=True, slots=True)
class RowResult:
    """A row's prediction (None when it waits or does not fit), the layout evaluated, and
    why it was not evaluated."""

    row: ServingRow
    predicted: float | None
    layout: str = ""
    reason: str = ""

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None:
            return None
        return 100.0 * (self.predicted - self.row.measured) / self.row.measured

    def record(self) -> dict[str, object]:
        r = self.row
        return {
            "case": r.case,
            "kind": r.kind,
            "engine": r.engine,
            "metric": r.metric,
            "measured": r.measured,
            "predicted": self.predicted,
            "error_pct": self.error_pct,
            "fitted": r.fitted,
            "layout": self.layout,
            "status": "waiting" if r.waiting else ("evaluated" if self.predicted else "infeasible"),
            "reason": self.reason,
            "source": r.citation,
        }


def _context(row: ServingRow, lengths: tuple[int, int], **kw: Any) -> ServeContext:
    acc = _device(row)
    curve = device_profile(acc).intra_node
    cluster = Cluster(devices=row.gpus)
    if curve is not None:  # the node's links at the line rate of its measured curve
        cluster = replace(cluster, intra_node_bandwidth_bytes_per_s=curve.line_rate_bytes_per_s)
    kv = row.kv_format if row.kv_format in serving_settings().format_bytes else "bf16"
    weights = FORMATS_MODELLED[row.weight_format]
    requests = RequestBatch.of(*lengths, kv_format=kv, weight_format=weights)
    return ServeContext(cluster, requests, engine=row.engine, **kw)


def _predict(row: ServingRow) -> tuple[float, str]:
    """(the row's metric as the model predicts it, the layout evaluated)."""
    model, acc = get_model(row.model), _device(row)
    pool = f"t={row.tp},p={row.pp},d={row.replicas},ep=1"
    isl, osl = row.input_tokens, row.output_tokens
    if row.kind == "decode-batch1":
        ctx = _context(row, (isl, osl))
        lay = parse_serving(f"{pool},batch=1,chunk=off,batching=static")
        point = evaluate_layout(row.case, model, acc, lay, ctx)
        return point.engine.output_tokens_per_s, str(lay)
    if row.kind == "ttft-batch1":
        ctx = _context(row, (isl, 2))
        lay = parse_serving(f"{pool},batch=1,chunk=off,batching=static")
        return evaluate_layout(row.case, model, acc, lay, ctx).engine.ttft_s, str(lay)
    if row.kind == "static-throughput":
        ctx = _context(row, (isl, osl))
        lay = parse_serving(f"{pool},batch={row.max_batch},chunk=off,batching=static")
        point = evaluate_layout(row.case, model, acc, lay, ctx)
        return point.engine.output_tokens_per_s / row.gpus, str(lay)
    limits = {"ttft_limit_s": row.ttft_limit_s, "tpot_limit_s": row.tpot_limit_s}
    ctx = _context(row, (isl, osl), disaggregate=False, **limits)
    point = search(row.case, model, acc, parse_serving(pool), ctx)
    return point.engine.output_tokens_per_s, str(point.layout)


def evaluate_row(row: ServingRow) -> RowResult:
    """Predict one row (or say why it waits, or why nothing fits in the model)."""
    if row.waiting:
        return RowResult(row, None, reason=row.waiting)
    try:
        value, layout = _predict(row)
    except Infeasible as e:
        return RowResult(row, None, reason=f"infeasible in the model: {e.reason}")
    return RowResult(row, value, layout)


def evaluate_rows(
    rows: tuple[ServingRow, ...], progress: Callable[[int, ServingRow], None] | None = None
) -> list[RowResult]:
    out = []
    for i, row in enumerate(rows):
        if progress is not None:
            progress(i, row)
        out.append(evaluate_row(row))
    return out


def _group(results: list[RowResult]) -> dict[str, object]:
    errors = [abs(r.error_pct) for r in results if r.error_pct is not None]
    return {
        "rows": len(results),
        "evaluated": len(errors),
        "mean_abs_error_pct": sum(errors) / len(errors) if errors else None,
        "max_abs_error_pct": max(errors) if errors else None,
    }


def summarize(results: list[RowResult]) -> dict[str, object]:
    """Mean and largest |error| of the fitted and held-out rows, and by kind of point; the
    rows waiting for number formats and the ones infeasible in the model, counted apart."""
    live = [r for r in results if not r.row.waiting]
    kinds = dict.fromkeys(r.row.kind for r in live)
    return {
        "fitted": _group([r for r in live if r.row.fitted]),
        "held_out": _group([r for r in live if not r.row.fitted]),
        "by_kind": {k: _group([r for r in live if r.row.kind == k]) for k in kinds},
        "waiting": sum(1 for r in results if r.row.waiting),
        "infeasible": sum(1 for r in live if r.predicted is None),
    }
