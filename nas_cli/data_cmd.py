"""``nas data prepare``: parse a task's files once on this node, ahead of a study.

The tasks that read large files (``vqa-files``, ``coco-files``, ``image-folder``) keep their
parsed form as memory-mapped arrays in the node's data cache (``trainers.tasks.cache``: the
folder ``$NAS_DATA_CACHE``, else ``~/.cache/nas/data``). The first process to use a task's files
prepares them; this command does it ahead, with the options a study or ``nas train`` passes
(``--task-set`` as ``nas train`` takes them), so no trial waits for it.

``register(subparsers)`` adds the subcommand; the task code is imported only when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from nas.errors import NasError

__all__ = ["register"]

_DESCRIPTION = """\
Parse the files of TASK (vqa-files, coco-files or image-folder) into the node's data cache, or
check what is there: every later process (a study's trials, nas train) maps the prepared arrays
instead of parsing the files. Prepared data is keyed by the task's options and checked before
each use against the sizes and times of the files it was read from, so changed files are
prepared again. The cache is $NAS_DATA_CACHE, else $XDG_CACHE_HOME/nas/data, else
~/.cache/nas/data; concurrent users prepare it once."""


def _prepare(args: argparse.Namespace) -> int:
    from nas.errors import ConfigError
    from nas.loading import parse_overrides
    from trainers.tasks import PREPARED_TASKS, check_task, prepare_task
    from trainers.tasks.cache import CACHE_ENV, cache_root

    options = parse_overrides(args.task_set)
    check_task(args.task, options)  # before the announcement: a refusal is one line
    if args.task not in PREPARED_TASKS:
        raise ConfigError(f"Task {args.task!r} has no prepared data; the tasks with prepared "
                          f"data are {list(PREPARED_TASKS)}.")
    # A transient line on a terminal while it works (erased after, so that a refusal found
    # while parsing, a malformed file, is still the one line on stderr).
    status = sys.stderr.isatty() and not args.json
    if status:
        print(f"preparing {args.task} in {cache_root()} ...", end="\r", file=sys.stderr,
              flush=True)
    start = time.perf_counter()
    try:
        prepared = prepare_task(args.task, **options)
    finally:
        if status:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    if prepared.path is None:
        raise NasError(f"The data cache '{cache_root()}' cannot be written; set {CACHE_ENV} to "
                       "a writable folder.")
    row: dict[str, Any] = {"task": args.task, "path": str(prepared.path),
                           "built": prepared.built, "train": prepared.items("train"),
                           "val": prepared.items("val"), "bytes": prepared.nbytes,
                           "seconds": round(seconds, 3)}
    if args.json:
        print(json.dumps(row))
        return 0
    what = "prepared" if prepared.built else "already prepared"
    print(f"{args.task}: {what} in {seconds:.1f} s, {row['train']:,} training and "
          f"{row['val']:,} validation items, {row['bytes'] / 2**20:.1f} MiB: {row['path']}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``data`` (``data prepare``) to the ``nas`` subcommands."""
    p = subparsers.add_parser("data", help="prepare a task's files once on this node",
                              description=_DESCRIPTION)
    p.set_defaults(func=_prepare)  # its only subcommand (required), which sets it again
    commands = p.add_subparsers(dest="data_command", metavar="COMMAND")
    commands.required = True
    q = commands.add_parser("prepare", help="parse a task's files into the node's data cache",
                            description=_DESCRIPTION)
    q.add_argument("task", metavar="TASK", help="vqa-files, coco-files or image-folder")
    q.add_argument("--task-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a task option, e.g. root=/data/vqa (repeatable), as nas train takes it")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=_prepare)
