"""MkDocs hooks (``mkdocs.yml``: ``hooks``): the site's generated sections, rendered at build.

A page holding ``<!-- NAME: docs._generate.FUNCTION() -->`` ... ``<!-- /NAME -->`` gets that
section rendered from the code (the ``nas`` parser, the study parser, ``nas/knobs.py``) each time
the site is built, so the reference never falls behind the code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `mkdocs build` from the console script: the packages and docs
    sys.path.insert(0, str(ROOT))

from docs._generate import render  # noqa: E402

__all__ = ["on_page_markdown"]


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    """The page's Markdown with its generated sections rendered."""
    return render(markdown)
