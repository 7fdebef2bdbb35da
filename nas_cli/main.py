"""``nas``: the command line.

User errors (``NasError``) end with one line on stderr and exit code 2; tracebacks only with
``--debug``. Heavy imports happen inside the subcommands so ``nas --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from nas.errors import NasError
from nas_cli._common import (
    EVALUATOR_HELP,
    format_agreement,
    objective_value,
    print_front,
    refuse_memory_storage,
)
from studies.store import InertStream, inert

__all__ = ["main"]

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# ----------------------------------------------------------------------------- subcommands
def _cmd_presets(args: argparse.Namespace) -> int:
    from nas.cost import estimate_cost
    from nas.presets import get_preset, list_presets

    rows: list[dict[str, Any]] = []
    for info in list_presets():
        cost = estimate_cost(get_preset(info["name"]))
        rows.append({**info, "params": cost.params, "madds": cost.madds, "task": cost.task})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'preset':<15} {'family':<7} {'params':>12} {'MAdds':>16}  {'task':<14} note")
    for r in rows:
        print(f"{r['name']:<15} {r['family']:<7} {r['params']:>12,} {r['madds']:>16,}  "
              f"{r['task']:<14} {r['note']}")
    return 0


def _cmd_cost(args: argparse.Namespace) -> int:
    from nas.cost import estimate_cost
    from nas.loading import exported_geometry, load_arch

    config = load_arch(args.arch, args.set)
    cost = estimate_cost(config, args.task or exported_geometry(args.arch))
    if args.json:
        print(json.dumps(cost.to_dict()))
        return 0
    print(f"arch {args.arch} ({cost.family}, arch_id {cost.arch_id}) on task {cost.task}")
    print(f"{'part':<12} {'params':>14} {'weights only':>14} {'MAdds':>18}")
    for name, part in cost.parts.items():
        print(f"{name:<12} {part.params:>14,} {part.params_matrix:>14,} {part.madds:>18,}")
    print(f"{'total':<12} {cost.params:>14,} {cost.params_matrix:>14,} {cost.madds:>18,}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from nas.loading import load_arch, parse_overrides, unwritable_ancestor
    from trainers import TrainConfig, get_task, train
    from trainers.loop import quick_defaults

    if args.out is not None and (blocked := unwritable_ancestor(args.out)) is not None:
        raise NasError(f"--out {args.out!r} cannot be made: {str(blocked)!r} is not a writable "
                       "folder.")  # found before training, not after it
    config = load_arch(args.arch, args.set)
    data = get_task(args.task, **parse_overrides(args.task_set))
    settings: dict[str, Any] = {**quick_defaults(args.task), **parse_overrides(args.train_set)}
    if args.epochs is not None:
        settings["epochs"] = args.epochs
    if args.seed is not None:
        settings["seed"] = args.seed
    cfg = TrainConfig.from_dict(settings)

    def progress(batches: Any, total: int, desc: str) -> Any:
        return tqdm(batches, total=total, desc=desc, leave=False, file=sys.stderr,
                    disable=args.json and not sys.stderr.isatty())

    def report(epoch: Any) -> None:
        if not args.json:
            print(f"epoch {epoch.epoch}: loss {epoch.train_loss:.4f}  {epoch.metric} "
                  f"{epoch.value:.4f}  ({epoch.seconds:.1f} s)")

    result = train(config, cfg, data, report, checkpoint_dir=args.out, progress=progress)
    if args.json:
        keys = ("metric", "value", "chance", "epochs", "seconds", "samples_per_second",
                "params", "madds", "status", "reason", "checkpoint", "arch_id")
        print(json.dumps({k: getattr(result, k) for k in keys}))
    else:
        print(f"{result.status}: {result.metric} {result.value:.4f} (chance {result.chance:.4f}) "
              f"in {result.seconds:.1f} s, {result.samples_per_second:.0f} samples/s, "
              f"{result.params:,} params, {result.madds:,} MAdds")
        if result.reason:
            print(f"reason: {result.reason}")
        if result.checkpoint:
            print(f"checkpoint: {result.checkpoint}")
    return 0 if result.status != "failed" else 1


def _resolve_study_file(path: str) -> str:
    """A study file path, or the name of one shipped in ``studies/`` (``quickstart``)."""
    from pathlib import Path

    if Path(path).exists() or path.endswith((".yaml", ".yml", ".json")):
        return path
    import studies

    shipped = Path(studies.__file__).parent / f"{path}.yaml"
    return str(shipped) if shipped.exists() else path


def _after_run(name: str, storage: str | None) -> None:
    import shlex

    from nas_cli.export_cmd import export_hint
    from studies import resolve_storage_url

    print_front(name, storage)
    _warn_at_chance(name, storage)
    url = resolve_storage_url(storage)
    print(f"\nOpen the dashboard: {shlex.join(['nas', 'dashboard', '--storage', url])}")
    print(f"Export the front:   {export_hint(name, url)}")


def _warn_at_chance(name: str, storage: str | None) -> None:
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


def _cmd_run(args: argparse.Namespace) -> int:
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
    run_study(run, address=args.address, evaluator=evaluator, verbose=args.verbose)
    _after_run(spec.name, args.storage)
    return 0


def _cmd_resume(args: argparse.Namespace) -> int:
    from studies.engine import prepare_resume, run_study

    # Checked before the database is opened for writing: unknown study, unvouched evaluator,
    # a name that cannot name folders, another owner, everything the run would refuse.
    run, evaluator = prepare_resume(args.name, args.storage, vouched=args.evaluator,
                                    address=args.address, trials=args.trials,
                                    timeout_minutes=args.timeout_minutes)
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
              on_start=announce)
    _after_run(args.name, args.storage)
    return 0


def _budget_label(budget: Any) -> str:
    minutes = budget.timeout_minutes
    return f"{budget.trials} trials" + (f", {minutes:g} minutes per run" if minutes else "")


def _cmd_status(args: argparse.Namespace) -> int:
    from studies import list_studies, study_status

    if args.name is None:
        rows = list_studies(args.storage)
        if args.json:
            print(json.dumps(rows))
        else:
            for r in rows:
                if r.get("unreadable"):  # listed, so that one odd study hides no other
                    print(f"{r['name']:<32} unreadable: {r['unreadable']}")
                    continue
                print(f"{r['name']:<32} {r['task'] or '-':<20} {r['trials']:>6} trials  "
                      f"started {r['started']}")
        return 0
    status = study_status(args.name, args.storage)
    if args.json:
        print(json.dumps(status))
        return 0
    print(f"study {status['name']!r} on {status['task']!r}: {status['counted']}/"
          f"{status['budget']} trials counted, hypervolume {status['hypervolume']:.4f}")
    reference = ", ".join(f"{n} {objective_value(n, v)}"
                          for n, v in status["reference"].items())
    notes = {"derived": "derived from its trials: the study predates stored references; "
                        "`nas resume` stores one",
             "partly derived": "latency from its trials"}
    note = notes.get(status["reference_source"])
    print(f"  hypervolume reference: {reference}" + (f" ({note})" if note else ""))
    print("  by status: " + ", ".join(f"{k} {v}" for k, v in sorted(status["statuses"].items())))
    print("  training: " + _training_line(status["train"], status["train_searched"]))
    if status["owner"]:
        print(f"  running: pid {status['owner']['pid']} on {status['owner']['host']}")
    if status["tune_dir"]:
        print(f"  Ray Tune folder of the latest run: {status['tune_dir']}")
    for o in status["objectives"]:
        best = objective_value(o["name"], status["best"][o["name"]])
        print(f"  best {o['name']} ({o['direction']}): {best}")
    if status["convergence"] is not None:
        from studies.convergence import convergence_text

        print("  " + convergence_text(status["convergence"]))
    _print_promotions(status)
    return 0


def _training_line(train: dict[str, Any], searched: dict[str, Any]) -> str:
    """The settings every trial starts from, then those searched per trial, on one line."""
    fixed = [f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in train.items()]
    drawn = []
    for key, dist in searched.items():
        if "choices" in dist:
            drawn.append(f"{key} searched in {dist['choices']}")
        else:
            scale = ", log" if dist.get("log") else ""
            drawn.append(f"{key} searched in [{dist['low']:g}, {dist['high']:g}{scale}]")
    line = ", ".join(fixed + drawn)
    if "dropout" not in train and "dropout" not in searched:
        line += ", dropout the family's own"
    return line


def _print_promotions(status: dict[str, Any]) -> None:
    """A promoted study's source and rank agreement; a source's promoted studies and theirs."""

    fidelity = status.get("fidelity")
    if status.get("promoted_from") and fidelity:
        print(f"  promoted from {status['promoted_from']!r} (proxy {fidelity['proxy_epochs']} "
              f"epochs -> {fidelity['epochs']} on {fidelity['task']!r}): "
              f"{format_agreement(fidelity)}")
    for p in status.get("promotions") or []:
        if p.get("missing"):
            print(f"  promoted as {p['name']!r} (that study is gone)")
        else:
            print(f"  promoted as {p['name']!r} ({p['epochs']} epochs on {p['task']!r}): "
                  f"{format_agreement(p)}")


def _cmd_pareto(args: argparse.Namespace) -> int:
    from studies import pareto_trials

    if args.json:
        print(json.dumps(pareto_trials(args.name, args.storage)))
    else:
        print_front(args.name, args.storage)
    return 0


# ----------------------------------------------------------------------------- parser
def _add_arch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("arch", metavar="ARCH", help="a preset name or a YAML/JSON architecture file")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a key of the architecture (value parsed as YAML); repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nas",
        description="Architecture search for lightweight vision-and-language Transformers.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("presets", help="list the architecture presets with their costs")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=_cmd_presets)

    p = sub.add_parser(
        "cost", help="build an architecture on the meta device and report its cost",
        description="Report params, weight-matrix params and MAdds, split by part, of ARCH on a "
        "task geometry, without training and without allocating weights.",
    )
    _add_arch_args(p)
    p.add_argument("--task", default=None, help="task geometry (default: the family's task)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_cost)

    p = sub.add_parser(
        "train", help="train one architecture on one task",
        description="Train ARCH on TASK with a progress bar; writes a checkpoint holding its "
        "config to --out. Exit code 1 when the run fails (e.g. the loss turns NaN).",
    )
    _add_arch_args(p)
    p.add_argument("--task", required=True, help="a trainable task (synthetic-vqa, "
                   "synthetic-captions, digits, vqa-files, coco-files, image-folder, cifar)")
    p.add_argument("--task-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a task option, e.g. root=/data/coco (repeatable)")
    p.add_argument("--train-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a training setting, e.g. lr=0.002 (repeatable)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", default=None, metavar="DIR", help="write the checkpoint here")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(func=_cmd_train)

    storage_help = ("SQLAlchemy URL of the study database (default: $NAS_STORAGE, else "
                    "sqlite:///nas_studies.db)")
    p = sub.add_parser("run", help="launch a study (local Ray, or a cluster with --address)")
    p.add_argument("study", metavar="STUDY.yaml",
                   help="a study file, or the name of a shipped one (quickstart)")
    p.add_argument("--storage", default=None, help=storage_help)
    p.add_argument("--address", default=None, help="an existing Ray cluster (e.g. auto)")
    p.add_argument("--name", default=None, help="study name (default: the file's name key)")
    p.add_argument("--verbose", action="store_true", help="also show Ray Tune's own output")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "resume", help="continue a study from the database alone",
        description="Continue study NAME from the database alone: trials a crashed run left "
        "running are closed and run again, until the budget is spent. --trials and "
        "--timeout-minutes grow the budget (stored in the study). Everything is checked "
        "before the database is written.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--trials", type=int, default=None, metavar="N",
                   help="a new total trial budget (counted trials, as the study key "
                   "budget.trials); refused if fewer than the trials already counted")
    p.add_argument("--timeout-minutes", type=float, default=None, metavar="M",
                   help="a new wall-clock limit of each run, this one and later resumes (as "
                   "Optuna's timeout limits each optimize call)")
    p.add_argument("--storage", default=None, help=storage_help)
    p.add_argument("--address", default=None, help="an existing Ray cluster (e.g. auto)")
    p.add_argument("--evaluator", default=None, metavar="MODULE:FUNCTION",
                   help=EVALUATOR_HELP)
    p.add_argument("--verbose", action="store_true", help="also show Ray Tune's own output")
    p.set_defaults(func=_cmd_resume)

    p = sub.add_parser("status", help="studies, or one study's trial counts and best values")
    p.add_argument("name", metavar="NAME", nargs="?", default=None)
    p.add_argument("--storage", default=None, help=storage_help)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("pareto", help="the Pareto-optimal trials of a study")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--storage", default=None, help=storage_help)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=_cmd_pareto)

    from nas_cli import dashboard_cmd, data_cmd, export_cmd, promote_cmd

    promote_cmd.register(sub)
    export_cmd.register(sub)
    dashboard_cmd.register(sub)
    data_cmd.register(sub)
    return parser


#: Commands whose standard output shows what the database holds (names, paths, reasons).
_PRINTS_STORED = frozenset({"status", "pareto", "export", "promote", "run", "resume"})
#: Commands that read or run studies through Optuna.
_USES_OPTUNA = _PRINTS_STORED | {"dashboard"}


def _log_levels(command: str) -> None:
    """The libraries' log levels for this process, set here rather than at import: Optuna's
    INFO lines (a study created, each trial told) are not the command's output."""
    if command in _USES_OPTUNA:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nas`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    _log_levels(args.command)
    try:
        if args.command in _PRINTS_STORED:  # what the database holds cannot drive the terminal
            with contextlib.redirect_stdout(InertStream(sys.stdout)):
                return func(args)
        return func(args)
    except NasError as exc:
        if args.debug:
            raise
        message = inert(" ".join(str(exc).split()))  # always one line, never an escape sequence
        print(f"nas {args.command}: error: {message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"nas {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
