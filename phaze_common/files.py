"""Reading a user's file: one path from bytes to parsed data, every failure one ConfigError.

Every reader of a user's JSON or TOML file (a model's ``config.json``, a sweep, a design
space, an accelerator, a placement instance, cost and carbon tables) calls these, so a file
that is missing, unreadable, in another encoding or malformed gives one error line naming the
file and the problem, never a traceback. Text is UTF-8; a byte-order mark (UTF-8, UTF-16 or
UTF-32, as Windows editors write them) is honoured, so such a file reads as its author meant.
"""

from __future__ import annotations

import codecs
import json
import tomllib
from pathlib import Path
from typing import Any, Final

from phaze_common.errors import ConfigError

__all__ = ["read_text", "read_json", "read_toml", "decode_text"]

# Byte-order marks and their codecs, longest first: UTF-32-LE's mark begins with UTF-16-LE's.
_BOMS: Final = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode_text(raw: bytes, source: str) -> str:
    """``raw`` as text: by its byte-order mark if it has one, else as UTF-8.

    Examples
    --------
    >>> decode_text('{"a": 1}'.encode("utf-16"), "f.json")
    '{"a": 1}'
    >>> decode_text(b"a = '\\xe9'", "f.toml")
    Traceback (most recent call last):
    ...
    phaze_common.errors.ConfigError: f.toml: not UTF-8 text (byte 0xe9 at offset 5); save it as UTF-8
    """
    encoding = next((enc for bom, enc in _BOMS if raw.startswith(bom)), None)
    if encoding is None and b"\0" in raw:
        raise ConfigError(f"{source}: {_nul_guess(raw)}; save it as UTF-8")
    try:
        return raw.decode(encoding or "utf-8")
    except UnicodeDecodeError as e:
        byte = raw[e.start : e.start + 1].hex()
        if encoding is None:
            raise ConfigError(
                f"{source}: not UTF-8 text (byte 0x{byte} at offset {e.start}); save it as UTF-8"
            ) from None
        raise ConfigError(
            f"{source}: starts with a {encoding.upper().removesuffix('-SIG')} byte-order mark "
            f"but is not valid {encoding.removesuffix('-sig').upper()} (at offset {e.start}); "
            "save it as UTF-8"
        ) from None


def _nul_guess(raw: bytes) -> str:
    """What a text with NUL bytes and no byte-order mark is likely to be: UTF-16 or UTF-32
    text saved without its mark puts a zero beside every ASCII character."""
    for width, name in ((4, "UTF-32"), (2, "UTF-16")):
        for order, at in (("LE", slice(1, None)), ("BE", slice(None, -1))):
            units = [raw[i : i + width] for i in range(0, len(raw) - len(raw) % width, width)]
            if units and all(u[at] == bytes(width - 1) for u in units):
                return f"looks like {name}-{order} text without a byte-order mark, not UTF-8"
    return "holds NUL bytes: not UTF-8 text"


def read_text(path: str | Path, what: str = "file") -> str:
    """The text of the file ``path`` (``what`` it is, for the error message)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, not a {what}") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the {what} ({e.strerror or e})") from None
    return decode_text(raw, str(p))


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """The parsed JSON of ``path``; malformed JSON is a ConfigError with line and column."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply to read") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{path}: malformed JSON: {e}") from None


def read_toml(path: str | Path, what: str = "TOML file") -> dict[str, Any]:
    """The parsed TOML of ``path``; malformed TOML is a ConfigError naming the place."""
    text = read_text(path, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    except RecursionError:
        raise ConfigError(f"{path}: TOML nested too deeply to read") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
