"""Collectives across nodes: the share of a node's NICs a ring collective reaches.

NCCL runs one ring per NIC, so a collective whose group has ``k`` members in each node drives
``k`` of the node's NICs at once; its bus bandwidth across nodes is ``k`` NIC shares times
the fraction of the NICs' line rate measured rings reach at large messages
(``arch_space/data/measured_nccl_multinode.toml``: DGX A100 192 of 200 GB/s, DGX H100 380 of
400 GB/s, 248 H200 nodes 350 of 400 GB/s).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Final

from arch_space._data import shipped_toml
from phaze_common.errors import ConfigError

__all__ = ["nic_busbw_fraction"]

_DATA_FILE: Final = "measured_nccl_multinode.toml"


@cache
def nic_busbw_fraction() -> float:
    """Mean ``busbw / NIC line rate`` of the measured multi-node all-reduce plateaus that give
    the nodes' NIC rate, in-network reductions (SHARP) left out.

    >>> 0.85 < nic_busbw_fraction() < 1.0
    True
    """
    points = [
        p
        for p in shipped_toml(_DATA_FILE).get("point", ())
        if "nic_bytes_per_s_per_node" in p and not p.get("in_network_reduction", False)
    ]
    shares = [p["busbw_bytes_per_s"] / p["nic_bytes_per_s_per_node"] for p in points]
    if not shares or not all(0 < s <= 1 for s in shares):
        raise ConfigError(
            f"{_DATA_FILE}: the [[point]]s with nic_bytes_per_s_per_node must give at least one "
            f"bus bandwidth in (0, 1] of the NICs' rate (got {shares})"
        )
    return math.fsum(shares) / len(shares)
