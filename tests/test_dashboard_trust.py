"""The dashboard over a study database that others write to (the database as a trust boundary).

A study database is shared: teammates, ``optuna.copy_study``, notebooks write to its tables, so
what the dashboard reads there is data of unknown origin. Each case takes a copy of a database
the engine wrote (``studies.create_study``, Optuna's ask and tell, ``write_epoch``), replaces
stored values as another tool could (every key of ``studies.store.StudyKey`` and ``TrialKey``:
missing, the wrong JSON type, not JSON, over 1,000,000 characters, nested 100,000 deep, control
characters; rows of ``nas_epochs``; Optuna's own columns) with sqlite3, and reads it:

- the data layer raises nothing but ``StoredValueError`` / ``NasError``, naming the study, the
  trial and the key, or reads the value;
- the listing lists every study, the odd one marked unreadable with its one-line reason;
- the app's routes and callbacks answer 200, an unreadable study's page and an unreadable trial's
  view showing that line, downloads refused with it; CSV cells that a spreadsheet would run are
  neutralised;
- the database file is byte-identical afterwards and nothing is written beside it.

A study's stored search space is needed only by its exports: one that does not parse leaves the
study readable, and only its exports say why. A study another tool wrote with markup in every
stored string the pages show (``markup_study``) reads as that text, draws, and reaches plotly
only escaped (plotly renders a subset of HTML in figure text; React shows a component's text as
written).
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import study_helpers as h
from markup_study import TAGS, MarkupStudy, write_markup_study
from optuna.trial import TrialState

from dashboard import create_app
from dashboard.data import (
    list_studies,
    load_curves,
    load_promotion,
    load_study,
    load_trial,
    open_readonly,
    study_info,
    study_names,
)
from dashboard.layout import study_href, trial_href
from dashboard.testing import (
    callback_body,
    components,
    first_render,
    open_every_view,
    post_callback,
)
from nas.errors import NasError
from studies import StudySpec, create_study
from studies.store import Status, StoredValueError, StudyKey, TrialKey, epochs_table, trial_attrs
from studies.store.keys import iter_keys
from studies.store.storage import write_epoch

pytestmark = pytest.mark.timeout(300)

STUDY, OTHER = "s", "other"
TRIALS = 8  # of STUDY: 0-6 completed, 7 stopped early
DEEP = "[" * 100_000 + "]" * 100_000
HUGE = json.dumps("x" * 1_100_000)
ESCAPES = json.dumps("\x1b]0;owned\x07\x1b[2J\r\u202eevil\x00<script>alert(1)</script>")

#: The kind of value each key holds (the engine's): what "the wrong JSON type" is for it.
TEXT_KEYS = {StudyKey.SPACE_HASH, StudyKey.TRAINING_KEY, StudyKey.TUNE_DIR,
             StudyKey.PROMOTED_FROM, TrialKey.ARCH_ID, TrialKey.STATUS, TrialKey.REASON,
             TrialKey.NODE, TrialKey.CHECKPOINT, TrialKey.ENQUEUED, TrialKey.TUNE_TRIAL,
             TrialKey.FAULT}
#: The trial keys the study page reads (the rest only a trial's own view).
PAGE_KEYS = {TrialKey.STATUS, TrialKey.REASON, TrialKey.ARCH_ID, TrialKey.EPOCHS_REACHED,
             TrialKey.COST}
VARIANTS = ("missing", "wrong-type", "not-json", "huge", "deep", "escapes")


def _text(key: str, variant: str) -> str | None:
    """The stored JSON text of ``variant`` for ``key`` (None: the row is deleted)."""
    return {"missing": None, "not-json": "{'oops", "huge": HUGE, "deep": DEEP,
            "escapes": ESCAPES,
            "wrong-type": '{"a": [1]}' if key in TEXT_KEYS else json.dumps("a string")}[variant]


def _unreadable(key: str, variant: str) -> bool:
    """Whether ``studies.store.stored`` refuses ``variant`` as the value of ``key``."""
    if variant == "missing":
        return key == StudyKey.SPACE  # a study made by nas has its space
    if variant == "escapes":  # a string: fine where a string belongs, but a status word
        return key not in TEXT_KEYS or key == TrialKey.STATUS
    return True


# ----------------------------------------------------------------------------- the database
def _make_study(url: str, name: str, *, trials: int) -> None:
    """A study as the engine writes it: created by ``create_study`` (study file, space,
    geometry, reference), trials asked and told with the engine's attributes, epochs through
    ``write_epoch``. The costs are made up (nothing here recomputes them)."""
    spec = StudySpec.from_dict(h.study_dict(
        name, constraints={"params_max": 1e9, "madds_max": 1e12}, budget={"trials": trials}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    for i in range(trials):
        trial = run.study.ask()
        config, overrides = run.space.suggest(trial)
        stopped = i == trials - 1
        attrs = {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                 TrialKey.COST: {"params": 1000 + i, "params_matrix": 900 + i,
                                 "madds": 50_000 + i,
                                 "parts": {"backbone": {"params": 800, "params_matrix": 700,
                                                        "madds": 40_000}}},
                 TrialKey.TRAIN: {"epochs": 2, "seed": 0, **overrides},
                 TrialKey.STATUS: Status.STOPPED if stopped else Status.COMPLETED,
                 TrialKey.EPOCHS_REACHED: 1 if stopped else 2, TrialKey.SECONDS: 1.5,
                 TrialKey.NODE: "node-0", TrialKey.SAMPLES_PER_SECOND: 900.0}
        for epoch in (1, 2)[:attrs[TrialKey.EPOCHS_REACHED]]:
            value = 0.5 + 0.04 * i + 0.01 * epoch
            write_epoch(run.storage, name, trial.number, {
                "epoch": epoch, "train_loss": 1.0 / epoch, "metric": "accuracy",
                "value": value, "seconds": 0.1, "extra": {"lr": 0.01}})
            # As the engine's searcher does: Optuna's report is single-objective only.
            run.storage.set_trial_intermediate_value(trial._trial_id, epoch, value)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if stopped:
            run.study.tell(trial, state=TrialState.PRUNED)
        else:  # each less accurate and smaller than the one before: all on the front
            run.study.tell(trial, [0.9 - 0.01 * i, 1000.0 - i])
    run.storage.engine.dispose()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("trust") / "studies.db"
    url = f"sqlite:///{db}"
    _make_study(url, STUDY, trials=TRIALS)
    _make_study(url, OTHER, trials=2)
    _edit(db, [])  # one file: the cases copy it
    return db


Statements = list[tuple[str, tuple[Any, ...]]]
_STUDY_ID = f"(SELECT study_id FROM studies WHERE study_name = '{STUDY}')"


def _trial_id(number: int) -> str:
    return f"(SELECT trial_id FROM trials WHERE number = {number} AND study_id = {_STUDY_ID})"


def _set(table: str, owner: str, where: str, key: str, text: str | None) -> Statements:
    """Replace (or with ``text`` None delete) attribute ``key`` of a study or a trial."""
    out: Statements = [(f"DELETE FROM {table} WHERE key = ? AND {owner} = {where}", (key,))]
    if text is not None:
        out.append((f"INSERT INTO {table} ({owner}, key, value_json) VALUES ({where}, ?, ?)",
                    (key, text)))
    return out


def _study_attr(key: str, text: str | None) -> Statements:
    return _set("study_user_attributes", "study_id", _STUDY_ID, key, text)


def _trial_attr(number: int, key: str, text: str | None) -> Statements:
    return _set("trial_user_attributes", "trial_id", _trial_id(number), key, text)


def _edit(db: Path, statements: Statements) -> None:
    """Apply SQL edits as another program would, and close, leaving the copy one file."""
    h.edit_sqlite(db, statements)


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def crafted(base: Path, tmp_path: Path) -> Iterator[Any]:
    """``craft(statements)``: a copy of the base database with the edits applied, opened
    read-only; afterwards the folder must be as the edits left it."""
    db = tmp_path / "studies.db"
    engines: list[sa.Engine] = []
    before: dict[str, str] = {}

    def craft(statements: Statements) -> sa.Engine:
        shutil.copyfile(base, db)
        _edit(db, statements)
        before.update(_snapshot(tmp_path))
        engines.append(open_readonly(f"sqlite:///{db}"))
        return engines[-1]

    yield craft
    for engine in engines:
        engine.dispose()
    assert _snapshot(tmp_path) == before  # byte-identical, and nothing beside it


def _one_line(exc: BaseException, *words: str) -> None:
    message = str(exc)
    assert "\n" not in message and "Traceback" not in message
    for word in words:
        assert word in message, (word, message)


def _listing(engine: sa.Engine) -> dict[str, Any]:
    """The listing's rows by name; the other study is always there, readable."""
    infos, frame = list_studies(engine)
    rows = {r["name"]: r for r in frame.to_dict("records")}
    assert set(rows) == {STUDY, OTHER} and [i.name for i in infos] == [STUDY, OTHER]
    assert rows[OTHER]["unreadable"] is None and rows[OTHER]["trials"] == 2
    return rows


