"""The error types of Phaze's public API, for callers that catch them.

They are defined in :mod:`phaze_common.errors`, the leaf package every Phaze package shares.
"""

from __future__ import annotations

from phaze_common.errors import ConfigError, Infeasible, PhazeError, SolverError

__all__ = ["PhazeError", "ConfigError", "Infeasible", "SolverError"]
