"""The one definition of a result point's columns: name, SQL type, unit, sense and meaning.

The store's tables, the CSV/JSON export, the Pareto senses, the plots' axis labels and the
report's units all read :data:`POINT_COLUMNS`, so a metric is named, typed and explained in
exactly one place. Units are SI (docs/models.md); tCDP is in kgCO2e·s.

A record is a flat mapping from column names to plain values (``str``, ``int``, ``float``,
``bool`` or ``None``). Rows with ``workload == AGGREGATE_WORKLOAD`` hold one design's aggregate
over all the sweep's workloads (``throughput_score``, summed cost and carbon).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from phaze_common.errors import ConfigError, unknown_name

__all__ = [
    "SCHEMA_VERSION",
    "AGGREGATE_WORKLOAD",
    "Sense",
    "Column",
    "POINT_COLUMNS",
    "COLUMNS",
    "COLUMN_NAMES",
    "NUMERIC_COLUMNS",
    "DESIGN_COLUMNS",
    "TIME_TERM_COLUMNS",
    "ENERGY_TERM_COLUMNS",
    "HEADROOM_COLUMNS",
    "SERVE_COLUMNS",
    "AT_RATE_COLUMNS",
    "PAIR_COLUMNS",
    "PAIR_COLUMN_NAMES",
    "column",
    "numeric_column",
]

# Version of the store layout and of the exported documents; bump on any incompatible change.
# 4: usd_per_device_hour; system cost, cost to train and embodied carbon count the whole
# system (hosts, network, data centre). 5: serving points (mode, batch, lengths, TTFT, TPOT,
# rates, energy, cost and carbon per token). 6: the design's tensor-core formats and each
# point's precision recipe. 7: serving points simulated at a rate (p99 TTFT and TPOT,
# stability, SLO attainment, cost per token at the rate, feasibility at the rate). 8: p50
# latencies and goodput at the rate; the ``pairs`` table of prefill-decode design pairs.
SCHEMA_VERSION: Final = 8

# The workload name of the per-design aggregate rows.
AGGREGATE_WORKLOAD: Final = "*all*"

Sense = Literal["max", "min"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the ``points`` table.

    ``sense`` is how a better value moves ("max", "min", or ``None`` for a parameter that has no
    better direction); ``label`` is the short human name used on plot axes and table headers;
    ``unit`` is the SI unit as displayed ("" for a pure number).
    """

    name: str
    sqltype: Literal["TEXT", "INTEGER", "REAL"]
    unit: str
    sense: Sense | None
    label: str
    description: str

    @property
    def numeric(self) -> bool:
        return self.sqltype != "TEXT"

    @property
    def axis_label(self) -> str:
        """``label (unit)``, or just the label for unit-less numbers."""
        return f"{self.label} ({self.unit})" if self.unit else self.label


def _c(name, sqltype, unit, sense, label, description) -> Column:
    return Column(name, sqltype, unit, sense, label, description)


