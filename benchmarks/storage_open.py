"""Opening a study database: ``studies.store.storage.open_storage`` against Optuna's ``RDBStorage``.

    python benchmarks/storage_open.py [--opens 40] [--trials 20]

Every ``nas`` command opens the study database at least once (``status``, ``pareto`` and
``export`` read-only, ``run`` and ``resume`` writable). Optuna's ``RDBStorage`` checks the
database's schema revision against the newest one its migration scripts name, and loads those
scripts from disk on every open; ``open_storage`` reads the newest revision once per process and
compares. Printed, for an SQLite study of ``--trials`` trials: the median milliseconds per open
of plain ``RDBStorage`` (Optuna's check every time), of ``open_storage(read_only=True)`` and of
the writable ``open_storage``, each alternated with the others in one run, and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import optuna

from studies.store.storage import open_storage


def _study(url: str, trials: int) -> None:
    study = optuna.create_study(study_name="s", storage=open_storage(url),
                                directions=["maximize", "minimize"])
    for i in range(trials):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        study.tell(trial, [x, float(i)])


def _timed(open_: Callable[[], optuna.storages.RDBStorage]) -> float:
    started = time.perf_counter()
    storage = open_()
    storage.get_all_studies()  # one read, as a command does first
    seconds = time.perf_counter() - started
    storage.engine.dispose()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opens", type=int, default=40)
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'studies.db'}"
        _study(url, args.trials)
        arms: dict[str, Callable[[], optuna.storages.RDBStorage]] = {
            "optuna RDBStorage": lambda: optuna.storages.RDBStorage(url),
            "open_storage(read_only=True)": lambda: open_storage(url, read_only=True),
            "open_storage (writable)": lambda: open_storage(url),
        }
        for open_ in arms.values():  # imports and the once-per-process read, not timed
            _timed(open_)
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.opens):
            for name, open_ in arms.items():
                times[name].append(_timed(open_))
    base = statistics.median(times["optuna RDBStorage"])
    print(f"{'open':32s} {'ms (median)':>12s} {'vs Optuna':>10s}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:32s} {1000 * median:12.1f} {base / median:9.2f}x")


if __name__ == "__main__":
    main()
