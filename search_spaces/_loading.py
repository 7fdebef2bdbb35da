"""Finding search spaces: the ones shipped in this package, a user's YAML file, or a mapping."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from nas.errors import ConfigError
from nas.loading import load_yaml, read_mapping
from search_spaces._space import SearchSpace

__all__ = ["list_spaces", "load_space"]

_SUFFIXES = (".yaml", ".yml", ".json")


def list_spaces() -> list[str]:
    """Names of the spaces shipped with the package (``search_spaces/*.yaml``), sorted."""
    root = resources.files(__package__ or "search_spaces")
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def _shipped(name: str) -> dict[str, Any]:
    text = resources.files(__package__ or "search_spaces").joinpath(f"{name}.yaml").read_text()
    data = load_yaml(text)
    if not isinstance(data, dict):  # a packaging mistake, not user input
        raise ConfigError(f"Shipped search space {name!r} does not hold a mapping.")
    return data


def load_space(spec: str | Path | Mapping[str, Any]) -> SearchSpace:
    """A search space from a shipped name (``"lw_transformer"``), a YAML/JSON path, or a mapping.

    A bare name is looked up among the shipped spaces first; anything with a file suffix or a
    directory part is read as a path. A file without ``name`` is named after its stem.

    Raises:
        ConfigError: unknown name, unreadable file, or an invalid space (one-line message).
    """
    if isinstance(spec, Mapping):
        return SearchSpace.from_dict(spec)
    text = str(spec)
    path = Path(text)
    looks_like_path = path.suffix in _SUFFIXES or len(path.parts) > 1
    if not looks_like_path and text in list_spaces():
        return SearchSpace.from_dict(_shipped(text), name=text)
    if looks_like_path or path.is_file():
        return SearchSpace.from_dict(read_mapping(path, "search-space file"), name=path.stem)
    raise ConfigError(
        f"Unknown search space {text!r}; shipped spaces are {list_spaces()} (or give the path "
        "of a .yaml file)."
    )
