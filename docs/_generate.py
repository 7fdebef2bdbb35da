"""Generated sections of the README and the documentation site, rendered from the code.

The knob table (``nas.knobs``), the ``nas`` parser, the study parser, the presets, the sharing
schemes and the trainer's settings are declared once in the code; the
lists for people are rendered here, above the packages, so that ``nas`` never imports its own
presets to print a column. A generated section lies between
``<!-- NAME: docs._generate.FUNCTION() -->`` and ``<!-- /NAME -->``. The site's pages are
rendered when MkDocs builds them (``docs/_hooks.py`` calls :func:`render`), so they are never
stale; ``README.md`` is a file people read as it is, so its sections are written into it, and
``tests/test_knobs.py`` keeps them equal to their functions. After changing a knob::

    python -m docs._generate           # rewrite README.md's generated sections
    python -m docs._generate --check   # exit 1 (naming them) when a section is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docs._cli_reference import cli_reference
from docs._study_keys import study_keys
from nas.knobs import FAMILY_NAMES, KNOBS, Knob
from nas.presets import family_defaults

__all__ = ["README", "SECTIONS", "knob_summary", "knob_table", "main", "present", "presets_list",
           "render", "section", "sharing_schemes", "train_settings"]

README = Path(__file__).resolve().parents[1] / "README.md"


def knob_table() -> str:
    """The knob list of the architecture reference: one row per knob of ``nas.knobs.KNOBS``."""
    rows = ["| key | values | default | families | acts on | meaning | from |",
            "|---|---|---|---|---|---|---|"]
    for k in KNOBS:
        families = "all" if k.families == FAMILY_NAMES else ", ".join(k.families)
        rows.append(f"| `{k.name}` | {k.bounds()} | {_default_text(k)} | {families} | "
                    f"{', '.join(k.acts_on) or '-'} | {k.meaning} | {k.paper} |")
    return "\n".join(rows) + "\n"


def knob_summary() -> str:
    """The README's summary of the design space: the knobs the papers name."""
    rows = ["| knob | config key | what it does |", "|---|---|---|"]
    rows += [f"| {k.label} | `{k.name}` | {k.meaning.removeprefix(f'{k.label}: ')} |"
             for k in KNOBS if k.label]
    return "\n".join(rows) + "\n"


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(
        value)


def _default_text(knob: Knob) -> str:
    """A knob's default as the docs state it: per family, its dense value, or the base
    presets'."""
    if knob.defaults:
        by_value: dict[str, list[str]] = {}
        for family, value in knob.defaults:
            by_value.setdefault(_text(value), []).append(family)
        return "; ".join(f"{value} ({', '.join(families)})"
                         for value, families in by_value.items())
    if knob.is_design_knob:
        return _text(knob.dense)
    if knob.kind == "family":
        return "-"
    preset = any(family_defaults(f).get(knob.name) is not None for f in knob.families)
    return "the family's base preset's" if preset else "null"


def presets_list() -> str:
    """The presets: name, family and note (``nas presets`` adds their costs)."""
    from nas.presets import list_presets

    rows = ["| preset | family | note |", "|---|---|---|"]
    rows += [f"| `{p['name']}` | {p['family']} | {p['note']} |" for p in list_presets()]
    return "\n".join(rows) + "\n"


def sharing_schemes() -> str:
    """The named cross-layer sharing schemes a search space may draw, with the pattern each
    gives a stack of 6 and of 5 layers."""
    from nas.sharing import format_pattern
    from search_spaces import SCHEMES

    rows = ["| scheme | 6 layers | 5 layers |", "|---|---|---|"]
    rows += [f"| `{name}` | `{format_pattern(build(6))}` | `{format_pattern(build(5))}` |"
             for name, build in SCHEMES.items()]
    return "\n".join(rows) + "\n"


def _kind(annotation: Any) -> str:
    """A type annotation as the docs say it: ``float or null``, ``one of `a`, `b```."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _kind(a) for a in args)
    return str(getattr(annotation, "__name__", annotation))


def train_settings() -> str:
    """The training settings a study's ``train`` (and a space's ``train``) may set, with their
    type and the trainer's default."""
    from search_spaces._knobs import TRAIN_FIXED, train_fields

    rows = ["| setting | type | default |", "|---|---|---|"]
    rows += [f"| `{name}` | {_kind(annotation)} | `{_text(default)}` |"
             for name, (annotation, default) in train_fields().items()]
    fixed = ", ".join(f"`{name}`" for name in TRAIN_FIXED if name not in ("epochs", "seed"))
    return "\n".join(rows) + (f"\n\nA study's `train` also takes {fixed}, which a space does "
                              "not search; `epochs` and `seed` come from `fidelity.epochs` and "
                              "`seed`.\n")


#: section name -> the function rendering it
SECTIONS: dict[str, Callable[[], str]] = {
    "knob summary": knob_summary, "knobs": knob_table, "presets": presets_list,
    "cli": cli_reference, "study keys": study_keys, "sharing schemes": sharing_schemes,
    "train settings": train_settings}


def _bounds(text: str, name: str) -> tuple[int, int]:
    """Where section ``name``'s content starts and ends in ``text``."""
    opening = f"<!-- {name}: docs._generate.{SECTIONS[name].__name__}() -->\n"
    start = text.index(opening) + len(opening)
    return start, text.index(f"<!-- /{name} -->", start)


def section(text: str, name: str) -> str:
    """The content of section ``name`` in ``text`` (a README), between its markers."""
    start, end = _bounds(text, name)
    return text[start:end]


def present(text: str) -> list[str]:
    """The sections of :data:`SECTIONS` that ``text`` has markers for."""
    return [name for name, function in SECTIONS.items()
            if f"<!-- {name}: docs._generate.{function.__name__}() -->\n" in text]


def render(text: str) -> str:
    """``text`` with every section it holds rendered afresh."""
    for name in present(text):
        start, end = _bounds(text, name)
        text = text[:start] + SECTIONS[name]() + text[end:]
    return text


def main(argv: list[str] | None = None) -> int:
    """Rewrite README.md's generated sections, or with ``--check`` only say which are stale."""
    parser = argparse.ArgumentParser(prog="python -m docs._generate", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    text = README.read_text()
    stale = [name for name in present(text) if section(text, name) != SECTIONS[name]()]
    if args.check:
        if stale:
            print(f"README.md: stale generated sections {stale}; run python -m docs._generate",
                  file=sys.stderr)
        return 1 if stale else 0
    if stale:
        README.write_text(render(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