def _reads(engine: sa.Engine) -> None:
    """Everything the study page and a trial's view read, for a readable study."""
    info = study_info(engine, STUDY)
    data = load_study(engine, info)
    assert list(data.trials.number) == list(range(TRIALS))
    load_curves(engine, info)
    load_promotion(engine, info)
    load_trial(engine, info, 0)


# ----------------------------------------------------------------------------- study values
STUDY_CASES = [(key, variant) for key in iter_keys(StudyKey) for variant in VARIANTS]


@pytest.mark.parametrize(("key", "variant"), STUDY_CASES,
                         ids=[f"{k}-{v}" for k, v in STUDY_CASES])
def test_a_study_value(crafted: Any, key: str, variant: str) -> None:
    engine = crafted(_study_attr(key, _text(key, variant)))
    row = _listing(engine)[STUDY]
    if key == StudyKey.SPACE:
        _space_refused_alone(engine, row, bad=_unreadable(key, variant))
    elif _unreadable(key, variant):
        assert row["unreadable"] and row["trials"] == TRIALS  # Optuna's counts still show
        _one_line(row["unreadable"], f"`{key}`", f"study '{STUDY}'")
        with pytest.raises(StoredValueError) as raised:
            study_info(engine, STUDY)
        _one_line(raised.value, f"`{key}`", f"study '{STUDY}'")
    else:
        assert row["unreadable"] is None
        _reads(engine)


