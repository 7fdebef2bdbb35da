"""Reading architecture configs: a preset name or a YAML/JSON file, plus ``KEY=VALUE`` overrides."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from nas.config import ArchConfig
from nas.errors import ConfigError, NasError
from nas.presets import PRESETS
from nas.tasks import TaskGeometry

__all__ = [
    "exported_geometry",
    "load_arch",
    "parse_overrides",
    "read_mapping",
    "unwritable_ancestor",
]

# The top-level keys of a trial exported by `nas export --format yaml/json`.
_EXPORT_KEYS = ("arch", "train", "task", "provenance")


def unwritable_ancestor(folder: str | Path) -> Path | None:
    """The nearest existing ancestor of ``folder`` (or itself) when it is not a writable folder,
    so ``folder`` cannot be made there; None when it can. Checked without writing anything."""
    path = Path(folder).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
        return None
    return existing


def read_mapping(path: str | Path, what: str = "file") -> dict[str, Any]:
    """Read a YAML or JSON file holding a mapping; errors name the file."""
    p = Path(path)
    if not p.is_file():
        raise NasError(f"{what} {str(p)!r} does not exist.")
    text = p.read_text()
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0]
        kind = p.suffix[1:] or "YAML"
        raise ConfigError(f"{what} {str(p)!r} is not valid {kind}: {first}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{what} {str(p)!r} must hold a mapping, but holds {type(data).__name__}."
        )
    return data


_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)$")


def _number_like(value: Any) -> Any:
    """PyYAML (YAML 1.1) reads ``1e-3`` as a string; a user writing it means a number."""
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    return value


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` items; values are YAML (``true``, ``3``, ``null``,
    ``{encoder: "(0x6)"}``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, but got {item!r}.")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
            out[key.strip()] = _number_like(value)
        except yaml.YAMLError:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML.") from None
    return out


def _architecture_section(data: dict[str, Any], path: str) -> dict[str, Any]:
    """The flat architecture of a file: the file itself, or its ``arch`` mapping when the file is
    a trial exported by ``nas export`` (``arch`` beside ``train``, ``task``, ``provenance``)."""
    if "arch" not in data:
        return data
    extra = sorted(set(data) - set(_EXPORT_KEYS))
    if extra:
        raise ConfigError(
            f"architecture file {path!r}: unknown key {extra[0]!r} beside `arch`; an exported "
            f"trial holds only {list(_EXPORT_KEYS)}."
        )
    if not isinstance(data["arch"], dict):
        raise ConfigError(f"architecture file {path!r}: `arch` must be a mapping of architecture "
                          f"keys, but holds {type(data['arch']).__name__}.")
    return dict(data["arch"])


def exported_geometry(spec: str) -> TaskGeometry | None:
    """The task geometry an exported trial file records (``task.geometry``), else ``None``.

    ``nas cost FILE`` uses it when no ``--task`` is given, so that an exported trial reports the
    costs it had in its study.
    """
    if spec in PRESETS or not spec.endswith((".yaml", ".yml", ".json")):
        return None
    data = read_mapping(spec, "architecture file")
    task = data.get("task") if "arch" in data else None
    geometry = task.get("geometry") if isinstance(task, dict) else None
    if geometry is None:
        return None
    try:
        return TaskGeometry(**geometry)
    except TypeError:
        raise ConfigError(f"architecture file {spec!r}: `task.geometry` is not a task geometry "
                          f"(keys {[f.name for f in dataclasses.fields(TaskGeometry)]}).") from None


def load_arch(spec: str, overrides: Sequence[str] | dict[str, Any] = ()) -> ArchConfig:
    """A preset name or a path to a YAML/JSON architecture file, with overrides applied.

    The file holds the flat architecture keys, or is a trial exported by ``nas export``.
    """
    if spec in PRESETS:
        data = dict(PRESETS[spec])
    elif spec.endswith((".yaml", ".yml", ".json")) or Path(spec).exists():
        data = _architecture_section(read_mapping(spec, "architecture file"), spec)
    else:
        raise ConfigError(
            f"Unknown architecture {spec!r}: not a preset ({', '.join(sorted(PRESETS))}) "
            "nor a .yaml/.json file."
        )
    extra = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    return ArchConfig.from_dict({**data, **extra})
