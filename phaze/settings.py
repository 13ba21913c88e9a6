"""Every sweep, evaluate and serve setting, declared once.

A :class:`Setting` names one knob: its ``[sweep]`` key (also the field of its section's
record, :class:`~phaze.config.SweepConfig` or its ``training`` or ``serving``, and, unless
``api`` says otherwise, the :func:`phaze.api.search` keyword), its section (shared by both
modes, training or serving),
type, default (what an empty ``[sweep]`` table gets), allowed range, unit, help text, the
field of the model it fills (``Context.seq_len``, ``Layout.mbs``, ...), its command-line
flag, the store column it is recorded in and its label in a point's key.

The command-line options are generated from this table (:mod:`phaze.cli._settings`);
:mod:`phaze.config` checks the ranges it declares; tests/test_settings_table.py checks the
configuration's fields and defaults, :data:`phaze_common.sweep_modes.MODE_KEYS`, the API's
keywords, the store's columns and the point keys against it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from workloads.framework import DEFAULT_FRAMEWORK
from workloads.precision import DEFAULT_PRECISION

__all__ = [
    "MODE_SECTIONS",
    "SECTIONS",
    "Setting",
    "merge_sections",
    "SETTINGS",
    "flag_of",
    "section_keys",
    "setting",
]

#: The sections of the settings: those both modes use, the training ones and the serving
#: ones (:data:`phaze_common.sweep_modes.MODE_KEYS` lists the last two by mode).
SECTIONS: Final = ("sweep", "training", "serving")
#: The section of each mode's own settings.
MODE_SECTIONS: Final = MappingProxyType({"train": "training", "serve": "serving"})
_KINDS: Final = ("int", "float", "str", "bool", "tokens", "recompute", "path")


@dataclass(frozen=True, slots=True)
class Setting:
    """One knob.

    ``kind`` is ``int``, ``float``, ``str``, ``bool``, ``tokens`` (a count or text such as
    "2T"), ``recompute`` (a recompute mode) or ``path`` (a file); ``many`` says the ``[sweep]`` key holds a list
    (each value swept). ``lo`` and ``hi`` bound a number in ``unit`` (an end left out when
    ``lo_open`` / ``hi_open``; None: unbounded). ``choices`` names where the allowed names are
    (``"module:name"``, read only when asked, so the table stays light).
    ``fills`` is the model field the value ends up in (``Class.field``). ``flag`` is the
    command-line option (None: none); a ``--no-`` flag of a bool sets it false, a
    ``--yes/--no`` pair true or false (unset: None), any other sets it true;
    ``flag_per_unit`` is the flag's units per ``unit`` (1000: milliseconds for seconds,
    1e-9: GB/s for B/s). ``column`` is the store column recording it, ``key_label`` its label in a
    point's key (None: neither); ``api`` the :func:`phaze.api.search` keyword when it is
    not ``key`` ("" for none: the ``cluster`` argument gives it). ``in_file`` False: a
    setting of one evaluation or serve only (its command's option, a keyword of
    :func:`phaze.api.evaluate` or :func:`phaze.api.serve`), which no sweep file takes.
    """

    key: str
    section: str
    kind: str
    default: Any
    unit: str
    help: str
    fills: str
    many: bool = False
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: str | None = None
    flag: str | None = None
    flag_per_unit: float = 1.0
    column: str | None = None
    key_label: str | None = None
    api: str | None = None
    in_file: bool = True

    def __post_init__(self) -> None:
        if self.section not in SECTIONS or self.kind not in _KINDS:
            raise ValueError(f"setting {self.key}: section {self.section!r}, kind {self.kind!r}")

    @property
    def api_name(self) -> str:
        """The :func:`phaze.api.search` keyword ("" for none)."""
        return self.key if self.api is None else self.api

    @property
    def dest(self) -> str:
        """The command's parameter name: the key, or the flag's own name where the flag is in
        other units or sets a bool false (``ttft_ms``, ``no_prune``)."""
        if self.flag is not None and (self.flag_per_unit != 1 or self.flag.startswith("--no-")):
            return self.flag.removeprefix("--").replace("-", "_")
        return self.key

    def allowed(self) -> tuple[str, ...]:
        """The names a ``choices`` setting allows: ``choices`` is ``module:name.attribute``,
        each name called when it is a function."""
        if self.choices is None:
            return ()
        from importlib import import_module

        module, path = self.choices.split(":")
        value = import_module(module)
        for name in path.split("."):
            value = getattr(value, name)
            value = value() if callable(value) else value
        return tuple(value)

    def in_flag_units(self, value: float) -> float:
        """``value`` (in :attr:`unit`) in the flag's units; a fraction ``flag_per_unit``
        divides by its whole inverse, so that 300e9 B/s is 300.0 GB/s exactly."""
        per = self.flag_per_unit
        return value * per if per >= 1 else value / round(1 / per)

    def range_text(self, per_unit: float = 1.0) -> str:
        """The range, in units of ``1 / per_unit`` of :attr:`unit`: ``(0, 1e+06]``."""
        lo = -math.inf if self.lo is None else self.lo * per_unit
        hi = math.inf if self.hi is None else self.hi * per_unit
        left = "(" if self.lo_open or self.lo is None else "["
        right = ")" if self.hi_open or self.hi is None else "]"
        return f"{left}{lo:g}, {hi:g}{right}"

    def range_problem(self, value: Any) -> str | None:
        """Why a number is outside the declared range (None when it is inside or not a
        number), naming the key, the value and the range."""
        if self.kind not in ("int", "float") or isinstance(value, bool):
            return None
        if not isinstance(value, int | float):
            return None
        above = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
        below = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
        if above and below:
            return None
        return f"{self.key} = {value!r} must be in {self.range_text()} ({self.unit or 'count'})"

    def from_flag(self, value: Any) -> Any:
        """A flag's value in the key's units (None: not given)."""
        if value is None or value == ():
            return None
        if self.kind == "bool":
            if "/" in str(self.flag):
                return value
            return (not str(self.flag).startswith("--no-")) if value else None
        if self.kind == "tokens":
            from phaze.model.run import parse_tokens

            return parse_tokens(value)
        if self.flag_per_unit > 1:
            return value / self.flag_per_unit
        if self.flag_per_unit < 1:
            return value * round(1 / self.flag_per_unit)
        return value


_POS: Final = {"lo": 0, "lo_open": True}
_SECONDS: Final = {**_POS, "hi": 1e6, "unit": "s", "flag_per_unit": 1e3}
# a link's bandwidth, given in GB/s on the command line
_GBPS: Final = {**_POS, "hi": 1e15, "flag_per_unit": 1e-9}


def _s(key: str, section: str, kind: str, default: Any, help: str, fills: str, **kw) -> Setting:
    return Setting(key, section, kind, default, kw.pop("unit", ""), help, fills, **kw)


_TABLE: Final = (
    _s("workloads", "sweep", "str", ("gpt3-1.3b", "llama2-7b"),
       "Workload name or config.json (repeatable).", "Evaluation.workload", many=True,
       flag="--workload", column="workload"),
    _s("space", "sweep", "str", "tiny",
       "Design space: a shipped name (tiny, default, reticle) or a TOML file.",
       "DesignSpace.name", flag="--space"),
    _s("devices", "sweep", "int", 64, "Accelerators in the cluster.", "Cluster.devices",
       lo=1, hi=MAX_DEVICES, flag="--devices", column="devices", api=""),
    _s("devices_per_node", "sweep", "int", 8, "Accelerators per node.",
       "Cluster.devices_per_node", lo=1, hi=MAX_DEVICES, flag="--devices-per-node", api=""),
    _s("intra_node_bandwidth_bytes_per_s", "sweep", "float", 300e9,
       "Intra-node link bandwidth per device, GB/s.", "Cluster.intra_node_bandwidth_bytes_per_s",
       unit="B/s", **_GBPS, flag="--intra-node-gbps", api=""),
    _s("inter_node_bandwidth_bytes_per_s", "sweep", "float", 25e9,
       "Inter-node link bandwidth per device, GB/s.", "Cluster.inter_node_bandwidth_bytes_per_s",
       unit="B/s", **_GBPS, flag="--inter-node-gbps", api=""),
    _s("intra_node_latency_s", "sweep", "float", 2e-6, "Intra-node link latency.",
       "Cluster.intra_node_latency_s", unit="s", lo=0, api=""),
    _s("inter_node_latency_s", "sweep", "float", 5e-6, "Inter-node link latency.",
       "Cluster.inter_node_latency_s", unit="s", lo=0, api=""),
    _s("seq_len", "training", "int", 2048, "Tokens per sequence.", "Context.seq_len",
       unit="tokens", lo=1, hi=MAX_SEQ_LEN, flag="--seq-len"),
    _s("global_batch", "training", "int", 512, "Sequences per iteration.",
       "Context.global_batch", lo=1, hi=MAX_GLOBAL_BATCH, flag="--global-batch"),
    _s("micro_batches", "training", "int", (1, 2, 4), "Micro-batch size (repeatable).",
       "Layout.mbs", many=True, lo=1, hi=MAX_GLOBAL_BATCH, flag="--micro-batch",
       column="micro_batch", key_label="mbs"),
    _s("hbm_gib", "sweep", "float", (),
       "HBM per device in GiB for the space's designs (repeatable); presets keep their own.",
       "Accelerator.hbm_bytes", unit="GiB", many=True, **_POS, hi=1e6, flag="--hbm-gib",
       column="hbm_bytes", api="hbm_sizes"),
    _s("recompute", "training", "recompute", ("none", "full"),
       "Recompute mode (repeatable): none, selective, full or modules:<groups joined by +>.",
       "Layout.recompute", many=True, flag="--recompute", column="recompute",
       key_label="recompute", api="recompute_modes"),
    _s("precision", "training", "str", (DEFAULT_PRECISION,),
       "Precision recipe (repeatable): each design runs those its tensor cores have the "
       "format for.", "Layout.precision", many=True,
       choices="workloads.precision:recipe_names", flag="--precision", column="precision",
       key_label="precision", api="precisions"),
    _s("ep", "training", "int", (), "Expert-parallel degrees the search may choose.",
       "Context.ep_degrees", many=True, lo=1, hi=MAX_DEVICES),
    _s("cp", "training", "int", (), "Context-parallel degrees the search may choose.",
       "Context.cp_degrees", many=True, lo=1, hi=MAX_DEVICES),
    _s("zero", "training", "int", (),
       "ZeRO stage the search may choose (repeatable) [default: 0, 1; 2, 3 when neither "
       "fits].", "Context.zero_stages", many=True, lo=0, hi=3, flag="--zero"),
    _s("sequence_parallel", "training", "bool", None,
       "Sequence parallelism: true or false fixes it; unset searches it.",
       "Context.sequence_parallel", flag="--sp/--no-sp"),
    _s("objectives", "sweep", "str", ("tokens_per_s", "tco_usd", "total_kgco2e", "tcdp"),
       "Metric to rank by, +max or -min (repeatable).", "Objective.metric", many=True,
       flag="--objective"),
    _s("presets", "sweep", "str", ("tpuv4", "a100", "h100"),
       "Accelerator presets evaluated beside the space as reference points.",
       "Accelerator.name", many=True, column="design_name"),
    _s("prune", "sweep", "bool", True, "Evaluate every design (no bound-based pruning).",
       "SweepConfig.prune", flag="--no-prune"),
    _s("framework", "training", "str", DEFAULT_FRAMEWORK,
       f"Overlap profile of the training framework [default: {DEFAULT_FRAMEWORK}].",
       "Context.framework", choices="workloads.framework:framework_names", flag="--framework"),
    _s("tokens_to_train", "training", "tokens", None,
       "Tokens to train every workload: 2e12, 2T, 300B [default: each model's published "
       "budget].", "Context.tokens_to_train", unit="tokens", flag="--tokens"),
    _s("optimizer_state", "training", "str", None,
       "Formats of the training state's parts, changed from the precision recipe's: "
       "master=fp32|none, moments=fp32|bf16|8bit, grads=fp32|bf16|bf16+fp32 "
       "(e.g. master=fp32,moments=bf16,grads=fp32: DeepSeek-V3's 14 B per parameter).",
       "Context.optimizer_state", flag="--optimizer-state"),
    _s("allow_context_extension", "training", "bool", False,
       "Let --seq-len exceed a rotary or ALiBi model's context (max_positions), for a run "
       "that extends it (RoPE scaling); a learned position table is refused still.",
       "Context.allow_context_extension", flag="--allow-context-extension"),
    _s("mode", "sweep", "str", "train",
       "train (the training knobs) or serve (inference serving) [default: train].",
       "SweepConfig.mode", choices="phaze_common.sweep_modes:MODES", flag="--mode"),
    _s("input_tokens", "serving", "int", 2048, "Serving: prompt tokens (ISL).",
       "RequestBatch.lengths", unit="tokens", lo=1, hi=MAX_SEQ_LEN, flag="--input-tokens",
       column="input_tokens", key_label="isl"),
    _s("output_tokens", "serving", "int", 128, "Serving: tokens generated (OSL).",
       "RequestBatch.lengths", unit="tokens", lo=2, hi=MAX_SEQ_LEN, flag="--output-tokens",
       column="output_tokens", key_label="osl"),
    _s("ttft_limit_s", "serving", "float", None, "Serving: mean TTFT limit.",
       "ServeContext.ttft_limit_s", **_SECONDS, flag="--ttft-ms"),
    _s("tpot_limit_s", "serving", "float", None, "Serving: mean TPOT limit.",
       "ServeContext.tpot_limit_s", **_SECONDS, flag="--tpot-ms"),
    _s("batches", "serving", "int", (1, 4, 16, 64, 256),
       "Serving: sequences in flight per replica (repeatable) [default: 1, 4, 16, 64, 256].",
       "ServingLayout.batch", many=True, lo=1, hi=MAX_GLOBAL_BATCH, flag="--batch",
       column="batch", key_label="batch"),
    _s("disaggregate", "serving", "bool", True,
       "Serving: search separate prefill and decode pools too.", "ServeContext.disaggregate",
       flag="--no-disaggregate"),
    _s("hbm_tbps", "sweep", "float", (),
       "HBM bandwidth in TB/s for the space's designs (repeatable); presets keep their own.",
       "Accelerator.hbm_bandwidth_bytes_per_s", unit="TB/s", many=True, **_POS, hi=1e6,
       flag="--hbm-tbps", column="hbm_bandwidth_bytes_per_s"),
    _s("weight_formats", "serving", "str", ("bf16",),
       "Serving: the blocks' weight format (repeatable): each design serves at those its "
       "tensor cores run [default: bf16].", "ServingLayout.weights", many=True,
       choices="workloads.serving:serving_settings.weight_recipes", flag="--weight-format",
       key_label="weights"),
    _s("rate", "serving", "float", None,
       "Serving: requests per second arriving (Poisson); every point's layout is also "
       "simulated under it (p99 latencies, SLO attainment, cost per token at the rate).",
       "AtRate.rate_per_s", unit="requests/s", **_POS, hi=1e9, flag="--rate",
       key_label="rate"),
    _s("requests", "serving", "int", None,
       "Serving: requests simulated at --rate [default: 2000].", "AtRate.requests",
       lo=2, hi=1_000_000, flag="--requests", key_label="requests"),
    _s("seed", "serving", "int", None, "Serving: seed of the arrivals at --rate [default: 0].",
       "AtRate.seed", lo=0, hi=2**63 - 1, flag="--seed", key_label="seed"),
    _s("p99_ttft_limit_s", "serving", "float", None,
       "Serving: p99 TTFT limit at --rate, ms: a point meets the SLO there when 99 % of its "
       "requests are within the p99 limits (as serve --capacity) [default: the mean limits].",
       "AtRate.p99_ttft_limit_s", **_SECONDS, flag="--p99-ttft-ms", key_label="p99_ttft"),
    _s("p99_tpot_limit_s", "serving", "float", None,
       "Serving: p99 TPOT limit at --rate, ms (as --p99-ttft-ms).", "AtRate.p99_tpot_limit_s",
       **_SECONDS, flag="--p99-tpot-ms", key_label="p99_tpot"),
    _s("pairs", "serving", "bool", False,
       "Serving: also pair every design's prefill pool with every design's decode pool "
       "(Splitwise), simulated at --rate, and report the pairs' front.", "PairSweep.pairs",
       flag="--pairs"),
    # one evaluation's or serve's own: no sweep file takes them
    _s("state_bytes_per_parameter", "training", "int", None,
       "Weights + gradients + optimizer state per parameter, a shorthand for the parts "
       "--optimizer-state names: a sum they make, 6 to 20 for Adam [default 18: bf16 weights, "
       "fp32 gradients, master copy and moments; 14: bf16 moments; 20: DeepSpeed's BF16 "
       "optimizer].", "Context.state_bytes_per_parameter", unit="B", lo=1,
       flag="--state-bytes", in_file=False),
    _s("objective", "serving", "str", "tokens_per_s_per_device",
       "What the search maximises (throughput per device) or minimises ($ per Mtoken).",
       "ServeContext.objective", choices="phaze.model.serving:OBJECTIVES", flag="--objective",
       in_file=False),
    _s("kv_format", "serving", "str", "bf16", "KV-cache number format (bf16, fp16, fp8).",
       "RequestBatch.kv_format", flag="--kv-format", in_file=False),
    _s("kv_admission", "serving", "str", None,
       "How the engine's scheduler reserves a request's KV cache: on-demand (vLLM's paging, "
       "a sequence holds its prompt and half its output on average) or whole-request "
       "(TensorRT-LLM's GUARANTEED_NO_EVICT, prompt and whole output) "
       "[default: workloads/data/serving.toml's].", "ServeContext.kv_admission",
       choices="workloads.serving:KV_ADMISSIONS", flag="--kv-admission", in_file=False),
    _s("engine", "serving", "str", None,
       "Serving engine profile (phaze/data/serving_engines.toml): its scheduler's rules "
       "(batching, batch sizes, chunked prefill, KV admission), all-reduce, kernel gaps and "
       "measured small-batch bandwidth [default: workloads/data/serving.toml's generic "
       "engine].", "ServeContext.engine", choices="phaze.model.serving_engines:engine_names",
       flag="--engine", in_file=False),
    _s("tokens_to_serve", "serving", "tokens", None,
       "Output tokens of the serving workload whose carbon and tCDP are given (2e9, 1B) "
       "[default: 1e9].", "ServeContext.tokens_to_serve", unit="tokens", flag="--tokens",
       in_file=False),
    _s("burstiness", "serving", "float", None,
       "Coefficient of variation of the gaps between arrivals (gamma distributed; 1 is "
       "Poisson) [default: 1]; needs --rate.", "serving_arrivals.generate(cv)", **_POS,
       hi=100, flag="--burstiness", in_file=False),
    _s("lengths", "serving", "str", None,
       "Request lengths at --rate: fixed (the input and output tokens) or a distribution "
       "from published statistics.", "serving_lengths.sample_lengths(name)",
       flag="--lengths", in_file=False),
    _s("trace", "serving", "path", None,
       "CSV of requests (arrival_s,input_tokens,output_tokens) to simulate instead of --rate.",
       "serving_arrivals.read_trace(path)", flag="--trace", in_file=False),
    _s("max_devices", "serving", "int", None, "Largest device count --capacity tries.",
       "serving_capacity.plan_capacity(max_devices)", lo=1, hi=MAX_DEVICES,
       flag="--max-devices", in_file=False),
)  # fmt: skip

#: Every setting by its key: first the sweep file's (the order of
#: :meth:`~phaze.config.SweepConfig.as_dict`), then those of one evaluation or serve only.
SETTINGS: Final = MappingProxyType({s.key: s for s in _TABLE})


def setting(key: str) -> Setting:
    """The setting called ``key``."""
    return SETTINGS[key]


def section_keys(section: str) -> tuple[str, ...]:
    """The sweep file's keys of ``section`` (:data:`SECTIONS`), in the table's order."""
    return tuple(s.key for s in _TABLE if s.section == section and s.in_file)


def flag_of(dest: str) -> Setting | None:
    """The setting a command parameter called ``dest`` sets (None: no setting)."""
    return _BY_DEST.get(dest)


_BY_DEST: Final[MappingProxyType[str, Setting]] = MappingProxyType(
    {s.dest: s for s in _TABLE if s.flag is not None}
)


def merge_sections(
    tables: Mapping[str, Mapping[str, Any]], source: str
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """A sweep file's settings as one table: ``[sweep]`` may hold any setting (as files
    always have), ``[training]`` and ``[serving]`` only their own section's. Returns the
    settings, the table each came from (for messages) and the problems: a key of another
    section (naming it) or one given twice."""
    merged = dict(tables.get("sweep", {}))
    where = dict.fromkeys(merged, "sweep")
    problems = []
    for section in SECTIONS[1:]:
        own = section_keys(section)
        for key, value in tables.get(section, {}).items():
            home = SETTINGS[key].section if key in SETTINGS else None
            if key not in own:
                close = difflib.get_close_matches(key, own, n=1, cutoff=0.5)
                hint = f"did you mean {close[0]!r}?; " if close and not home else ""
                hint += f"it belongs in [{home}]" if home else f"known keys: {', '.join(own)}"
                problems.append(f"{source} [{section}]: {key!r} is not a {section} key ({hint})")
            elif key in merged:
                problems.append(f"{source} [{section}]: {key} is in [sweep] too; give it once")
            else:
                merged[key], where[key] = value, section
    return merged, where, problems
