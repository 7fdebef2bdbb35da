"""Reading architecture configs: a preset name or a YAML/JSON file, plus ``KEY=VALUE`` overrides."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from nas.config import ArchConfig
from nas.errors import ConfigError, NasError
from nas.presets import PRESETS

__all__ = ["load_arch", "parse_overrides", "read_mapping"]


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
        raise ConfigError(f"{what} {str(p)!r} is not valid {p.suffix[1:] or 'YAML'}: {first}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {str(p)!r} must hold a mapping, but holds {type(data).__name__}.")
    return data


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` items; values are YAML (``true``, ``3``, ``null``, ``{encoder: "(0x6)"}``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, but got {item!r}.")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML.") from None
    return out


def load_arch(spec: str, overrides: Sequence[str] | dict[str, Any] = ()) -> ArchConfig:
    """A preset name or a path to a YAML/JSON architecture file, with overrides applied."""
    if spec in PRESETS:
        data = dict(PRESETS[spec])
    elif spec.endswith((".yaml", ".yml", ".json")) or Path(spec).exists():
        data = read_mapping(spec, "architecture file")
    else:
        raise ConfigError(
            f"Unknown architecture {spec!r}: not a preset ({', '.join(sorted(PRESETS))}) "
            "nor a .yaml/.json file."
        )
    extra = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    return ArchConfig.from_dict({**data, **extra})
