"""The same study on a PostgreSQL server this test starts on loopback (skipped without one)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
import study_helpers as h
from optuna.trial import TrialState
from postgres_fixture import postgres_url
from study_helpers import ray_local

from nas.tasks import TaskGeometry
from nas_cli.main import main as nas_main
from studies import StudySpec, counted_trials, create_study, load_existing, run_study
from studies.store import read_epochs

__all__ = ["postgres_url", "ray_local"]  # fixtures, imported for this module's tests

GEOMETRY = TaskGeometry("digits", "image", 10, image_size=32, in_chans=1)
BASE = h.SMALL_SPACE["base"]

_PLAIN_OPTUNA = """
import json, sys
import optuna
study = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2])
print(json.dumps([[t.number, t.values] for t in sorted(study.best_trials, key=lambda t: t.number)]))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("ray_local")
def test_a_study_on_postgresql(postgres_url, tmp_path, capsys) -> None:
    spec = StudySpec.from_dict(h.study_dict(
        "on-postgres", space="quickstart", budget={"trials": 6},
        constraints={"params_max": 2e5}, objectives=["accuracy", "params", "madds"],
        enqueue=[{"family": "vit", "d_model": 64, "d_ff": 128, "heads": 4,
                  "encoder_layers": 4, "patch_size": 4}] * 2))
    run = create_study(spec, postgres_url, geometry=GEOMETRY)
    run_study(run, evaluator=h.instant, progress=False)

    trials = h.load(postgres_url, "on-postgres")
    statuses = Counter(t.user_attrs.get("nas.status") for t in trials)
    assert counted_trials(trials) == 6 and statuses["reused"] >= 1, statuses
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for t in trials:
        if t.user_attrs["nas.status"] == "rejected":
            assert "params_max" in t.user_attrs["nas.reason"] and t.state == TrialState.FAIL
    rows = Counter(r["trial_number"] for r in read_epochs(run.storage.engine, "on-postgres"))
    trained = [t for t in trials if t.user_attrs["nas.status"] == "completed"]
    assert trained and all(rows[t.number] == 2 == len(t.intermediate_values) for t in trained)

    assert nas_main(["status", "on-postgres", "--storage", postgres_url, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["counted"] == 6 and status["statuses"] == dict(statuses)
    assert nas_main(["pareto", "on-postgres", "--storage", postgres_url, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    done = subprocess.run([sys.executable, "-c", _PLAIN_OPTUNA, "on-postgres", postgres_url],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [[t["number"], list(t["values"].values())] for t in printed] == json.loads(done.stdout)

    # Resuming a finished study runs nothing more; a second name is refused as on SQLite.
    run_study(load_existing("on-postgres", postgres_url, write=True), evaluator=h.instant,
              progress=False)
    assert len(h.load(postgres_url, "on-postgres")) == len(trials)
    path = h.write_study(tmp_path / "again.yaml", "on-postgres", space="quickstart")
    assert nas_main(["run", str(path), "--storage", postgres_url]) == 2
