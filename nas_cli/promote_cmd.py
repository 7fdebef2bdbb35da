"""``nas promote``: retrain a study's front (and a spread of dominated trials) at a higher fidelity
as a linked study, and report how well the proxy ranking predicted the promoted one (see
``studies.promote``).

``register(subparsers)`` adds the subcommand; the engine is imported only when it runs.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Any

from nas.errors import ConfigError
from nas_cli._common import (
    add_stored_run_args,
    format_agreement,
    print_front,
    refuse_memory_storage,
)

if TYPE_CHECKING:
    from studies.promote import Plan

__all__ = ["format_agreement", "register"]

_DESCRIPTION = """\
Retrain the Pareto-optimal trials of study NAME (up to --top, spread over the front by accuracy)
and as many of its dominated completed trials (evenly spaced by proxy accuracy) for --epochs
epochs (default 4x the study's) on --task (default the study's), as a new study NAME-promoted in
the same database (an ordinary Optuna study: each trial names its source trial in the user
attribute nas.source_trial and its proxy accuracy in nas.source_value). Prints Kendall's tau and
Spearman's rho between proxy and promoted accuracy, with the number of pairs, Kendall's tau of
the ranking by parameters alone and by MAdds alone against the same promoted accuracy (the free
baseline a proxy has to beat), and the promoted Pareto front. With --seeds N (N >= 2) each
chosen trial trains N times, with the study's seed and the N-1 after it; the rank agreement
takes each trial's mean, and the source's front is printed with each trial's promoted accuracy
mean ± std over its seeds, marked ~ where its place on the front is within that noise (`nas
pareto NAME` shows it too). `nas status NAME` shows the result; `nas resume NAME-promoted`
continues a cut-off promotion. A study that trains with its own evaluator is promoted only with
--evaluator naming the same function: the database stores it, and importing it runs code.
Everything is checked before anything is written."""


def _run(args: argparse.Namespace) -> int:
    from studies.checks import check_run
    from studies.cluster import check_ray_address
    from studies.evaluator import resolve_evaluator
    from studies.promote import DEFAULT_TOP, plan_promotion, promote, promoted_pairs

    check_ray_address(args.address)
    refuse_memory_storage(args.storage)
    top = DEFAULT_TOP if args.top is None else args.top
    plan = plan_promotion(args.name, args.storage, top=top, epochs=args.epochs,
                          task=args.task, seeds=args.seeds)
    spec = plan.spec
    _check_task_kind(plan)
    evaluator = resolve_evaluator(plan.source.spec, stored=True, vouched=args.evaluator)
    # Everything the promoted run would refuse, before the promoted study is created or the
    # source written; the announcement comes once the run starts (after create_study's own
    # refusals too: a task's files, constraints on its geometry), so a refusal is one line.
    check_run(spec, address=args.address, evaluator=evaluator, stored=True)
    times = f", {plan.seeds} seeds each," if plan.seeds > 1 else ""

    def announce(counted: int) -> None:
        print(f"promoting {len(plan.front)} Pareto-optimal and {len(plan.dominated)} dominated "
              f"trials{times} of {args.name!r} ({plan.source.spec.fidelity.epochs} epochs on "
              f"{plan.source.spec.task!r}) to {spec.fidelity.epochs} epochs on {spec.task!r} as "
              f"study {spec.name!r}, storage {plan.source.storage.url}", file=sys.stderr)

    result = promote(plan, address=args.address, evaluator=evaluator, verbose=args.verbose,
                     on_start=announce)
    print(f"Promoted {args.name!r} as {spec.name!r}: {format_agreement(result)} "
          f"(proxy {plan.source.spec.fidelity.epochs} epochs -> {spec.fidelity.epochs} on "
          f"{spec.task!r})")
    print(f"  the cost alone against the same promoted accuracy (more ranked higher): "
          f"parameters Kendall tau {_tau(result.get('params_kendall_tau'))}, MAdds Kendall tau "
          f"{_tau(result.get('madds_kendall_tau'))}")
    resolved = result.get("resolved")
    if isinstance(resolved, dict):  # a seeded promotion: the pairs its truth can order
        print(f"  the pairs the promoted accuracy resolves (means {resolved['margin']:.4f} or "
              f"more apart over {resolved['seeds']} seeds): {resolved['pairs']} of "
              f"{resolved['of']}; ordered as it orders them by the proxy "
              f"{_count(resolved['proxy'])}, parameters {_count(resolved['params'])}, MAdds "
              f"{_count(resolved['madds'])}")
    target = result.get("target")
    if isinstance(target, dict):  # a seeded promotion: the proxy against the target
        print(f"  the target (tau {_tau(target.get('bar'))} or more, within "
              f"{_number(target.get('gap'))} of one more training, and above the cost alone): "
              f"the proxy {_meets(target.get('meets'))} it; one more training of each trial "
              f"meets it in {_share(target.get('one_seed_meets'))} of its seeds' simulated "
              "noise")
    pairs = promoted_pairs(spec.name, plan.source.store)
    if pairs:
        print("  source trial  proxy accuracy  promoted accuracy")
        for row in sorted(pairs, key=lambda r: -r["proxy"]):
            print(f"  {row['source_trial']:>12}  {row['proxy']:>14.4f}  {row['promoted']:>17.4f}")
    print_front(spec.name, args.storage)
    if plan.seeds > 1:
        print_front(args.name, args.storage)  # the source's front, with its seed spread
    return 0


def _check_task_kind(plan: Plan) -> None:
    """``--task`` of another kind than the family the study searches (a VQA task for a ViT
    space) is refused naming the tasks that would do, before any data is read: the engine
    would only find out once it built the task and priced a model on it."""
    from nas.registry import get_family
    from nas.tasks import GEOMETRIES
    from trainers.tasks import list_tasks, task_kind

    spec = plan.spec
    family = plan.source.space.base_config.family
    need = get_family(family).kind
    # plan_promotion refused a cost-only geometry unless the study trains with its own evaluator
    kind = GEOMETRIES[spec.task].kind if spec.task in GEOMETRIES else task_kind(spec.task)
    if kind == need:
        return
    valid = list_tasks(need)
    if spec.evaluator:
        valid += sorted(n for n, g in GEOMETRIES.items() if g.kind == need)
    raise ConfigError(f"`--task` {spec.task!r} is {_article(kind)} {kind} task, but study "
                      f"{plan.source.spec.name!r} searches family {family!r}, which needs "
                      f"{_article(need)} {need} task: one of {valid}.")


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _count(value: Any) -> str:
    """A count of pairs as printed (a tie counts a half): ``-`` where there is none."""
    return "-" if value is None else f"{value:g}"


def _finite(value: Any) -> float | None:
    """A stored number, or ``None`` where it is not a finite number (stored data: any shape)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _tau(value: Any) -> str:
    """A stored tau as printed: ``-`` where it is undefined or not a finite number."""
    x = _finite(value)
    return "-" if x is None else f"{x:+.3f}"


