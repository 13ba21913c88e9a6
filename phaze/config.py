"""Sweep configuration: TOML -> validated, immutable :class:`SweepConfig`.

Validation happens once, here, at the boundary (STYLE §3): every problem in a file is reported
at once, each naming the file, the section, the field, the value and what is allowed; unknown
keys suggest the nearest known key.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from ilp import SCHEDULERS
from phaze.config_sections import ServingSettings, TrainingSettings
from phaze.model.context import DEFAULT_SEQUENCE_PARALLEL, MICRO_BATCHES, SolverSettings
from phaze.model.run import parse_tokens
from phaze.model.scoring import ScoringParams
from phaze.settings import SECTIONS, SETTINGS, merge_sections
from phaze_common.errors import ConfigError
from phaze_common.files import read_toml
from phaze_common.limits import LIMITS, MAX_GLOBAL_BATCH, MAX_SEQ_LEN, over_limit
from phaze_common.sweep_modes import MODE_KEYS, MODES
from placement.types import ZERO_STAGES
from workloads.framework import framework_names
from workloads.optimizer_state import OptimizerState, parse_optimizer_state
from workloads.precision import recipe_names
from workloads.recompute_modules import RECOMPUTE_WORDS, is_recompute_mode
from workloads.serving import serving_settings

__all__ = [
    "MODES",
    "MODE_KEYS",
    "SERVE_OBJECTIVES",
    "SERVE_OBJECTIVES_AT_RATE",
    "RECOMPUTE_MODES",
    "DEFAULT_SEQUENCE_PARALLEL",
    "MICRO_BATCHES",
    "ServingSettings",
    "SolverSettings",
    "SweepConfig",
    "TrainingSettings",
    "load_sweep_config",
    "unknown_keys",
    "MODEL_PACKAGES",
    "PRESENTATION",
    "model_digest",
    "tree_digest",
    "quick_sweep_config",
    "quick_sweep_data",
]

RECOMPUTE_MODES: Final = RECOMPUTE_WORDS
#: The objectives of a serving sweep when none are given.
SERVE_OBJECTIVES: Final = (
    "tokens_per_s_per_device",
    "usd_per_million_tokens",
    "kgco2e_per_million_tokens",
)
#: ... and of a serving sweep at a rate: the cost per million tokens that meets the SLO
#: there first.
SERVE_OBJECTIVES_AT_RATE: Final = ("usd_per_million_tokens_at_rate", *SERVE_OBJECTIVES)
_GIB: Final = 1 << 30
#: A sweep file's keys, in the declaration's order (:mod:`phaze.settings`).
_FILE_KEYS: Final = tuple(k for k, s in SETTINGS.items() if s.in_file)
#: The packages whose code and data decide a sweep's numbers: every file in them counts
#: towards :func:`model_digest`, found by walking the installed package, so a module or data
#: file added later counts without being listed.
MODEL_PACKAGES: Final = ("phaze_common", "workloads", "arch_space", "ilp", "placement", "phaze")
#: The parts of those packages that only present results (paths relative to the packages'
#: parent): editing them changes no number, so a sweep may be resumed across them.
PRESENTATION: Final = ("phaze/cli",)


def model_digest() -> str:
    """A content hash of the files of the models behind every result (:data:`MODEL_PACKAGES`
    less :data:`PRESENTATION`), so a sweep directory is never resumed by a Phaze whose models
    changed, even where the version number did not."""
    dirs = tuple((name, Path(str(resources.files(name)))) for name in MODEL_PACKAGES)
    return tree_digest(dirs, PRESENTATION)


@functools.cache
def tree_digest(dirs: tuple[tuple[str, Path], ...], excluded: tuple[str, ...] = ()) -> str:
    """A content hash of every file under the ``(name, directory)`` packages (compiled
    caches aside), each file named ``name/relative path``, leaving out the files under the
    ``excluded`` relative paths. Cached per process: the installed files do not change under
    a running sweep."""
    skip = tuple(f"{e.rstrip('/')}/" for e in excluded)
    files = sorted(
        (f"{name}/{f.relative_to(root).as_posix()}", f)
        for name, root in dirs
        for f in root.rglob("*")
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"
    )
    digest = hashlib.sha256()
    for rel, path in files:
        if not rel.startswith(skip):
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """One sweep: workloads x designs x the knobs of its mode.

    The settings both modes use are fields of their own; each mode's knobs are a section,
    ``training`` (:class:`~phaze.config_sections.TrainingSettings`, used when ``mode`` is
    ``"train"``) and ``serving`` (:class:`~phaze.config_sections.ServingSettings`, when it is
    ``"serve"``), as a sweep file's ``[training]`` and ``[serving]`` tables and the settings'
    sections (:mod:`phaze.settings`). :meth:`of` and :meth:`with_settings` take every
    setting by its key and put it in its section; :meth:`as_dict` gives them back as one
    table (the store's manifest, :meth:`config_hash`).

    ``hbm_gib`` empty means each design keeps the HBM capacity of its space; otherwise every
    design is evaluated with each capacity listed. ``hbm_tbps`` likewise replaces each space
    design's HBM bandwidth by each value (TB/s), its stacks derived again. ``presets`` are
    real chips evaluated beside the space as reference points (never pruned, marked in the
    plots; their own HBM is kept).
    """

    workloads: tuple[str, ...] = ("gpt3-1.3b", "llama2-7b")
    space: str = "tiny"
    devices: int = 64
    devices_per_node: int = 8
    intra_node_bandwidth_bytes_per_s: float = 300e9
    inter_node_bandwidth_bytes_per_s: float = 25e9
    intra_node_latency_s: float = 2e-6
    inter_node_latency_s: float = 5e-6
    hbm_gib: tuple[float, ...] = ()
    objectives: tuple[str, ...] = ("tokens_per_s", "tco_usd", "total_kgco2e", "tcdp")
    presets: tuple[str, ...] = ("tpuv4", "a100", "h100")
    prune: bool = True
    mode: str = "train"
    hbm_tbps: tuple[float, ...] = ()
    training: TrainingSettings = field(default_factory=TrainingSettings)
    serving: ServingSettings = field(default_factory=ServingSettings)
    solver: SolverSettings = field(default_factory=SolverSettings)
    scoring: ScoringParams = field(default_factory=ScoringParams)

    @classmethod
    def of(cls, **settings: Any) -> SweepConfig:
        """The default configuration with ``settings`` (keys of any section, ``solver``,
        ``scoring``) in their places."""
        return cls().with_settings(**settings)

    def with_settings(self, **settings: Any) -> SweepConfig:
        """This configuration with ``settings`` (keys of any section, ``solver``,
        ``scoring``) replaced, each in its section (:attr:`phaze.settings.Setting.section`);
        an unknown key is a TypeError, as :func:`dataclasses.replace` gives."""
        parts: dict[str, dict[str, Any]] = {"training": {}, "serving": {}}
        own = {}
        for key, value in settings.items():
            section = SETTINGS[key].section if key in SETTINGS else "sweep"
            (parts[section] if section in parts else own)[key] = value
        return replace(
            self,
            **own,
            training=replace(self.training, **parts["training"]),
            serving=replace(self.serving, **parts["serving"]),
        )

    def section(self, name: str) -> Any:
        """The record of a settings' section (:data:`phaze.settings.SECTIONS`): this
        configuration for ``sweep``, else :attr:`training` or :attr:`serving`."""
        return {"sweep": self, "training": self.training, "serving": self.serving}[name]

    def value(self, key: str) -> Any:
        """The value of the setting ``key``, in whichever section it is."""
        return getattr(self.section(SETTINGS[key].section), key)

    @property
    def hbm_bytes(self) -> tuple[int, ...]:
        return tuple(int(round(g * _GIB)) for g in self.hbm_gib)

    def as_dict(self) -> dict[str, Any]:
        """Every setting by its key (the sections' flattened), with ``solver`` and
        ``scoring`` as tables."""
        values = {key: self.value(key) for key in _FILE_KEYS}
        return {**values, "solver": asdict(self.solver), "scoring": asdict(self.scoring)}

    def config_hash(self) -> str:
        """A content hash of everything that changes results: the settings its mode uses
        (not the keys :data:`MODE_KEYS` gives only the other mode) and the models' code
        (:func:`model_digest`), not the output directory. The load keys count only with a
        rate (the p99 limits when given, pairing when on), so a sweep without them hashes as
        before they existed."""
        values = self.as_dict()
        unused = {k for m in MODES if m != self.mode for k in MODE_KEYS[m]}
        unused |= {
            k
            for k in ("rate", "requests", "seed", "p99_ttft_limit_s", "p99_tpot_limit_s")
            if values[k] is None
        }
        unused |= {"pairs"} if not values["pairs"] else set()
        settings = {k: v for k, v in values.items() if k not in unused}
        text = json.dumps({**settings, "models": model_digest()}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# the serving knobs' upper bounds, as the CLI's and the API's
_SERVE_LIMITS: Final = {
    "input_tokens": MAX_SEQ_LEN,
    "output_tokens": MAX_SEQ_LEN,
    "batches": MAX_GLOBAL_BATCH,
}
_TOP_KEYS: Final = _FILE_KEYS
#: The tables of a sweep file.
_TABLES: Final = (*SECTIONS, "solver", "scoring")


def _nearest(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_keys(
    source: str, section: str, data: Mapping[str, Any], known: tuple[str, ...]
) -> list[str]:
    """A problem for each key of ``data`` not ``known``, naming the nearest known key."""
    return [
        f"{source} [{section}]: unknown key {k!r}{_nearest(k, known)}; known keys: {', '.join(known)}"
        for k in data
        if k not in known
    ]


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list | tuple) else (value,)


def _is_pos_int(v: Any) -> bool:
    return _is_count(v) and v > 0


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_pos_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < math.inf


def _is_nonneg_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf


def _is_token_count(v: Any) -> bool:
    try:
        return isinstance(v, int | float | str) and not isinstance(v, bool) and parse_tokens(v) > 0
    except ConfigError:
        return False


def _is_optimizer_state(v: Any) -> bool:
    try:
        return isinstance(v, str) and bool(parse_optimizer_state(v, OptimizerState(2)))
    except ConfigError:
        return False


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


# field -> (is the value a list?, element check, what is allowed)
_RULES: Final = MappingProxyType(
    {
        "workloads": (True, _is_name, "a non-empty list of workload names or config.json paths"),
        "space": (False, _is_name, "a space name or a TOML path"),
        "devices": (False, _is_pos_int, "a positive integer"),
        "devices_per_node": (False, _is_pos_int, "a positive integer"),
        "intra_node_bandwidth_bytes_per_s": (
            False,
            _is_pos_num,
            "a finite positive number (bytes/s)",
        ),
        "inter_node_bandwidth_bytes_per_s": (
            False,
            _is_pos_num,
            "a finite positive number (bytes/s)",
        ),
        "intra_node_latency_s": (False, _is_nonneg_num, "a finite number >= 0 (seconds)"),
        "inter_node_latency_s": (False, _is_nonneg_num, "a finite number >= 0 (seconds)"),
        "seq_len": (False, _is_pos_int, "a positive integer (tokens)"),
        "global_batch": (False, _is_pos_int, "a positive integer (sequences)"),
        "micro_batches": (True, _is_pos_int, "a non-empty list of positive integers"),
        "hbm_gib": (True, _is_pos_num, "a list of finite positive numbers (GiB)"),
        "recompute": (
            True,
            is_recompute_mode,
            f"a non-empty list of {', '.join(RECOMPUTE_MODES)} or modules:<groups joined by +>",
        ),
        "precision": (
            True,
            lambda v: v in recipe_names(),
            f"a non-empty list of precision recipes: {', '.join(recipe_names())}",
        ),
        "ep": (True, _is_pos_int, "a list of expert-parallel degrees (positive integers)"),
        "cp": (True, _is_pos_int, "a list of context-parallel degrees (positive integers)"),
        "zero": (
            True,
            lambda v: _is_count(v) and v in ZERO_STAGES,
            "a list of ZeRO stages from 0, 1, 2, 3 (empty: the search chooses)",
        ),
        "sequence_parallel": (
            False,
            lambda v: isinstance(v, bool),
            "true or false (leave it out to search it)",
        ),
        "objectives": (True, _is_name, "a non-empty list of metric names"),
        "presets": (True, _is_name, "a list of accelerator preset names (reference points)"),
        "prune": (False, lambda v: isinstance(v, bool), "true or false"),
        "framework": (
            False,
            lambda v: v in framework_names(),
            f"a framework overlap profile: one of {', '.join(framework_names())}",
        ),
        "tokens_to_train": (
            False,
            _is_token_count,
            'a positive token count up to 1e16 (2e12, "2T", "300B")',
        ),
        "optimizer_state": (
            False,
            _is_optimizer_state,
            "part=format pairs: master=fp32|none, moments=fp32|bf16|8bit, "
            'grads=fp32|bf16|bf16+fp32 (e.g. "master=fp32,moments=bf16")',
        ),
        "allow_context_extension": (False, lambda v: isinstance(v, bool), "true or false"),
        "mode": (False, lambda v: v in MODES, f"one of {', '.join(MODES)}"),
        "input_tokens": (False, _is_pos_int, "a positive integer (prompt tokens)"),
        "output_tokens": (
            False,
            lambda v: _is_pos_int(v) and v >= 2,
            "an integer >= 2 (generated tokens, a decode step at least)",
        ),
        "ttft_limit_s": (False, _is_pos_num, "a finite positive number (seconds)"),
        "tpot_limit_s": (False, _is_pos_num, "a finite positive number (seconds)"),
        "batches": (True, _is_pos_int, "a non-empty list of positive integers (sequences)"),
        "disaggregate": (False, lambda v: isinstance(v, bool), "true or false"),
        "hbm_tbps": (True, _is_pos_num, "a list of finite positive numbers (TB/s)"),
        "weight_formats": (
            True,
            lambda v: v in serving_settings().weight_recipes,
            "a non-empty list of serving weight formats: "
            + ", ".join(serving_settings().weight_recipes),
        ),
        "rate": (False, _is_pos_num, "a finite positive number (requests/s)"),
        "p99_ttft_limit_s": (False, _is_pos_num, "a finite positive number (seconds)"),
        "p99_tpot_limit_s": (False, _is_pos_num, "a finite positive number (seconds)"),
        "pairs": (False, lambda v: isinstance(v, bool), "true or false"),
        "requests": (
            False,
            lambda v: _is_pos_int(v) and 2 <= v <= 1_000_000,
            "an integer from 2 to 1000000 (requests simulated at the rate)",
        ),
        "seed": (
            False,
            lambda v: _is_count(v) and v < 2**63,
            "an integer from 0 to 2**63 - 1",
        ),
    }
)


def sweep_config_from_mapping(
    data: Mapping[str, Any], source: str = "config", *, mode_keys: bool = True
) -> SweepConfig:
    """Validate a parsed TOML mapping (sections ``[sweep]``, ``[training]``, ``[serving]``,
    ``[solver]``, ``[scoring]``; :func:`phaze.settings.merge_sections` reads the first three).

    With ``mode_keys``, a file that names its ``mode`` may not hold the keys only the other
    mode uses (:data:`MODE_KEYS`), which would be ignored without a word.
    """
    problems = unknown_keys(source, "top level", data, _TABLES)
    tables = {}
    for name in _TABLES:
        table = data.get(name, {})
        if not isinstance(table, Mapping):
            problems.append(f"{source}: {name} = {table!r} must be a table [{name}]")
            table = {}
        tables[name] = dict(table)
    problems += unknown_keys(source, "sweep", tables["sweep"], _TOP_KEYS)
    sweep, where, merge_problems = merge_sections(tables, source)
    problems += merge_problems
    solver_d, scoring_d = tables["solver"], tables["scoring"]
    if mode_keys:
        problems += _mode_problems(source, sweep)
    problems += unknown_keys(
        source, "solver", solver_d, tuple(f.name for f in fields(SolverSettings))
    )
    problems += unknown_keys(source, "scoring", scoring_d, ScoringParams.field_names())
    kw: dict[str, Any] = {}
    for key, value in sweep.items():
        if key not in _RULES:
            continue
        is_list, ok, allowed = _RULES[key]
        vals = _as_tuple(value) if is_list else (value,)
        if (
            is_list
            and not vals
            and key not in ("hbm_gib", "hbm_tbps", "presets", "ep", "cp", "zero")
        ) or not all(ok(v) for v in vals):
            problems.append(f"{source} [{where[key]}]: {key} = {value!r} must be {allowed}")
            continue
        limit = LIMITS.get(key) or _SERVE_LIMITS.get(key)
        if limit is not None:
            problems += [
                f"{source} [{where[key]}]: {p}"
                for v in vals
                if (p := over_limit(key, v, limit)) is not None
            ]
        else:  # the range the settings' declaration gives (phaze.settings)
            problems += [
                f"{source} [{where[key]}]: {p}"
                for v in vals
                if (p := SETTINGS[key].range_problem(v)) is not None
            ]
        kw[key] = vals if is_list else value
    for key in (
        "hbm_gib",
        "hbm_tbps",
        "ttft_limit_s",
        "tpot_limit_s",
        "rate",
        "p99_ttft_limit_s",
        "p99_tpot_limit_s",
    ):
        if key in kw:
            kw[key] = tuple(map(float, kw[key])) if key.startswith("hbm") else float(kw[key])
    if kw.get("mode") == "serve" and "objectives" not in kw:
        kw["objectives"] = SERVE_OBJECTIVES if "rate" not in kw else SERVE_OBJECTIVES_AT_RATE
    if "tokens_to_train" in kw and not problems:
        kw["tokens_to_train"] = parse_tokens(kw["tokens_to_train"])
    known_solver = {k: v for k, v in solver_d.items() if k in _SOLVER_KEYS}
    solver = SolverSettings(**known_solver)
    if solver.name not in SCHEDULERS:
        problems.append(
            f"{source} [solver]: name = {solver.name!r} must be one of {', '.join(SCHEDULERS)}"
        )
    if not _is_pos_num(solver.time_limit_s):
        problems.append(
            f"{source} [solver]: time_limit_s = {solver.time_limit_s!r} must be a finite number > 0"
        )
    if not (isinstance(solver.mip_gap, int | float) and 0 <= solver.mip_gap < 1):
        problems.append(f"{source} [solver]: mip_gap = {solver.mip_gap!r} must be in [0, 1)")
    if not _is_count(solver.search_nodes):
        problems.append(
            f"{source} [solver]: search_nodes = {solver.search_nodes!r} must be an integer >= 0"
        )
    scoring = _scoring_from_mapping(scoring_d, source, problems)
    if problems:
        raise ConfigError("; ".join(problems))
    return SweepConfig.of(**kw, solver=solver, scoring=scoring)


def _mode_problems(source: str, sweep: Mapping[str, Any]) -> list[str]:
    """The keys of ``sweep`` only the mode it does not name uses (none if it names none)."""
    mode = sweep.get("mode")
    if mode not in MODES:
        return []
    (other,) = (m for m in MODES if m != mode)
    keys = [k for k in MODE_KEYS[other] if k in sweep]
    if not keys:
        return []
    return [
        f"{source} [sweep]: {', '.join(keys)} only apply to mode = {other!r}; this sweep has "
        f"mode = {mode!r} (leave them out)"
    ]


_SOLVER_KEYS: Final = tuple(f.name for f in fields(SolverSettings))
_SCORING_NAMES: Final = ("grid_region", "embodied_mode", "host_profile", "cost_view")
_SCORING_NUMBERS: Final = tuple(n for n in ScoringParams.field_names() if n not in _SCORING_NAMES)


def _scoring_from_mapping(
    data: Mapping[str, Any], source: str, problems: list[str]
) -> ScoringParams:
    """Scoring defaults; ``grid_region`` picks a preset intensity unless one is given.

    Every problem is appended to ``problems`` (each named once, with the file and section);
    the defaults stand in for bad values so that the rest are still checked.
    """
    from arch_space.carbon import grid_intensity

    where = f"{source} [scoring]"
    given = {k: v for k, v in data.items() if k in ScoringParams.field_names()}
    for name in _SCORING_NUMBERS:
        value = given.get(name)
        if value is not None and not (
            isinstance(value, int | float) and not isinstance(value, bool)
        ):
            problems.append(f"{where}: {name} = {value!r} must be a number")
            del given[name]
    for name in _SCORING_NAMES:
        if name in given and not isinstance(given[name], str):
            problems.append(f"{where}: {name} = {given[name]!r} must be a name (a string)")
            del given[name]
    region = given.get("grid_region")
    if region is not None and given.get("grid_gco2e_per_kwh") is None:
        try:
            grid_intensity(str(region))
        except ConfigError as e:
            problems.append(f"{where}: grid_region: {e}")
            del given["grid_region"]
    try:
        return ScoringParams(**given)
    except ConfigError as e:
        problems.append(f"{where}: {str(e).replace('scoring: ', '')}")
        return ScoringParams()


def load_sweep_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep TOML file."""
    p = Path(path)
    return sweep_config_from_mapping(read_toml(p, "sweep config"), source=p.name)


def quick_sweep_config() -> SweepConfig:
    """The built-in quick sweep run by ``phaze sweep`` with no arguments."""
    return sweep_config_from_mapping(quick_sweep_data(), source="quick.toml")


def quick_sweep_data() -> dict[str, Any]:
    """The parsed TOML of the built-in quick sweep."""
    return tomllib.loads(resources.files("phaze").joinpath("data/quick.toml").read_text())
