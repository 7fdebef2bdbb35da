"""Cross-layer sharing patterns: parsing and normalising.

A pattern such as ``(0,0,1,1,2,2)`` lists, for each executed depth, the index of the parameter set
used there. ``(0x3,1x3)`` is shorthand for ``(0,0,0,1,1,1)``; ``(0x6)`` is ALBERT-style full
sharing. Brackets are optional.

Patterns are read with limits checked before anything is expanded: the text is at most
``MAX_PATTERN_CHARS`` long and the expanded pattern at most ``MAX_PATTERN_LENGTH`` depths, so
``(0x1000000000)`` is refused from its repeat count, without building a billion-entry tuple.
"""

from __future__ import annotations

import re

from nas.errors import ConfigError

__all__ = [
    "MAX_PATTERN_CHARS",
    "MAX_PATTERN_LENGTH",
    "canonical_pattern",
    "format_pattern",
    "parse_pattern",
]

#: The longest pattern text: "0,1,...,127" written out is 381 characters.
MAX_PATTERN_CHARS = 1024
#: The longest expanded pattern: a stack's depth limit (``nas.config.LIMITS``).
MAX_PATTERN_LENGTH = 128

_ITEM = re.compile(r"^\s*(\d+)\s*(?:[xX*]\s*(\d+))?\s*$")


def parse_pattern(text: str | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """Parse a sharing pattern into one parameter-set index per executed depth.

    Raises:
        ConfigError: the text is not a comma-separated list of ``I`` or ``IxN`` items, or it is
            longer than ``MAX_PATTERN_CHARS`` or expands to more than ``MAX_PATTERN_LENGTH``
            depths (checked before expanding).
    """
    if isinstance(text, (list, tuple)):
        if len(text) > MAX_PATTERN_LENGTH:
            raise ConfigError(f"A layer-sharing pattern has at most {MAX_PATTERN_LENGTH} "
                              f"entries, but got a list of {len(text)}.")
        items = [str(v) for v in text]
    elif isinstance(text, str):
        if len(text) > MAX_PATTERN_CHARS:
            raise ConfigError(f"A layer-sharing pattern has at most {MAX_PATTERN_CHARS} "
                              f"characters, but got {len(text)} ({text[:20]!r}...).")
        body = text.strip()
        if body.startswith("(") and body.endswith(")"):
            body = body[1:-1]
        items = body.split(",") if body.strip() else []
    else:
        raise ConfigError(
            f"A layer-sharing pattern must be a string such as '(0x3,1x3)', but got {text!r}."
        )
    runs: list[tuple[int, int]] = []
    for item in items:
        m = _ITEM.match(item)
        if m is None:
            raise ConfigError(
                f"Cannot parse layer-sharing pattern {text!r}: item {item.strip()!r} is not "
                "'I' or 'IxN' (e.g. '(0,0,1,1)' or '(0x2,1x2)')."
            )
        index, repeat = int(m.group(1)), int(m.group(2)) if m.group(2) is not None else 1
        if repeat < 1:
            raise ConfigError(f"Layer-sharing pattern {text!r}: repeat counts must be >= 1.")
        if index >= MAX_PATTERN_LENGTH:
            raise ConfigError(f"Layer-sharing pattern {text!r}: indices must be < "
                              f"{MAX_PATTERN_LENGTH}, but got {index}.")
        runs.append((index, repeat))
    length = sum(repeat for _, repeat in runs)  # before expanding anything
    if length > MAX_PATTERN_LENGTH:
        raise ConfigError(f"Layer-sharing pattern {text!r} expands to {length} depths, but a "
                          f"stack has at most {MAX_PATTERN_LENGTH} layers.")
    if not runs:
        raise ConfigError(f"Layer-sharing pattern {text!r} is empty.")
    return tuple(index for index, repeat in runs for _ in range(repeat))


def canonical_pattern(pattern: tuple[int, ...]) -> tuple[int, ...]:
    """Relabel indices in order of first use: ``(1,1,0,0)`` and ``(0,0,1,1)`` are one network."""
    relabel: dict[int, int] = {}
    return tuple(relabel.setdefault(i, len(relabel)) for i in pattern)


def format_pattern(pattern: tuple[int, ...]) -> str:
    """Format a pattern with the ``IxN`` shorthand for runs: ``(0x3,1x3)``."""
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        j = i
        while j < len(pattern) and pattern[j] == pattern[i]:
            j += 1
        parts.append(f"{pattern[i]}x{j - i}" if j - i > 1 else str(pattern[i]))
        i = j
    return "(" + ",".join(parts) + ")"