def _number(value: Any) -> str:
    """A stored number as printed: ``-`` where it is not a finite number."""
    x = _finite(value)
    return "-" if x is None else f"{x:g}"


def _meets(value: Any) -> str:
    """A stored verdict as printed: ``meets``, ``misses``, or ``-`` where it is not a bool."""
    return ("meets" if value else "misses") if isinstance(value, bool) else "-"


def _share(value: Any) -> str:
    """A stored fraction as a percentage: ``-`` where it is not a number within 0 .. 1."""
    x = _finite(value)
    return "-" if x is None or not 0 <= x <= 1 else f"{100 * x:.0f}%"


def _integer(text: str) -> int:
    """An integer argument (its range is checked by the command: one line, exit 2)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None


def register(subparsers: Any) -> None:
    """Add ``promote`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""

    p = subparsers.add_parser(
        "promote", help="retrain a study's front at a higher fidelity; rank agreement",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help="the study")
    p.add_argument("--top", type=_integer, default=None, metavar="N",
                   help="Pareto-optimal trials at most, and as many dominated ones (default 8)")
    p.add_argument("--epochs", type=_integer, default=None, metavar="E",
                   help="epochs of each promoted trial (default: 4x the study's)")
    p.add_argument("--seeds", type=_integer, default=1, metavar="N",
                   help="train each chosen trial N times, with seeds seed..seed+N-1 (default 1); "
                   "`nas pareto NAME` then shows each front trial's accuracy mean ± std and "
                   "marks those within the seed noise")
    p.add_argument("--task", default=None, metavar="TASK",
                   help="the task to retrain on (default: the study's)")
    add_stored_run_args(p, _run)
