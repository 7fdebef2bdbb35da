"""The study database as a trust boundary: crafted values in a copy, through every reader.

A study database is shared, and Optuna's own tools and other programs write to it. Each case
here takes a copy of a finished study database, replaces one stored value the way another tool
could (every key of ``studies.store.keys`` and rows of ``nas_leases`` and ``nas_epochs``:
missing, the wrong JSON type, not JSON, huge, nested 100,000 deep, path-like, control
characters, HTML and script text, and markup where another tool's names go) and runs the
reading commands on it in-process:

- each ends with exit 0, or exit 2 and ONE line on stderr; never a traceback, never another code;
- the read-only ones (status, pareto, export, and promote, which is refused at the unknown
  task it is given once it has read the source and chosen its trials) leave the database
  byte-identical, create no file beside it, and write nothing outside ``--out``; a refused
  ``resume`` changes nothing either;
- the listing (``nas status`` without a name) still lists the other study;
- what they print holds no control character but line feeds (no escape sequence reaches a
  terminal).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import study_helpers as h
from markup_study import markup, short_markup
from optuna.trial import TrialState
from postgres_fixture import postgres_url

from nas.cost import estimate_cost
from nas_cli.main import main as nas_main
from studies import StudySpec, create_study
from studies.store import Status, StudyKey, TrialKey
from studies.store.keys import iter_keys
from studies.store.lease import acquire
from studies.store.storage import open_storage, write_epoch

__all__ = ["postgres_url"]  # a fixture, imported for the PostgreSQL test

pytestmark = pytest.mark.timeout(300)

STUDY, OTHER = "s", "other"
DEEP = "[" * 100_000 + "]" * 100_000
HUGE = json.dumps("x" * 1_200_000)
ESCAPES = json.dumps("\x1b]0;owned\x07\x1b[2J\r\u202eevil")

#: Each variant: a label and the stored JSON text (None: the row is deleted).
VARIANTS: dict[str, str | None] = {
    "missing": None,
    "string": json.dumps("a string"),
    "list": "[1, 2, 3]",
    "mapping": '{"a": {"b": 1}}',
    "not-json": "{'oops",
    "huge": HUGE,
    "deep": DEEP,
    "path": json.dumps("/proc/self/environ"),  # (checkpoint paths: see the last test)
    "escapes": ESCAPES,
    "nan": "NaN",
    "huge-int": "9" * 5000,
    "markup": json.dumps(markup("value")),  # HTML and script text: data, shown as written
}


@dataclass(frozen=True)
class Craft:
    """One crafted value: an SQL edit of the database copy."""

    id: str
    statements: tuple[tuple[str, tuple[Any, ...]], ...]


def _attr_edit(table: str, owner: str, key: str, text: str | None,
               where: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    delete = (f"DELETE FROM {table} WHERE key = ? AND {owner} = ({where})", (key,))
    if text is None:
        return (delete,)
    return (delete, (f"INSERT INTO {table} ({owner}, key, value_json) VALUES (({where}), ?, ?)",
                     (key, text)))


_STUDY_ID = f"SELECT study_id FROM studies WHERE study_name = '{STUDY}'"
_TRIAL_0 = f"SELECT trial_id FROM trials WHERE number = 0 AND study_id = ({_STUDY_ID})"

CRAFTS: list[Craft] = []
for key in iter_keys(StudyKey):
    for label, text in VARIANTS.items():
        CRAFTS.append(Craft(f"study-{key}-{label}", _attr_edit(
            "study_user_attributes", "study_id", key, text, _STUDY_ID)))
for key in iter_keys(TrialKey):
    for label, text in VARIANTS.items():
        CRAFTS.append(Craft(f"trial-{key}-{label}", _attr_edit(
            "trial_user_attributes", "trial_id", key, text, _TRIAL_0)))
# Rows of our own tables, as another program (or a hand) could leave them.
_LEASE = ("INSERT INTO nas_leases (study_name, host, pid, process_start, started, heartbeat, "
          "token) VALUES (?, ?, ?, ?, ?, ?, ?)")
_GOOD_TIME = "2026-01-01 00:00:00.000000"
for label, row in {
    "pid-word": ("h", "abc", "1", _GOOD_TIME, _GOOD_TIME, "t"),
    "pid-negative": ("h", -1, "1", _GOOD_TIME, _GOOD_TIME, "t"),
    "pid-zero": ("h", 0, "1", _GOOD_TIME, _GOOD_TIME, "t"),
    "pid-huge": ("h", 2**62, "1", _GOOD_TIME, _GOOD_TIME, "t"),
    "time-word": ("h", 4242, "1", "yesterday", _GOOD_TIME, "t"),
    "time-number": ("h", 4242, "1", 12, 13, "t"),
    "host-escapes": ("\x1b[2J\x1b]0;owned\x07", 4242, "1", _GOOD_TIME, _GOOD_TIME, "t"),
    "host-empty": ("", 4242, "1", _GOOD_TIME, _GOOD_TIME, "t"),
    "token-huge": ("h", 4242, "1", _GOOD_TIME, _GOOD_TIME, "t" * 100_000),
}.items():
    CRAFTS.append(Craft(f"lease-{label}", ((_LEASE, (STUDY, *row)),)))
_EPOCH = ("INSERT INTO nas_epochs (study_name, trial_number, epoch, train_loss, metric, value, "
          "seconds, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
for label, row in {
    "extra-not-json": (0, 7, 0.1, "accuracy", 0.5, 1.0, "{oops"),
    "extra-deep": (0, 7, 0.1, "accuracy", 0.5, 1.0, DEEP),
    "extra-list": (0, 7, 0.1, "accuracy", 0.5, 1.0, "[1]"),
    "extra-huge": (0, 7, 0.1, "accuracy", 0.5, 1.0, HUGE),
    "value-word": (0, 7, 0.1, "accuracy", "high", 1.0, "{}"),
    "epoch-word": (0, "seventh", 0.1, "accuracy", 0.5, 1.0, "{}"),
    "trial-word": ("zero", 7, 0.1, "accuracy", 0.5, 1.0, "{}"),
    "metric-escapes": (0, 7, 0.1, "\x1b[2Jacc", 0.5, 1.0, "{}"),
}.items():
    CRAFTS.append(Craft(f"epochs-{label}", ((_EPOCH, (STUDY, *row)),)))
# Optuna's own columns, which its tools and ours read.
CRAFTS += [
    Craft("optuna-distribution-not-json", ((
        f"UPDATE trial_params SET distribution_json = '{{oops' WHERE trial_id = ({_TRIAL_0})",
        ()),)),
    Craft("optuna-distribution-deep", ((
        f"UPDATE trial_params SET distribution_json = ? WHERE trial_id = ({_TRIAL_0})",
        (DEEP,)),)),
    Craft("optuna-system-attr-deep", ((
        "INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES "
        f"(({_TRIAL_0}), 'x', ?)", (DEEP,)),)),
    Craft("optuna-study-name-escapes", ((
        f"UPDATE studies SET study_name = ? WHERE study_name = '{OTHER}'",
        ("other\x1b[2J\x1b]0;owned\x07",)),)),
]

# Markup where another tool's names go (keys of mappings, parameter names and choices, the
# study file's strings, objective and metric names), merged into the stored JSON with SQL.
_MERGE = "UPDATE {table} SET value_json = json_patch(value_json, ?) WHERE key = ? AND {where}"
_TRIAL_0_ROW = f"trial_id = ({_TRIAL_0})"
_STUDY_ROW = f"study_id = ({_STUDY_ID})"
_MARKUP = markup("name")
_KNOB = {_MARKUP: {"choices": [_MARKUP]}}
for label, table, where, key, patch in (
        ("arch-key", "trial_user_attributes", _TRIAL_0_ROW, TrialKey.ARCH, {_MARKUP: _MARKUP}),
        ("train-key", "trial_user_attributes", _TRIAL_0_ROW, TrialKey.TRAIN, {_MARKUP: _MARKUP}),
        ("cost-part", "trial_user_attributes", _TRIAL_0_ROW, TrialKey.COST,
         {"parts": {_MARKUP: {"params": 1, "params_matrix": 1, "madds": 1}}}),
        ("space-knob", "study_user_attributes", _STUDY_ROW, StudyKey.SPACE,
         {"name": _MARKUP, "arch": _KNOB}),
        ("spec-strings", "study_user_attributes", _STUDY_ROW, StudyKey.SPEC,
         {"name": _MARKUP, "description": _MARKUP, "task": _MARKUP,
          "space": {"name": _MARKUP, "arch": _KNOB}})):
    CRAFTS.append(Craft(f"markup-{label}", ((_MERGE.format(table=table, where=where),
                                             (json.dumps(patch), key)),)))
_CHOICES = {"name": "CategoricalDistribution", "attributes": {"choices": [_MARKUP, markup("kv")]}}
CRAFTS += [
    Craft("markup-objectives", _attr_edit("study_user_attributes", "study_id",
                                          StudyKey.OBJECTIVES,
                                          json.dumps([_MARKUP, markup("2")]), _STUDY_ID)),
    Craft("markup-param-name", ((
        f"UPDATE trial_params SET param_name = ? WHERE trial_id = ({_TRIAL_0}) AND "
        "param_name = 'attention_sharing'", (_MARKUP,)),)),
    Craft("markup-param-choices", ((
        f"UPDATE trial_params SET distribution_json = ? WHERE trial_id = ({_TRIAL_0}) AND "
        "param_name = 'attention_sharing'", (json.dumps(_CHOICES),)),)),
    Craft("markup-epochs", ((_EPOCH, (STUDY, 0, 7, 0.1, short_markup("metric"), 0.5, 1.0,
                                      json.dumps({_MARKUP: 0.1}))),)),
]

#: The commands each crafted database is read with: (label, argv, read-only).
COMMANDS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("list", ("status", "--storage", "{db}"), True),
    ("list-json", ("status", "--json", "--storage", "{db}"), True),
    ("status", ("status", STUDY, "--storage", "{db}"), True),
    ("pareto", ("pareto", STUDY, "--storage", "{db}"), True),
    ("export-yaml", ("export", STUDY, "--trial", "0", "--format", "yaml", "--out",
                     "{root}/out/yaml", "--storage", "{db}"), True),
    ("export-torch", ("export", STUDY, "--trial", "0", "--format", "torch", "--out",
                      "{root}/out/torch", "--storage", "{db}"), True),
    ("export-pareto", ("export", STUDY, "--pareto", "--format", "json", "--out",
                       "{root}/out/pareto", "--storage", "{db}"), True),
    # promote reads and plans from the source, then refuses the unknown task: never trains here
    ("promote", ("promote", STUDY, "--task", "no-such-task", "--storage", "{db}"), True),
    # last: the one command that may write (a lease, its write-ahead log), so that every read
    # above meets the database as another program left it
    ("resume", ("resume", STUDY, "--storage", "{db}"), False),
)

#: Printed characters that could drive a terminal (line feeds are fine).
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# ----------------------------------------------------------------------------- the database
def _make_study(url: str, name: str, *, trials: int) -> None:
    """A finished study: completed trials with the engine's attributes, a rejected one, and
    per-epoch rows; its budget is spent, so ``resume`` ends without starting Ray."""
    spec = StudySpec.from_dict(h.study_dict(name, budget={"trials": trials}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    for i in range(trials + 1):
        trial = run.study.ask()
        config, _ = run.space.suggest(trial)
        cost = estimate_cost(config, h.GEOMETRY)
        rejected = i == trials
        attrs = {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                 TrialKey.COST: {"params": cost.params, "params_matrix": cost.params_matrix,
                                 "madds": cost.madds,
                                 "parts": {k: vars(v) for k, v in cost.parts.items()}},
                 TrialKey.TRAIN: {"epochs": 2, "seed": 0}, TrialKey.EPOCHS_REACHED: 2,
                 TrialKey.STATUS: Status.REJECTED if rejected else Status.COMPLETED}
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if rejected:
            run.study.tell(trial, state=TrialState.FAIL)
            continue
        for epoch in (1, 2):
            write_epoch(run.storage, name, trial.number, {
                "epoch": epoch, "train_loss": 1.0 / epoch, "metric": "accuracy",
                "value": 0.5 + 0.1 * i + 0.01 * epoch, "seconds": 0.1, "extra": {"lr": 0.01}})
        run.study.tell(trial, [0.9 - 0.1 * i, float(cost.params)])  # trial 0 on the front


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crafted")
    db = root / "studies.db"
    url = f"sqlite:///{db}"
    _make_study(url, STUDY, trials=3)
    _make_study(url, OTHER, trials=1)
    acquire(open_storage(url).engine, OTHER).release()  # the lease table, without a row
    _edit(db, [], alone=False)  # its main file holds everything: the cases copy that
    return db


def _edit(db: Path, statements: Any, *, alone: bool = True) -> None:
    """Apply SQL edits as another program would, and close: the copy is left as one file."""
    h.edit_sqlite(db, statements)
    assert not alone or not os.path.exists(f"{db}-wal")


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = nas_main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- the cases
@pytest.mark.parametrize("craft", CRAFTS, ids=[c.id for c in CRAFTS])
def test_crafted_value_reads_as_one_line_and_changes_nothing(
        craft: Craft, base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "studies.db"
    shutil.copyfile(base, db)
    _edit(db, craft.statements)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NAS_STORAGE", raising=False)
    failures = []
    for label, template, read_only in COMMANDS:
        before = _snapshot(tmp_path)
        argv = [a.replace("{db}", f"sqlite:///{db}").replace("{root}", str(tmp_path))
                for a in template]
        code, out, err = _run(argv, capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        where = f"{label}: exit {code}, stderr {err[-600:]!r}"
        if "Traceback" in err or code not in (0, 2):
            failures.append(where)
            continue
        if code == 2 and len(lines) != 1:
            failures.append(f"{where} (not one line)")
        if _CONTROL.search(out) or _CONTROL.search(err):
            failures.append(f"{label}: printed a control character: {(out + err)[:300]!r}")
        after = _snapshot(tmp_path)
        if read_only or code == 2:
            outside = {k: v for k, v in after.items() if not k.startswith("out")}
            if outside != {k: v for k, v in before.items() if not k.startswith("out")}:
                failures.append(f"{where} (changed files beside --out: "
                                f"{sorted(set(after.items()) ^ set(before.items()))[:4]})")
        if code == 2 and after != before:
            failures.append(f"{where} (refused, yet wrote)")
        copied = [k for k in after if k.endswith((".pt", ".pth"))]
        if copied:  # the study kept no weights: any file copied came from a stored path
            failures.append(f"{label}: copied a file a stored path names: {copied}")
        if label.startswith("list") and code == 0:
            names = (json.loads(out) if label == "list-json"
                     else [line.split()[0] for line in out.splitlines() if line.strip()])
            if label == "list-json":
                names = [r["name"] for r in names]
            if not any(n.startswith(OTHER) for n in names):
                failures.append(f"{label}: the other study is not listed: {out[:300]!r}")
        if code == 2 and label in ("status", "pareto", "export-yaml") and not (
                STUDY in lines[0] or "study" in lines[0]):
            failures.append(f"{where} (does not name the study)")
    assert not failures, "\n".join(failures)


def test_the_cases_cover_every_key_and_table() -> None:
    ids = {c.id for c in CRAFTS}
    assert len(ids) == len(CRAFTS)
    for key in (*iter_keys(StudyKey), *iter_keys(TrialKey)):
        for label in VARIANTS:
            assert any(i.endswith(f"-{key}-{label}") for i in ids), (key, label)
    assert any(i.startswith("lease-") for i in ids) and any(i.startswith("epochs-") for i in ids)
    assert len(CRAFTS) * len(COMMANDS) >= 2500


def test_a_crafted_value_is_named(base: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The one line names the study, the trial and the key of the value that does not parse."""
    db = tmp_path / "studies.db"
    shutil.copyfile(base, db)
    _edit(db, _attr_edit("trial_user_attributes", "trial_id", TrialKey.COST, DEEP, _TRIAL_0))
    code, _, err = _run(["status", STUDY, "--storage", f"sqlite:///{db}"], capsys)
    assert code == 2
    assert f"`{TrialKey.COST}` of study '{STUDY}', trial 0 is nested deeper" in err
    code, out, err = _run(["status", "--json", "--storage", f"sqlite:///{db}"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and "unreadable" not in rows[OTHER] and rows[OTHER]["trials"] == 2
    assert "nested deeper" in rows[STUDY]["unreadable"]


@pytest.mark.parametrize("task", ["synthetic-vqa", "coco-files", "vqa2"])
def test_promote_to_a_task_of_another_kind_is_one_line(task: str, base: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A ViT study promoted to a VQA or caption task: one line naming the value and the tasks
    that would do (trainable ones: the study has no evaluator of its own), before any data is
    read or Ray started; the database and its folder are as they were."""
    db = tmp_path / "studies.db"
    shutil.copyfile(base, db)
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path)
    code, out, err = _run(["promote", STUDY, "--task", task, "--storage", f"sqlite:///{db}"],
                          capsys)
    kind = "caption" if task == "coco-files" else "vqa"
    expected = ("nas promote: error: Task 'vqa2' is a cost-only geometry" if task == "vqa2"
                else f"nas promote: error: `--task` {task!r} is a {kind} task, but study "
                f"'{STUDY}' searches family 'vit', which needs an image task: one of ['digits', "
                "'image-folder', 'cifar'].")
    assert (code, out, err.count("\n")) == (2, "", 1) and err.startswith(expected), err
    assert _snapshot(tmp_path) == before


def test_a_lease_row_no_nas_process_wrote_refuses_resume(base: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    db = tmp_path / "studies.db"
    shutil.copyfile(base, db)
    _edit(db, [(_LEASE, (STUDY, "h", "abc", "1", _GOOD_TIME, _GOOD_TIME, "t"))])
    before = db.read_bytes()
    code, _, err = _run(["resume", STUDY, "--storage", f"sqlite:///{db}"], capsys)
    assert code == 2 and "`nas_leases.pid`" in err and len(err.strip().splitlines()) == 1
    assert db.read_bytes() == before
    assert not os.path.exists(f"{db}-wal")


# ----------------------------------------------------------------------------- checkpoints
def _study_with_checkpoint(root: Path) -> tuple[str, Path, str]:
    """A finished study whose ``checkpoints`` folder holds trial 0's real checkpoint."""
    from types import SimpleNamespace

    from nas.models import create_model
    from trainers.loop import TrainConfig, TrainResult, save_checkpoint

    folder = root / "ckpt"
    url = f"sqlite:///{root / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict(STUDY, budget={"trials": 1},
                                            checkpoints=str(folder)))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    trial = run.study.ask()
    config, _ = run.space.suggest(trial)
    cost = estimate_cost(config, h.GEOMETRY)
    result = TrainResult(config.arch_id, spec.task, "accuracy", 0.5, 0.0, [], 1.0, 1.0,
                         cost.params, cost.madds)
    path = save_checkpoint(create_model(config, h.GEOMETRY), config, TrainConfig(),
                           SimpleNamespace(name=spec.task, geometry=h.GEOMETRY), None, result,
                           Path(spec.checkpoint_dir(trial.number) or ""))  # as a worker saves
    for key, value in {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                       TrialKey.STATUS: Status.COMPLETED, TrialKey.CHECKPOINT: str(path)}.items():
        trial.set_user_attr(key, value)
    run.study.tell(trial, [0.9, float(cost.params)])
    return url, path, config.arch_id


class _Boom:
    """A pickle whose loading would run a command (``weights_only=True`` must refuse it)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_paths_are_confined(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    """Only the trial's own checkpoint inside the study's folder is copied; any other file a
    stored path names (outside, through ``..`` or a link, not a checkpoint, a pickle that runs
    code, another architecture's) is refused in one line and nothing is written."""
    import torch

    url, real, arch_id = _study_with_checkpoint(tmp_path)
    folder = tmp_path / "ckpt"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (folder / "linked").symlink_to(outside)
    secret = tmp_path / "secret.txt"
    secret.write_text("PGPASSWORD=hunter2")
    marker = tmp_path / "ran"
    other_blob = torch.load(real, weights_only=True)
    other_blob["arch_id"] = "0" * 12
    crafted: dict[str, Any] = {
        "outside": str(secret),
        "proc": "/proc/self/environ",
        "dotdot": f"{folder}/../{real.name}",
        "relative": real.name,
        "other-name": str(folder / "other.pt"),
        "the-folder-itself": str(folder),
        "folder-link-out": str(folder / "linked" / real.name),
        "link-out": str(real),
        "not-a-checkpoint": str(real),
        "pickle-code": str(real),
        "other-arch": str(real),
        "a-folder": str(real),
    }
    original = real.read_bytes()
    for label, stored in crafted.items():
        real.unlink(missing_ok=True)
        if real.is_dir():
            real.rmdir()
        if label == "link-out":
            real.symlink_to(secret)
        elif label == "not-a-checkpoint":
            real.write_text("PGPASSWORD=hunter2")
        elif label == "pickle-code":
            torch.save({"arch_id": arch_id, "boom": _Boom(marker)}, real)
        elif label == "other-arch":
            torch.save(other_blob, real)
        elif label == "a-folder":
            real.mkdir()
        elif label == "folder-link-out":
            (outside / real.name).write_bytes(original)
        else:
            real.write_bytes(original)
        db = Path(url.removeprefix("sqlite:///"))
        _edit(db, [(f"UPDATE trial_user_attributes SET value_json = ? WHERE key = "
                    f"'{TrialKey.CHECKPOINT}'", (json.dumps(stored),))], alone=False)
        out = tmp_path / f"out-{label}"
        code, _, err = _run(["export", STUDY, "--trial", "0", "--format", "torch", "--out",
                             str(out), "--storage", url], capsys)
        assert code == 2, (label, err)
        assert len(err.strip().splitlines()) == 1 and f"`{TrialKey.CHECKPOINT}`" in err, err
        assert not out.exists(), label
        assert not marker.exists(), "loading the checkpoint ran code"
    real.rmdir()
    real.write_bytes(original)
    _edit(Path(url.removeprefix("sqlite:///")), [(
        f"UPDATE trial_user_attributes SET value_json = ? WHERE key = '{TrialKey.CHECKPOINT}'",
        (json.dumps(str(real)),))], alone=False)
    out = tmp_path / "out-real"
    code, _, err = _run(["export", STUDY, "--trial", "0", "--format", "torch", "--out",
                         str(out), "--storage", url], capsys)
    assert code == 0, err
    assert (out / "trial-0.pt").read_bytes() == original  # the trial's own checkpoint is copied


# ----------------------------------------------------------------------------- PostgreSQL
#: Crafts as another client of a shared PostgreSQL writes them: (table, key, JSON text).
_PG_CRAFTS = [
    ("study_user_attributes", StudyKey.SPEC, "{'oops"),
    ("study_user_attributes", StudyKey.OBJECTIVES, json.dumps(["a", "b", "c"])),
    ("study_user_attributes", StudyKey.REFERENCE, HUGE),
    ("study_user_attributes", StudyKey.SPACE, json.dumps("a string")),
    ("trial_user_attributes", TrialKey.COST, DEEP),
    ("trial_user_attributes", TrialKey.ARCH, json.dumps([1, 2])),
    ("trial_user_attributes", TrialKey.STATUS, ESCAPES),
    ("trial_user_attributes", TrialKey.EPOCHS_REACHED, "9" * 5000),
]


def _pg_state(url: str) -> str:
    """Every row nas or Optuna keeps, as one string: what a read-only command must not move."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            parts = [json.dumps([list(map(str, r)) for r in conn.execute(sa.text(
                f"SELECT * FROM {table} ORDER BY 1, 2"))]) for table in (
                "studies", "trials", "study_user_attributes", "trial_user_attributes",
                "trial_values", "nas_epochs")]
    finally:
        engine.dispose()
    return hashlib.sha256("".join(parts).encode()).hexdigest()


def test_crafted_values_in_a_shared_postgresql(postgres_url: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The same boundary on PostgreSQL: each crafted value is written by another client, read
    by every command (one line and exit 2, or exit 0), and put back."""
    import sqlalchemy as sa

    study, other = "crafted-pg", "crafted-pg-other"
    _make_study(postgres_url, study, trials=2)
    _make_study(postgres_url, other, trials=1)
    monkeypatch.chdir(tmp_path)
    engine = sa.create_engine(postgres_url)
    owner = {"study_user_attributes": ("study_id", "SELECT study_id FROM studies WHERE "
                                                   "study_name = :s"),
             "trial_user_attributes": ("trial_id", "SELECT t.trial_id FROM trials t JOIN "
                                                   "studies s USING (study_id) WHERE "
                                                   "s.study_name = :s AND t.number = 0")}
    try:
        for table, key, text in _PG_CRAFTS:
            column, where = owner[table]
            select = f"SELECT value_json FROM {table} WHERE key = :k AND {column} = ({where})"
            with engine.begin() as conn:
                original = conn.execute(sa.text(select), {"k": key, "s": study}).scalar_one()
                conn.execute(sa.text(f"UPDATE {table} SET value_json = :v WHERE key = :k AND "
                                     f"{column} = ({where})"), {"v": text, "k": key, "s": study})
            before = _pg_state(postgres_url)
            for argv in (["status", "--json"], ["status", study], ["pareto", study],
                         ["export", study, "--trial", "0", "--format", "yaml", "--out",
                          str(tmp_path / "out")], ["resume", study]):
                code, out, err = _run([*argv, "--storage", postgres_url], capsys)
                assert "Traceback" not in err and code in (0, 2), (key, argv, err)
                if code == 2:
                    assert len(err.strip().splitlines()) == 1 and key in err, (key, argv, err)
                if argv == ["status", "--json"]:
                    assert other in out, (code, out, err)
                assert not _CONTROL.search(out + err), (key, argv)
                assert _pg_state(postgres_url) == before, (key, argv, "the database changed")
            with engine.begin() as conn:
                conn.execute(sa.text(f"UPDATE {table} SET value_json = :v WHERE key = :k AND "
                                     f"{column} = ({where})"), {"v": original, "k": key,
                                                                "s": study})
    finally:
        engine.dispose()
