"""The project's own error types.

`NasError` (and its subclasses) are the errors a user can cause: a bad config, a missing file, an
unknown study. The CLI turns them into one line on stderr and exit code 2. `RunAborted` is a
fault met while running (the Ray cluster went away, the disk filled): one line too, exit code 1.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["ConfigError", "NasError", "RunAborted", "first_line"]


class NasError(Exception):
    """An error caused by user input: reported as one line, exit code 2."""

    exit_code = 2


class ConfigError(NasError, ValueError):
    """An invalid architecture, task, search-space or study configuration."""


class RunAborted(NasError):
    """A study's run stopped on a fault outside the study (its trials are closed, it resumes)."""

    exit_code = 1


def first_line(exc: BaseException, *, typed: bool = False, limit: int | None = None,
               default: str | None = None) -> str:
    """The first non-empty line of ``exc``'s message, stripped, at most ``limit`` characters;
    ``default`` (else the name of ``exc``'s type) where the message is empty. ``typed``: as
    ``Type: line`` (only ``Type`` where the message is empty).

    Driver errors, Ray's and Optuna's run to pages (a traceback, a state dump, the SQL
    statement); a nas error is one line, so it quotes the first line of the error it reports.
    Text read from the study database is made safe to print separately (``studies.store.inert``).
    """
    line = next((s.strip() for s in str(exc).splitlines() if s.strip()), "")[:limit]
    if typed:
        return f"{type(exc).__name__}: {line}".rstrip(": ")
    return line or (type(exc).__name__ if default is None else default)
