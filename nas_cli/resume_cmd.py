"""``nas resume``: continue a study from the database alone (see
``studies.engine.prepare_resume``); the engine is imported only when it runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nas_cli._common import add_stored_run_args
from nas_cli.run_cmd import after_run

__all__ = ["register"]

_DESCRIPTION = (
    "Continue study NAME from the database alone: trials a crashed run left running are closed "
    "and run again, until the budget is spent. --trials, --timeout-minutes and --until change "
    "the budget (stored in the study). Everything is checked before the database is written.")


def _run(args: argparse.Namespace) -> int:
    from nas_cli._signals import resume_command
    from studies.engine import prepare_resume, run_study

    # Checked before the database is opened for writing: unknown study, unvouched evaluator,
    # a name that cannot name folders, another owner, everything the run would refuse.
    run, evaluator = prepare_resume(args.name, args.storage, vouched=args.evaluator,
                                    address=args.address, trials=args.trials,
                                    timeout_minutes=args.timeout_minutes, until=args.until)
    budget = run.spec.budget.trials
    before = run.attrs.spec.budget if run.attrs is not None and run.attrs.spec else None

    def announce(counted: int) -> None:
        if before is not None and before != run.spec.budget:
            print(f"study {args.name!r}: budget {_budget_label(before)} -> "
                  f"{_budget_label(run.spec.budget)} (stored)", file=sys.stderr)
        if counted >= budget:
            print(f"study {args.name!r}: the budget is spent ({counted} of {budget} trials); "
                  "nothing to run.", file=sys.stderr)
        else:
            print(f"study {args.name!r}: resuming at {counted} of {budget} trials, storage "
                  f"{run.storage.url}", file=sys.stderr)

    run_study(run, address=args.address, evaluator=evaluator, verbose=args.verbose,
              on_start=announce, resume=resume_command(args, args.name, run.spec.evaluator))
    after_run(args.name, args.storage)
    return 0


def _budget_label(budget: Any) -> str:
    minutes = budget.timeout_minutes
    return (f"{budget.trials} trials" + (f", {minutes:g} minutes per run" if minutes else "")
            + (f", until {budget.until}" if budget.until else ""))


def register(subparsers: Any) -> None:
    """Add ``resume`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser("resume", help="continue a study from the database alone",
                              description=_DESCRIPTION)
    p.add_argument("name", metavar="NAME")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="a new total trial budget (counted trials, as the study key "
                   "budget.trials); refused if fewer than the trials already counted")
    p.add_argument("--timeout-minutes", type=float, default=None, metavar="M",
                   help="a new wall-clock limit of each run, this one and later resumes (as "
                   "Optuna's timeout limits each optimize call)")
    p.add_argument("--until", choices=("converged", "budget"), default=None,
                   help="converged: stop once the default sampler's expected gains stay below "
                   "the hypervolume's noise (budget.until: converged); budget: run to the "
                   "trial budget, past a convergence (drops budget.until)")
    add_stored_run_args(p, _run)
