"""Published Megatron-LM runs held out of every fit (``phaze validate megatron --held-out``).

The runs are in ``phaze/data/megatron_heldout.toml`` with their sources and the settings a
source leaves open (named per row, so the table says which rows rest on a choice). They are
predicted exactly like Table 5 (same preset, fitted values and framework rules); a throughput
becomes an iteration time with the source's own FLOP count (Narayanan et al. SC21, eq. 3).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from phaze.cli.validate_cmd import ValidationRow
from phaze_common.errors import ConfigError
from placement import Layout
from workloads import get_model

__all__ = ["HeldOutRun", "held_out_runs", "sc21_flops", "held_out_rows"]

_DATA_FILE: Final = "megatron_heldout.toml"
_SEQ_LEN: Final = 2048


@dataclass(frozen=True, slots=True)
class HeldOutRun:
    """One published run: its layout, the measured iteration time and where it is from."""

    case: str
    model: str
    gpus: int
    strategy: Layout
    global_batch: int
    measured_s: float
    source: str
    assumed: tuple[str, ...]


def sc21_flops(model: str, global_batch: int, seq_len: int = _SEQ_LEN) -> float:
    """FLOPs of one iteration with full recompute, SC21 eq. 3:
    ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``."""
    m = get_model(model)
    layers, h, v = m.layers, m.hidden, m.vocab
    extra = 1 + seq_len / (6 * h) + v / (16 * layers * h)
    return 96.0 * global_batch * seq_len * layers * h * h * extra


def _run(row: Mapping[str, Any], sources: Mapping[str, str], where: str) -> HeldOutRun:
    try:
        strategy = Layout(
            t=int(row["tp"]),
            p=int(row["pp"]),
            d=int(row["gpus"]) // (int(row["tp"]) * int(row["pp"])),
            mbs=int(row["micro_batch"]),
            v=int(row["virtual_stages"]),
            recompute=str(row["recompute"]),
            sp=bool(row["sequence_parallel"]),
        )
        if "iteration_s" in row:
            measured = float(row["iteration_s"])
        else:
            flops = sc21_flops(str(row["model"]), int(row["global_batch"]))
            measured = flops / (float(row["tflops_per_gpu"]) * 1e12 * int(row["gpus"]))
        return HeldOutRun(
            case=str(row["case"]),
            model=str(row["model"]),
            gpus=int(row["gpus"]),
            strategy=strategy,
            global_batch=int(row["global_batch"]),
            measured_s=measured,
            source=sources[str(row["source"])],
            assumed=tuple(str(x) for x in row["assumed"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(
            f"{_DATA_FILE} {where}: {e!r} (a row needs the fields of the others)"
        ) from None


def held_out_runs() -> tuple[HeldOutRun, ...]:
    """The shipped held-out runs, in the file's order."""
    text = resources.files("phaze").joinpath("data", _DATA_FILE).read_text("utf-8")
    data = tomllib.loads(text)
    return tuple(_run(r, data["sources"], f"run {i}") for i, r in enumerate(data["run"]))


def held_out_rows(predict: Callable[[HeldOutRun], float]) -> list[ValidationRow]:
    """The held-out runs beside ``predict``'s iteration times; a case resting on a setting
    its source leaves open says which."""
    out = []
    for run in held_out_runs():
        label = f"{run.case} (assumed: {', '.join(run.assumed)})" if run.assumed else run.case
        out.append(ValidationRow(label, run.measured_s, predict(run), run.source))
    return out
