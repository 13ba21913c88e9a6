"""Reading a Hugging Face ``config.json``'s fields as Model fields: every missing or
unsupported field collected, each told in the file's own words (:class:`Reader`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Reader", "has_dropout", "is_count", "is_pos_int", "standard_sizes"]

_KIND = {list: "array", dict: "object"}


class Reader:
    """Reads keys of one config, collecting every missing or unsupported field.

    ``names`` maps each Model field read with :meth:`size` to its config.json key, so the
    Model's own errors can be told in the file's words.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data: Mapping[str, Any] = data
        self.problems: list[str] = []
        self.names: dict[str, str] = {}

    def size(self, key: str, field: str, default: Any = ...) -> Any:
        """A positive integer read from ``key`` into the Model's ``field``."""
        self.names[field] = key
        value = self.get(key, default)
        if key in self.data and value is not None and not is_pos_int(value):
            self.problems.append(f"{key} = {value!r} must be a positive integer")
            return None
        return value

    def in_file_words(self, message: str) -> str:
        """``message`` with each Model field read by :meth:`size` named by its key."""
        for field, key in self.names.items():
            message = re.sub(rf"\b{field} = ", f"{key} = ", message)
        return message

    def get(self, key: str, default: Any = ..., check: Callable[[Any], bool] | None = None) -> Any:
        if key not in self.data or (self.data[key] is None and default is not ...):
            if default is ...:
                self.problems.append(f"missing field {key!r}")
                return None
            return default
        value = self.data[key]
        if isinstance(value, list | dict):  # every key read here holds one number, flag or name
            self.problems.append(
                f"{key} = {value!r} must be a single value, not a JSON {_KIND[type(value)]}"
            )
            return None if default is ... else default
        if check is not None and not check(value):
            self.problems.append(f"unsupported value {key} = {value!r}")
        return value

    def unsupported(self, key: str, value: Any, allowed: str) -> None:
        self.problems.append(f"unsupported value {key} = {value!r} (supported: {allowed})")


def is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def has_dropout(*rates: Any) -> bool:
    return any(isinstance(r, int | float) and r > 0 for r in rates)


def is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def standard_sizes(r: Reader) -> dict[str, Any]:
    """The six sizes most config.json files name the same way."""
    return dict(
        layers=r.size("num_hidden_layers", "layers"),
        hidden=r.size("hidden_size", "hidden"),
        heads=r.size("num_attention_heads", "heads"),
        ffn_hidden=r.size("intermediate_size", "ffn_hidden"),
        vocab=r.size("vocab_size", "vocab"),
        max_positions=r.size("max_position_embeddings", "max_positions"),
    )
