"""The accelerator and cluster descriptions (DESIGN.md §3), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from phaze.errors import ConfigError

__all__ = ["Accelerator", "Cluster"]


def _check_positive(owner: str, obj: object, fields: tuple[str, ...]) -> list[str]:
    problems = []
    for f in fields:
        v = getattr(obj, f)
        if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
            problems.append(f"{owner}: {f} = {v!r} must be a positive number")
    return problems


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator chip: tensor cores (R x C weight-stationary systolic arrays of bf16
    MACs), vector cores (SIMD lanes), a global buffer shared by all cores, and HBM.

    All sizes in SI units: bytes, bytes/s, Hz. ``node_nm`` names the process node whose
    technology data (``arch_space/data/tech.toml``) gives area, energy and cost.
    """

    num_tc: int
    tc_rows: int
    tc_cols: int
    num_vc: int
    vc_lanes: int
    glb_bytes: int
    hbm_bytes: int
    hbm_bandwidth_bytes_per_s: float
    clock_hz: float
    node_nm: int = 7
    bytes_per_element: int = 2
    name: str = ""

    def __post_init__(self) -> None:
        problems = _check_positive(
            f"accelerator {self.name or '(unnamed)'}",
            self,
            (
                "num_tc",
                "tc_rows",
                "tc_cols",
                "num_vc",
                "vc_lanes",
                "glb_bytes",
                "hbm_bytes",
                "hbm_bandwidth_bytes_per_s",
                "clock_hz",
                "node_nm",
                "bytes_per_element",
            ),
        )
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def macs_per_cycle(self) -> int:
        return self.num_tc * self.tc_rows * self.tc_cols

    @property
    def peak_flops(self) -> float:
        """Peak dense FLOP/s of the tensor cores (one MAC = 2 FLOPs)."""
        return 2.0 * self.macs_per_cycle * self.clock_hz


@dataclass(frozen=True, slots=True)
class Cluster:
    """Devices and the network between them.

    Bandwidths are per device and per direction, in bytes/s; latencies are per message hop.
    Devices in one node talk over ``intra_node_*`` links (NVLink-like), across nodes over
    ``inter_node_*`` links (InfiniBand-like).
    """

    devices: int
    devices_per_node: int = 8
    intra_node_bandwidth_bytes_per_s: float = 300e9
    inter_node_bandwidth_bytes_per_s: float = 25e9
    intra_node_latency_s: float = 2e-6
    inter_node_latency_s: float = 5e-6

    def __post_init__(self) -> None:
        problems = _check_positive(
            "cluster",
            self,
            (
                "devices",
                "devices_per_node",
                "intra_node_bandwidth_bytes_per_s",
                "inter_node_bandwidth_bytes_per_s",
            ),
        )
        for f in ("intra_node_latency_s", "inter_node_latency_s"):
            if getattr(self, f) < 0:
                problems.append(f"cluster: {f} = {getattr(self, f)!r} must be >= 0")
        if not problems and self.devices % self.devices_per_node and self.devices > self.devices_per_node:
            problems.append(
                f"cluster: devices = {self.devices} must be a multiple of "
                f"devices_per_node = {self.devices_per_node} (or at most one node)"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def nodes(self) -> int:
        return max(1, self.devices // self.devices_per_node)

    def group_link(self, group: int) -> tuple[float, float]:
        """(bandwidth bytes/s, latency s) of the slowest link a ring over ``group``
        consecutive devices crosses: intra-node if the group fits in a node."""
        if group <= self.devices_per_node:
            return self.intra_node_bandwidth_bytes_per_s, self.intra_node_latency_s
        return self.inter_node_bandwidth_bytes_per_s, self.inter_node_latency_s
