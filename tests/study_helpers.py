"""Fake evaluators, small study files and fixtures for the study-engine tests.

The evaluators have the signature of ``studies.worker.evaluate_trial`` and run inside Ray
workers, which import them by module name (``study_helpers``): :data:`TESTS_DIR` must be on the
workers' ``PYTHONPATH`` (:func:`worker_env` puts it there before Ray starts; a subprocess gets it
from :func:`subprocess_env`). Their results are deterministic functions of the architecture and
its settings, so tests can predict them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from ray_nodes import START_TIMEOUT, START_TRIES

from nas.tasks import TaskGeometry
from studies.store import TrialKey

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent
NAS = [sys.executable, "-m", "nas_cli.main"]  # the `nas` command of this venv

# A vit space on `digits` small enough that a study re-samples architectures: 2 x 2 x 2 = 8.
SMALL_SPACE: dict[str, Any] = {
    "name": "tiny",
    "base": {"family": "vit", "d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 2,
             "patch_size": 8},
    "arch": {"groups": {"choices": [1, 2]}, "group_ffn": {"choices": [False, True]},
             "attention_sharing": {"choices": ["none", "kv"]}},
}

#: The cost geometry of these studies (`digits` at 32x32, one channel).
GEOMETRY = TaskGeometry("digits", "image", 10, image_size=32, in_chans=1)

Report = Callable[[dict[str, Any]], bool] | None


# ----------------------------------------------------------------------------- environment
def worker_env() -> None:
    """Let Ray workers started from now on import this module."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(TESTS_DIR) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *paths])


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a `nas` subprocess whose study names an evaluator here."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), *paths]), **extra}
    env.pop("RAY_ADDRESS", None)
    env.pop("NAS_STORAGE", None)
    return env


def start_ray() -> None:
    """A local Ray runtime with 2 CPUs, shared by the tests (started on first use). Its own
    (``address="local"``): a plain ``ray.init()`` joins the cluster a test on the other xdist
    worker may have running (``ray start``, ``ray.cluster_utils.Cluster`` record theirs)."""
    import ray

    worker_env()
    for attempt in range(START_TRIES):  # Ray's fixed 30 s for its raylet to register
        if ray.is_initialized():
            break
        before = _children()
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False,
                     logging_level=logging.ERROR, log_to_driver=False)
        except Exception as exc:
            if START_TIMEOUT not in str(exc) or attempt == START_TRIES - 1:
                raise
            # The failed start's GCS, raylet and helpers are this process's children and
            # nothing tracks them (ray.shutdown does not): end them before the next try.
            for pid in _children() - before:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            ray.shutdown()
    # Were Ray started elsewhere without our PYTHONPATH, workers could not import the
    # evaluators by name: send them by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _children() -> set[int]:
    """This process's child processes (Linux: from ``/proc``)."""
    me, found = str(os.getpid()), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            if stat.read_text().rpartition(")")[2].split()[1] == me:
                found.add(int(stat.parent.name))
    return found


@pytest.fixture()
def ray_local() -> Iterator[None]:
    """:func:`start_ray` for one test."""
    start_ray()
    yield


# ----------------------------------------------------------------------------- study files
def study_dict(name: str, **overrides: Any) -> dict[str, Any]:
    """A study on `digits` over :data:`SMALL_SPACE`, with ``overrides`` on top."""
    data: dict[str, Any] = {
        "name": name, "task": "digits", "space": SMALL_SPACE,
        "objectives": [{"name": "accuracy", "direction": "maximize"},
                       {"name": "params", "direction": "minimize"}],
        "sampler": {"name": "random"}, "budget": {"trials": 6},
        "fidelity": {"epochs": 2}, "resources": {"cpu": 1}, "seed": 0,
    }
    data.update(overrides)
    return data


def write_study(path: Path, name: str, **overrides: Any) -> Path:
    path.write_text(yaml.safe_dump(study_dict(name, **overrides), sort_keys=False))
    return path


def edit_sqlite(db: Path, statements: Iterable[tuple[str, tuple[Any, ...]]]) -> None:
    """Apply SQL edits to an SQLite study database as another program would, checkpoint its
    write-ahead log and close: the file holds everything, for a copy to take."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            for statement, params in statements:
                conn.execute(statement, params)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def load(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    """The study's trials, read with Optuna alone."""
    return optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)


def result_key(trial: optuna.trial.FrozenTrial) -> str:
    """What decides a training's result: architecture and settings."""
    return json.dumps([trial.user_attrs[TrialKey.ARCH_ID], trial.user_attrs[TrialKey.TRAIN]],
                      sort_keys=True)


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------- evaluators
def fake_value(arch: dict[str, Any], settings: dict[str, Any], epoch: int) -> float:
    """A made-up accuracy in [0.5, 0.9), stable per architecture and settings, rising with the
    epoch."""
    blob = json.dumps([arch, {k: v for k, v in settings.items() if k != "epochs"}],
                      sort_keys=True)
    return 0.5 + 0.3 * hashlib.sha1(blob.encode()).digest()[0] / 256 + 0.01 * epoch


