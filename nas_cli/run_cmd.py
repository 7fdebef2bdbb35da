"""``nas run``: launch a study from a study file (see ``studies.engine``), then print its front
and the commands that open and export it. The engine is imported only when it runs.

``after_run`` is what ``nas run`` and ``nas resume`` print once the study's run ends.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nas_cli._common import (
    ADDRESS_HELP,
    STORAGE_HELP,
    objective_value,
    print_front,
    refuse_memory_storage,
)

__all__ = ["after_run", "register", "warn_at_chance"]


def _resolve_study_file(path: str) -> str:
    """A study file path, or the name of one shipped in ``studies/`` (``quickstart``)."""
    from pathlib import Path

    if Path(path).exists() or path.endswith((".yaml", ".yml", ".json")):
        return path
    import studies

    shipped = Path(studies.__file__).parent / f"{path}.yaml"
    return str(shipped) if shipped.exists() else path


def after_run(name: str, storage: str | None) -> None:
    """The front of study ``name``, a note if it never beat chance, and the commands that open
    the dashboard on it and export it."""
    import shlex

    from nas_cli.export_cmd import export_hint
    from studies import resolve_storage_url

    print_front(name, storage)
    warn_at_chance(name, storage)
    url = resolve_storage_url(storage)
    print(f"\nOpen the dashboard: {shlex.join(['nas', 'dashboard', '--storage', url])}")
    print(f"Export the front:   {export_hint(name, url)}")


def warn_at_chance(name: str, storage: str | None) -> None:
    """Say so when no completed trial beat the task's chance level: such a front ranks nothing."""
    from studies import study_status

    status = study_status(name, storage)
    best, chance = status["best"].get("accuracy"), status["reference"].get("accuracy")
    if best is not None and chance is not None and best <= chance:
        print(f"note: no trial beat chance accuracy ({objective_value('accuracy', chance)} on "
              f"{status['task']!r}), so this front ranks nothing: the proxy trains too little. "
              "Raise fidelity.epochs (or smoke.steps) and run the study again.")


def _space_label(space: Any) -> str:
    return repr(space.get("name", "inline") if isinstance(space, dict) else space)


def _run(args: argparse.Namespace) -> int:
    from nas_cli._signals import resume_command
    from studies import create_study, load_study_spec, run_study
    from studies.checks import check_run
    from studies.evaluator import resolve_evaluator

    spec = load_study_spec(_resolve_study_file(args.study), name=args.name)
    refuse_memory_storage(args.storage)
    evaluator = resolve_evaluator(spec, stored=False)  # the study file's author's code
    # Everything the run would refuse (Ray, resources, evaluator, folders), before the study
    # is created; create_study checks the rest before it writes.
    check_run(spec, address=args.address, evaluator=evaluator)
    run = create_study(spec, args.storage, evaluator=evaluator)
    print(f"study {spec.name!r}: {spec.budget.trials} trials of space {_space_label(spec.space)} "
          f"on {spec.task!r}, storage {run.storage.url}", file=sys.stderr)
    run_study(run, address=args.address, evaluator=evaluator, verbose=args.verbose,
              resume=resume_command(args, spec.name, spec.evaluator))
    after_run(spec.name, args.storage)
    return 0


def register(subparsers: Any) -> None:
    """Add ``run`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser("run",
                              help="launch a study (local Ray, or a cluster with --address)")
    p.add_argument("study", metavar="STUDY.yaml",
                   help="a study file, or the name of a shipped one (quickstart)")
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--address", default=None, help=ADDRESS_HELP)
    p.add_argument("--name", default=None, help="study name (default: the file's name key)")
    p.add_argument("--verbose", action="store_true", help="also show Ray Tune's own output")
    p.set_defaults(func=_run, prints_stored=True, runs_study=True)
