"""Bounds on the sizes a user may ask for: well beyond any machine that exists.

Checked where input enters (sweep configs, command-line options, placement instances), so a
slip such as ``--devices 100000000`` is one error naming the limit rather than minutes of
work or a process killed for memory. Like :mod:`phaze_common.errors`, this module imports nothing
of ours, so any package may use it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_DEVICES", "MAX_GLOBAL_BATCH", "MAX_SEQ_LEN", "LIMITS", "over_limit"]

MAX_DEVICES: Final = 1_000_000  # accelerators; the largest training clusters have ~10^5
MAX_GLOBAL_BATCH: Final = 1_000_000  # sequences per iteration (also micro-batches per batch)
MAX_SEQ_LEN: Final = 10_000_000  # tokens per sequence

# field of a sweep config -> its upper bound
LIMITS: Final = {
    "devices": MAX_DEVICES,
    "devices_per_node": MAX_DEVICES,
    "global_batch": MAX_GLOBAL_BATCH,
    "micro_batches": MAX_GLOBAL_BATCH,
    "seq_len": MAX_SEQ_LEN,
}


def over_limit(name: str, value: object, limit: int) -> str | None:
    """The problem with ``name = value`` if it is a number above ``limit``, else None.

    Examples
    --------
    >>> over_limit("devices", 10**8, MAX_DEVICES)
    'devices = 100000000 is above the limit of 1000000 (more than any machine has)'
    >>> over_limit("devices", 64, MAX_DEVICES) is None
    True
    """
    if isinstance(value, int | float) and not isinstance(value, bool) and value > limit:
        return f"{name} = {value!r} is above the limit of {limit} (more than any machine has)"
    return None
