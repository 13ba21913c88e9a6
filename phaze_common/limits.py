"""Bounds on the sizes a user may ask for: well beyond any machine that exists.

Checked where input enters (sweep configs, command-line options, placement instances), so a
slip such as ``--devices 100000000`` is one error naming the limit rather than minutes of
work or a process killed for memory. Like :mod:`phaze_common.errors`, this module imports nothing
of ours, so any package may use it.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "MAX_DEVICES",
    "MAX_GLOBAL_BATCH",
    "MAX_SEQ_LEN",
    "MAX_LAYERS",
    "MAX_WIDTH",
    "MAX_VOCAB",
    "MAX_EXPERTS",
    "LIMITS",
    "MODEL_LIMITS",
    "over_limit",
]

MAX_DEVICES: Final = 1_000_000  # accelerators; the largest training clusters have ~10^5
MAX_GLOBAL_BATCH: Final = 1_000_000  # sequences per iteration (also micro-batches per batch)
MAX_SEQ_LEN: Final = 10_000_000  # tokens per sequence
# A model's sizes (config.json, the catalog). Layers cost work and memory in proportion (one
# graph node each); the widths only scale numbers, and are bounded so a slip is caught.
MAX_LAYERS: Final = 10_000  # transformer blocks; the deepest published LLMs have ~10^2
MAX_WIDTH: Final = 1_000_000  # hidden, FFN, heads, head sizes; the widest published FFN ~10^5
MAX_VOCAB: Final = 10_000_000  # vocabulary entries; the largest published ~2.6 x 10^5
MAX_EXPERTS: Final = 100_000  # experts per MoE block; the most published (Switch-C) 2,048

# field of a sweep config -> its upper bound
LIMITS: Final = {
    "devices": MAX_DEVICES,
    "devices_per_node": MAX_DEVICES,
    "global_batch": MAX_GLOBAL_BATCH,
    "micro_batches": MAX_GLOBAL_BATCH,
    "seq_len": MAX_SEQ_LEN,
}


# field of a Model -> its upper bound
MODEL_LIMITS: Final = {
    "layers": MAX_LAYERS,
    "dense_layers": MAX_LAYERS,
    "mtp_layers": MAX_LAYERS,
    "hidden": MAX_WIDTH,
    "ffn_hidden": MAX_WIDTH,
    "heads": MAX_WIDTH,
    "kv_heads": MAX_WIDTH,
    "embedding_dim": MAX_WIDTH,
    "head_size": MAX_WIDTH,
    "expert_ffn_hidden": MAX_WIDTH,
    "q_lora_rank": MAX_WIDTH,
    "kv_lora_rank": MAX_WIDTH,
    "qk_nope_head_dim": MAX_WIDTH,
    "qk_rope_head_dim": MAX_WIDTH,
    "v_head_dim": MAX_WIDTH,
    "vocab": MAX_VOCAB,
    "type_vocab": MAX_VOCAB,
    "max_positions": MAX_SEQ_LEN,
    "sliding_window": MAX_SEQ_LEN,
    "experts": MAX_EXPERTS,
    "top_k": MAX_EXPERTS,
    "shared_experts": MAX_EXPERTS,
}


def over_limit(
    name: str, value: object, limit: int, why: str = "more than any machine has"
) -> str | None:
    """The problem with ``name = value`` if it is a number above ``limit``, else None.

    Examples
    --------
    >>> over_limit("devices", 10**8, MAX_DEVICES)
    'devices = 100000000 is above the limit of 1000000 (more than any machine has)'
    >>> over_limit("devices", 64, MAX_DEVICES) is None
    True
    """
    if isinstance(value, int | float) and not isinstance(value, bool) and value > limit:
        return f"{name} = {value!r} is above the limit of {limit} ({why})"
    return None
