"""Named cross-layer sharing schemes: patterns that are valid for any depth.

A search space cannot list literal patterns such as ``(0x3,1x3)`` when the depth itself is
searched, because a pattern's length must equal the stack's depth. A scheme is a rule that builds
the pattern once the depth is known, so every (depth, scheme) pair is a valid network.
"""

from __future__ import annotations

from collections.abc import Callable

from nas.sharing import canonical_pattern, format_pattern, parse_pattern

__all__ = ["SCHEMES", "format_sharing", "resolve_sharing"]


def _none(depth: int) -> tuple[int, ...]:
    return tuple(range(depth))


def _full(depth: int) -> tuple[int, ...]:
    return (0,) * depth


def _halves(depth: int) -> tuple[int, ...]:
    first = (depth + 1) // 2  # ceil: an odd stack gives its extra layer to the first half
    return (0,) * first + (1,) * (depth - first)


def _pairs(depth: int) -> tuple[int, ...]:
    return tuple(i // 2 for i in range(depth))


def _mirror(depth: int) -> tuple[int, ...]:
    return tuple(min(i, depth - 1 - i) for i in range(depth))


def _cycle2(depth: int) -> tuple[int, ...]:
    return tuple(i % 2 for i in range(depth))


#: Scheme name -> pattern builder. ``none``: unshared; ``full``: one layer executed L times
#: (ALBERT); ``halves``: ``(0x⌈L/2⌉,1x⌊L/2⌋)``; ``pairs``: ``(0,0,1,1,2,2,...)``; ``mirror``:
#: ``(0,1,2,2,1,0)``, the first layer shared with the last; ``cycle2``: ``(0,1,0,1,...)``.
SCHEMES: dict[str, Callable[[int], tuple[int, ...]]] = {
    "none": _none,
    "full": _full,
    "halves": _halves,
    "pairs": _pairs,
    "mirror": _mirror,
    "cycle2": _cycle2,
}


def resolve_sharing(choice: str, depth: int) -> tuple[int, ...]:
    """The canonical pattern of a scheme name or literal pattern for a stack of ``depth`` layers.

    A literal pattern is returned as parsed; its length is checked when the space is loaded.
    """
    if choice in SCHEMES:
        return canonical_pattern(SCHEMES[choice](depth))
    return canonical_pattern(parse_pattern(choice))


def format_sharing(pattern: tuple[int, ...]) -> str | None:
    """The config value for ``pattern``: ``None`` when unshared, else the ``IxN`` shorthand."""
    if pattern == tuple(range(len(pattern))):
        return None
    return format_pattern(pattern)