POINT_COLUMNS: Final[tuple[Column, ...]] = (
    # identity
    _c("key", "TEXT", "", None, "key", "content key of (workload, design, knobs), set by the sweep"),
    _c("workload", "TEXT", "", None, "workload", "model trained ('*all*' = aggregate over workloads)"),
    _c("design_id", "TEXT", "", None, "design id", "content id of the accelerator design"),
    _c("design_name", "TEXT", "", None, "design", "human name of the design (a preset's name)"),
    # accelerator parameters
    _c("num_tc", "INTEGER", "", None, "tensor cores", "tensor (systolic-array) cores per device"),
    _c("tc_rows", "INTEGER", "", None, "TC rows", "rows of each tensor core's array"),
    _c("tc_cols", "INTEGER", "", None, "TC cols", "columns of each tensor core's array"),
    _c("num_vc", "INTEGER", "", None, "vector cores", "vector cores per device"),
    _c("vc_lanes", "INTEGER", "", None, "VC lanes", "lanes of each vector core"),
    _c("glb_bytes", "INTEGER", "B", None, "global buffer", "on-chip global buffer per device"),
    _c("hbm_bytes", "INTEGER", "B", None, "HBM", "HBM capacity per device"),
    _c("hbm_bandwidth_bytes_per_s", "REAL", "B/s", None, "HBM bandwidth", "HBM bandwidth per device"),
    _c("clock_hz", "REAL", "Hz", None, "clock", "core clock frequency"),
    _c("node_nm", "INTEGER", "nm", None, "node", "process technology node"),
    _c("formats", "TEXT", "", None, "formats", "number formats of the tensor cores (bf16+fp8)"),
    # training knobs and placement
    _c("devices", "INTEGER", "", None, "devices", "accelerators in the cluster"),
    _c("micro_batch", "INTEGER", "", None, "micro-batch", "micro-batch size (sequences)"),
    _c("recompute", "TEXT", "", None, "recompute", "activation recomputation mode"),
    _c("precision", "TEXT", "", None, "precision", "precision recipe (the blocks' GEMM format)"),
    _c("feasible", "INTEGER", "", None, "feasible", "1 if a placement fits, else 0"),
    _c("reason", "TEXT", "", None, "reason", "why the point is infeasible"),
    _c("tp", "INTEGER", "", None, "TP", "tensor-parallel width"),
    _c("pp", "INTEGER", "", None, "PP", "pipeline-parallel depth (stages)"),
    _c("dp", "INTEGER", "", None, "DP", "data-parallel width"),
    # speed
    _c("iteration_s", "REAL", "s", "min", "iteration time", "time of one training iteration"),
    _c("samples_per_s", "REAL", "samples/s", "max", "throughput", "training samples per second"),
    _c("tokens_per_s", "REAL", "tokens/s", "max", "throughput", "training tokens per second"),
    _c("mfu", "REAL", "", "max", "MFU", "model FLOPs utilisation, fraction of peak (0-1)"),
    _c("time_to_train_s", "REAL", "s", "min", "time to train", "D: tokens to train / tokens per s / goodput (wall clock)"),
    # where one iteration's time goes (placement.iteration.IterationTime): the terms sum to
    # iteration_s; the steady pipeline's terms are the bottleneck device's
    _c("compute_s", "REAL", "s", "min", "compute",
       "compute in the steady pipeline, without recomputation and exposed collectives"),
    _c("recompute_s", "REAL", "s", "min", "recompute", "forward work re-run before the backward pass"),
    _c("tp_comm_exposed_s", "REAL", "s", "min", "TP comm.",
       "tensor-parallel collectives no compute hides"),
    _c("ep_comm_exposed_s", "REAL", "s", "min", "EP all-to-all",
       "expert-parallel token all-to-alls no compute hides"),
    _c("cp_comm_exposed_s", "REAL", "s", "min", "CP K/V ring",
       "context-parallel K/V ring transfers no compute hides"),
    _c("pp_comm_exposed_s", "REAL", "s", "min", "PP comm.", "pipeline receives between stages"),
    _c("bubble_s", "REAL", "s", "min", "bubble", "pipeline fill and drain: L (p - 1) / v"),
    _c("dp_comm_exposed_s", "REAL", "s", "min", "DP comm.",
       "data-parallel gradient reduction (and ZeRO gathers) left after the pipeline flush"),
    _c("embedding_comm_exposed_s", "REAL", "s", "min", "tied emb. comm.",
       "all-reduce of the tied word embedding's gradients between first and last stage"),
    _c("optimizer_s", "REAL", "s", "min", "optimizer", "optimizer step"),
    # energy
    _c("energy_per_batch_j", "REAL", "J", "min", "energy per batch", "IT energy of one iteration, all devices and hosts"),
    _c("energy_compute_j", "REAL", "J", "min", "compute energy", "MAC and vector energy per batch"),
    _c("energy_memory_j", "REAL", "J", "min", "memory energy", "buffer and HBM energy per batch"),
    _c("energy_static_j", "REAL", "J", "min", "static energy", "leakage while computing, per batch"),
    _c("energy_network_j", "REAL", "J", "min", "network energy", "link energy per batch"),
    _c("energy_idle_j", "REAL", "J", "min", "idle energy", "devices' idle power while they wait, per batch"),
    _c("energy_host_j", "REAL", "J", "min", "host energy", "host servers' energy per batch"),
    _c("job_energy_j", "REAL", "J", "min", "job energy", "energy of the whole training job"),
    _c("avg_power_w", "REAL", "W", "min", "average power", "average power of all devices and hosts"),
    # area, cost, carbon
    _c("area_mm2", "REAL", "mm²", "min", "die area", "silicon area of one device (all its dies)"),
    _c("peak_flops", "REAL", "FLOP/s", "max", "peak compute", "peak FLOP/s of one device"),
    _c("device_cost_usd", "REAL", "USD", "min", "chip cost", "manufacturing cost of one device's chip (die, HBM, package, test)"),
    _c("system_cost_usd", "REAL", "USD", "min", "system cost", "capex: accelerators, hosts, network and data centre"),
    _c("electricity_usd", "REAL", "USD", "min", "electricity", "job energy x PUE x electricity price"),
    _c("tco_usd", "REAL", "USD", "min", "cost to train", "devices x wall-clock time x cost per device-hour (capital, interest, upkeep, electricity)"),
    _c("usd_per_device_hour", "REAL", "USD", "min", "cost per device-hour", "cost to train / device-hours held"),
    _c("tokens_per_usd", "REAL", "tokens/USD", "max", "tokens per dollar", "tokens to train / cost to train"),
    _c("embodied_kgco2e", "REAL", "kgCO2e", "min", "embodied carbon", "manufacturing carbon of boards, hosts and network charged to the job"),
    _c("operational_kgco2e", "REAL", "kgCO2e", "min", "operational carbon", "job energy x PUE x grid intensity"),
    _c("total_kgco2e", "REAL", "kgCO2e", "min", "total carbon", "tC = embodied + operational"),
    _c("tcdp", "REAL", "kgCO2e·s", "min", "tCDP", "total carbon x time to train, in kgCO2e·s"),
    _c("tcdp_kgco2e_days", "REAL", "kgCO2e·day", "min", "tCDP", "tCDP in kgCO2e·days"),
    _c("memory_per_device_bytes", "REAL", "B", "min", "memory per device", "peak memory on one device"),
    # the design against its budgets (arch_space.power.Headroom); set on evaluated points
    _c("die_area_mm2", "REAL", "mm²", "min", "area of one die", "one die as made, spare cores too"),
    _c("area_budget_mm2", "REAL", "mm²", None, "area budget", "largest die: the reticle"),
    _c("area_headroom", "REAL", "", "max", "area headroom", "1 - die area / area budget"),
    _c("power_drawn_w", "REAL", "W", "min", "power drawn",
       "board power under tensor load (a large GEMM), held at the limit by a preset's limiter"),
    _c("power_asked_w", "REAL", "W", "min", "power asked",
       "board power under tensor load the energy model asks for without a limiter"),
    _c("power_budget_w", "REAL", "W", None, "board limit",
       "board power limit: a preset's host server's, else its node's default budget"),
    _c("power_headroom", "REAL", "", "max", "power headroom",
       "1 - power asked / board limit (negative: how far a limiter throttles)"),
    _c("throughput_score", "REAL", "", "max", "throughput score",
       "aggregate rows: geometric mean over workloads of throughput / best throughput"),
    # serving points (mode "serve"): one layout at one batch; their cost and carbon columns
    # above are those of serving the workload's output tokens (docs/serving.md)
    _c("mode", "TEXT", "", None, "mode", "train, or serve (inference serving)"),
    _c("batch", "INTEGER", "", None, "batch", "serving: sequences in flight per decode replica"),
    _c("input_tokens", "INTEGER", "tokens", None, "ISL", "serving: prompt tokens per request"),
    _c("output_tokens", "INTEGER", "tokens", None, "OSL", "serving: generated tokens per request"),
    _c("ttft_s", "REAL", "s", "min", "TTFT", "serving: mean time to the first token"),
    _c("tpot_s", "REAL", "s", "min", "TPOT", "serving: mean time per output token after the first"),
    _c("output_tokens_per_s", "REAL", "tokens/s", "max", "output throughput",
       "serving: output tokens per second of all devices"),
    _c("tokens_per_s_per_device", "REAL", "tokens/s", "max", "output tokens/s per device",
       "serving: output tokens per second per device"),
    _c("requests_per_s", "REAL", "requests/s", "max", "requests/s", "serving: requests completed per second"),
    _c("kv_cache_bytes_per_device", "REAL", "B", None, "KV cache per device",
       "serving: the KV cache a device's sequences hold"),
    _c("energy_per_token_j", "REAL", "J", "min", "energy per token",
       "serving: IT energy per output token (compute, memory, static, network, idle, host)"),
    _c("usd_per_million_tokens", "REAL", "USD", "min", "$ per Mtoken",
       "serving: cost of a million output tokens (device-hours at the TCO rate, electricity)"),
    _c("kgco2e_per_million_tokens", "REAL", "kgCO2e", "min", "carbon per Mtoken",
       "serving: embodied share and operational carbon of a million output tokens"),
    _c("meets_slo", "INTEGER", "", None, "meets SLO", "serving: 1 if the TTFT and TPOT limits are met"),
    # a serving sweep with a rate: the point's layout simulated under that load
    _c("ttft_p99_s", "REAL", "s", "min", "p99 TTFT at rate",
       "serving at the sweep's rate: 99th-percentile time to first token (null when unstable)"),
    _c("tpot_p99_s", "REAL", "s", "min", "p99 TPOT at rate",
       "serving at the sweep's rate: 99th-percentile time per output token (null when unstable)"),
    _c("ttft_p50_s", "REAL", "s", "min", "p50 TTFT at rate",
       "serving at the sweep's rate: median time to first token (null when unstable)"),
    _c("tpot_p50_s", "REAL", "s", "min", "p50 TPOT at rate",
       "serving at the sweep's rate: median time per output token (null when unstable)"),
    _c("stable", "INTEGER", "", None, "stable at rate",
       "serving at the sweep's rate: 1 if the queue stays bounded, 0 if it grows"),
    _c("slo_attainment", "REAL", "", "max", "SLO attainment",
       "serving at the sweep's rate: share of requests within the TTFT and TPOT limits (0-1)"),
    _c("goodput_requests_per_s", "REAL", "1/s", "max", "goodput at rate",
       "serving at the sweep's rate: requests per second completed within the limits"),
    _c("usd_per_million_tokens_at_rate", "REAL", "USD", "min", "$ per Mtoken at rate",
       "serving at the sweep's rate: device-hours per million output tokens served at the rate "
       "(null when the point is not feasible at the rate)"),
    _c("feasible_at_rate", "INTEGER", "", None, "feasible at rate",
       "serving at the sweep's rate: 1 if stable and the limits are met (99 % attainment)"),
    _c("placement", "TEXT", "", None, "placement", "the chosen placement, as JSON text"),
    # how exact the layer schedules are
    _c("schedule_gap_max", "REAL", "", None, "worst schedule gap",
       "worst gap of the point's layer schedules: (makespan - proven lower bound) / makespan; "
       "0 = every pass proven optimal"),
    _c("schedule_methods", "TEXT", "", None, "schedule methods",
       "how the distinct layer passes were closed, as method:count (bound = meets the lower "
       "bound, search = branch and bound, ilp/ilp_cores = MIP, list = list schedule, unproven)"),
)  # fmt: skip

