"""Settings of the operator cost model, loaded from ``arch_space/data/perf.toml``.

Every value carries its unit in its name and its source in the data file beside it; this
module only types, validates and loads them.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from phaze_common.errors import ConfigError, unknown_name

__all__ = ["PerfSettings", "default_settings"]

_DATA_FILE = "perf.toml"


@dataclass(frozen=True, slots=True)
class PerfSettings:
    """Model constants that are not properties of one accelerator (sources in perf.toml)."""

    glb_bytes_per_cycle_per_mib: float = 128.0
    issue_overhead_s: float = 1.0e-6
    hbm_efficiency: float = 0.88
    accumulator_bytes: int = 4
    elementwise_passes: int = 1
    softmax_passes: int = 3
    norm_passes: int = 2
    intra_node_link_pj_per_bit: float = 1.9
    inter_node_link_pj_per_bit: float = 60.0

    def __post_init__(self) -> None:
        problems = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int | float) or isinstance(v, bool):
                problems.append(f"perf settings: {f.name} = {v!r} must be a number")
            elif f.name == "issue_overhead_s" and v < 0:
                problems.append(f"perf settings: {f.name} = {v!r} must be >= 0")
            elif f.name != "issue_overhead_s" and v <= 0:
                problems.append(f"perf settings: {f.name} = {v!r} must be > 0")
            elif f.name == "hbm_efficiency" and v > 1:
                problems.append(f"perf settings: {f.name} = {v!r} must be <= 1")
        if problems:
            raise ConfigError("; ".join(problems))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "perf settings") -> PerfSettings:
        """Settings from a mapping (a TOML table); unknown keys name the nearest known key."""
        known = [f.name for f in dataclasses.fields(cls)]
        problems = [
            f"{source}: {unknown_name('key', key, known)}" for key in data if key not in known
        ]
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(**dict(data))


@lru_cache(maxsize=1)
def default_settings() -> PerfSettings:
    """The packaged settings of ``arch_space/data/perf.toml``."""
    text = resources.files("arch_space").joinpath("data", _DATA_FILE).read_text("utf-8")
    return PerfSettings.from_mapping(tomllib.loads(text)["perf"], source=_DATA_FILE)
