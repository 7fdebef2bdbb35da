"""Every check before the first write, and the study database as data, never code.

`nas run`, `nas resume` and `nas promote` refuse what a run would fail on (a folder it cannot
make, resources Ray cannot schedule or the cluster cannot hold, an evaluator the workers cannot
call) in ONE line, exit 2, with the database and the file tree as they were: every file under
the case's folder is hashed before and after, and a run in a fresh folder creates neither the
SQLite file nor `nas_runs/`. A stored `evaluator` is imported only when the command names the
same one (`--evaluator`); a study whose database name could not name folders does not resume;
and a copy made with `optuna.copy_study` resumes as itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h
import yaml
from optuna.trial import TrialState

import studies.store.lease as lease_module
from nas.cost import estimate_cost
from nas.errors import ConfigError
from nas_cli.main import main as nas_main
from studies import StudySpec, create_study, run_study
from studies.cluster import check_resources
from studies.spec import Resources
from studies.store import Status, StudyKey, TrialKey, read_epochs
from studies.store.lease import read_owner
from studies.store.storage import open_storage

pytestmark = pytest.mark.timeout(300)
ray_local = h.ray_local


# ----------------------------------------------------------------------------- evaluators
# Named in study files as `test_prewrite:<name>`; none of them may ever be called.
def two_args(arch: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError("called")


def no_report(arch: dict[str, Any], settings: dict[str, Any], task: str,
              task_options: dict[str, Any], *, latency: bool = False) -> dict[str, Any]:
    raise AssertionError("called")


def needs_device(arch: dict[str, Any], settings: dict[str, Any], task: str,
                 task_options: dict[str, Any], *, device: str, latency: bool = False,
                 report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    raise AssertionError("called")


#: A module whose import leaves a mark: a study in the database names it as its evaluator.
EVIL = "import pathlib\npathlib.Path(__file__).with_name('IMPORTED').touch()\n" \
       "def evaluate(*args, **kwargs):\n    return {}\n"


# ----------------------------------------------------------------------------- helpers
def _snapshot(root: Path) -> dict[str, str]:
    """Every file and folder under ``root``: a file with the SHA-256 of its bytes."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest()
                                       if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], root: Path) -> str:
    """Run ``nas argv``: exit 2, one line on stderr and nothing under ``root`` changed; the
    line."""
    before = _snapshot(root)
    capsys.readouterr()
    code = nas_main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err[-3000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert _snapshot(root) == before, "the command wrote or changed files"
    return lines[0]


def _close(storage: optuna.storages.RDBStorage) -> None:
    """Every connection closed: SQLite folds its write-ahead log into the file."""
    storage.remove_session()
    storage.engine.dispose()


def _make_study(url: str, name: str, *, running: bool, **overrides: Any) -> None:
    """Study ``name`` with two completed trials (as the engine writes them) and, where
    ``running``, one left RUNNING as by a crash (a resume would close it)."""
    spec = StudySpec.from_dict(h.study_dict(name, **overrides))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    for i in range(2):
        trial = run.study.ask()
        config, _ = run.space.suggest(trial)
        cost = estimate_cost(config, h.GEOMETRY)
        for key, value in {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                           TrialKey.COST: {"params": cost.params, "madds": cost.madds,
                                           "params_matrix": cost.params_matrix},
                           TrialKey.TRAIN: {"epochs": 2, "seed": 0},
                           TrialKey.STATUS: Status.COMPLETED}.items():
            trial.set_user_attr(key, value)
        run.study.tell(trial, [0.5 + 0.1 * i, float(cost.params)])
    if running:
        run.space.suggest(run.study.ask())
    _close(run.storage)


def _edit(path: Path, name: str, change: Callable[[optuna.Study], None]) -> None:
    """What another writer of the database could do to study ``name``."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    change(optuna.load_study(study_name=name, storage=storage))
    _close(storage)


def _stored_spec(**changes: Any) -> Callable[[optuna.Study], None]:
    def change(study: optuna.Study) -> None:
        study.set_user_attr(StudyKey.SPEC, {**study.user_attrs[StudyKey.SPEC], **changes})
    return change


@pytest.fixture()
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of its own as the current folder, the default storage and Tune folder there."""
    root = tmp_path / "work"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.delenv("NAS_RUNS", raising=False)
    monkeypatch.delenv("NAS_STORAGE", raising=False)
    yield root
    assert not (root / "nas_runs").is_dir() and not (root / "nas_studies.db").exists()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding study `s` (budget 6, two trials done, one left RUNNING) and study
    `src` (finished, to promote); each test copies it into its own folder."""
    path = tmp_path_factory.mktemp("made") / "studies.db"
    _make_study(f"sqlite:///{path}", "s", running=True)
    _make_study(f"sqlite:///{path}", "src", running=False, budget={"trials": 2})
    assert sorted(p.name for p in path.parent.iterdir()) == ["studies.db"]  # nothing open
    return path


@pytest.fixture()
def stored(made: Path, fresh: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``fresh`` holding a copy of ``made`` and the module :data:`EVIL` (importable)."""
    shutil.copyfile(made, fresh / "studies.db")
    (fresh / "evil_mod.py").write_text(EVIL)
    monkeypatch.syspath_prepend(str(fresh))
    yield fresh
    assert not (fresh / "IMPORTED").exists() and "evil_mod" not in sys.modules


# ----------------------------------------------------------------------------- nas run
RUN_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("storage-path-is-a-file", {"tune": {"storage_path": "{root}/a-file"}},
     "`tune.storage_path`: '{root}/a-file' is a file"),
    ("storage-path-under-a-file", {"tune": {"storage_path": "{root}/a-file/tune"}},
     "`tune.storage_path`: '{root}/a-file' is a file, not a folder, so '{root}/a-file/tune'"),
    ("nas-runs-is-a-file", {}, "Tune's folder of the study"),
    ("checkpoints-study-is-a-file", {"checkpoints": "{root}/weights"},
     "`checkpoints`: '{root}/weights/p' is a file"),
    ("cpu-below-ray", {"resources": {"cpu": 0.00001}},
     "`resources.cpu` is 1e-05, finer than Ray schedules: a trial asks for 0 cpu or from 0.0001"),
    ("gpu-below-ray", {"resources": {"cpu": 1, "gpu": 0.00001}}, "`resources.gpu` is 1e-05"),
    ("evaluator-two-args", {"evaluator": "test_prewrite:two_args"},
     "'test_prewrite:two_args' cannot take the call the workers make, f(arch, settings, task, "
     "task_options, latency=..., report=...)"),
    ("evaluator-without-report", {"evaluator": "test_prewrite:no_report"}, "'report'"),
    ("evaluator-needs-more", {"evaluator": "test_prewrite:needs_device"}, "'device'"),
]


