"""``nas status``: the studies of a database, or one study's trial counts, best values,
hypervolume, owner and promotions (see ``studies.report``); read-only, imported when it runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nas_cli._common import STORAGE_HELP, format_agreement, objective_value

__all__ = ["register"]

_NOTES = {"derived": "derived from its trials: the study predates stored references; "
                     "`nas resume` stores one",
          "partly derived": "latency from its trials"}


def _run(args: argparse.Namespace) -> int:
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
    note = _NOTES.get(status["reference_source"])
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


def register(subparsers: Any) -> None:
    """Add ``status`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser("status",
                              help="studies, or one study's trial counts and best values")
    p.add_argument("name", metavar="NAME", nargs="?", default=None)
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run, prints_stored=True)
