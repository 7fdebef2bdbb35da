"""An exception as one line: what every error message of nas quotes of another's.

Driver errors, Ray's and Optuna's run to pages (a traceback, a state dump, the SQL statement);
a nas error is one line, so it quotes the first line of the error it reports. Text read from the
study database is made safe to print separately (``studies.store.inert``).
"""

from __future__ import annotations

__all__ = ["first_line"]


def first_line(exc: BaseException, *, typed: bool = False, limit: int | None = None,
               default: str | None = None) -> str:
    """The first non-empty line of ``exc``'s message, stripped, at most ``limit`` characters;
    ``default`` (else the name of ``exc``'s type) where the message is empty. ``typed``: as
    ``Type: line`` (only ``Type`` where the message is empty)."""
    line = next((s.strip() for s in str(exc).splitlines() if s.strip()), "")[:limit]
    if typed:
        return f"{type(exc).__name__}: {line}".rstrip(": ")
    return line or (type(exc).__name__ if default is None else default)
