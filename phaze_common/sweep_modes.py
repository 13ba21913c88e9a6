"""The sweep's two modes and the ``[sweep]`` keys only one of them uses.

Declared here, in the leaf package, so that the configuration (:mod:`phaze.config`), which
refuses the other mode's keys, and the report (:mod:`results.report`), which shows only the
sweep's own mode's inputs, read one list.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

__all__ = ["MODES", "MODE_KEYS"]

MODES: Final = ("train", "serve")
#: The [sweep] keys only one mode uses (the other ignores them; every other key serves both).
MODE_KEYS: Final = MappingProxyType(
    {
        "train": (
            "seq_len",
            "global_batch",
            "micro_batches",
            "recompute",
            "precision",
            "ep",
            "cp",
            "zero",
            "sequence_parallel",
            "framework",
            "tokens_to_train",
            "optimizer_state",
            "allow_context_extension",
        ),
        "serve": (
            "input_tokens",
            "output_tokens",
            "ttft_limit_s",
            "tpot_limit_s",
            "batches",
            "disaggregate",
            "weight_formats",
            "rate",
            "requests",
            "seed",
            "p99_ttft_limit_s",
            "p99_tpot_limit_s",
            "pairs",
        ),
    }
)
