"""The even split of a chain into contiguous parts, the one rule both training pipelines
(Megatron-LM's default stage split) and serving pipelines (vLLM's ``get_pp_indices``) use."""

from __future__ import annotations

__all__ = ["even_counts"]


def even_counts(items: int, parts: int) -> tuple[int, ...]:
    """How many of ``items`` each of ``parts`` contiguous parts takes: as even as can be, the
    first parts one more each when ``parts`` does not divide ``items``."""
    if parts < 1 or items < 0:
        raise ValueError(f"cannot split {items} items into {parts} parts")
    n, extra = divmod(items, parts)
    return tuple(n + (1 if i < extra else 0) for i in range(parts))
