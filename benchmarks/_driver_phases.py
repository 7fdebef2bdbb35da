"""The driver's own work a trial, timed inside each arm's driver process on the cluster, for
``benchmarks/cluster.py --phases``.

With ``$NAS_BENCH_PHASES`` naming a folder, :func:`time_engine` (the engine's driver, ``nas
run`` in this process) or :func:`time_peer` (the Tune + ``OptunaSearch`` driver) wraps the
calls through which Tune hands its driver's work to the searcher, and Tune's own saving of its
experiment state, each with a clock. The driver's event loop runs them one at a time, so while
one runs no other trial's result is handled and no freed slot is filled. At the process's exit
the seconds of each call go to ``FOLDER/ARM-PID.json``; :func:`summary` reads them back.

The engine: ``StudySearcher.suggest`` (the ask, the sampler, the parameters drawn, a new
architecture's traced pass, the launch attributes; a trial asked ahead: its launch alone),
``ask_ahead`` (from ``studies.searcher.ASK_AHEAD_FROM`` trials at once, the same work for the
next trial at the end of a step in which every slot is busy; called at every step's end),
``on_trial_complete`` (the ending's attributes and the epochs kept, then the tell) and
``write_epochs`` (the epoch reports kept, at most once a second). The peer:
``OptunaSearch.suggest`` (the ask, the define-by-run parameters), ``on_trial_result`` and
``on_trial_complete`` (the tell). Both: ``TuneController.save_to_dir``, Tune's experiment
checkpoint.
"""

from __future__ import annotations

import atexit
import collections
import functools
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

__all__ = ["PHASES_ENV", "summary", "time_engine", "time_peer"]

#: The folder the timed drivers write their calls' seconds to.
PHASES_ENV = "NAS_BENCH_PHASES"

_seconds: dict[str, list[float]] = collections.defaultdict(list)


def _wrap(cls: Any, name: str, label: str) -> None:
    inner = getattr(cls, name)

    @functools.wraps(inner)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            _seconds[label].append(time.perf_counter() - began)

    setattr(cls, name, timed)


def _start(arm: str, calls: list[tuple[Any, str, str]]) -> None:
    folder = os.environ.get(PHASES_ENV)
    if not folder:
        return
    from ray.tune.execution.tune_controller import TuneController

    for cls, name, label in [*calls, (TuneController, "save_to_dir", "Tune's checkpoint")]:
        _wrap(cls, name, label)
    path = Path(folder) / f"{arm}-{os.getpid()}.json"
    atexit.register(lambda: path.write_text(json.dumps(_seconds)))


def time_engine() -> None:
    """Time the engine's driver in this process (before ``nas run``)."""
    from studies.searcher import StudySearcher

    _start("nas", [(StudySearcher, "suggest", "suggest"),
                   (StudySearcher, "on_trial_complete", "end"),
                   (StudySearcher, "write_epochs", "epochs"),
                   (StudySearcher, "ask_ahead", "ask ahead")])


def time_peer() -> None:
    """Time the Tune + ``OptunaSearch`` driver in this process (before ``Tuner.fit``)."""
    from ray.tune.search.optuna import OptunaSearch

    _start("tune", [(OptunaSearch, "suggest", "suggest"),
                    (OptunaSearch, "on_trial_result", "results"),
                    (OptunaSearch, "on_trial_complete", "end")])


def summary(folder: Path, arm: str, trials: int) -> str:
    """One line: each timed call's milliseconds a finished trial (the median call in
    brackets) and their sum; '' where the arm wrote nothing."""
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    for path in folder.glob(f"{arm}-*.json"):
        for label, values in json.loads(path.read_text()).items():
            seconds[label].extend(values)
    if not seconds or trials <= 0:
        return ""
    cells = [f"{label} {sum(v) / trials * 1000:.1f} ms (median {statistics.median(v) * 1000:.1f}"
             f", {len(v)} calls)" for label, v in seconds.items() if v]
    total = sum(sum(v) for v in seconds.values()) / trials * 1000
    return f"  {arm}: the driver a trial: {', '.join(cells)}; in all {total:.1f} ms"
