"""What the dashboard reads: SQL queries against Optuna's tables and ``nas_epochs``, read-only.

Every view queries only what it needs with SQLAlchemy Core (a 10,000-trial study would take
seconds to materialise through ``optuna.load_study``), and returns pandas DataFrames or plain
dicts. The engine cannot write and creates nothing (``studies.store.read_only_engine``):
SQLite is opened read-only, also in a folder the dashboard may not write (and reads a
write-ahead-logged database while the driver writes it, without "database is locked");
PostgreSQL and MySQL sessions are set read-only. Each read runs in one snapshot
(one SQLite read transaction, or PostgreSQL's repeatable read), so a trial and its values agree.

The database is a trust boundary (``studies.store.stored``): teammates and other tools write to
it, so every stored value is parsed by its rules before it is used. A study whose
values do not parse is listed as unreadable, with the one-line reason, while the others show,
and ``study_info`` raises that reason; a search space that does not parse (another tool's knob
names) leaves the study readable, its exports refused with that line. A trial whose value does
not parse keeps its row on the study page, the field blank and the key named in its
``unreadable`` column; ``load_trial`` raises the reason, naming study, trial and key.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
import pandas as pd
import sqlalchemy as sa
from optuna.distributions import BaseDistribution
from sqlalchemy.engine import Connection, Engine

from dashboard import _sql as sql
from studies.store import (
    SamplerKey,
    Status,
    StorageError,
    StoredValueError,
    StudyAttrs,
    StudyKey,
    StudyStore,
    TrialKey,
    epochs_table,
    read_epochs,
    read_only_engine,
    reading,
    stored,
)

if TYPE_CHECKING:
    from studies.spec import StudySpec

__all__ = [
    "FIXED_COLUMNS",
    "STATUS_OF_STATE",
    "UNFINISHED",
    "StudyData",
    "StudyInfo",
    "fingerprint",
    "list_studies",
    "load_convergence",
    "load_curves",
    "load_front",
    "load_promotion",
    "load_rest",
    "load_study",
    "load_trial",
    "open_readonly",
    "readonly_optuna_storage",
    "seed_noise",
    "study_info",
    "study_names",
    "trial_state",
]

#: Columns of :attr:`StudyData.trials` besides the objectives and the knobs.
FIXED_COLUMNS = ("number", "state", "status", "reason", "arch_id", "epochs_reached",
                 "cost_params", "cost_madds", "started", "completed", "duration_s", "unreadable")
# Columns of the trial table and its rows beside those: no objective may take their names.
_RESERVED = frozenset({*FIXED_COLUMNS, "trial_id", "pareto", "id"})
# The scalar trial attributes the study views show, and their columns (the architecture itself
# is read per trial; ``TrialKey.COST`` gives ``cost_params`` and ``cost_madds``).
_SCALAR_ATTRS = {TrialKey.STATUS: "status", TrialKey.REASON: "reason",
                 TrialKey.ARCH_ID: "arch_id", TrialKey.EPOCHS_REACHED: "epochs_reached"}
#: The words of trials that have not finished, beside ``studies.store.Status``' six.
UNFINISHED = ("running", "waiting")
#: A trial's status where it has no ``TrialKey.STATUS`` (a study not made by nas, a trial
#: still running): its Optuna state in ``Status``' words, so that a page never shows "pruned"
#: beside "stopped" for the same thing.
STATUS_OF_STATE = {"complete": Status.COMPLETED, "pruned": Status.STOPPED,
                   "fail": Status.FAILED, "running": "running", "waiting": "waiting"}


# ----------------------------------------------------------------------------- the engine
def open_readonly(storage_url: str | None = None) -> Engine:
    """A read-only engine on the study database (resolved as ``nas`` resolves ``--storage``).

    Raises:
        StorageError: the URL is malformed, the SQLite file is missing, the server cannot be
            reached, or the database holds no Optuna tables.
    """
    return read_only_engine(storage_url)


def readonly_optuna_storage(storage_url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage over read-only connections (for code that reads through Optuna's API,
    such as ``studies.export``): it creates no tables and cannot write."""
    return StudyStore.open(storage_url, read_only=True).storage


# ----------------------------------------------------------------------------- studies
@dataclass(frozen=True)
class StudyInfo:
    """A study's identity, objectives and ``nas.*`` study attributes: ``stored`` as
    ``studies.store.stored`` types them, ``attrs`` as decoded. A study whose stored values do not
    parse has no ``stored`` but a ``problem`` (the error naming the value): the listing shows
    it as unreadable, and :meth:`check` raises it. A search space that does not parse is
    ``space_problem`` alone (``stored.space`` is then None)."""

    study_id: int
    name: str
    objectives: tuple[str, ...]
    directions: tuple[str, ...]  # "minimize" / "maximize", one per objective
    attrs: dict[str, Any] = field(default_factory=dict, compare=False)
    stored: StudyAttrs | None = field(default=None, compare=False)
    problem: StoredValueError | None = field(default=None, compare=False, repr=False)
    #: Why the stored search space does not parse (another tool's knob names, say): the study
    #: shows, without a space; only what needs one (its exports) is refused with this line.
    space_problem: StoredValueError | None = field(default=None, compare=False, repr=False)

    def check(self) -> None:
        """Raise the reason the study's stored values do not parse, if they do not."""
        if self.problem is not None:
            raise self.problem.with_traceback(None)

    @property
    def unreadable(self) -> str | None:
        """Why the study's stored values do not parse, in one line; None when they do."""
        return None if self.problem is None else " ".join(str(self.problem).split())

    @property
    def spec(self) -> StudySpec | None:
        return self.stored.spec if self.stored is not None else None

    @property
    def task(self) -> str | None:
        return self.stored.task if self.stored is not None else None

    @property
    def constraints(self) -> dict[str, float]:
        return dict(self.spec.constraints) if self.spec is not None else {}

    @property
    def reference(self) -> list[float | None] | None:
        """The stored hypervolume reference point (raw units), if any."""
        ref = self.stored.reference if self.stored is not None else None
        return list(ref) if ref is not None else None


