"""Operator performance and energy model (docs/models.md).

* :func:`matmul_cycles` - cycles of one weight-stationary systolic array (SCALE-Sim v3).
* :func:`op_costs` - single-core and all-core latency/energy of every op of an op graph,
  vectorised with numpy and cached by content.
* :func:`gemm_report` - one GEMM on all tensor cores of a design.
* :func:`gemm_measurements` - published GEMM latencies for validation.
"""

from arch_space.perf.costs import BOUNDS, OpCost, OpCostTable, op_costs
from arch_space.perf.report import GemmMeasurement, GemmReport, gemm_measurements, gemm_report
from arch_space.perf.settings import PerfSettings, default_settings
from arch_space.perf.systolic import matmul_cycles

__all__ = [
    "BOUNDS",
    "GemmMeasurement",
    "GemmReport",
    "OpCost",
    "OpCostTable",
    "PerfSettings",
    "default_settings",
    "gemm_measurements",
    "gemm_report",
    "matmul_cycles",
    "op_costs",
]
