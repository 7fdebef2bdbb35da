"""``nas pareto``: the Pareto-optimal trials of a study (see ``studies.pareto_trials``);
read-only, imported when it runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nas_cli._common import STORAGE_HELP, print_front

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    from studies import pareto_trials

    if args.json:
        print(json.dumps(pareto_trials(args.name, args.storage)))
    else:
        print_front(args.name, args.storage)
    return 0


def register(subparsers: Any) -> None:
    """Add ``pareto`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser("pareto", help="the Pareto-optimal trials of a study")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=_run, prints_stored=True)