def _directions(name: str, rows: Sequence[tuple[Any, Any]]) -> tuple[str, ...]:
    """The study's objective directions in objective order (``rows``: objective, direction)."""
    words = {str(d).lower() for _, d in rows}
    if not rows:
        raise StoredValueError(name, "study_directions", "is missing (the study has no "
                                                         "objectives)")
    if not words <= {"minimize", "maximize"}:
        odd = sorted(words - {"minimize", "maximize"})[0]
        raise StoredValueError(name, "study_directions.direction", "must be MINIMIZE or "
                               f"MAXIMIZE, but is {stored.inert(odd[:64]).upper()!r}")
    order = sorted((o, d) for o, d in rows if isinstance(o, int) and not isinstance(o, bool))
    if [o for o, _ in order] != list(range(len(rows))):
        raise StoredValueError(name, "study_directions.objective", "must number the objectives "
                               f"0 to {len(rows) - 1}, each once")
    return tuple(str(d).lower() for _, d in order)


def _check_objectives(name: str, objectives: Sequence[str]) -> None:
    """Objective names become columns of the trial table beside its own: each must be new."""
    seen: set[str] = set()
    for objective in objectives:
        if objective in _RESERVED or objective in seen or objective.startswith("param:"):
            raise StoredValueError(name, StudyKey.OBJECTIVES, f"names the objective "
                                   f"{stored.inert(objective[:64])!r} twice or as a column of "
                                   "the trial table's own")
        seen.add(objective)


def _info(study_id: int, name: str, directions: Sequence[tuple[Any, Any]],
          texts: Sequence[tuple[Any, Any]], *, full: bool) -> StudyInfo:
    """One study's info from its rows (``texts``: its user attributes' key and JSON text).
    A search space that does not parse is the study's ``space_problem``, not its ``problem``:
    the pages draw without it (only exports need it, and say that line)."""
    raw: dict[str, Any] = {}
    dirs: tuple[str, ...] = ()
    space_problem = None
    try:
        dirs = _directions(name, directions)
        for key, text in texts:
            try:
                raw[str(key)] = stored.loads(text, study=name, key=str(key))
            except StoredValueError as exc:
                if str(key) != StudyKey.SPACE:
                    raise
                space_problem = exc.with_traceback(None)
        try:
            attrs = stored.study_attrs(name, raw, len(dirs), full=full and not space_problem)
        except StoredValueError as exc:
            if exc.key != StudyKey.SPACE:
                raise
            space_problem = exc.with_traceback(None)
            attrs = stored.study_attrs(name, raw, len(dirs), full=False)
        _check_objectives(name, attrs.objectives)
    except StoredValueError as exc:
        return StudyInfo(study_id, name, tuple(f"objective_{i}" for i in range(len(dirs))),
                         dirs, raw, problem=exc.with_traceback(None))
    return StudyInfo(study_id, name, attrs.objectives, dirs, raw, attrs,
                     space_problem=space_problem)


def _infos(conn: Connection, where: Any = None, *, full: bool = True) -> list[StudyInfo]:
    """The studies (those ``where`` selects), each typed by ``studies.store.stored`` (``full``: with
    its search space) or marked unreadable."""
    s = sql.studies
    query = sa.select(s.c.study_id, s.c.study_name).order_by(s.c.study_id)
    if where is not None:
        query = query.where(where)
    rows = conn.execute(query).all()
    ids = [r.study_id for r in rows]
    directions: dict[int, list[tuple[Any, Any]]] = {i: [] for i in ids}
    d = sql.study_directions
    for r in conn.execute(sa.select(d.c.study_id, d.c.objective, d.c.direction)
                          .where(d.c.study_id.in_(ids))):
        directions.setdefault(r.study_id, []).append((r.objective, r.direction))
    texts: dict[int, list[tuple[Any, Any]]] = {i: [] for i in ids}
    a = sql.study_attrs
    for r in conn.execute(sa.select(a.c.study_id, a.c.key, a.c.value_json)
                          .where(a.c.study_id.in_(ids))):
        texts.setdefault(r.study_id, []).append((r.key, r.value_json))
    return [_info(r.study_id, str(r.study_name), directions[r.study_id], texts[r.study_id],
                  full=full) for r in rows]


def study_names(engine: Engine) -> list[str]:
    """Every study's name, in creation order."""
    with reading(engine) as conn:
        return [str(r[0]) for r in conn.execute(
            sa.select(sql.studies.c.study_name).order_by(sql.studies.c.study_id))]


def study_info(engine: Engine, name: str) -> StudyInfo:
    """The study called ``name``, its stored values parsed (its search space too);
    ``StorageError`` naming the studies there when there is none, ``StoredValueError`` when a
    stored value of it does not parse."""
    with reading(engine) as conn:
        found = _infos(conn, sql.studies.c.study_name == name)
        if found:
            found[0].check()
            return found[0]
        names = [str(r[0]) for r in conn.execute(sa.select(sql.studies.c.study_name))]
    raise StorageError(f"Unknown study {stored.inert(name)!r}; studies in this database: "
                       f"{', '.join(stored.inert(n) for n in sorted(names)) or 'none'}.")


def _status_word(text: Any) -> str | None:
    """A stored ``TrialKey.STATUS`` text as one of ``Status``' words, None for anything else."""
    try:
        word = stored.loads(text, study="", key=TrialKey.STATUS)
    except StoredValueError:
        return None
    return word if isinstance(word, str) and word in Status.ALL else None


