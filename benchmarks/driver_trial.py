"""The driver's own work per trial, without Ray: the engine's searcher against the database
work of ``benchmarks/cluster.py``'s Tune + ``OptunaSearch`` peer, side by side in one run.

    .venv/bin/python benchmarks/driver_trial.py [--trials 200] [--in-flight 8]

Starts its own PostgreSQL (as ``benchmarks/cluster.py`` does, on loopback). Both arms draw from
the ``quickstart`` space with ``--in-flight`` trials outstanding (the oldest told first) and
the made-up accuracies of ``benchmarks/_sleep_trial.py``, so nothing trains:

- the engine: the cluster benchmark's study (accuracy and params, the default sampler, 4
  epochs, no early stopping) created by ``studies.engine.create_study``; each trial is the
  searcher's own path (``StudySearcher._ask`` and ``_launch``: Optuna's ask with the sampler,
  the parameters drawn, a new architecture's traced pass, its launch attributes), three epoch
  reports as Tune hands them over (``record_epoch``; written at a step's end at most once a
  second, ``studies.searcher.EPOCH_WRITE_SECONDS``) and the final one (``on_trial_complete``,
  with the epochs still kept). The reports arrive as on the cluster benchmark's schedule: each
  trial's 4 epochs one second apart on a simulated clock (the one the searcher's write
  interval reads), a freed slot asked into at once;
- the peer: what ``OptunaSearch`` does with the database for the same trial: ``Study.ask``
  with multivariate TPE and a constant liar, the define-by-run space, ``Study.tell`` (it
  reports no epochs of a multi-objective study).

Printed per arm: each phase's calls and milliseconds (the median call, and the sum over the
run a trial: a first call's imports included), the commits and statements a trial, and the
ratio of the two arms' totals. Tune's own work (its trial start,
results and callbacks) is the same in both arms and is not here: ``benchmarks/cluster.py``
measures the whole.
"""

from __future__ import annotations

import argparse
import collections
import heapq
import math
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tests' PostgreSQL helper
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sleep_trial import QuickstartSpace, made_up  # noqa: E402

EPOCHS = 4


