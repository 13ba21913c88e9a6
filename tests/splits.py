"""The interleaved splits a brute-force oracle writes out: Megatron-LM's even split, or the
uneven splits whose first and last chunks carry fewer blocks (Megatron-Core's pipeline
layout), written here from the layer symbols, independently of the search."""

from __future__ import annotations


def interleaved_splits(blocks: int, p: int, v: int) -> list[tuple[str, ...] | None]:
    """Megatron-LM's even split (None) when ``p * v`` divides the blocks, else each split of
    ``E t...t L`` whose middle chunks hold ``ceil(blocks / (p v))`` blocks and whose first and
    last chunks (with the embedding ``E`` and the loss ``L``) hold the rest."""
    c = p * v
    if blocks % c == 0:
        return [None]
    k = -(-blocks // c)
    out = []
    for first in range(k + 1):
        last = blocks - first - (c - 2) * k
        if 0 <= last <= k:
            out.append(("E" + "t" * first, *["t" * k] * (c - 2), "t" * last + "L"))
    return out