def list_studies(engine: Engine) -> tuple[list[StudyInfo], pd.DataFrame]:
    """Every study, and a frame with one row per study: trials by status (one column per
    ``studies.store.Status`` word and per :data:`UNFINISHED` one, by ``TrialKey.STATUS`` or else
    the state), last activity, ``unreadable`` (why its stored values do not parse, else None),
    and each objective's values of the completed trials (columns ``study_id``, ``objective``,
    ``value``) in ``frame.attrs["values"]``, for the caller's best values and hypervolume."""
    t, v = sql.trials, sql.trial_values
    with reading(engine) as conn:
        infos = _infos(conn, full=False)
        states = pd.DataFrame(conn.execute(
            sa.select(t.c.study_id, t.c.state, sa.func.count().label("n"),
                      sa.func.max(t.c.datetime_start, type_=sa.String).label("started"),
                      sa.func.max(t.c.datetime_complete, type_=sa.String).label("completed"))
            .group_by(t.c.study_id, t.c.state)).all(),
            columns=["study_id", "state", "n", "started", "completed"])
        statuses = pd.DataFrame(conn.execute(
            sa.select(t.c.study_id, t.c.state, sql.trial_attrs.c.value_json,
                      sa.func.count().label("n"))
            .join(t, t.c.trial_id == sql.trial_attrs.c.trial_id)
            .where(sql.trial_attrs.c.key == TrialKey.STATUS)
            .group_by(t.c.study_id, t.c.state, sql.trial_attrs.c.value_json)).all(),
            columns=["study_id", "state", "status", "n"])
        values = pd.DataFrame(conn.execute(
            sa.select(t.c.study_id, t.c.number, v.c.objective, v.c.value)
            .join(t, t.c.trial_id == v.c.trial_id)
            .where(sql.as_text(t.c.state) == "COMPLETE",
                   sql.as_text(v.c.value_type) == "FINITE")).all(),
            columns=["study_id", "number", "objective", "value"])
    for column in ("number", "objective", "value"):  # SQLite keeps text in a number's column
        values[column] = pd.to_numeric(values[column], errors="coerce")
    values = values.dropna()
    states["started"], states["completed"] = sql.dates(states.started), sql.dates(states.completed)
    rows = []
    words = (*Status.ALL, *UNFINISHED)
    for info in infos:
        mine = states[states.study_id == info.study_id]
        counts = dict.fromkeys(words, 0)
        unlabelled = {str(s).lower(): int(n) for s, n in zip(mine.state, mine.n, strict=True)}
        labelled = statuses[statuses.study_id == info.study_id]
        for state, text, n in zip(labelled.state, labelled.status, labelled.n, strict=True):
            state = str(state).lower()
            word = _status_word(text)
            if state in UNFINISHED or word is None:
                continue  # counted by its state below
            counts[word] += int(n)
            unlabelled[state] -= int(n)
        for state, n in unlabelled.items():
            word = STATUS_OF_STATE.get(state)
            if word is not None:
                counts[word] += n
        stamps = [x for x in (*mine.started, *mine.completed) if pd.notna(x)]
        rows.append({
            "study_id": info.study_id, "name": info.name, "task": info.task,
            "trials": int(mine.n.sum()), **counts,
            "last_activity": max(stamps) if stamps else None, "unreadable": info.unreadable,
        })
    frame = pd.DataFrame(rows, columns=["study_id", "name", "task", "trials", *words,
                                        "last_activity", "unreadable"])
    frame["unreadable"] = pd.Series([i.unreadable for i in infos], index=frame.index,
                                    dtype=object)  # None stays None, not NaN
    frame.attrs["values"] = values
    return infos, frame


# ----------------------------------------------------------------------------- one study
@dataclass(frozen=True)
class StudyData:
    """Every trial of a study as one row: :data:`FIXED_COLUMNS`, one column per objective
    (NaN unless COMPLETE) and one per knob (the trial's parameters, NaN where a conditional
    knob was not drawn), ordered by trial number.

    ``knobs`` maps knob columns to parameter names (a parameter whose name clashes with
    another column is prefixed ``param:``); ``distributions`` holds each knob's distribution.
    ``whole`` is False for :func:`load_front`'s part: no knobs, and reason, arch_id,
    epochs_reached, the times and the completed trials' costs left blank.
    """

    info: StudyInfo
    trials: pd.DataFrame
    knobs: dict[str, str]
    distributions: dict[str, BaseDistribution]
    version: str = ""
    whole: bool = True

    @property
    def objectives(self) -> tuple[str, ...]:
        return self.info.objectives

    def complete(self) -> pd.DataFrame:
        """The COMPLETE trials whose objective values are all finite."""
        df = self.trials[self.trials.state == "complete"]
        if not self.objectives:
            return df
        values = df[list(self.objectives)].to_numpy(dtype=float)
        return df[pd.notna(values).all(axis=1) & (abs(values) != float("inf")).all(axis=1)]


_FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def fingerprint(engine: Engine, study_id: int, name: str) -> str:
    """A cheap summary that changes whenever the study's trials, values or epochs change."""
    t = sql.trials
    with reading(engine) as conn:
        n, last_id, finished, last_done = conn.execute(
            sa.select(sa.func.count(), sa.func.max(t.c.trial_id),
                      sa.func.sum(sa.case((sql.as_text(t.c.state).in_(_FINISHED), 1),
                                          else_=0)),
                      sa.func.max(t.c.datetime_complete, type_=sa.String))
            .where(t.c.study_id == study_id)).one()
        last_attrs = conn.execute(sa.select(sa.func.count()).select_from(sql.trial_attrs)
                                  .where(sql.trial_attrs.c.trial_id == last_id)).scalar()
        running = (sa.select(t.c.trial_id)
                   .where(t.c.study_id == study_id, sql.as_text(t.c.state) == "RUNNING")
                   .scalar_subquery())
        steps = conn.execute(sa.select(sa.func.count()).select_from(sql.trial_intermediate)
                             .where(sql.trial_intermediate.c.trial_id.in_(running))).scalar()
        epochs: int | None = 0
        if sa.inspect(conn).has_table(epochs_table.name):
            epochs = conn.execute(sa.select(sa.func.count()).select_from(epochs_table)
                                  .where(epochs_table.c.study_name == name)).scalar()
    return json.dumps([n, last_id, finished, str(last_done), last_attrs, steps, epochs])


def _typed(study: str, key: str) -> Callable[[Any], Any]:
    """The check of trial attribute ``key``'s decoded value: its value as
    ``studies.store.trial_attrs`` types it, or its ``StoredValueError``. What the engine writes
    (a status word, a short id or reason, a count, a cost of counts) is accepted at once, each
    only where ``trial_attrs`` accepts it (``tests/test_dashboard_trust.py`` holds them to it);
    the rest takes ``trial_attrs`` itself."""
    name = _SCALAR_ATTRS.get(key, "cost")

    def check(value: Any) -> Any:
        if key == TrialKey.STATUS and isinstance(value, str) and value in Status.ALL:
            return value
        if key in (TrialKey.ARCH_ID, TrialKey.REASON) and isinstance(value, str) and (
                len(value) <= 64):
            return value
        if key == TrialKey.EPOCHS_REACHED and type(value) is int and 0 <= value < 2**62:
            return value
        if key == TrialKey.COST and _plain_cost(value):
            return value
        # The verdict only: trial 0 stands for every trial holding this value.
        return getattr(stored.trial_attrs(study, 0, {key: value}), name)

    return check


def _plain_cost(value: Any) -> bool:
    """A cost as the engine writes it: a mapping of finite counts >= 0 and a mapping of parts."""
    if not isinstance(value, dict):
        return False
    for key in ("params", "params_matrix", "madds"):
        count = value.get(key)
        if count is not None and not (type(count) in (int, float) and 0 <= count < 2**62):
            return False
    parts = value.get("parts")
    return parts is None or (isinstance(parts, dict)
                             and all(isinstance(p, dict) for p in parts.values()))


def _notes(index: pd.Index, bad: Mapping[str, pd.Series],
           problems: Mapping[int, list[str]] | None = None) -> np.ndarray:
    """Each trial's ``unreadable`` cell (``index``: their ids, in order): the keys whose stored
    values do not parse (``bad``: a mask by trial id per key; ``problems``: more keys by trial
    id), or None."""
    found: dict[int, list[str]] = {}
    for key, mask in bad.items():
        for trial_id in mask.index[mask.to_numpy(dtype=bool)]:
            found.setdefault(int(trial_id), []).append(key)
    for trial_id, keys in (problems or {}).items():
        found.setdefault(int(trial_id), []).extend(keys)
    notes = np.full(len(index), None, dtype=object)
    if found:  # few trials, if any: looked up by id rather than walking every trial
        ids = list(found)
        at = pd.Index(index).get_indexer(ids)
        for position, trial_id in zip(at, ids, strict=True):
            if position >= 0:
                notes[position] = ", ".join(found[trial_id])
    return notes


def _wide_attrs(conn: Connection, where: Any, study: str,
                keys: Mapping[str, str]) -> tuple[pd.DataFrame, dict[str, pd.Series]]:
    """Trial attributes ``keys`` (key: column) of the trials ``where`` selects, one row per
    trial holding any (indexed by trial id), ``TrialKey.COST`` as its params and MAdds
    (``cost_params``, ``cost_madds``); and per key the mask of the rows whose value does not
    parse (left None). Each distinct text is parsed once (a study's trials share a few costs
    per architecture)."""
    t, a = sql.trials, sql.trial_attrs
    query = sa.select(a.c.trial_id).join(t, t.c.trial_id == a.c.trial_id).where(
        where, a.c.key.in_(list(keys)))
    if len(keys) == 1:  # a trial holds a key once (Optuna's unique constraint): no grouping
        query = query.add_columns(a.c.value_json)
    else:
        query = query.add_columns(*(sql.pivot(a.c.key == key, a.c.value_json).label(f"a{i}")
                                    for i, key in enumerate(keys))).group_by(a.c.trial_id)
    df = sql.frame(conn, query, ["trial_id", *keys.values()]).set_index("trial_id")
    bad: dict[str, pd.Series] = {}
    for key, name in keys.items():
        df[name], mask = sql.scalars(df[name], study=study, key=key, check=_typed(study, key))
        bad[key] = pd.Series(mask, index=df.index)
    if "cost" in df:
        costs = df.pop("cost")
        for part in ("params", "madds"):
            df[f"cost_{part}"] = pd.to_numeric(
                pd.Series([c.get(part) if c is not None else None for c in costs],
                          index=df.index, dtype=object), errors="coerce").astype(float)
    return df, bad


def _wide_values(conn: Connection, mine: Any, n_objectives: int) -> pd.DataFrame:
    """Objective values, one column per objective (``v0``, ``v1``, ...), one row per trial."""
    t, v = sql.trials, sql.trial_values
    columns = []
    for i in range(n_objectives):
        columns += [sql.pivot(v.c.objective == i, v.c.value).label(f"v{i}"),
                    sql.pivot(v.c.objective == i, v.c.value_type).label(f"type{i}")]
    df = sql.frame(conn, sa.select(v.c.trial_id, *columns).join(t, t.c.trial_id == v.c.trial_id)
                .where(mine).group_by(v.c.trial_id),
                ["trial_id", *(c.name for c in columns)])
    for i in range(n_objectives):
        df[f"v{i}"] = sql.with_infinities(df[f"v{i}"], df.pop(f"type{i}"))
    return df.set_index("trial_id")


