"""``nas export``: write a study's trials as configs for use elsewhere (see ``studies.export``).

``register(subparsers)`` adds the subcommand; the export itself is imported only when it runs, so
``nas --help`` stays fast. ``export_hint`` is the command line other commands print to suggest an
export, quoted for the shell.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from nas_cli._common import STORAGE_HELP

__all__ = ["FORMAT_NAMES", "export_hint", "register"]

#: The names of ``studies.export.FORMATS`` (repeated here so the parser needs no heavy import;
#: a test keeps the two equal).
FORMAT_NAMES = ("yaml", "json", "hf-config", "openvqa", "acort", "timm", "torch")

_DESCRIPTION = """\
Write trial N (--trial N) or every Pareto-optimal trial (--pareto) of study NAME into folder DIR,
one file per trial named trial-<N>.<ext>; --pareto adds pareto.csv with each trial's objective
values, arch_id and file. Formats:
  yaml, json  architecture, training settings, task and provenance (study, trial, objectives,
              cost by part, arch_id, search-space hash, seed, fidelity, version, git commit);
              `nas cost FILE` and a study's `enqueue:` list read them back
  hf-config   trial-<N>/config.json in the style of Hugging Face model configs
  openvqa     MCAN/OpenVQA network keys plus the group-wise keys (mcan)
  acort       ACORT/ORT training-script options as a shell snippet (ort)
  timm        the timm model name (nas_vit, nas_swin) and keyword arguments (vit, swin)
  torch       a Python script that builds the network with this package
Existing files are kept unless --force."""


def export_hint(name: str, storage_url: str, *, out: str = "exported/",
                fmt: str = "yaml") -> str:
    """The ``nas export`` command line that writes the Pareto front of study ``name``, quoted
    for a POSIX shell: a name or URL with spaces or shell characters stays one word and runs
    nothing, and a name starting with ``-`` comes after ``--``."""
    options = ["--pareto", "--format", fmt, "--out", out, "--storage", storage_url]
    words = [*options, "--", name] if name.startswith("-") else [name, *options]
    return shlex.join(["nas", "export", *words])


def _run(args: argparse.Namespace) -> int:
    from studies.export import export_trials

    written = export_trials(args.name, fmt=args.format, out=args.out, trial=args.trial,
                            pareto=args.pareto, storage_url=args.storage, force=args.force)
    for path in written:
        print(path)
    return 0


def register(subparsers: Any) -> None:
    """Add ``export`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser(
        "export", help="write trials of a study as configs for use elsewhere",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", help="the study")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--trial", type=int, metavar="N", help="export trial number N")
    which.add_argument("--pareto", action="store_true",
                       help="export every Pareto-optimal trial, plus pareto.csv")
    p.add_argument("--format", required=True, choices=FORMAT_NAMES, metavar="FMT",
                   help=f"one of {', '.join(FORMAT_NAMES)}")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write into")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=_run, prints_stored=True)