def _fake(arch: dict[str, Any], settings: dict[str, Any], report: Report, *,
          sleep: float = 0.0, nan: bool = False, log: str | None = None) -> dict[str, Any]:
    epochs: list[dict[str, Any]] = []
    status, reason = "completed", None
    started = time.time()
    for epoch in range(1, int(settings["epochs"]) + 1):
        time.sleep(sleep)
        if nan and arch.get("group_ffn"):
            status, reason = "failed", f"loss became nan at epoch {epoch}, step 3"
            break
        row = {"epoch": epoch, "train_loss": 1.0 / epoch, "metric": "accuracy",
               "value": fake_value(arch, settings, epoch), "lr": 1e-3, "seconds": sleep,
               "extra": {}}
        epochs.append(row)
        if report is not None and report(row):
            status = "stopped"
            break
    log = log or os.environ.get("NAS_FAKE_LOG")
    if log:  # which trainings really ran, across processes
        with open(log, "a") as out:
            out.write(json.dumps({"arch": arch, "settings": settings, "status": status,
                                  "start": started, "end": time.time()}) + "\n")
    return {"status": status, "reason": reason, "value": epochs[-1]["value"] if epochs else 0.0,
            "epochs": epochs, "seconds": sleep * len(epochs), "samples_per_second": 0.0,
            "metric": "accuracy"}


def instant(arch: dict[str, Any], settings: dict[str, Any], task: str,
            task_options: dict[str, Any], *, latency: bool = False, report: Report = None,
            log: str | None = None) -> dict[str, Any]:
    """Return at once with the per-epoch values of :func:`fake_value`; ``log`` (a file, or
    ``$NAS_FAKE_LOG``) records each call."""
    return _fake(arch, settings, report, log=log)


def instant_with_weights(arch: dict[str, Any], settings: dict[str, Any], task: str,
                         task_options: dict[str, Any], *, latency: bool = False,
                         report: Report = None, checkpoint_dir: str | None = None
                         ) -> dict[str, Any]:
    """:func:`instant` for a study that keeps checkpoints (it takes ``checkpoint_dir``; the
    weights are the test's to write)."""
    return _fake(arch, settings, report)


def at_chance(arch: dict[str, Any], settings: dict[str, Any], task: str,
              task_options: dict[str, Any], *, latency: bool = False, report: Report = None,
              log: str | None = None) -> dict[str, Any]:
    """Like :func:`instant`, but every epoch scores 0.05: below digits' chance level (0.1)."""
    result = _fake(arch, settings, report, log=log)
    result["epochs"] = [{**row, "value": 0.05} for row in result["epochs"]]
    return {**result, "value": 0.05}


def chaos(arch: dict[str, Any], settings: dict[str, Any], task: str,
          task_options: dict[str, Any], *, latency: bool = False, report: Report = None,
          log: str | None = None) -> dict[str, Any]:
    """Like :func:`instant` but for the networks with a grouped FFN: without attention sharing
    their loss turns NaN (the result the trainer returns then), with it the evaluator raises
    (a bug in a user's trainer)."""
    if arch.get("group_ffn") and arch.get("attention_sharing") != "none":
        raise ValueError("boom: the trainer crashed")
    return _fake(arch, settings, report, nan=bool(arch.get("group_ffn")), log=log)


def slow(arch: dict[str, Any], settings: dict[str, Any], task: str,
         task_options: dict[str, Any], *, latency: bool = False, report: Report = None,
         log: str | None = None) -> dict[str, Any]:
    """Like :func:`instant`, ``$NAS_FAKE_SLEEP`` seconds (default 1) per epoch."""
    return _fake(arch, settings, report, sleep=float(os.environ.get("NAS_FAKE_SLEEP", "1.0")),
                 log=log)


def gated(arch: dict[str, Any], settings: dict[str, Any], task: str,
          task_options: dict[str, Any], *, latency: bool = False, report: Report = None,
          log: str | None = None) -> dict[str, Any]:
    """Like :func:`instant`, once the file ``$NAS_FAKE_GATE`` exists (a test opens the gate when
    it has seen what it waits for; 300 s at most)."""
    gate = Path(os.environ["NAS_FAKE_GATE"])
    deadline = time.monotonic() + 300
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return _fake(arch, settings, report, log=log)


def arrive(folder: Path, wanted: int, *, timeout: float, text: str = "") -> int:
    """Leave a file (holding ``text``) in ``folder`` and wait, ``timeout`` seconds at most,
    until ``wanted`` processes have left theirs (across Ray's workers and nodes on this
    machine); how many had arrived then."""
    (folder / f"arrived-{os.getpid()}-{time.time_ns()}").write_text(text)
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("arrived-*"))) < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(list(folder.glob("arrived-*")))


def meet(arch: dict[str, Any], settings: dict[str, Any], task: str,
         task_options: dict[str, Any], *, latency: bool = False, report: Report = None,
         log: str | None = None) -> dict[str, Any]:
    """Like :func:`instant`, once two trainings have :func:`arrive`-d in the folder
    ``$NAS_FAKE_MEET`` (120 s at most), so the first two run at the same time wherever Ray
    placed them, however slowly a node starts its workers."""
    arrive(Path(os.environ["NAS_FAKE_MEET"]), 2, timeout=120)
    return _fake(arch, settings, report, log=log)


def load_if_any(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    """:func:`load`, or no trials while the study does not exist yet."""
    try:
        return load(url, name)
    except (KeyError, optuna.exceptions.StorageInternalError):
        return []
