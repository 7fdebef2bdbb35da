"""Trials on GPUs, and light trial processes (issue 22, items 1 and 4).

This machine has no GPU: the placement is tested with logical GPUs (``ray.init(num_gpus=2)``),
which Ray schedules and announces to a trial (``ray.get_gpu_ids()``, ``CUDA_VISIBLE_DEVICES``)
as it would real ones. The device choice and the memory share are tested as pure functions with
the CUDA probes injected.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import study_helpers as h
from optuna.trial import TrialState

from nas.config import ArchConfig
from nas.errors import ConfigError
from nas.memory import CUDA_CONTEXT_BYTES, CUDA_LIBRARY_BYTES, estimate_training_memory
from studies import StudySpec, create_study, run_study
from studies.cluster import (
    MEMORY_STEP,
    TRAINING_WORKER_BASELINE_BYTES,
    WORKER_BASELINE_BYTES,
    TrialResources,
    count_slots,
)
from studies.spec import Resources
from studies.worker import evaluate_trial
from trainers import TrainConfig, get_task
from trainers.devices import GpuUnavailable, Placement, gpu_budget, probe_cuda, trial_device
from trainers.loop import check_gpu_share

BASE = h.SMALL_SPACE["base"]
# four architectures with four arch ids (groups act only with a grouped FFN)
ARCHS = [{**BASE, "groups": g, "group_ffn": g == 2, "attention_sharing": s}
         for g in (1, 2) for s in ("none", "kv")]
GIB = 2**30


# ----------------------------------------------------------------------------- device choice
def test_a_trial_without_gpu_keeps_its_device() -> None:
    for requested in ("auto", "cpu", "cuda:0"):
        assert trial_device(requested, Placement(), probe=lambda: "unused") == requested


def test_a_trial_with_a_gpu_trains_on_its_first_visible_device() -> None:
    placement = Placement(("3",), 0.5, "3")
    for requested in ("auto", "cuda", "cuda:0"):
        assert trial_device(requested, placement, probe=lambda: None) == "cuda:0"
    two = Placement(("2", "5"), 1.0, "2,5")
    assert trial_device("cuda:1", two, probe=lambda: None) == "cuda:1"
    assert trial_device("cpu", placement, probe=lambda: "no driver") == "cpu"  # as asked


def test_a_gpu_that_cuda_cannot_use_fails_with_the_reason() -> None:
    placement = Placement(("0",), 0.5, "0")
    with pytest.raises(GpuUnavailable) as caught:
        trial_device("auto", placement, probe=lambda: "Found no NVIDIA driver on your system.")
    assert str(caught.value) == ("Ray assigned GPU 0 (CUDA_VISIBLE_DEVICES='0') but CUDA cannot "
                                 "use it: Found no NVIDIA driver on your system.")
    with pytest.raises(GpuUnavailable, match=r"`device` is 'cuda:1'.*GPU 0, seen as cuda:0"):
        trial_device("cuda:1", placement, probe=lambda: None)
    with pytest.raises(GpuUnavailable, match="cuda:1"):  # CUDA sees fewer than Ray assigned
        trial_device("cuda:1", Placement(("0", "1")), probe=lambda: None, device_count=lambda: 1)


def test_the_cuda_probe_names_why_cuda_cannot_be_used() -> None:
    import torch

    why = probe_cuda()
    if torch.cuda.is_available():
        assert why is None
    else:
        assert isinstance(why, str) and why and "\n" not in why


def test_placement_from_ray() -> None:
    half = Placement.from_ray(0.5, [1], {"CUDA_VISIBLE_DEVICES": "1"})
    assert half == Placement(("1",), 0.5, "1")
    assert Placement.from_ray(2, ["0", "1"], {}).fraction == 1.0
    assert Placement.from_ray(0, [], {}) == Placement()


# ----------------------------------------------------------------------------- GPU memory share
def test_gpu_budget_is_the_share_of_the_card_capped_by_what_is_free() -> None:
    assert gpu_budget(free=80 * GIB, total=80 * GIB, fraction=0.5) == 40 * GIB
    assert gpu_budget(free=30 * GIB, total=80 * GIB, fraction=0.5) == 30 * GIB
    assert gpu_budget(free=80 * GIB, total=80 * GIB, fraction=1.0) == 80 * GIB
    assert gpu_budget(free=10 * GIB, total=80 * GIB, fraction=0.25) == 10 * GIB
    # the process's CUDA context counts against its share, and is already out of what is free
    assert gpu_budget(free=80 * GIB, total=80 * GIB, fraction=0.5, context=GIB) == 39 * GIB
    assert gpu_budget(free=30 * GIB, total=80 * GIB, fraction=0.5, context=GIB) == 30 * GIB
    assert gpu_budget(free=GIB, total=GIB, fraction=0.5, context=GIB) == 0
    for bad in (0.0, 1.5, -0.5):
        with pytest.raises(ValueError, match="fraction"):
            gpu_budget(1, 1, bad)


def test_a_half_gpu_trial_plans_for_half_the_card() -> None:
    config = ArchConfig.from_dict({**BASE, "groups": 1})
    data = get_task("digits")
    cfg = TrainConfig(batch_size=64)
    # the estimate plus the CUDA libraries' workspaces (measured on an H200: tests/test_cuda.py)
    need = (estimate_training_memory(config, data.geometry, 64, eval_batch_size=256)
            + CUDA_LIBRARY_BYTES)
    total = 3 * need // 2 + CUDA_CONTEXT_BYTES  # the card holds it with the context beside it
    assert check_gpu_share(config, cfg, data, 1.0, (total, total)) == need
    with pytest.raises(ConfigError, match="for the CUDA context"):  # the context counts
        check_gpu_share(config, cfg, data, 1.0, (total, need + CUDA_CONTEXT_BYTES - 1))
    with pytest.raises(ConfigError):  # the estimate alone would fit: the libraries do not
        check_gpu_share(config, cfg, data, 1.0, (need - 1, need - 1))
    with pytest.raises(ConfigError) as caught:
        check_gpu_share(config, cfg, data, 0.5, (total, total))
    message = str(caught.value)
    assert "\n" not in message
    assert "holds 0.5 of a GPU" in message and "raise resources.gpu" in message


# ----------------------------------------------------------------------------- memory requests
def test_each_trial_asks_for_its_memory() -> None:
    geometry = h.GEOMETRY
    arch = ArchConfig.from_dict({**BASE, "groups": 1})
    settings = {"batch_size": 32, "eval_batch_size": 64}
    estimate = estimate_training_memory(arch, geometry, 32, eval_batch_size=64)
    cpu = TrialResources(Resources(cpu=1), TRAINING_WORKER_BASELINE_BYTES, geometry, 64 * GIB)
    wanted = cpu.memory({"arch": arch.to_dict(), "settings": settings})
    assert TRAINING_WORKER_BASELINE_BYTES + estimate <= wanted
    assert wanted < TRAINING_WORKER_BASELINE_BYTES + estimate + MEMORY_STEP
    assert wanted % MEMORY_STEP == 0
    bigger = cpu.memory({"arch": arch.to_dict(), "settings": {**settings, "batch_size": 4096}})
    assert bigger > wanted
    assert cpu.request({"arch": arch.to_dict(), "settings": settings}) == {
        "cpu": 1, "gpu": 0.0, "memory": wanted}
    # with a GPU the model lives on the GPU: the host memory asked for is the baseline
    gpu = TrialResources(Resources(cpu=1, gpu=0.5), WORKER_BASELINE_BYTES, geometry, 64 * GIB)
    assert gpu.memory({"arch": arch.to_dict(), "settings": settings}) == WORKER_BASELINE_BYTES
    # larger than every node: capped at the largest, where the trainer's own check refuses it
    small = TrialResources(Resources(cpu=1), TRAINING_WORKER_BASELINE_BYTES, geometry, 1.5 * GIB)
    assert small.memory({"arch": arch.to_dict(), "settings": {"batch_size": 65536}}) == 1.5 * GIB
    assert cpu.memory({"number": 0}) == TRAINING_WORKER_BASELINE_BYTES  # no architecture
    pgf = cpu({"arch": arch.to_dict(), "settings": settings})
    assert pgf.bundles == [{"CPU": 1, "memory": wanted}]


def test_slots_count_memory_too() -> None:
    node = {"CPU": 8.0, "GPU": 2.0, "memory": 4.0 * GIB}
    assert count_slots([node], Resources(cpu=1), 0.25 * GIB) == 8
    assert count_slots([node], Resources(cpu=1), 1.0 * GIB) == 4  # memory binds first
    assert count_slots([node], Resources(cpu=1, gpu=0.5), 0.25 * GIB) == 4
    assert count_slots([node, {"CPU": 2.0, "memory": 8.0 * GIB}], Resources(cpu=1),
                       1.0 * GIB) == 6
    assert count_slots([node], Resources(cpu=1), 5.0 * GIB) == 0


def test_a_training_trial_on_a_gpu_cuda_cannot_use_fails_without_ray() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA works here: the trial would train")
    out = evaluate_trial({**BASE, "groups": 1}, {"epochs": 1}, "digits", {},
                         placement=Placement(("0",), 0.5, "0"))
    assert out["status"] == "failed"
    assert out["reason"].startswith("Ray assigned GPU 0 (CUDA_VISIBLE_DEVICES='0') but CUDA "
                                    "cannot use it: ")
    assert "\n" not in out["reason"]


# ----------------------------------------------------------------------------- on Ray
PLACED_LOG = "NAS_TEST_PLACED_LOG"


def placed(arch: dict[str, Any], settings: dict[str, Any], task: str,
           task_options: dict[str, Any], *, latency: bool = False, report: Any = None
           ) -> dict[str, Any]:
    """Trains nothing: records the GPUs Ray gave the trial and whether torch is imported in its
    process, then waits (at most 60 s) until four trials have arrived, and records how many it
    saw: trials that run at once all see four."""
    import ray

    folder = Path(os.environ[PLACED_LOG])
    row = {"pid": os.getpid(), "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
           "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "torch": "torch" in sys.modules,
           "arch": arch}
    row["peers"] = h.arrive(folder, 4, timeout=60, text=json.dumps(row))
    with open(folder / "placed.jsonl", "a") as out:
        out.write(json.dumps(row) + "\n")
    return {"status": "completed", "value": 0.5, "epochs": [], "seconds": 0.0,
            "samples_per_second": 0.0}


def trains(arch: dict[str, Any], settings: dict[str, Any], task: str,
           task_options: dict[str, Any], *, latency: bool = False, report: Any = None
           ) -> dict[str, Any]:
    """The built-in trainer, recording whether torch was imported before and after it."""
    before = "torch" in sys.modules
    from studies.worker import evaluate_trial as built_in

    out = built_in(arch, settings, task, task_options, latency=latency, report=report)
    with open(Path(os.environ[PLACED_LOG]) / "trains.jsonl", "a") as log:
        log.write(json.dumps({"before": before, "after": "torch" in sys.modules}) + "\n")
    return out


@pytest.fixture()
def logical_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A Ray runtime of its own with 4 CPUs and 2 logical GPUs; the evaluators' log folder."""
    import ray

    folder = tmp_path / "placed"
    folder.mkdir()
    monkeypatch.setenv(PLACED_LOG, str(folder))  # before Ray starts: its workers inherit it
    monkeypatch.setenv("NAS_RUNS", str(tmp_path / "runs"))
    h.worker_env()
    ray.shutdown()
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False,
             logging_level=logging.ERROR, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield folder
    finally:
        ray.shutdown()


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_half_gpu_trials_pack_two_per_gpu(logical_gpus: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gpus.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "gpus", budget={"trials": 4}, resources={"cpu": 1, "gpu": 0.5}, enqueue=ARCHS))
    run = create_study(spec, url, geometry=h.GEOMETRY, evaluator=placed)
    run_study(run, progress=False, evaluator=placed)
    rows = _rows(logical_gpus / "placed.jsonl")
    assert len(rows) == 4, rows
    assert all(r["peers"] == 4 for r in rows), rows  # the four ran at once
    for r in rows:
        assert len(r["gpu_ids"]) == 1, r
        assert r["visible"] == r["gpu_ids"][0], r  # each saw its own GPU
    assert Counter(r["gpu_ids"][0] for r in rows) == {"0": 2, "1": 2}  # packed 2 per GPU
    assert len({r["pid"] for r in rows}) == 4  # four trial processes
    assert not any(r["torch"] for r in rows), rows  # an evaluator that trains imports no torch
    trials = h.load(url, "gpus")
    assert sorted(t.state for t in trials) == [TrialState.COMPLETE] * 4


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_training_trial_on_a_logical_gpu_fails_with_the_reason(
        logical_gpus: Path, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA works here: the trial would train")
    url = f"sqlite:///{tmp_path / 'cuda.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "cuda", budget={"trials": 1}, resources={"cpu": 1, "gpu": 0.5}, enqueue=ARCHS[:1],
        train={"max_steps_per_epoch": 2}, fidelity={"epochs": 1}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    run_study(run, progress=False)
    (trial,) = h.load(url, "cuda")
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs["nas.status"] == "failed"
    reason = trial.user_attrs["nas.reason"]
    assert reason.startswith("Ray assigned GPU ") and " but CUDA cannot use it: " in reason
    assert "\n" not in reason


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_only_a_training_trial_imports_torch(logical_gpus: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'light.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "light", budget={"trials": 1}, enqueue=ARCHS[:1], train={"max_steps_per_epoch": 2},
        fidelity={"epochs": 1}))
    run = create_study(spec, url, geometry=h.GEOMETRY, evaluator=trains)
    run_study(run, progress=False, evaluator=trains)
    assert _rows(logical_gpus / "trains.jsonl") == [{"before": False, "after": True}]
    (trial,) = h.load(url, "light")
    assert trial.state == TrialState.COMPLETE
