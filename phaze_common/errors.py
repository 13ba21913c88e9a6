"""The error hierarchy shared by every Phaze package.

This module imports nothing of ours, so the leaf packages (``workloads``,
``arch_space``, ...) may raise these types without depending on the rest of
``phaze``.

* :class:`ConfigError` - the user gave bad input (a file, a flag, an argument).
  The CLI prints it as one ``Error:`` line and exits with status 1.
* :class:`Infeasible` - a well-formed question has no answer (the model does not
  fit the memory, no strategy divides the devices). Sweeps record it and go on.
* :class:`SolverError` - an optimisation solver failed in a way that is not a
  timeout (timeouts return the best feasible answer with their status).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["PhazeError", "ConfigError", "Infeasible", "SolverError", "unknown_name"]


class PhazeError(Exception):
    """Base of every error Phaze raises on purpose."""


class ConfigError(PhazeError, ValueError):
    """Bad user input: the message names the source, the field, the value and the rule."""


class Infeasible(PhazeError):
    """An expected "does not fit" outcome, with the reason in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SolverError(PhazeError):
    """A solver failed (not a timeout); ``status`` is the solver's own status text."""

    def __init__(self, message: str, status: str = "") -> None:
        super().__init__(message)
        self.status = status


def unknown_name(kind: str, name: str, known: Iterable[str]) -> ConfigError:
    """A ConfigError for an unknown ``name`` of ``kind``, suggesting the nearest known names.

    Examples
    --------
    >>> str(unknown_name("workload", "gpt3-17b", ["gpt3-175b", "gpt3-13b"]))
    "unknown workload 'gpt3-17b'; did you mean gpt3-175b, gpt3-13b? (known: gpt3-13b, gpt3-175b)"
    """
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ConfigError(f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})")
