"""The built-in model catalog (``workloads/data/models.toml``) and name-or-file resolution."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from phaze_common.errors import ConfigError, unknown_name
from workloads.hf import load_hf_config
from workloads.model import Model

__all__ = ["model_names", "get_model", "catalog", "resolve_model"]

_CATALOG_FILE = "models.toml"


@lru_cache(maxsize=1)
def catalog() -> MappingProxyType[str, Model]:
    """Every catalog model by name, in file order."""
    text = resources.files("workloads").joinpath("data", _CATALOG_FILE).read_text("utf-8")
    tables = tomllib.loads(text).get("models", {})
    models = {
        name: Model.from_mapping({"name": name, **table}, source=f"{_CATALOG_FILE} [models.{name}]")
        for name, table in tables.items()
    }
    return MappingProxyType(models)


def model_names() -> tuple[str, ...]:
    """Catalog names in file order (families together, smallest first)."""
    return tuple(catalog())


def get_model(name: str) -> Model:
    """A catalog model by name.

    Raises
    ------
    ConfigError
        The name is not in the catalog; the message suggests the nearest names.
    """
    try:
        return catalog()[name]
    except KeyError:
        raise unknown_name("model", name, model_names()) from None


_MTP_KEY = "mtp_layers="


def _mtp_layers(text: str, setting: str) -> int:
    value = setting.removeprefix(_MTP_KEY)
    if not value.isdigit():
        raise ConfigError(
            f"model {text!r}: mtp_layers = {value!r} must be a non-negative integer "
            "(NAME:mtp_layers=0 trains without multi-token prediction)"
        )
    return int(value)


def resolve_model(name_or_path: str | Path) -> Model:
    """A catalog name, or a path to a Hugging Face ``config.json`` or its directory
    (see :mod:`workloads.hf`); ``NAME:mtp_layers=N`` sets its multi-token-prediction
    modules (0: none), as Megatron-Core's ``--mtp-num-layers``.

    >>> resolve_model("deepseek-v3:mtp_layers=0").mtp_layers
    0
    """
    text = str(name_or_path)
    if ":" in text and text.rpartition(":")[2].startswith(_MTP_KEY):
        base, _, setting = text.rpartition(":")
        return replace(resolve_model(base), mtp_layers=_mtp_layers(text, setting))
    if text in catalog():
        return catalog()[text]
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        return load_hf_config(path)
    if "/" in text or "\\" in text:
        raise ConfigError(f"model file {text!r} does not exist")
    return get_model(text)