def _wide_params(conn: Connection, mine: Any, study: str
                 ) -> tuple[pd.DataFrame, dict[str, BaseDistribution], dict[int, list[str]]]:
    """Parameters in external representation (a categorical one is stored as its choice's
    index), one column per parameter, one row per trial; each parameter's distribution; and the
    trials whose parameter does not decode (its distribution or its value), with the keys
    (``param:<name>``): their cells are None, and a parameter none of whose distributions
    decodes has no column."""
    t, p = sql.trials, sql.trial_params
    joined = sa.select().select_from(p).join(t, t.c.trial_id == p.c.trial_id).where(mine)
    kinds = conn.execute(joined.with_only_columns(p.c.param_name, p.c.distribution_json)
                         .distinct()).all()
    parsed: dict[tuple[str, Any], BaseDistribution] = {}  # those that decode
    by_name: dict[str, list[Any]] = {}
    for name, text in kinds:
        by_name.setdefault(str(name), []).append(text)
        with contextlib.suppress(StoredValueError):
            parsed[str(name), text] = sql.distribution(text, study=study, name=str(name))
    simple = sorted(n for n, texts in by_name.items()
                    if len(texts) == 1 and (n, texts[0]) in parsed)
    columns = [sql.pivot(p.c.param_name == n, p.c.param_value).label(f"p{i}")
               for i, n in enumerate(simple)]
    df = sql.frame(conn, joined.with_only_columns(p.c.trial_id, *columns).group_by(p.c.trial_id),
                ["trial_id", *simple]).set_index("trial_id")
    distributions: dict[str, BaseDistribution] = {}
    problems: dict[int, list[str]] = {}

    def unreadable(trial_ids: Any, name: str) -> None:
        for trial_id in trial_ids:
            problems.setdefault(int(trial_id), []).append(f"param:{stored.inert(name)}")

    for name in simple:
        dist = distributions[name] = parsed[name, by_name[name][0]]
        df[name], bad = sql.external(df[name], dist)
        unreadable(df.index[bad], name)
    mixed = sorted(set(by_name) - set(simple))  # a distribution that changed or does not decode
    if mixed:
        rows = sql.frame(conn, joined.with_only_columns(
            p.c.trial_id, p.c.param_name, p.c.param_value, p.c.distribution_json)
            .where(p.c.param_name.in_(mixed)), ["trial_id", "name", "value", "text"])
        for name in mixed:
            good = [parsed[name, x] for x in by_name[name] if (name, x) in parsed]
            if good:
                df[name] = pd.Series(None, index=df.index, dtype=object)
                distributions[name] = good[-1]
        for (name, text), group in rows.groupby(["name", "text"], sort=False, dropna=False):
            if (str(name), text) not in parsed:
                unreadable(group.trial_id, str(name))
                continue
            values, bad = sql.external(group.value, parsed[str(name), text])
            df.loc[group.trial_id.to_numpy(), str(name)] = values.to_numpy()
            unreadable(group.trial_id[bad], str(name))
    return df, distributions, problems


def _numbers(name: str, numbers: pd.Series) -> pd.Series:
    """The trials' numbers as integers; ``StoredValueError`` unless each is a distinct one."""
    values = pd.to_numeric(numbers, errors="coerce")
    if values.isna().any() or (values != values.round()).any() or values.duplicated().any():
        raise StoredValueError(name, "trials.number", "must give each trial its own whole "
                                                      "number")
    return values.astype(np.int64)


#: What the 2-D front needs of each trial beside its row and values (a trial that did not
#: complete is drawn at its cost, ``TrialKey.COST``), and what the other views need.
_FRONT_ATTRS = {TrialKey.STATUS: "status"}
_REST_ATTRS = {TrialKey.REASON: "reason", TrialKey.ARCH_ID: "arch_id",
               TrialKey.EPOCHS_REACHED: "epochs_reached"}
_COST = {TrialKey.COST: "cost"}


@dataclass(frozen=True)
class _FrontRows:
    """What :func:`_read_front` reads, indexed by trial id."""

    trials: pd.DataFrame  # number, state
    values: pd.DataFrame  # v0, v1, ...: the objectives' values
    attrs: pd.DataFrame  # status; cost_params and cost_madds of the trials not COMPLETE
    bad: dict[str, pd.Series]  # by key: the trials whose value does not parse


@dataclass(frozen=True)
class _RestRows:
    """What :func:`_read_rest` reads, indexed by trial id."""

    times: pd.DataFrame  # started, completed as stored
    attrs: pd.DataFrame  # reason, arch_id, epochs_reached
    costs: pd.DataFrame  # cost_params and cost_madds of the COMPLETE trials
    bad: dict[str, pd.Series]
    params: pd.DataFrame
    distributions: dict[str, BaseDistribution]
    problems: dict[int, list[str]]


def _read_front(conn: Connection, info: StudyInfo) -> _FrontRows:
    """Every trial's number, state, objective values and status, and the cost of those that did
    not complete: what the 2-D front draws."""
    t = sql.trials
    mine = t.c.study_id == info.study_id
    trials = sql.frame(conn, sa.select(t.c.trial_id, t.c.number, t.c.state).where(mine),
                       ["trial_id", "number", "state"])
    status, bad = _wide_attrs(conn, mine, info.name, _FRONT_ATTRS)
    cost, bad_cost = _wide_attrs(conn, sa.and_(mine, sql.as_text(t.c.state) != "COMPLETE"),
                                 info.name, _COST)
    return _FrontRows(trials.set_index("trial_id"), _wide_values(conn, mine, len(info.objectives)),
                      status.join(cost, how="outer"), {**bad, **bad_cost})


