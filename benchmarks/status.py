"""``nas status`` (the listing) over a database of many studies, next to ``optuna studies``.

    python benchmarks/status.py [--studies 200] [--trials 100] [--repeats 3] [--db PATH [--keep]]

Builds a SQLite database of ``--studies`` engine-shaped studies of ``--trials`` trials each
(``benchmarks/_study_db.py``: every ``nas.*`` attribute, per-epoch rows; completed, stopped,
rejected, failed trials). Then, interleaved, each ``--repeats`` times in a fresh process (what a
user waits for at the prompt), reported as median, min and max:

- ``nas status --storage URL`` and ``nas status --json --storage URL``;
- ``optuna studies --storage URL`` (Optuna's own listing, for scale), where its CLI is installed;
- a bare ``python -c pass`` (the interpreter's own start).

And where ``nas status``'s time goes, in this process: importing what the command imports, the
listing's read of the database (``studies.report.list_studies``), and the rows printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
sys.path[:] = ([str(_ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]
               + [str(_HERE)])  # this checkout's packages first, never this folder's scripts

from _study_db import write_study  # noqa: E402


def build(path: Path, studies: int, trials: int) -> None:
    """``studies`` studies of ``trials`` trials each (a few still running) in ``path``."""
    for i in range(studies):
        write_study(path, f"study-{i:03d}", trials, seed=i, running=i % 3)


def _holds(path: Path, studies: int, trials: int) -> bool:
    import sqlalchemy as sa

    if not path.exists():
        return False
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            counts = conn.execute(sa.text(
                "SELECT count(*) FROM trials GROUP BY study_id")).scalars().all()
    except sa.exc.DBAPIError:
        return False
    finally:
        engine.dispose()
    return len(counts) == studies and set(counts) == {trials}


def _seconds(argv: list[str]) -> float:
    """Wall seconds of ``argv`` in a fresh process (which must succeed)."""
    env = {**os.environ, "PYTHONPATH": f"{_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    started = time.perf_counter()
    subprocess.run(argv, check=True, cwd=_ROOT, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _runs(label: str, times: list[float]) -> str:
    return (f"  {label:<40} median {statistics.median(times):6.2f} s  (min {min(times):.2f}, "
            f"max {max(times):.2f}; runs {', '.join(f'{t:.2f}' for t in times)})")


def _in_process(url: str) -> dict[str, float]:
    """Where ``nas status``'s time goes in this process: imports, the read, the printing."""
    started = time.perf_counter()
    import nas_cli.main  # noqa: F401  what the command's process imports first
    from studies import list_studies

    imported = time.perf_counter()
    rows = list_studies(url)
    read = time.perf_counter()
    lines = [f"{r['name']:<32} {r['task'] or '-':<20} {r['trials']:>6} trials  "
             f"started {r['started']}" for r in rows if not r.get("unreadable")]
    printed = time.perf_counter()
    assert len(lines) == len(rows), [r for r in rows if r.get("unreadable")][:1]
    return {"import": imported - started, "read": read - imported, "print": printed - read}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--trials", type=int, default=100, help="trials per study")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--db", default=None, help="SQLite file to write (default: a temp file)")
    parser.add_argument("--keep", action="store_true",
                        help="reuse --db where it already holds studies of this shape")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per study created
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "status.db"
        if args.keep and _holds(path, args.studies, args.trials):
            print(f"reusing {path}")
        else:
            for old in path.parent.glob(path.name + "*"):
                old.unlink()
            started = time.perf_counter()
            build(path, args.studies, args.trials)
            print(f"built {args.studies} studies of {args.trials} trials in "
                  f"{time.perf_counter() - started:.0f} s ({path.stat().st_size / 1e6:.1f} MB)")
        url = f"sqlite:///{path}"
        nas = [sys.executable, "-m", "nas_cli.main", "status", "--storage", url]
        optuna_cli = shutil.which("optuna", path=str(Path(sys.executable).parent))
        arms = {"nas status": nas, "nas status --json": [*nas[:4], "--json", *nas[4:]],
                "python -c pass": [sys.executable, "-c", "pass"]}
        if optuna_cli:
            arms["optuna studies"] = [optuna_cli, "studies", "--storage", url]
        times: dict[str, list[float]] = {k: [] for k in arms}
        for _ in range(args.repeats):  # interleaved, so each sees the same machine load
            for label, command in arms.items():
                times[label].append(_seconds(command))
        print(f"\nin a fresh process each, over {args.studies} studies of {args.trials} "
              "trials:")
        for label, values in times.items():
            print(_runs(label, values))
        if optuna_cli:
            ratio = statistics.median(times["nas status"]) / statistics.median(
                times["optuna studies"])
            print(f"  ratio nas status / optuna studies (medians): {ratio:.2f}")
        parts = _in_process(url)
        print("\nwhere nas status's time goes (in this process, seconds): " + ", ".join(
            f"{k} {v:.2f}" for k, v in parts.items()))
        verdict = "meets" if statistics.median(times["nas status"]) < 2.0 else "misses"
        print(f"target (nas status over {args.studies} studies in under 2 s): {verdict}")
        print(f"load average during the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
              f"on {os.cpu_count()} CPUs (other work on the machine slows every arm)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
