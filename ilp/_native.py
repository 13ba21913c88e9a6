"""Keep native solver libraries off the process's standard output.

HiGHS prints its banner ("Running HiGHS ...") from C++ to file descriptor 1 when the first
``highspy.Highs`` of a process is built, before any option can turn it off
(ERGO-Code/HiGHS issue 2749). Standard output carries the CLI's tables and JSON documents,
so the solvers run with descriptor 1 pointed at the null device.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["native_stdout_silenced"]


@contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """Point file descriptor 1 at the null device for the block (Python's own ``sys.stdout``
    is flushed first, so nothing written before is lost)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