def _space_refused_alone(engine: sa.Engine, row: dict[str, Any], *, bad: bool) -> None:
    """Only exports need the search space: a study whose stored space nas cannot use is listed
    and read as any other, without a space, and its exports are refused with the one line
    naming it."""
    from dashboard.exports import trial_record

    assert row["unreadable"] is None
    _reads(engine)
    info = study_info(engine, STUDY)
    if not bad:
        assert info.space_problem is None and info.stored is not None and info.stored.space
        return
    assert info.stored is not None and info.stored.space is None
    _one_line(info.space_problem, f"`{StudyKey.SPACE}`", f"study '{STUDY}'")
    with pytest.raises(StoredValueError) as raised:
        trial_record(info, load_trial(engine, info, 0), None)
    assert raised.value is info.space_problem


@pytest.mark.parametrize(("label", "key", "value"), [
    ("objectives-too-few", StudyKey.OBJECTIVES, ["accuracy"]),
    ("objectives-a-column", StudyKey.OBJECTIVES, ["accuracy", "number"]),
    ("objectives-twice", StudyKey.OBJECTIVES, ["params", "params"]),
    ("reference-too-long", StudyKey.REFERENCE, [0.1, 2e6, 3.0]),
    ("spec-other-objectives", StudyKey.SPEC, None),
    ("space-not-a-space", StudyKey.SPACE, {"name": "x", "base": "no-such-preset"}),
])
def test_a_study_value_of_the_right_type_that_does_not_fit(crafted: Any, base: Path,
                                                           label: str, key: str,
                                                           value: Any) -> None:
    if value is None:  # the stored study file, declaring one objective too many
        spec = StudySpec.from_dict(h.study_dict(STUDY, objectives=[
            {"name": "accuracy"}, {"name": "params"}, {"name": "madds"}]))
        value = spec.to_dict()
    engine = crafted(_study_attr(key, json.dumps(value)))
    if key == StudyKey.SPACE:
        _space_refused_alone(engine, _listing(engine)[STUDY], bad=True)
        return
    assert _listing(engine)[STUDY]["unreadable"]
    with pytest.raises(StoredValueError, match=f"`{key}` of study '{STUDY}'"):
        study_info(engine, STUDY)


# ----------------------------------------------------------------------------- trial values
@pytest.mark.parametrize("key", list(iter_keys(TrialKey)))
def test_a_trial_value(crafted: Any, key: str) -> None:
    """Each variant on its own trial (trial i: VARIANTS[i]) of the one study."""
    engine = crafted([edit for i, variant in enumerate(VARIANTS)
                      for edit in _trial_attr(i, key, _text(key, variant))])
    assert _listing(engine)[STUDY]["unreadable"] is None  # a trial's value: the study reads
    info = study_info(engine, STUDY)
    trials = load_study(engine, info).trials.set_index("number")
    for number, variant in enumerate(VARIANTS):
        bad = _unreadable(key, variant)
        note = trials.at[number, "unreadable"]
        assert (note == key) if bad and key in PAGE_KEYS else note is None, (variant, note)
        if bad:
            with pytest.raises(StoredValueError) as raised:
                load_trial(engine, info, number)
            _one_line(raised.value, f"`{key}`", f"study '{STUDY}', trial {number}")
        else:
            load_trial(engine, info, number)
    # The unreadable field is left blank; the rest of the row reads.
    assert trials.loc[list(range(len(VARIANTS)))].accuracy.notna().all()