@pytest.mark.parametrize(("change", "fragment"), [c[1:] for c in RUN_CASES],
                         ids=[c[0] for c in RUN_CASES])
def test_run_refuses_before_the_study_exists(change: dict[str, Any], fragment: str,
                                             fresh: Path, capsys) -> None:
    (fresh / "a-file").write_text("x")
    (fresh / "weights").mkdir()
    (fresh / "weights" / "p").write_text("x")  # checkpoints/<study>
    if not change:
        (fresh / "nas_runs").write_text("x")  # where Tune's folder goes by default
    text = yaml.safe_dump(h.study_dict("p", **change)).replace("{root}", str(fresh))
    (fresh / "p.yaml").write_text(text)
    line = _refused(["run", "p.yaml"], capsys, fresh)
    assert fragment.replace("{root}", str(fresh)) in line


def test_run_refuses_resources_the_cluster_cannot_hold(fresh: Path, ray_local: None,
                                                       capsys) -> None:
    h.write_study(fresh / "big.yaml", "big", resources={"cpu": 64})
    line = _refused(["run", "big.yaml"], capsys, fresh)
    assert "asks for 64 cpu" in line


@pytest.mark.parametrize(("value", "ok"), [(0, True), (1e-4, True), (1.5e-4, True),
                                           (0.5, True), (64, True), (9.9e-5, False),
                                           (1e-9, False)])
def test_ray_schedules_resources_in_units_of_a_ten_thousandth(value: float, ok: bool) -> None:
    for resources in (Resources(cpu=value), Resources(cpu=1, gpu=value)):
        if ok:
            check_resources(resources)
        else:
            with pytest.raises(ConfigError, match=r"from 0\.0001"):
                check_resources(resources)


# ----------------------------------------------------------------------------- nas resume
RESUME_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("evaluator-not-vouched", {"evaluator": "evil_mod:evaluate"}, [],
     "trains with the evaluator 'evil_mod:evaluate' that its database names; importing it "
     "runs that code, so it runs only when you name it: pass --evaluator evil_mod:evaluate"),
    ("evaluator-another", {"evaluator": "evil_mod:evaluate"},
     ["--evaluator", "study_helpers:instant"], "(not 'study_helpers:instant')"),
    ("evaluator-none-stored", {}, ["--evaluator", "study_helpers:instant"],
     "names no evaluator"),
    ("evaluator-signature", {"evaluator": "test_prewrite:two_args"},
     ["--evaluator", "test_prewrite:two_args"], "cannot take the call the workers make"),
    ("cpu-below-ray", {"resources": {"cpu": 0.00001, "gpu": 0}}, [], "`resources.cpu`"),
    ("storage-path-is-a-file", {"tune": {"callbacks": ["json"], "max_failures": 0,
                                         "storage_path": "{root}/a-file"}},
     [], "`tune.storage_path`: '{root}/a-file' is a file"),
    ("checkpoints-blocked", {"checkpoints": "{root}/a-file/weights"}, [], "`checkpoints`"),
    ("checkpoints-not-claimed", {"checkpoints": "{root}/ssh"}, [],
     "`checkpoints` names '{root}/ssh', which no `nas run` made (it holds no .nas-study"),
    ("storage-path-not-claimed", {"tune": {"callbacks": ["json"], "max_failures": 0,
                                           "storage_path": "{root}/ssh"}},
     [], "`tune.storage_path` names '{root}/ssh', which no `nas run` made"),
]


