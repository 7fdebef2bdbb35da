"""The project's own error types.

`NasError` (and its subclasses) are the errors a user can cause: a bad config, a missing file, an
unknown study. The CLI turns them into one line on stderr and exit code 2. `RunAborted` is a
fault met while running (the Ray cluster went away, the disk filled): one line too, exit code 1.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["ConfigError", "NasError", "RunAborted"]


class NasError(Exception):
    """An error caused by user input: reported as one line, exit code 2."""

    exit_code = 2


class ConfigError(NasError, ValueError):
    """An invalid architecture, task, search-space or study configuration."""


class RunAborted(NasError):
    """A study's run stopped on a fault outside the study (its trials are closed, it resumes)."""

    exit_code = 1
