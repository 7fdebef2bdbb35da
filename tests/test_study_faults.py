"""Faults that end cleanly and recover by themselves where they can (issue 22, item 3).

A database error while a trial's parameters are drawn is handled like any other database fault;
a dropped connection is retried with backoff for a bounded time; whatever is left RUNNING is
closed by the end of the run or by the next `nas resume`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy.exc as sa_exc
import study_helpers as h
from optuna.trial import TrialState

from nas_cli.main import main as nas_main
from studies import counted_trials
from studies.lease import read_owner
from studies.storage import open_storage

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(600)]
ray_local = h.ray_local

def _fail_param_write(monkeypatch: pytest.MonkeyPatch, make: Callable[[], Exception], *,
                      at: int, times: int = 1) -> dict[str, int]:
    """Make the driver fail inside Optuna's write of a drawn parameter (from the ``at``-th
    write, ``times`` times in a row); Optuna turns it into its ``StorageInternalError``."""
    real = optuna.storages.RDBStorage._set_trial_param_without_commit
    calls = {"n": 0, "failed": 0}

    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] >= at and calls["failed"] < times:
            calls["failed"] += 1
            raise make()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(optuna.storages.RDBStorage, "_set_trial_param_without_commit", write)
    return calls


def _running(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return [t for t in h.load(url, name) if t.state == TrialState.RUNNING]


def test_a_database_error_while_drawing_parameters_stops_the_run_cleanly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sampler's write fails (not a lost connection): the run stops with one line naming
    the driver's error, the trial being drawn is closed (not RUNNING, not counted), the lease is
    released, and `nas resume` finishes the study."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = h.write_study(tmp_path / "draw.yaml", "draw", budget={"trials": 4},
                         evaluator="study_helpers:instant")
    calls = _fail_param_write(
        monkeypatch, lambda: sa_exc.DatabaseError("INSERT", {}, Exception("value too long")),
        at=4)
    assert nas_main(["run", str(path), "--storage", url]) == 1
    assert calls["failed"] == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "value too long" in err[-1] and "nas resume draw" in err[-1], err
    assert "invalid data in the commit" not in err[-1]
    assert "Its running trials were closed as interrupted" in err[-1]
    assert not any("Traceback" in line for line in err)
    trials = h.load(url, "draw")
    assert not _running(url, "draw")
    drawn = [t for t in trials if "drawn" in str(t.user_attrs.get("nas.reason"))]
    assert len(drawn) == 1 and drawn[0].user_attrs["nas.status"] == "interrupted"
    assert read_owner(open_storage(url).engine, "draw") is None
    monkeypatch.undo()
    h.start_ray()
    assert nas_main(["resume", "draw", "--evaluator", "study_helpers:instant",
                     "--storage", url]) == 0
    assert counted_trials(h.load(url, "draw")) == 4
    assert not _running(url, "draw")
