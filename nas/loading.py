"""Reading architecture configs: a preset name or a YAML/JSON file, plus ``KEY=VALUE`` overrides.

Every YAML or JSON file of the system (architectures, search spaces, studies) is read by
:func:`read_mapping`, with bounds checked before the content can take memory: the file's size,
its encoding (binary content is refused), the nesting depth, and YAML aliases (a "billion laughs"
document is refused from its node graph, before any object is built). Numbers must be finite
(``.nan``, ``.inf``, JSON's ``NaN`` are refused wherever they appear).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from nas.config import ArchConfig
from nas.errors import ConfigError, NasError, first_line
from nas.presets import PRESETS
from nas.tasks import TaskGeometry

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_YAML_ALIASES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "exported_geometry",
    "load_arch",
    "load_yaml",
    "parse_overrides",
    "read_mapping",
    "unwritable_ancestor",
]

#: The largest config file read: the biggest shipped study or space is a few KiB.
MAX_FILE_BYTES = 1024 * 1024
#: Alias nodes (``*name``) one YAML document may hold.
MAX_YAML_ALIASES = 100
#: Nesting depth of mappings and lists (deeper documents would exhaust the parser's stack).
MAX_YAML_DEPTH = 64
#: Nodes of one document counted with every alias expanded, as a reader of the data sees them.
MAX_YAML_NODES = 100_000

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


class _Refused(Exception):
    """A document over one of the loader's bounds; the message says which, for one line."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that bounds nesting while it scans and composes, and aliases while
    it composes (before any Python object is built)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # Checked in the scanner: PyYAML's scanner slows quadratically in the depth of `[[[...`.
        if self.flow_level >= MAX_YAML_DEPTH:
            raise _Refused(f"it nests mappings and lists more than {MAX_YAML_DEPTH} deep")
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise _Refused(f"it holds more than {MAX_YAML_ALIASES} aliases (*name)")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _Refused(f"it nests mappings and lists more than {MAX_YAML_DEPTH} deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_nodes(root: yaml.Node) -> int:
    """Nodes of the graph under ``root`` with every alias expanded, counted without expanding
    (each shared node's count is computed once); refused past ``MAX_YAML_NODES`` or on a cycle."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise _Refused("an alias refers to a node that contains it (a recursive document)")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_YAML_NODES:
            raise _Refused(f"it holds more than {MAX_YAML_NODES:,} nodes, counting what each "
                           "alias repeats")
        sizes[key] = total
        return total

    return size(root)


def _check_finite(data: Any, where: str = "") -> None:
    """Refuse a NaN or infinite number anywhere in ``data``, naming its key path."""
    if isinstance(data, float) and not math.isfinite(data):
        raise _Refused(f"`{where}` is {data}, but numbers must be finite" if where
                       else f"{data} is not a finite number")
    if isinstance(data, dict):
        for key, value in data.items():
            _check_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_finite(value, f"{where}[{i}]")


def _parse_yaml(text: str) -> Any:
    """One YAML document within the module's bounds; ``_Refused`` names the bound broken."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_nodes(node)
        data = loader.construct_document(node)
        _check_finite(data)
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise _Refused(str(exc).rstrip(".")) from None
    except RecursionError:  # aliases of aliases, each nested: deeper than the 64 levels seen
        raise _Refused("it nests mappings and lists too deeply") from None
    finally:
        loader.dispose()
    return data


def load_yaml(text: str) -> Any:
    """Parse one YAML document with PyYAML's safe loader, within the module's bounds: at most
    ``MAX_YAML_ALIASES`` aliases, ``MAX_YAML_DEPTH`` levels, ``MAX_YAML_NODES`` nodes with the
    aliases expanded, no recursive alias, finite numbers only.

    Raises:
        ConfigError: a bound is broken (one line, naming it).
        yaml.YAMLError: the text is not YAML.
    """
    try:
        return _parse_yaml(text)
    except _Refused as exc:
        raise ConfigError(f"The YAML document is refused: {exc}.") from None


def _read_text(p: Path, what: str) -> str:
    """The file's text, refused (one line) when too large, unreadable or not UTF-8 text."""
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"{what} {str(p)!r} is {size:,} bytes, more than the "
                              f"{MAX_FILE_BYTES:,} a config file may hold.")
        with p.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)  # a file that grew meanwhile is cut here
    except OSError as exc:
        raise NasError(f"{what} {str(p)!r} cannot be read: {exc.strerror or exc}.") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"{what} {str(p)!r} holds more than the {MAX_FILE_BYTES:,} bytes a "
                          "config file may hold.")
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise ConfigError(f"{what} {str(p)!r} is binary (a NUL byte at offset {nul}), not "
                          "YAML or JSON text.")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(p)!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                          f"at offset {exc.start}); YAML and JSON files must be UTF-8.") from None


def read_mapping(path: str | Path, what: str = "file") -> dict[str, Any]:
    """Read a YAML or JSON file holding a mapping; errors name the file.

    Refused with one line: a missing or unreadable file, one over ``MAX_FILE_BYTES``, binary
    content, invalid syntax, a YAML document over the alias and depth bounds (see
    :func:`load_yaml`), a non-finite number, a document that is not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise NasError(f"{what} {str(p)!r} does not exist.")
    text = _read_text(p, what)
    kind = p.suffix[1:] or "YAML"
    try:
        if p.suffix == ".json":
            data = json.loads(text)
            _check_finite(data)
        else:
            data = _parse_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{what} {str(p)!r} is not valid {kind}: {first_line(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{what} {str(p)!r} nests mappings and lists too deeply.") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{what} {str(p)!r} is refused: {str(exc).rstrip('.')}.") from None
    except _Refused as exc:
        raise ConfigError(f"{what} {str(p)!r} is refused: {exc}.") from None
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
            value = _parse_yaml(raw) if raw.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML.") from None
        except _Refused as exc:
            raise ConfigError(f"--set {item!r} is refused: {exc}.") from None
        value = _number_like(value)
        if isinstance(value, float) and not math.isfinite(value):  # "1e999" reads as inf
            raise ConfigError(f"--set {item!r}: numbers must be finite, but got {value}.")
        out[key.strip()] = value
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
