"""The two modes' own settings of a sweep: :class:`TrainingSettings` (a sweep file's
``[training]`` table) and :class:`ServingSettings` (``[serving]``).

:class:`~phaze.config.SweepConfig` holds one of each beside the settings both modes use.
Their fields are the keys of the settings' sections (:func:`phaze.settings.section_keys`), in
the declaration's order and with its defaults (tests/test_settings_table.py checks both).
"""

from __future__ import annotations

from dataclasses import dataclass

from phaze.model.context import DEFAULT_SEQUENCE_PARALLEL, MICRO_BATCHES
from workloads.framework import DEFAULT_FRAMEWORK
from workloads.precision import DEFAULT_PRECISION

__all__ = ["ServingSettings", "TrainingSettings"]


@dataclass(frozen=True, slots=True)
class TrainingSettings:
    """The knobs of a training sweep (``mode = "train"``).

    ``global_batch`` is in sequences. ``framework`` is the overlap profile of the training
    framework (:mod:`workloads.framework`). ``tokens_to_train`` is every workload's token
    budget (None: each model's published budget). ``optimizer_state`` changes the parts of
    the training state from each recipe's (:mod:`workloads.optimizer_state`).
    ``allow_context_extension`` lets ``seq_len`` exceed a rotary or ALiBi model's context
    (:meth:`Model.context_problem`). ``ep`` and ``cp`` are the expert- and context-parallel
    degrees the placement search may choose from (empty: the search's own,
    :func:`phaze.model.pipeline.search_degrees`); ``zero`` the ZeRO stages (empty: 0 and 1,
    then 2 and 3 when neither fits); ``sequence_parallel`` True or False fixes it (None:
    searched, on or off at each tensor-parallel width). ``precision`` lists the precision
    recipes (:mod:`workloads.precision`) each design runs, those whose GEMM format its
    tensor cores have (:func:`phaze.sweep.planning.design_knobs`).
    """

    seq_len: int = 2048
    global_batch: int = 512
    micro_batches: tuple[int, ...] = MICRO_BATCHES
    recompute: tuple[str, ...] = ("none", "full")
    precision: tuple[str, ...] = (DEFAULT_PRECISION,)
    ep: tuple[int, ...] = ()
    cp: tuple[int, ...] = ()
    zero: tuple[int, ...] = ()
    sequence_parallel: bool | None = DEFAULT_SEQUENCE_PARALLEL
    framework: str = DEFAULT_FRAMEWORK
    tokens_to_train: int | None = None
    optimizer_state: str | None = None
    allow_context_extension: bool = False


@dataclass(frozen=True, slots=True)
class ServingSettings:
    """The knobs of a serving sweep (``mode = "serve"``, docs/serving.md).

    Every design serves each workload's requests of ``input_tokens`` in and
    ``output_tokens`` out at each of ``batches`` (sequences in flight per replica), the
    serving layout searched under the mean latency limits ``ttft_limit_s`` and
    ``tpot_limit_s`` (None: none), disaggregated pools too unless ``disaggregate`` is false,
    at each of ``weight_formats`` (the blocks' weights: bf16, fp8) a design's tensor cores
    run. ``rate`` (requests/s) also simulates each point's layout under that load:
    ``requests`` arrivals (None: the simulation's default) drawn with ``seed`` (None: 0);
    ``p99_ttft_limit_s`` and ``p99_tpot_limit_s`` are the latency limits each request is
    held to there (None: the mean limits), as ``phaze serve --capacity`` holds them.
    ``pairs`` also serves every prefill pool of one design with every decode pool of
    another (:mod:`phaze.sweep.pairs`; needs a rate).
    """

    input_tokens: int = 2048
    output_tokens: int = 128
    ttft_limit_s: float | None = None
    tpot_limit_s: float | None = None
    batches: tuple[int, ...] = (1, 4, 16, 64, 256)
    disaggregate: bool = True
    weight_formats: tuple[str, ...] = ("bf16",)
    rate: float | None = None
    requests: int | None = None
    seed: int | None = None
    p99_ttft_limit_s: float | None = None
    p99_tpot_limit_s: float | None = None
    pairs: bool = False