# ----------------------------------------------------------------------------- other rows
# Rows written with raw SQL on purpose: what another program can leave in the tables.
_EPOCH = (f"INSERT INTO {epochs_table.name} (study_name, trial_number, epoch, train_loss, "
          "metric, value, seconds, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
_EPOCHS = epochs_table.name  # the epoch rows' table, as a stored value's key names it
_PARAM = f"UPDATE trial_params SET {{}} WHERE trial_id = {_trial_id(1)} AND param_name = 'groups'"
ROW_CASES: dict[str, tuple[Statements, str | None]] = {
    # label: (edits, the key a trial's view names, or None where the value is read)
    **{f"epochs-extra-{label}": ([(_EPOCH, (STUDY, 1, 7, 0.1, "accuracy", 0.5, 1.0, text))],
                                 f"{_EPOCHS}.extra")
       for label, text in (("not-json", "{oops"), ("deep", DEEP), ("list", "[1]"),
                           ("huge", HUGE))},
    "epochs-value-word": ([(_EPOCH, (STUDY, 1, 7, 0.1, "accuracy", "high", 1.0, "{}"))],
                          f"{_EPOCHS}.value"),
    "epochs-epoch-word": ([(_EPOCH, (STUDY, 1, "seventh", 0.1, "accuracy", 0.5, 1.0, "{}"))],
                          f"{_EPOCHS}.epoch"),
    "epochs-metric-escapes": ([(_EPOCH, (STUDY, 1, 7, 0.1, "\x1b[2J<b>acc", 0.5, 1.0, "{}"))],
                              None),
    "distribution-not-json": ([(_PARAM.format("distribution_json = '{oops'"), ())],
                              "param:groups"),
    "distribution-deep": ([(_PARAM.format("distribution_json = ?"), (DEEP,))], "param:groups"),
    "distribution-wrong-shape": ([(_PARAM.format("distribution_json = ?"), (json.dumps(
        {"name": "IntDistribution", "attributes": {"low": 5, "high": 1}}),))], "param:groups"),
    "distribution-choice-mapping": ([(_PARAM.format("distribution_json = ?"), (json.dumps(
        {"name": "CategoricalDistribution", "attributes": {"choices": [{"a": 1}, 2]}}),))],
        "param:groups"),
    "param-index-out-of-range": ([(_PARAM.format("param_value = 99"), ())], "param:groups"),
    "param-value-word": ([(_PARAM.format("param_value = 'two'"), ())], "param:groups"),
    "value-type-word": ([(f"UPDATE trial_values SET value_type = 'SIDEWAYS' WHERE trial_id = "
                          f"{_trial_id(1)}", ())], None),
    "value-word": ([(f"UPDATE trial_values SET value = 'high' WHERE trial_id = {_trial_id(1)}",
                     ())], None),
    "state-word": ([(f"UPDATE trials SET state = 'EXPLODED' WHERE trial_id = {_trial_id(1)}",
                     ())], None),
    "started-word": ([(f"UPDATE trials SET datetime_start = 'yesterday', datetime_complete = 12"
                       f" WHERE trial_id = {_trial_id(1)}", ())], None),
    "intermediate-word": ([(f"UPDATE trial_intermediate_values SET step = 'one', "
                            f"intermediate_value = 'high' WHERE trial_id = {_trial_id(1)} "
                            "AND step = 1", ())], None),
    "system-attr-deep": ([("INSERT INTO trial_system_attributes (trial_id, key, value_json) "
                           f"VALUES ({_trial_id(1)}, 'x', ?)", (DEEP,))], None),
}


@pytest.mark.parametrize("label", list(ROW_CASES))
def test_a_row_of_another_table(crafted: Any, label: str) -> None:
    """``nas_epochs`` rows and Optuna's own columns, on trial 1."""
    statements, key = ROW_CASES[label]
    engine = crafted(statements)
    assert _listing(engine)[STUDY]["unreadable"] is None
    info = study_info(engine, STUDY)
    trials = load_study(engine, info).trials.set_index("number")
    load_curves(engine, info)
    if key is None:
        load_trial(engine, info, 1)
        return
    if key.startswith("param:"):  # the study page reads the parameters: it names it too
        assert trials.at[1, "unreadable"] == key
    with pytest.raises(StoredValueError) as raised:
        load_trial(engine, info, 1)
    _one_line(raised.value, f"`{key}`", f"study '{STUDY}'")


@pytest.mark.parametrize(("label", "statements", "key"), [
    ("direction-word", [("UPDATE study_directions SET direction = 'SIDEWAYS' WHERE study_id = "
                         f"{_STUDY_ID}", ())], "study_directions.direction"),
    ("number-word", [(f"UPDATE trials SET number = 'seven' WHERE trial_id = {_trial_id(1)}", ())],
     "trials.number"),
])
def test_an_optuna_column_that_makes_the_study_unreadable(crafted: Any, label: str,
                                                          statements: Statements,
                                                          key: str) -> None:
    engine = crafted(statements)
    row = _listing(engine)[STUDY]
    with pytest.raises(StoredValueError) as raised:
        load_study(engine, study_info(engine, STUDY))
    _one_line(raised.value, f"`{key}`", f"study '{STUDY}'")
    assert row["unreadable"] is None or key in row["unreadable"]


# ----------------------------------------------------------------------------- the app
#: One database holding one odd value per trial of STUDY (trial 0 and 6 stay as written), and
#: an unreadable OTHER: what the pages are read on.
ZOO: Statements = [
    *_trial_attr(1, TrialKey.COST, DEEP),
    *_trial_attr(2, TrialKey.STATUS, "{'oops"),
    *_trial_attr(3, TrialKey.ARCH, json.dumps("a string")),
    *_trial_attr(4, TrialKey.REASON, json.dumps("=HYPERLINK(\"http://x\",\"y\")")),
    (_EPOCH, (STUDY, 5, 9, 0.1, "accuracy", 0.5, 1.0, DEEP)),
    *_trial_attr(7, TrialKey.CHECKPOINT, json.dumps("/etc/passwd")),
    (f"UPDATE trial_values SET value = -7.5 WHERE objective = 0 AND trial_id = {_trial_id(6)}",
     ()),
    ("UPDATE study_user_attributes SET value_json = '\"a string\"' WHERE key = ? AND "
     f"study_id = (SELECT study_id FROM studies WHERE study_name = '{OTHER}')",
     (StudyKey.SPEC,)),
]
#: What each odd trial's view shows.
ZOO_TRIALS = {1: f"`{TrialKey.COST}`", 2: f"`{TrialKey.STATUS}`", 3: f"`{TrialKey.ARCH}`",
              5: f"`{_EPOCHS}.extra`"}


@pytest.fixture
def zoo(crafted: Any) -> Any:
    engine = crafted(ZOO)
    return create_app(engine.url.render_as_string(hide_password=True), refresh_seconds=1)


def _ok(results: Any) -> None:
    assert [r.status for r in results] == [200] * len(results), [
        (r.output, r.status) for r in results]


def _texts(response: Any) -> str:
    return json.dumps(response)


@pytest.fixture
def one_line_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """What the app logs of the odd values: one line each, never a traceback."""
    with caplog.at_level(logging.INFO):
        yield
    records = caplog.get_records("call")
    for record in records:
        assert record.exc_info is None and "\n" not in record.getMessage(), record.getMessage()
    assert any(r.name == "dashboard.app" for r in records)


def test_pages_on_odd_values(zoo: Any, one_line_logs: None) -> None:
    client = zoo.server.test_client()
    for path in ("/", study_href(OTHER), study_href(STUDY), trial_href(STUDY, 1)):
        page = client.get(path)  # the app's frame, whatever the study holds
        assert page.status_code == 200 and b"_dash-config" in page.data
    # The studies page lists both: the other unreadable, with why.
    listing = post_callback(client, callback_body(zoo, "studies-table.children",
                                                  {"studies-tick.n_intervals": None}))
    _ok([listing])
    cells = [c for c in components(listing.response) if c["props"].get("className") ==
             "unreadable"]
    assert len(cells) == 1 and f"`{StudyKey.SPEC}` of study '{OTHER}'" in _texts(cells)
    assert f"/study/{STUDY}" in _texts(listing.response)
    # The unreadable study's page: its one line, no server error.
    page = first_render(client, zoo, study_href(OTHER))
    _ok(page)
    assert "Unreadable study" in _texts(page[0].response)
    assert f"`{StudyKey.SPEC}` of study '{OTHER}'" in _texts(page[0].response)
    # The study page renders every view; the odd trials are named, their fields blank.
    results = first_render(client, zoo, study_href(STUDY))
    _ok(results)
    summary = next(r for r in results if r.output.startswith("study-summary"))
    assert "2 trials (1, 2)" in _texts(summary.response)
    table = next(r for r in results if r.output.startswith("..trial-table.data"))
    rows = {r["id"]: r for r in table.response["response"]["trial-table"]["data"]}
    assert rows[1]["unreadable"] == TrialKey.COST and rows[2]["unreadable"] == TrialKey.STATUS
    assert rows[2]["status"] == Status.COMPLETED  # an unreadable status reads the state's word
    store = {"study.data": {"name": STUDY}}
    for _, answer in open_every_view(client, zoo, STUDY, "groups"):
        _ok([answer])
        assert "view" in answer.response["response"]
    compare = post_callback(client, callback_body(zoo, "compare.figure", {
        **store, "compare-with.value": OTHER, "pareto-x.value": "params",
        "pareto-y.value": "accuracy"}, changed="compare-with.value"))
    _ok([compare])
    assert f"study '{OTHER}'" in _texts(compare.response)
    # Each odd trial's view: the one line naming study, trial and key.
    for number, key in ZOO_TRIALS.items():
        page = first_render(client, zoo, trial_href(STUDY, number))
        _ok(page)
        body = _texts(page[-1].response)
        assert "trial-problem" in body and key in body and f"trial {number}" in body
    for number in (0, 4, 6, 7):  # read as written
        page = first_render(client, zoo, trial_href(STUDY, number))
        _ok(page)
        assert "trial-state" in _texts(page[-1].response)


def _export(client: Any, app: Any, number: int, fmt: str) -> Any:
    button = {"format": fmt, "type": "export"}
    request = callback_body(app, "..trial-download", {"trial.data": {"name": STUDY,
                                                                     "number": number}},
                            changed=json.dumps(button, separators=(",", ":")) + ".n_clicks")
    request["inputs"][0] = [{"id": button, "property": "n_clicks", "value": 1}]
    answer = post_callback(client, request)
    _ok([answer])
    return answer.response["response"]


def test_downloads_on_odd_values(zoo: Any, one_line_logs: None) -> None:
    client = zoo.server.test_client()
    # A trial whose architecture does not parse: refused with its line, no bytes.
    refused = _export(client, zoo, 3, "yaml")
    assert "trial-download" not in refused
    assert f"`{TrialKey.ARCH}`" in refused["trial-message"]["children"]
    # A checkpoint the database names outside the study's folder: never served.
    for fmt in ("yaml", "torch"):
        answer = _export(client, zoo, 7, fmt)
        assert "root:" not in _texts(answer)
    # The whole Pareto set: trial 1 is on the front, so the zip is refused with its line.
    pareto = post_callback(client, callback_body(zoo, "..pareto-download", {
        "pareto-button.n_clicks": 1, "pareto-format.value": "json",
        "study.data": {"name": STUDY}}))
    _ok([pareto])
    assert "pareto-download" not in pareto.response["response"]
    assert f"`{TrialKey.COST}` of study '{STUDY}', trial 1" in _texts(pareto.response)
    # CSV: every cell a spreadsheet would run is neutralised; numbers stay numbers.
    csv = post_callback(client, callback_body(zoo, "..csv-download", {
        "csv-button.n_clicks": 1, "study.data": {"name": STUDY},
        "trial-table.filter_query": "", "trial-table.sort_by": []}))
    _ok([csv])
    rows = _csv_rows(csv.response["response"]["csv-download"]["data"]["content"])
    assert rows[4]["reason"].startswith("'=HYPERLINK")
    assert rows[6]["accuracy"] == "-7.5"  # a negative number, as a number
    selected = post_callback(client, callback_body(zoo, "..selection-download", {
        "selection-csv.n_clicks": 1, "selected.data": {"numbers": [4, 6]},
        "study.data": {"name": STUDY}}))
    _ok([selected])
    rows = _csv_rows(selected.response["response"]["selection-download"]["data"]["content"])
    assert sorted(rows) == [4, 6] and rows[4]["reason"].startswith("'=HYPERLINK")
    # A study that does not parse: its CSV is refused with its line.
    other = post_callback(client, callback_body(zoo, "..csv-download", {
        "csv-button.n_clicks": 1, "study.data": {"name": OTHER},
        "trial-table.filter_query": "", "trial-table.sort_by": []}))
    _ok([other])
    assert "csv-download" not in other.response["response"]
    assert f"study '{OTHER}'" in other.response["response"]["csv-message"]["children"]


def _csv_rows(content: str) -> dict[int, dict[str, str]]:
    """A CSV download's rows by trial number; no cell (nor header) starts a formula, unless it
    is a number."""
    rows = list(csv.reader(io.StringIO(content)))
    for cell in (c for row in rows for c in row):
        if cell.startswith(("=", "+", "-", "@", "\t", "\r")):
            float(cell)
    return {int(r["number"]): r for r in csv.DictReader(io.StringIO(content))}


FORMULAS = ("=1+1", "+1", "-1+cmd", "@SUM(A1)", "\tx", "\rx", "x\r=1+1")


def test_every_formula_start_is_neutralised(crafted: Any) -> None:
    """Trial i's reason and arch_id are FORMULAS[i]: each cell that starts a formula gets its
    apostrophe, and a carriage return inside a cell cannot start a row of its own."""
    engine = crafted([edit for i, cell in enumerate(FORMULAS) for key in (
        TrialKey.REASON, TrialKey.ARCH_ID) for edit in _trial_attr(i, key, json.dumps(cell))])
    app = create_app(engine.url.render_as_string(hide_password=True), refresh_seconds=1)
    answer = post_callback(app.server.test_client(), callback_body(app, "..csv-download", {
        "csv-button.n_clicks": 1, "study.data": {"name": STUDY},
        "trial-table.filter_query": "", "trial-table.sort_by": []}))
    rows = _csv_rows(answer.response["response"]["csv-download"]["data"]["content"])
    assert len(rows) == TRIALS
    for i, cell in enumerate(FORMULAS):
        shown = cell if cell.startswith("x") else "'" + cell
        assert rows[i]["reason"] == shown and rows[i]["arch_id"] == shown
        assert float(rows[i]["accuracy"]) > 0  # numbers as written


# ----------------------------------------------------------------------------- fast paths
@pytest.mark.parametrize("value", [
    None, Status.COMPLETED, "running", "x" * 64, "x" * 65, "x" * 200, "\x1b[2J", 0, 3, -1, 2**62,
    2**63, 2.0, 2.5, True, float("nan"), float("inf"), [], {}, {"params": 1},
    {"params": -1}, {"params": True}, {"params": float("inf")}, {"params": 1, "parts": []},
    {"params": 1, "parts": {"a": 1}}, {"madds": "1"}, {"params_matrix": None}, ["a"],
])
@pytest.mark.parametrize("key", sorted(PAGE_KEYS))
def test_the_study_pages_checks_agree_with_studies_stored(key: str, value: Any) -> None:
    """The study page checks a column of 10,000 trials quickly; it accepts a value exactly
    where ``studies.store.trial_attrs`` does (which it falls back to)."""
    from dashboard.data import _typed

    try:
        trial_attrs(STUDY, 0, {key: value})
    except StoredValueError:
        expected = False
    else:
        expected = True
    try:
        _typed(STUDY, key)(value)
    except StoredValueError:
        assert not expected
    else:
        assert expected


@pytest.mark.parametrize("text", [
    '"plain"', '"with \\" quote"', '"a"b"', '"\x01"', "12", "012", "-3", "1" * 18, "1" * 19,
    "1" * 5000, "1e400", "NaN", "[1, 2]", "[" * 33 + "]" * 33, "[" * 32 + "]" * 32,
    '{"a": ' * 40 + "1" + "}" * 40, '"' + "x" * 200_000 + '"', "{oops", "", " ", "true",
    '{"a": 99999999999999999999}', '{"a": "9999999999999999999 in a string"}',
])
def test_the_fast_decoding_agrees_with_studies_stored(text: str) -> None:
    from dashboard._sql import _decode
    from studies.store import loads

    try:
        expected = loads(text, study=STUDY, key="k")
    except StoredValueError:
        with pytest.raises(StoredValueError):
            _decode(text, STUDY, "k")
    else:
        got = _decode(text, STUDY, "k")
        assert got == expected or (got != got and expected != expected)  # NaN


def test_names_of_the_studies_stay_text(crafted: Any) -> None:
    """A study name with control characters and markup reads as text, and the pages answer."""
    name = "evil\x1b[2J\u202e<script>alert(1)</script>/../../etc"
    engine = crafted([(f"UPDATE studies SET study_name = ? WHERE study_name = '{OTHER}'",
                       (name,))])
    assert study_names(engine) == [STUDY, name]
    app = create_app(engine.url.render_as_string(hide_password=True), refresh_seconds=1)
    client = app.server.test_client()
    _ok(first_render(client, app, study_href(name)))
    _ok(first_render(client, app, "/study/..%2F..%2Fetc%2Fpasswd"))
    with pytest.raises(NasError, match="Unknown study"):
        study_info(engine, "../../etc/passwd")


# ----------------------------------------------------------------------------- markup
@pytest.fixture(scope="module")
def markup(base: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, MarkupStudy]:
    """A copy of the base database with the markup study written into it by another tool."""
    db = tmp_path_factory.mktemp("markup") / "studies.db"
    shutil.copyfile(base, db)
    url = f"sqlite:///{db}"
    return url, write_markup_study(url)


def test_markup_reads_as_the_text_it_is(markup: tuple[str, MarkupStudy]) -> None:
    """Every stored string reads as written; only the space, which nas cannot use, is refused,
    with one line naming it, and only exports need it."""
    url, m = markup
    engine = open_readonly(url)
    try:
        rows = {r["name"]: r for r in list_studies(engine)[1].to_dict("records")}
        assert rows[m.name]["unreadable"] is None and rows[m.name]["task"] == m["task"]
        info = study_info(engine, m.name)
        assert info.objectives == ("accuracy", "params", m["objective"])
        assert info.spec is not None and info.spec.name == m.name and info.task == m["task"]
        _one_line(info.space_problem, f"`{StudyKey.SPACE}`", m["knob"])
        data = load_study(engine, info)
        assert data.knobs == {m["knob"]: m["knob"], m["width"]: m["width"]}
        trials = data.trials.set_index("number")
        assert trials.unreadable.isna().all()
        assert set(trials.reason) == {m["reason"]} and set(trials.arch_id) == {m["archid"]}
        assert list(trials[m["knob"]]) == [m["choiceA"], m["choiceB"]] * 3
        trial = load_trial(engine, info, 0)
        assert trial["arch"][m["archkey"]] == m["archvalue"]
        assert trial["train"][m["trainkey"]] == m["trainvalue"]
        assert trial["params"] == {m["knob"]: m["choiceA"], m["width"]: 2}
        assert m["part"] in trial["cost"]["parts"]
        assert {e["metric"] for e in trial["epochs"]} == {m["metric"]}
        assert trial["attrs"][TrialKey.CHECKPOINT] == m["checkpoint"]
    finally:
        engine.dispose()


def _figures(tree: Any) -> Iterator[dict[str, Any]]:
    """Every plotly figure (a mapping of ``data`` and ``layout``) in a callback's answer."""
    if isinstance(tree, dict):
        if "data" in tree and "layout" in tree:
            yield tree
            return
        tree = list(tree.values())
    if isinstance(tree, list):
        for item in tree:
            yield from _figures(item)


def _figure_texts(figure: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A figure's strings: those plotly renders with its HTML subset, and those it draws as
    plain text (the tick labels of a parallel coordinates axis)."""
    figure = json.loads(json.dumps(figure))  # a copy to take the plain texts out of
    plain = [label for trace in figure["data"] if trace.get("type") == "parcoords"
             for dim in trace.get("dimensions") or [] for label in dim.pop("ticktext", [])]
    return list(_strings(figure)), plain


def _strings(tree: Any) -> Iterator[str]:
    if isinstance(tree, str):
        yield tree
    elif isinstance(tree, dict):
        for value in tree.values():
            yield from _strings(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from _strings(item)


def _answers(client: Any, app: Any, m: MarkupStudy) -> list[Any]:
    """The studies page, the study page, each of its views, its comparison with the engine's
    study both ways and each trial's page, as the browser opens them."""
    results = list(first_render(client, app, "/"))
    results += first_render(client, app, study_href(m.name))
    results += [answer for _, answer in open_every_view(client, app, m.name, m["knob"])]
    for this, other in ((m.name, STUDY), (STUDY, m.name)):
        results.append(post_callback(client, callback_body(app, "compare.figure", {
            "study.data": {"name": this}, "compare-with.value": other,
            "pareto-x.value": "params", "pareto-y.value": "accuracy"},
            changed="compare-with.value")))
    for number in range(6):
        results += first_render(client, app, trial_href(m.name, number))
    return results


def test_markup_draws_as_text(markup: tuple[str, MarkupStudy], one_line_logs: None) -> None:
    """The study page, its views and its trial pages answer and draw; no figure text that plotly
    renders as HTML holds a raw tag of the markup, each holds it escaped, and the one text
    plotly draws as plain text holds it as written; the components hold it as text, none as
    HTML or markdown; the exports are refused with the space's line."""
    url, m = markup
    app = create_app(url, refresh_seconds=1)
    client = app.server.test_client()
    results = _answers(client, app, m)
    _ok(results)
    figures = [_figure_texts(f) for r in results for f in _figures(r.response)]
    texts = [t for rendered, _ in figures for t in rendered]
    assert len(figures) > 12 and not [t for t in texts if any(tag in t for tag in TAGS)]
    for place in ("study", "knob", "width", "choiceA", "choiceB", "objective", "reason",
                  "archid", "metric", "part"):
        shown = html.escape(m[place], quote=False)
        assert any(shown in t for t in texts), place
    plain = {t for _, texts in figures for t in texts}  # drawn as plain text: as written
    assert plain == {m["choiceA"], m["choiceB"]}, plain
    pages = json.dumps([r.response for r in results])
    assert "dangerously_allow_html" not in pages
    for r in results:
        for c in components(r.response):
            assert c["type"] != "Markdown", c
            if c["type"] == "DataTable":
                assert [col["id"] for col in c["props"].get("columns") or []
                        if col.get("presentation") == "markdown"] in ([], ["number"])
    table = next(r for r in results if r.output.startswith("..trial-table.data"))
    cells = table.response["response"]["trial-table"]["data"]
    assert [row[m["knob"]] for row in cells] == [m["choiceA"], m["choiceB"]] * 3
    assert {row["reason"] for row in cells} == {m["reason"]}
    assert all(re.fullmatch(r"\[\d\](\(/study/[^)]*/trial/\d\))", row["number"]) for row in cells)
    for place in ("task", "objective", "archkey", "archvalue", "trainkey", "trainvalue", "part",
                  "checkpoint", "study"):
        assert json.dumps(m[place])[1:-1] in pages, place  # as a component's text
    # Exports need the space: refused with its line (and no download), the study drawn.
    line = " ".join(str(study_info(open_readonly(url), m.name).space_problem).split())
    assert json.dumps(line)[1:-1] in pages  # beside the Pareto set's button and the trial's
    request = callback_body(app, "..trial-download", {"trial.data": {"name": m.name,
                                                                     "number": 0}},
                            changed='{"format":"yaml","type":"export"}.n_clicks')
    request["inputs"][0] = [{"id": {"format": "yaml", "type": "export"},
                             "property": "n_clicks", "value": 1}]
    refused = post_callback(client, request)
    _ok([refused])
    assert "trial-download" not in refused.response["response"]
    assert refused.response["response"]["trial-message"]["children"] == line