COLUMNS: Final = MappingProxyType({c.name: c for c in POINT_COLUMNS})
COLUMN_NAMES: Final = tuple(c.name for c in POINT_COLUMNS)
NUMERIC_COLUMNS: Final = tuple(c.name for c in POINT_COLUMNS if c.numeric and c.name != "feasible")

# Columns of the ``designs`` table besides its free-form JSON ``extra``: a point's design identity
# and accelerator parameters, then area, peak compute and cost. A design record's other keys
# (whatever the sweep knows about a design) are kept in ``extra``.
DESIGN_COLUMNS: Final = (
    *COLUMN_NAMES[COLUMN_NAMES.index("design_id") : COLUMN_NAMES.index("devices")],
    "area_mm2",
    "peak_flops",
    "device_cost_usd",
)

# The terms of an iteration's time (they sum to iteration_s), of its energy (they sum to
# energy_per_batch_j), and the design's headroom figures, in the order tables show them.
TIME_TERM_COLUMNS: Final = (
    "compute_s",
    "recompute_s",
    "tp_comm_exposed_s",
    "ep_comm_exposed_s",
    "cp_comm_exposed_s",
    "pp_comm_exposed_s",
    "bubble_s",
    "dp_comm_exposed_s",
    "embedding_comm_exposed_s",
    "optimizer_s",
)
ENERGY_TERM_COLUMNS: Final = (
    "energy_compute_j",
    "energy_memory_j",
    "energy_static_j",
    "energy_network_j",
    "energy_idle_j",
    "energy_host_j",
)
HEADROOM_COLUMNS: Final = (
    "die_area_mm2",
    "area_budget_mm2",
    "area_headroom",
    "power_drawn_w",
    "power_asked_w",
    "power_budget_w",
    "power_headroom",
)