def _read_rest(conn: Connection, info: StudyInfo) -> _RestRows:
    """What the other views need beside the front's: the trials' times, knobs, reason,
    architecture id and epochs, and the cost of the completed trials."""
    t = sql.trials
    mine = t.c.study_id == info.study_id
    times = sql.frame(conn, sa.select(t.c.trial_id, t.c.datetime_start, t.c.datetime_complete)
                      .where(mine), ["trial_id", "started", "completed"]).set_index("trial_id")
    attrs, bad = _wide_attrs(conn, mine, info.name, _REST_ATTRS)
    costs, bad_cost = _wide_attrs(conn, sa.and_(mine, sql.as_text(t.c.state) == "COMPLETE"),
                                  info.name, _COST)
    params, distributions, problems = _wide_params(conn, mine, info.name)
    return _RestRows(times, attrs, costs, {**bad, **bad_cost}, params, distributions, problems)


def _front_frame(info: StudyInfo, rows: _FrontRows) -> pd.DataFrame:
    """The trials as :class:`StudyData` holds them (trial_id, :data:`FIXED_COLUMNS`, the
    objectives), ordered by number, from the front's rows alone: reason, arch_id and
    epochs_reached None, times NaT, the completed trials' costs NaN."""
    df = rows.trials.copy()
    df["number"] = _numbers(info.name, df.number)
    df["state"] = df.state.astype(str).str.lower()
    df["started"] = df["completed"] = pd.Series(pd.NaT, index=df.index, dtype="datetime64[ns]")
    df["duration_s"] = np.nan
    attrs = rows.attrs.reindex(df.index)
    status = attrs.status.astype(object).where(attrs.status.notna(), None)
    # A trial without a readable status reads its state's word (an odd state: that state).
    status = status.where(status.notna(), df.state.map(STATUS_OF_STATE))
    df["status"] = status.where(status.notna(), df.state)
    for column in ("reason", "arch_id", "epochs_reached"):
        df[column] = pd.Series(None, index=df.index, dtype=object)
    for part in ("cost_params", "cost_madds"):
        df[part] = attrs[part].astype(float)
    df["unreadable"] = pd.Series(_notes(df.index, rows.bad), index=df.index, dtype=object)
    for i, name in enumerate(info.objectives):
        df[name] = rows.values[f"v{i}"].reindex(df.index).astype(float)
    df = df.reset_index().sort_values("number", kind="stable").reset_index(drop=True)
    return df[["trial_id", *FIXED_COLUMNS, *info.objectives]]


def _with_rest(info: StudyInfo, front: pd.DataFrame,
               rest: _RestRows) -> tuple[pd.DataFrame, dict[str, str],
                                         dict[str, BaseDistribution]]:
    """The front's frame with the rest's columns: the trials' times, reason, arch_id, epochs,
    the completed ones' costs, each knob (a column per parameter), and the keys of what does
    not parse added to ``unreadable``; the knob columns and their distributions. Trials the
    rest holds and the front does not (begun between the two reads) are left out."""
    df = front.copy()
    ids = pd.Index(df.trial_id)
    times = rest.times.reindex(ids)
    for column in ("started", "completed"):
        df[column] = pd.Series(sql.dates(times[column]).to_numpy(), index=df.index)
    df["duration_s"] = (df.completed - df.started).dt.total_seconds()
    attrs = rest.attrs.reindex(ids)
    for column in ("reason", "arch_id", "epochs_reached"):
        values = attrs[column].to_numpy(dtype=object)
        df[column] = pd.Series(values, index=df.index, dtype=object).where(pd.notna(values), None)
    costs = rest.costs.reindex(ids)
    for part in ("cost_params", "cost_madds"):
        df[part] = df[part].fillna(pd.Series(costs[part].to_numpy(dtype=float), index=df.index))
    more = _notes(ids, rest.bad, rest.problems)
    df["unreadable"] = pd.Series([", ".join(n for n in pair if isinstance(n, str)) or None
                                  for pair in zip(df.unreadable, more, strict=True)],
                                 index=df.index, dtype=object)
    taken = set(_RESERVED) | set(info.objectives)
    knobs: dict[str, str] = {}
    for param in rest.params.columns:
        column = param
        while column in taken:  # a parameter named as another column: prefixed
            column = f"param:{column}"
        taken.add(column)
        knobs[column] = param
    for column, param in knobs.items():
        df[column] = pd.Series(rest.params[param].reindex(ids).to_numpy(dtype=object),
                               index=df.index, dtype=object)
    return df, knobs, {c: rest.distributions[p] for c, p in knobs.items()}


def _study(info: StudyInfo, front: pd.DataFrame, rest: _RestRows | None,
           version: str) -> StudyData:
    knobs: dict[str, str] = {}
    distributions: dict[str, BaseDistribution] = {}
    if rest is not None:
        front, knobs, distributions = _with_rest(info, front, rest)
    columns = ["trial_id", *FIXED_COLUMNS, *info.objectives, *knobs]
    return StudyData(info, front[columns], knobs, distributions, version,
                     whole=rest is not None)


def load_study(engine: Engine, info: StudyInfo, version: str = "") -> StudyData:
    """Every trial of the study with what the study page shows (see :class:`StudyData`), read
    in one snapshot; a trial's value that does not parse is left None and its key named in
    ``unreadable``."""
    info.check()
    with reading(engine) as conn:
        front, rest = _read_front(conn, info), _read_rest(conn, info)
    return _study(info, _front_frame(info, front), rest, version)