class Phases:
    """Seconds per call of each wrapped phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = collections.defaultdict(list)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name].append(time.perf_counter() - began)
        return timed


def engine(url: str, folder: str, trials: int, in_flight: int, phases: Phases) -> float:
    import studies.searcher as searcher_module
    from studies.engine import create_study
    from studies.searcher import StudyCallback, StudySearcher
    from studies.spec import StudySpec
    from studies.store import TrialKey
    from studies.tune_report import EpochResult, FinalResult

    spec = StudySpec.from_dict({
        "name": "engine", "task": "digits", "space": "quickstart",
        "objectives": [{"name": "accuracy", "direction": "maximize"},
                       {"name": "params", "direction": "minimize"}],
        "budget": {"trials": trials}, "fidelity": {"epochs": EPOCHS, "early_stopping": "none"},
        "resources": {"cpu": 1}, "seed": 0, "evaluator": "_sleep_trial:evaluate",
        "tune": {"callbacks": [], "storage_path": f"{folder}/tune"}})
    run = create_study(spec, url)
    assert run.geometry is not None
    searcher = StudySearcher(run, run.geometry)
    callback = StudyCallback(searcher)
    searcher.asking.ask = phases.wrap("ask (sampler)", searcher.asking.ask)  # type: ignore[method-assign]
    searcher.asking.draw = phases.wrap("draw (params)", searcher.asking.draw)  # type: ignore[method-assign]
    searcher_module._cost_and_memory = phases.wrap(
        "traced pass (new arch)", searcher_module._cost_and_memory)
    searcher.store.record_launched = phases.wrap(  # type: ignore[method-assign]
        "launch attributes", searcher.store.record_launched)
    write_epochs = phases.wrap("epochs", searcher.write_epochs)
    complete = phases.wrap("end (tell)", searcher.on_trial_complete)

    class Trial:
        def __init__(self, trial_id: str) -> None:
            self.trial_id = trial_id

    clock = [0.0]  # the simulated cluster's seconds: what the searcher's write interval reads
    searcher_module.time = types.SimpleNamespace(  # type: ignore[attr-defined]
        monotonic=lambda: clock[0])
    events: list[tuple[float, int, str, int, float]] = []  # (at, order, trial, epoch, accuracy)
    asked = done = order = 0
    began = time.perf_counter()
    while done < trials:
        while len({e[2] for e in events}) < in_flight and asked < trials + 100:
            asked += 1
            tid = f"t{asked}"
            start = time.perf_counter()
            candidate = searcher._ask()
            if candidate is not None:
                searcher._launch(tid, candidate)
                accuracy = made_up(candidate.attrs[TrialKey.ARCH])[0]
                for epoch in range(1, EPOCHS + 1):
                    order += 1
                    heapq.heappush(events, (clock[0] + epoch, order, tid, epoch, accuracy))
            phases.seconds["suggest (all)"].append(time.perf_counter() - start)
        clock[0], _, tid, epoch, accuracy = heapq.heappop(events)
        report = EpochResult(epoch=epoch, metric="accuracy", value=accuracy, train_loss=1.0)
        if epoch < EPOCHS:
            callback.on_trial_result(0, [], Trial(tid), report.to_tune())
            write_epochs()  # Tune's step ends
            continue
        final = FinalResult("completed", value=accuracy, epoch=report,
                            epochs_reached=EPOCHS).to_tune()
        callback.on_trial_result(0, [], Trial(tid), final)
        complete(tid, final)
        done += 1
    return time.perf_counter() - began


def peer(url: str, trials: int, in_flight: int, phases: Phases) -> float:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=0, multivariate=True, constant_liar=True)
    study = optuna.create_study(study_name="peer", storage=optuna.storages.RDBStorage(url),
                                sampler=sampler, directions=["maximize", "minimize"])
    space = QuickstartSpace(EPOCHS)
    ask, draw, tell = (phases.wrap("ask (sampler)", study.ask), phases.wrap("draw (params)", space),
                       phases.wrap("end (tell)", study.tell))
    live: collections.deque[tuple[optuna.Trial, dict[str, Any]]] = collections.deque()
    began = time.perf_counter()
    for i in range(trials + in_flight):
        if i < trials:
            start = time.perf_counter()
            trial = ask()
            live.append((trial, draw(trial)))
            phases.seconds["suggest (all)"].append(time.perf_counter() - start)
        if live and (len(live) >= in_flight or i >= trials):
            trial, config = live.popleft()
            tell(trial, list(made_up(config["arch"])))
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--in-flight", type=int, default=8)
    args = parser.parse_args()
    if args.trials < 1 or args.in_flight < 1:
        raise SystemExit("driver_trial.py: --trials and --in-flight must be at least 1")
    from postgres_fixture import find_postgres_bin, postgres_server

    if find_postgres_bin() is None:
        raise SystemExit("driver_trial.py: PostgreSQL is not installed (initdb, pg_ctl); "
                         "`make system-deps` installs it")
    counts: collections.Counter[str] = collections.Counter()
    sa.event.listen(sa.engine.Engine, "commit", lambda *a, **k: counts.update(["commits"]))
    sa.event.listen(sa.engine.Engine, "before_cursor_execute",
                    lambda *a, **k: counts.update(["statements"]))
    totals = {}
    with postgres_server() as url, tempfile.TemporaryDirectory() as folder:
        for arm in ("tune + OptunaSearch (TPE)", "nas (engine)"):
            phases = Phases()
            counts.clear()
            if arm.startswith("nas"):
                wall = engine(url, folder, args.trials, args.in_flight, phases)
            else:
                wall = peer(url, args.trials, args.in_flight, phases)
            per_trial = {name: sum(v) / args.trials for name, v in phases.seconds.items()}
            suggest = per_trial.pop("suggest (all)")
            totals[arm] = suggest + sum(v for k, v in per_trial.items()
                                        if k in ("epochs", "end (tell)"))
            print(f"{arm}: {args.trials} trials, {args.in_flight} in flight, {wall:.1f} s; "
                  f"a trial: {counts['commits'] / args.trials:.1f} commits, "
                  f"{counts['statements'] / args.trials:.1f} statements")
            for name, seconds in phases.seconds.items():
                tail = sorted(seconds)[max(0, math.ceil(0.99 * len(seconds)) - 1)]
                print(f"  {name:24s} {len(seconds):4d} calls, median "
                      f"{1e3 * statistics.median(seconds):6.1f} ms, p99 {1e3 * tail:6.1f}, "
                      f"max {1e3 * max(seconds):6.1f}, "
                      f"{1e3 * sum(seconds) / args.trials:6.1f} ms a trial")
            print(f"  {'driver work a trial':24s} {1e3 * totals[arm]:6.1f} ms "
                  "(suggest, epochs, end)")
    engine_ms, peer_ms = (1e3 * totals[a] for a in ("nas (engine)", "tune + OptunaSearch (TPE)"))
    print(f"engine / peer, driver work a trial: {engine_ms:.1f} / {peer_ms:.1f} ms = "
          f"{engine_ms / peer_ms:.2f}x (the study's creation and Ray's start not included)")


if __name__ == "__main__":
    main()
