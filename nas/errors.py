"""The project's own error types.

`NasError` (and its subclasses) are the errors a user can cause: a bad config, a missing file, an
unknown study. The CLI turns them into one line on stderr and exit code 2. Everything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["ConfigError", "NasError"]


class NasError(Exception):
    """An error caused by user input: reported as one line, exit code 2."""


class ConfigError(NasError, ValueError):
    """An invalid architecture, task, search-space or study configuration."""
