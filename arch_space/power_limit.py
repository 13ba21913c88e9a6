"""A board's power limiter: a preset's draw never exceeds its board power limit (TDP).

A real board holds its power at or below its limit by lowering its clock; the measured
sustained rates of a preset (``[devices]`` of its chip file) already include that
throttling, so its op times stand and only its op energy is held to ``limit x time``. The
limit of a preset is the board power of the host server it ships in (its ``[host]``);
designs that are not presets have none here (a design space clocks them down to its power
budget instead, :mod:`arch_space.space`).
"""

from __future__ import annotations

import math

import numpy as np

from arch_space._data import plain_values, shipped_toml

__all__ = ["capped_dynamic_scale", "preset_board_limit_w"]


def preset_board_limit_w(accelerator: str) -> float:
    """The board power limit (W) of preset ``accelerator``: the ``device_board_w`` of the
    host server in ``system.toml`` it ships in, ``inf`` for any other name.

    Examples
    --------
    >>> preset_board_limit_w("h100"), preset_board_limit_w("my-design")
    (700.0, inf)
    """
    if accelerator:
        for p in shipped_toml("system.toml")["host"]["profile"].values():
            if p.get("preset") == accelerator:
                return float(plain_values(p)["device_board_w"])
    return math.inf


def capped_dynamic_scale(
    dynamic_j: np.ndarray, static_w: float, latency_s: np.ndarray, limit_w: float
) -> np.ndarray:
    """Factor (in [0, 1]) on each op's dynamic energy so that dynamic + static energy over
    the op's latency stays at or below ``limit_w x latency``; 1 where it already does, 0 where
    static power alone reaches the limit."""
    dynamic_j = np.asarray(dynamic_j, dtype=float)
    if math.isinf(limit_w):
        return np.ones_like(dynamic_j)
    room_j = np.maximum((limit_w - static_w) * np.asarray(latency_s, dtype=float), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(dynamic_j > room_j, room_j / dynamic_j, 1.0)
    return scale