# The columns a serving point adds (mode "serve").
SERVE_COLUMNS: Final = COLUMN_NAMES[COLUMN_NAMES.index("batch") : COLUMN_NAMES.index("placement")]
# The serving columns only a sweep with a rate fills (null without one).
AT_RATE_COLUMNS: Final = COLUMN_NAMES[
    COLUMN_NAMES.index("ttft_p99_s") : COLUMN_NAMES.index("placement")
]

# The ``pairs`` table: a serving sweep's prefill pool of one design with the decode pool of
# another, simulated at the sweep's rate (phaze.sweep.pairs); the figures as a point's.
PAIR_COLUMNS: Final[tuple[Column, ...]] = (
    _c("key", "TEXT", "", None, "key", "content key of (workload, both pools, weights, rate)"),
    _c("workload", "TEXT", "", None, "workload", "model served"),
    _c("prefill_design_id", "TEXT", "", None, "prefill design id", "the prefill pool's design"),
    _c("prefill_design_name", "TEXT", "", None, "prefill design", "its name (a preset's)"),
    _c("decode_design_id", "TEXT", "", None, "decode design id", "the decode pool's design"),
    _c("decode_design_name", "TEXT", "", None, "decode design", "its name (a preset's)"),
    _c("precision", "TEXT", "", None, "precision", "the weights' format's precision recipe"),
    _c("batch", "INTEGER", "", None, "batch", "sequences in flight per decode replica"),
    _c("prefill_strategy", "TEXT", "", None, "prefill pool", "the prefill pool's layout"),
    _c("decode_strategy", "TEXT", "", None, "decode pool", "the decode pool's layout"),
    _c("prefill_devices", "INTEGER", "", None, "prefill devices", "devices of the prefill pool"),
    _c("decode_devices", "INTEGER", "", None, "decode devices", "devices of the decode pool"),
    _c("devices", "INTEGER", "", None, "devices", "devices of both pools"),
    _c(
        "kv_transfer_s",
        "REAL",
        "s",
        "min",
        "KV transfer",
        "a prompt's KV cache sent from the prefill pool to the decode pool, across nodes",
    ),
    *(
        c
        for c in POINT_COLUMNS
        if c.name
        in (
            "ttft_p99_s",
            "tpot_p99_s",
            "ttft_p50_s",
            "tpot_p50_s",
            "stable",
            "slo_attainment",
            "goodput_requests_per_s",
            "usd_per_million_tokens_at_rate",
            "feasible_at_rate",
        )
    ),
)
PAIR_COLUMN_NAMES: Final = tuple(c.name for c in PAIR_COLUMNS)

assert len(COLUMNS) == len(POINT_COLUMNS), "duplicate column name"
assert set(DESIGN_COLUMNS) | set(TIME_TERM_COLUMNS) | set(ENERGY_TERM_COLUMNS) <= set(COLUMNS)
assert set(HEADROOM_COLUMNS) <= set(COLUMNS)


def column(name: str) -> Column:
    """The column called ``name``; an unknown name raises a ConfigError naming the nearest."""
    try:
        return COLUMNS[name]
    except KeyError:
        raise unknown_name("column", name, COLUMN_NAMES) from None


def numeric_column(name: str) -> Column:
    """The numeric metric ``name`` (anything a Pareto front or a plot axis can use)."""
    if name not in COLUMNS:
        raise unknown_name("metric", name, NUMERIC_COLUMNS)
    col = COLUMNS[name]
    if name not in NUMERIC_COLUMNS:
        raise ConfigError(
            f"metric {name!r} is not a number (it holds {col.description}); "
            f"use a numeric column such as tokens_per_s, system_cost_usd, total_kgco2e or tcdp"
        )
    return col