def _refused_with_stored(argv: list[str], stored_change: dict[str, Any], fragment: str,
                         stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``argv`` (``resume NAME`` or ``promote NAME`` and flags) refused in one line holding
    ``fragment``, once the study's stored file carries ``stored_change``, with nothing
    written."""
    (stored / "a-file").write_text("x")
    (stored / "ssh").mkdir()  # a folder that exists, and that no run made
    change = yaml.safe_load(yaml.safe_dump(stored_change).replace("{root}", str(stored)))
    _edit(stored / "studies.db", argv[1], _stored_spec(**change))
    line = _refused([*argv, "--storage", "sqlite:///studies.db"], capsys, stored)
    assert fragment.replace("{root}", str(stored)) in line


@pytest.mark.parametrize(("stored_change", "flags", "fragment"),
                         [c[1:] for c in RESUME_CASES], ids=[c[0] for c in RESUME_CASES])
def test_resume_refuses_before_the_database_is_written(stored_change: dict[str, Any],
                                                       flags: list[str], fragment: str,
                                                       stored: Path, capsys) -> None:
    _refused_with_stored(["resume", "s", *flags], stored_change, fragment, stored, capsys)
    trials = h.load(f"sqlite:///{stored / 'studies.db'}", "s")
    assert [t.state for t in trials][-1] == TrialState.RUNNING  # not closed


def test_resume_refuses_resources_the_cluster_cannot_hold(stored: Path, ray_local: None,
                                                          capsys) -> None:
    _edit(stored / "studies.db", "s", _stored_spec(resources={"cpu": 64, "gpu": 0}))
    line = _refused(["resume", "s", "--storage", "sqlite:///studies.db"], capsys, stored)
    assert "asks for 64 cpu" in line


@pytest.mark.parametrize("name", ["a/b", "../up", "tab\there", "esc\x1b[2Jape", " padded"])
def test_resume_refuses_a_name_that_cannot_name_folders(name: str, stored: Path,
                                                        capsys) -> None:
    # Optuna's own tools take any name; nas would not have given this one.
    storage = optuna.storages.RDBStorage("sqlite:///studies.db")
    optuna.copy_study(from_study_name="s", from_storage=storage, to_storage=storage,
                      to_study_name=name)
    _close(storage)
    line = _refused(["resume", name, "--storage", "sqlite:///studies.db"], capsys, stored)
    assert "cannot run under its name" in line and "\x1b" not in line


# ----------------------------------------------------------------------------- nas promote
PROMOTE_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("evaluator-not-vouched", {"evaluator": "evil_mod:evaluate"}, [],
     "pass --evaluator evil_mod:evaluate"),
    ("evaluator-signature", {"evaluator": "test_prewrite:no_report"},
     ["--evaluator", "test_prewrite:no_report"], "cannot take the call the workers make"),
    ("cpu-below-ray", {"resources": {"cpu": 0.00001, "gpu": 0}}, [], "`resources.cpu`"),
    ("storage-path-is-a-file", {"tune": {"callbacks": ["json"], "max_failures": 0,
                                         "storage_path": "{root}/a-file"}},
     [], "`tune.storage_path`: '{root}/a-file' is a file"),
    ("checkpoints-not-claimed", {"checkpoints": "{root}/ssh"}, [],
     "`checkpoints` names '{root}/ssh', which no `nas run` made"),
]


@pytest.mark.parametrize(("stored_change", "flags", "fragment"),
                         [c[1:] for c in PROMOTE_CASES], ids=[c[0] for c in PROMOTE_CASES])
def test_promote_refuses_before_the_promoted_study_exists(stored_change: dict[str, Any],
                                                          flags: list[str], fragment: str,
                                                          stored: Path, capsys) -> None:
    _refused_with_stored(["promote", "src", *flags], stored_change, fragment, stored, capsys)


def test_promote_refuses_resources_the_cluster_cannot_hold(stored: Path, ray_local: None,
                                                           capsys) -> None:
    """The source stores resources the cluster cannot hold: no `src-promoted`, the source
    not written (it used to be created and recorded, then two lines and exit 2)."""
    _edit(stored / "studies.db", "src", _stored_spec(resources={"cpu": 64, "gpu": 0}))
    line = _refused(["promote", "src", "--storage", "sqlite:///studies.db"], capsys, stored)
    assert "asks for 64 cpu" in line
    names = [s.study_name for s in optuna.get_all_study_summaries("sqlite:///studies.db")]
    assert sorted(names) == ["s", "src"]


# ----------------------------------------------------------------------------- a copy
def _record(url: str, name: str) -> tuple[Any, ...]:
    study = optuna.load_study(study_name=name, storage=url)
    return (study.user_attrs, [(t.number, t.state, t.values, t.params, t.user_attrs)
                               for t in study.trials],
            read_epochs(open_storage(url, read_only=True).engine, name))


def test_a_copy_resumes_as_itself(tmp_path: Path, ray_local: None, monkeypatch,
                                  capsys) -> None:
    runs = tmp_path / "runs"
    monkeypatch.setenv("NAS_RUNS", str(runs))
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    # Learning rates drawn from a continuous range: every trial trains (none reuses a result).
    space = {**h.SMALL_SPACE, "train": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}
    spec = StudySpec.from_dict(h.study_dict("orig", space=space, budget={"trials": 2},
                                            evaluator="study_helpers:instant"))
    run_study(create_study(spec, url, geometry=h.GEOMETRY), progress=False)
    optuna.copy_study(from_study_name="orig", from_storage=url, to_storage=url,
                      to_study_name="copy")
    _edit(tmp_path / "studies.db", "copy", _stored_spec(budget={"trials": 4}))
    source = _record(url, "orig")
    assert source[1] and source[2]  # trials and per-epoch rows
    orig_runs = _snapshot(runs / "orig")

    leases: list[tuple[str, Any, Any]] = []
    acquire = lease_module.acquire

    def spy(engine: Any, name: str, **kwargs: Any) -> Any:
        lease = acquire(engine, name, **kwargs)
        leases.append((name, read_owner(engine, name), read_owner(engine, "orig")))
        return lease

    monkeypatch.setattr(lease_module, "acquire", spy)
    capsys.readouterr()
    assert nas_main(["resume", "copy", "--evaluator", "study_helpers:instant",
                     "--storage", url]) == 0
    assert "Pareto front of 'copy'" in capsys.readouterr().out

    # The lease was the copy's, the source's never taken.
    [(name, owner, other)] = leases
    assert name == "copy" and owner.study_name == "copy" and other is None
    copy = optuna.load_study(study_name="copy", storage=url)
    done = [t for t in copy.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 4
    new = sorted(t.number for t in done if t.number >= 2)
    assert new == [2, 3]
    assert all(t.user_attrs[TrialKey.STATUS] == Status.COMPLETED for t in done)
    # Its per-epoch rows are under its own name (a copy brings none of the source's).
    rows = read_epochs(open_storage(url, read_only=True).engine, "copy")
    assert sorted({r["trial_number"] for r in rows}) == new
    # Tune's folder is the copy's, one trial folder per trained trial.
    tune_dir = Path(copy.user_attrs[StudyKey.TUNE_DIR])
    assert tune_dir.parent == runs / "copy" and tune_dir.is_dir()
    assert sorted(p.name for p in tune_dir.glob("trial-*")) == [f"trial-{n}" for n in new]
    # The source is as it was, in the database and in its Tune folder.
    assert _record(url, "orig") == source
    assert _snapshot(runs / "orig") == orig_runs
    assert sorted(p.name for p in runs.iterdir()) == ["copy", "orig"]


def test_a_run_claims_its_folders_and_a_resume_accepts_them(tmp_path: Path) -> None:
    """`nas run` (the study file's author) makes its folders and marks them; the same folders
    read back from the database are then accepted, and no others."""
    from studies.folders import MARKER, check_claims

    weights, tune = tmp_path / "weights", tmp_path / "tune"
    spec = StudySpec.from_dict(h.study_dict("claimed", checkpoints=str(weights),
                                            tune={"storage_path": str(tune)}))
    create_study(spec, f"sqlite:///{tmp_path / 'db.db'}", geometry=h.GEOMETRY)
    assert (weights / MARKER).read_text() == "claimed\n" == (tune / MARKER).read_text()
    check_claims(spec)  # accepted
    elsewhere = dataclasses.replace(spec, checkpoints=str(tmp_path))
    with pytest.raises(ConfigError, match="no `nas run` made"):
        check_claims(elsewhere)
