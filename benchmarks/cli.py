"""How fast the listing commands answer: ``nas --help``, ``nas presets`` and ``nas cost
deit-tiny``, each in a fresh process.

    python benchmarks/cli.py [--runs 5] [--baseline /path/to/another/checkout]

Every command runs ``--runs`` times in a new interpreter (``python -m nas_cli.main``, as the
``nas`` entry point does), the commands alternated so that a busy machine slows them alike.
Printed per command: the median wall seconds, the median CPU seconds (user + system of the
child) and the ratio of the wall time to a bare interpreter's start (``python -c pass``, run
alongside), the floor no command can go under. With ``--baseline`` the same commands also run
from that checkout (its code first on ``PYTHONPATH``, this interpreter), alternated with this
one's, and the ratio baseline / this checkout is printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "nas --help": ["-m", "nas_cli.main", "--help"],
    "nas presets": ["-m", "nas_cli.main", "presets"],
    "nas cost deit-tiny": ["-m", "nas_cli.main", "cost", "deit-tiny"],
}


def _timed(argv: list[str], root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``python argv`` with ``root`` first on the path."""
    paths = [str(root), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=root, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (default 5)")
    parser.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT",
                        help="also time the commands from this checkout, alternated")
    args = parser.parse_args()
    roots = {"this": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {
        (r, c): [] for r in roots for c in COMMANDS}
    for _ in range(args.runs):
        for command, argv in COMMANDS.items():
            for label, root in roots.items():
                times[label, command].append(_timed(argv, root))

    def median(label: str, command: str, i: int) -> float:
        return statistics.median(t[i] for t in times[label, command])

    print(f"{args.runs} fresh processes per command, medians, on {os.cpu_count()} CPUs")
    head = f"{'command':<22} {'wall s':>8} {'CPU s':>8} {'x bare start':>13}"
    if args.baseline:
        head += f" {'baseline wall s':>16} {'baseline CPU s':>15} {'baseline / this':>16}"
    print(head)
    bare = median("this", "python -c pass", 0)
    for command in COMMANDS:
        wall, cpu = median("this", command, 0), median("this", command, 1)
        line = f"{command:<22} {wall:>8.2f} {cpu:>8.2f} {wall / bare:>13.1f}"
        if args.baseline:
            b_wall, b_cpu = median("baseline", command, 0), median("baseline", command, 1)
            line += f" {b_wall:>16.2f} {b_cpu:>15.2f} {b_wall / wall:>16.1f}"
        print(line)


if __name__ == "__main__":
    main()
