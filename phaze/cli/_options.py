"""Defaults the commands share where they depend on the model."""

from __future__ import annotations

from typing import Final

from workloads import Model

__all__ = ["DEFAULT_SEQ_LEN", "default_seq_len"]

DEFAULT_SEQ_LEN: Final = 2048  # tokens; GPT-3's context, used where a model's is at least this


def default_seq_len(model: Model) -> int:
    """The sequence length a command uses when none is given: 2048 tokens, or the model's
    context (its position table) when that is shorter."""
    return min(DEFAULT_SEQ_LEN, model.max_positions)
