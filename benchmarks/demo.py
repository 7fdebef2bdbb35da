"""The demo (``make demo``: the shipped ``quickstart`` study) over several seeds: how long it
takes and what its front holds.

    python benchmarks/demo.py [--seeds 0,1,2] [--study studies/quickstart.yaml]
                              [--baseline OTHER.yaml] [--keep DIR]

Each seed runs the study file with its ``seed`` key set to that seed, as ``make demo`` runs it:
``nas run`` in a fresh process (local Ray), into a temporary SQLite database. Printed per run:
the wall seconds, the CPU seconds of the whole process tree (the driver, Ray's daemons and its
workers; read from ``/proc`` every 0.2 s, so Linux only, and a process that lives less than
that is missed), whether the study spent its trial budget or was cut off by its time budget,
its trials by status, and its Pareto front: the best accuracy (with that trial's parameters)
and the span of parameters across the front (largest / smallest). The demo promises a study
that ends within 4 minutes on two cores, within its budget, with a front holding a model of at
least 0.93 accuracy and spanning at least 5x in parameters; the last column says which of
these a run kept. With ``--baseline`` another study file runs with the same seeds, alternated
with the first, and the ratios baseline / study of wall and CPU seconds are printed. ``--keep
DIR`` keeps each run's study file, database and log there (``nas status NAME --storage ...``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROMISE = {"seconds": 240.0, "accuracy": 0.93, "span": 5.0}


def _tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Record the CPU seconds so far of ``root`` and its descendants into ``seen``."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone since listed
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold ()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid and p not in tree]
        tree.update(children)
        frontier.extend(children)
    for pid in tree & times.keys():
        seen[pid] = max(seen.get(pid, 0.0), times[pid])


def _run(study: dict[str, Any], seed: int, folder: Path, label: str) -> dict[str, Any]:
    """One ``nas run`` of ``study`` with ``seed``: wall and CPU seconds, status and front."""
    name = f"{label}-seed{seed}"
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**study, "seed": seed}, sort_keys=False))
    url = f"sqlite:///{folder / f'{name}.db'}"
    env = {**os.environ, "NAS_RUNS": str(folder / "nas_runs"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    seen: dict[int, float] = {}
    started = time.perf_counter()
    with (folder / f"{name}.log").open("w") as log:
        child = subprocess.Popen([sys.executable, "-m", "nas_cli.main", "run", str(path),
                                  "--name", name, "--storage", url], cwd=ROOT, env=env,
                                 stdout=log, stderr=subprocess.STDOUT)
        while child.poll() is None:
            _tree_cpu(child.pid, seen)
            time.sleep(0.2)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"{name}: nas run exited {child.returncode}; see {log.name}")
    return {"wall": wall, "cpu": sum(seen.values()), **_outcome(name, url)}


def _outcome(name: str, url: str) -> dict[str, Any]:
    from studies import pareto_trials, study_status

    status = study_status(name, url)
    front = pareto_trials(name, url)
    params = [t["values"]["params"] for t in front]
    best = max(front, key=lambda t: t["values"]["accuracy"])
    return {"counted": status["counted"], "budget": status["budget"],
            "statuses": status["statuses"], "front": len(front),
            "best": best["values"]["accuracy"], "best_params": best["values"]["params"],
            "span": max(params) / min(params)}


def _kept(r: dict[str, Any]) -> str:
    broken = [what for what, ok in (
        ("time", r["wall"] <= PROMISE["seconds"]), ("cut off", r["counted"] >= r["budget"]),
        ("accuracy", r["best"] >= PROMISE["accuracy"]), ("span", r["span"] >= PROMISE["span"]),
    ) if not ok]
    return "all" if not broken else "not " + ", ".join(broken)


def _line(label: str, seed: int, r: dict[str, Any]) -> str:
    statuses = " ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))
    return (f"{label:<9} {seed:>4} {r['wall']:>7.0f} {r['cpu']:>7.0f} "
            f"{r['counted']:>3}/{r['budget']:<3} {r['front']:>5} {r['best']:>8.3f} "
            f"{r['best_params']:>11,.0f} {r['span']:>6.1f}x  {_kept(r):<18} {statuses}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--study", type=Path, default=ROOT / "studies" / "quickstart.yaml")
    parser.add_argument("--baseline", type=Path, default=None, metavar="OTHER.yaml",
                        help="also run this study file with the same seeds, alternated")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep each run's study file, database and log in DIR")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    files = {"study": args.study, **({"baseline": args.baseline} if args.baseline else {})}
    studies = {label: yaml.safe_load(path.read_text()) for label, path in files.items()}
    print(f"{', '.join(f'{k}: {v}' for k, v in files.items())}; {os.cpu_count()} CPUs")
    print(f"{'file':<9} {'seed':>4} {'wall s':>7} {'CPU s':>7} {'counted':>7} {'front':>5} "
          f"{'best acc':>8} {'its params':>11} {'span':>7}  {'promises kept':<18} statuses")
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in studies}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep.resolve() if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            for label, study in studies.items():
                result = _run(study, seed, folder, label)
                results[label].append(result)
                print(_line(label, seed, result), flush=True)
    for label, runs in results.items():
        print(f"{label}: median wall {statistics.median(r['wall'] for r in runs):.0f} s, "
              f"median CPU {statistics.median(r['cpu'] for r in runs):.0f} s over "
              f"{len(runs)} seeds")
    if args.baseline:
        for key in ("wall", "cpu"):
            ratios = [b[key] / s[key] for s, b in zip(results["study"], results["baseline"],
                                                        strict=True)]
            print(f"baseline / study, {key}: " + ", ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()