def load_front(engine: Engine, info: StudyInfo, version: str = "") -> StudyData:
    """What the study's 2-D front draws, for its first paint: every trial's row, status and
    objective values, and the cost of those that did not complete (a 100,000-trial study's
    knobs alone are 1.3 million rows). Its ``whole`` is False: no knobs, reason, arch_id,
    epochs or times, no costs of the completed trials; :func:`load_rest` adds them."""
    info.check()
    with reading(engine) as conn:
        front = _read_front(conn, info)
    return _study(info, _front_frame(info, front), None, version)


def load_rest(engine: Engine, front: StudyData) -> StudyData:
    """:func:`load_front`'s trials with the rest of what the study page shows, read in a
    snapshot of its own: as :func:`load_study` reads them, but for a trial that changed
    between the two reads (its newer attributes beside its older values until the page's next
    refresh reloads the study, which its change of fingerprint brings)."""
    if front.whole:
        return front
    with reading(engine) as conn:
        rest = _read_rest(conn, front.info)
    return _study(front.info, front.trials, rest, front.version)


def load_curves(engine: Engine, info: StudyInfo) -> pd.DataFrame:
    """Every trial's learning curve: its intermediate values (the metric reported after each
    epoch), as rows (number, step, value) ordered by trial and step; a row whose number or step
    is not a finite number is left out."""
    t, i = sql.trials, sql.trial_intermediate
    with reading(engine) as conn:
        df = sql.frame(conn, sa.select(t.c.number, i.c.step, i.c.intermediate_value,
                                       i.c.intermediate_value_type)
                       .join(i, i.c.trial_id == t.c.trial_id)
                       .where(t.c.study_id == info.study_id),
                       ["number", "step", "value", "type"])
    df["value"] = sql.with_infinities(df.value, df.type)
    for column in ("number", "step"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    df = df[np.isfinite(df[["number", "step"]].to_numpy(dtype=float)).all(axis=1)]
    df = df.astype({"number": np.int64})
    return df.drop(columns="type").sort_values(["number", "step"], kind="stable").reset_index(
        drop=True)


def load_promotion(engine: Engine, info: StudyInfo) -> pd.DataFrame:
    """A promoted study's links to its source (``nas promote``): rows number (the promoted
    trial), source_trial and proxy (its accuracy in the source study); ``StoredValueError``
    for a link that does not parse."""
    t, a = sql.trials, sql.trial_attrs
    keys = {TrialKey.SOURCE_TRIAL: "source_trial", TrialKey.SOURCE_VALUE: "source_value"}
    with reading(engine) as conn:
        df = sql.frame(conn, sa.select(t.c.number, a.c.key, a.c.value_json)
                       .join(a, a.c.trial_id == t.c.trial_id)
                       .where(t.c.study_id == info.study_id, a.c.key.in_(list(keys))),
                       ["number", "key", "value"])
    links: dict[int, dict[str, Any]] = {}
    for number, key, text in zip(df.number, df.key, df.value, strict=True):
        n = sql.number(number)
        if n is None or not n.is_integer():
            raise StoredValueError(info.name, "trials.number", "must give each trial its own "
                                                               "whole number")
        value = stored.loads(text, study=info.name, key=key, trial=int(n))
        parsed = stored.trial_attrs(info.name, int(n), {key: value})
        links.setdefault(int(n), {})[key] = getattr(parsed, keys[key])
    pairs = [(n, v[TrialKey.SOURCE_TRIAL], v[TrialKey.SOURCE_VALUE]) for n, v in links.items()
             if v.get(TrialKey.SOURCE_TRIAL) is not None
             and v.get(TrialKey.SOURCE_VALUE) is not None]
    return pd.DataFrame({"number": np.array([n for n, _, _ in pairs], dtype=int),
                         "source_trial": np.array([s for _, s, _ in pairs], dtype=int),
                         "proxy": np.array([v for _, _, v in pairs], dtype=float)})


def load_convergence(engine: Engine, info: StudyInfo) -> dict[str, Any] | None:
    """``studies.convergence.convergence_report`` of the study: the default sampler's gain and
    noise recorded with each trial (``SamplerKey``), read by trial number. A value that does
    not parse or is not a finite number at least 0 counts as not recorded, as ``nas status``
    counts it. None where no trial records a gain."""
    from studies.convergence import convergence_report

    info.check()
    t, a = sql.trials, sql.trial_system_attrs
    keys = (SamplerKey.GAIN, SamplerKey.NOISE)
    with reading(engine) as conn:
        numbers = sql.frame(conn, sa.select(t.c.number).where(t.c.study_id == info.study_id),
                            ["number"])
        rows = sql.frame(conn, sa.select(t.c.number, a.c.key, a.c.value_json)
                         .join(a, a.c.trial_id == t.c.trial_id)
                         .where(t.c.study_id == info.study_id, a.c.key.in_(keys)),
                         ["number", "key", "value"])
    attrs: dict[int, dict[str, Any]] = {}
    for number in numbers.number:
        n = sql.number(number)
        if n is not None and n.is_integer():
            attrs.setdefault(int(n), {})
    for number, key, text in zip(rows.number, rows.key, rows.value, strict=True):
        n = sql.number(number)
        if n is None or not n.is_integer() or int(n) not in attrs:
            continue
        try:
            attrs[int(n)][key] = stored.loads(text, study=info.name, key=key, trial=int(n))
        except StoredValueError:
            continue  # not recorded
    ordered = sorted(attrs)
    stops = info.spec is not None and info.spec.budget.until == "converged"
    return convergence_report(ordered, [attrs[n] for n in ordered], stops=stops)


#: :func:`seed_noise`'s columns.
NOISE_COLUMNS = ("source_trial", "seeds", "mean", "std", "min", "max", "within_noise",
                 "neighbour")


def seed_noise(promoted: StudyData, links: pd.DataFrame) -> pd.DataFrame:
    """A seeded promotion's spread (``nas promote --seeds``): one row per source trial trained
    with 2 seeds or more, with :data:`NOISE_COLUMNS`: its number, the seeds completed, the mean,
    sample std, min and max of its promoted accuracy, and ``studies.noise.within_noise``'s
    verdict over those rows (on every objective's mean; the costs' spread is 0) with the
    source trial it does not stand out from (``neighbour``, -1 for none). ``promoted``: the
    promoted study; ``links``: its :func:`load_promotion`. Empty when it has no accuracy or
    no trial with 2 seeds."""
    from studies.noise import noisy_points, spreads

    names = list(promoted.objectives)
    empty = pd.DataFrame({c: pd.Series(dtype=float) for c in NOISE_COLUMNS})
    if "accuracy" not in names or links.empty:
        return empty
    rows = promoted.complete()[["number", *names]].merge(
        links[["number", "source_trial"]], on="number")
    groups = {int(source): group[names].to_numpy(dtype=float).tolist()
              for source, group in rows.groupby("source_trial", sort=True)}
    points = noisy_points(spreads(groups, names).values(), names,
                          list(promoted.info.directions))
    if not points:
        return empty
    kept = [points[s] for s in sorted(points)]
    return pd.DataFrame({
        "source_trial": np.array([p.spread.source_trial for p in kept], dtype=int),
        "seeds": np.array([p.spread.seeds for p in kept], dtype=int),
        **{column: np.array([getattr(p.spread, column) for p in kept], dtype=float)
           for column in ("mean", "std", "min", "max")},
        "within_noise": np.array([p.within_noise for p in kept], dtype=bool),
        "neighbour": np.array([-1 if p.neighbour is None else p.neighbour for p in kept],
                              dtype=int)})


# ----------------------------------------------------------------------------- one trial
def _trial_row(conn: Connection, info: StudyInfo, number: int) -> Any:
    """Trial ``number``'s row (trial_id, state, started, completed as stored);
    ``StorageError`` for an unknown number."""
    t = sql.trials
    row = conn.execute(sa.select(t.c.trial_id, t.c.state,
                                 sa.type_coerce(t.c.datetime_start, sa.String).label("started"),
                                 sa.type_coerce(t.c.datetime_complete, sa.String)
                                 .label("completed"))
                       .where(t.c.study_id == info.study_id, t.c.number == number)).first()
    if row is None:
        n = conn.execute(sa.select(sa.func.count()).select_from(t)
                         .where(t.c.study_id == info.study_id)).scalar() or 0
        span = f"0-{n - 1}" if n else "none yet"
        raise StorageError(f"Unknown trial {number} of study {stored.inert(info.name)!r}; its "
                           f"trials are {span}.")
    return row


def trial_state(engine: Engine, info: StudyInfo, number: int) -> str:
    """Trial ``number``'s Optuna state in lower case (``running``), read without its stored
    values; ``StorageError`` for an unknown number."""
    with reading(engine) as conn:
        return str(_trial_row(conn, info, number).state).lower()


def _stamp(value: Any) -> Any:
    return None if pd.isna(value) else value.to_pydatetime()


def load_trial(engine: Engine, info: StudyInfo, number: int) -> dict[str, Any]:
    """One trial: state, values, parameters, every user attribute, per-epoch rows (from
    ``nas_epochs``) and intermediate values. ``StorageError`` for an unknown number,
    ``StoredValueError`` (naming study, trial and key) for a stored value of it that does not
    parse."""
    info.check()
    v, p, a, im = sql.trial_values, sql.trial_params, sql.trial_attrs, sql.trial_intermediate
    with reading(engine) as conn:
        row = _trial_row(conn, info, number)
        trial_id = row.trial_id
        values = {r.objective: sql.INFINITIES.get(r.value_type, sql.number(r.value))
                  for r in conn.execute(sa.select(v.c.objective, v.c.value, v.c.value_type)
                                        .where(v.c.trial_id == trial_id))}
        params = sql.frame(conn, sa.select(p.c.param_name, p.c.param_value, p.c.distribution_json)
                           .where(p.c.trial_id == trial_id),
                           ["param_name", "param_value", "distribution_json"])
        texts = conn.execute(sa.select(a.c.key, a.c.value_json)
                             .where(a.c.trial_id == trial_id)).all()
        steps = [(r.step, sql.INFINITIES.get(r.intermediate_value_type,
                                             sql.number(r.intermediate_value)))
                 for r in conn.execute(sa.select(im.c.step, im.c.intermediate_value,
                                                 im.c.intermediate_value_type)
                                       .where(im.c.trial_id == trial_id).order_by(im.c.step))
                 if sql.number(r.step) is not None]
    param_values, _ = sql.decode_params(params, study=info.name, trial=number)
    attrs = {str(k): stored.loads(x, study=info.name, key=str(k), trial=number) for k, x in texts}
    parsed = stored.trial_attrs(info.name, number, attrs)
    epochs = read_epochs(engine, info.name, number)  # each row checked as the engine's
    state = str(row.state).lower()
    started, completed = sql.dates(pd.Series([row.started, row.completed], dtype=object))
    return {
        "number": number, "state": state,
        "status": parsed.status or STATUS_OF_STATE.get(state, state),
        "reason": parsed.reason,
        "values": {name: values.get(i) for i, name in enumerate(info.objectives)},
        "params": param_values, "attrs": attrs,
        "arch": parsed.arch, "cost": parsed.cost, "train": parsed.train,
        "arch_id": parsed.arch_id, "epochs": epochs, "intermediate": steps,
        "started": _stamp(started), "completed": _stamp(completed),
    }
