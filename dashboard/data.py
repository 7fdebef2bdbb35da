"""What the dashboard reads: SQL queries against Optuna's tables and ``nas_epochs``, read-only.

Every view queries only what it needs with SQLAlchemy Core (a 10,000-trial study would take
seconds to materialise through ``optuna.load_study``), and returns pandas DataFrames or plain
dicts. The engine cannot write and creates nothing (``studies.storage.read_only_engine_kwargs``):
SQLite is opened read-only, also in a folder the dashboard may not write (and reads a
write-ahead-logged database while the driver writes it, without "database is locked");
PostgreSQL and MySQL sessions are set read-only. Each read runs in one snapshot
(one SQLite read transaction, or PostgreSQL's repeatable read), so a trial and its values agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import optuna
import pandas as pd
import sqlalchemy as sa
from optuna.distributions import (
    BaseDistribution,
    json_to_distribution,
)
from sqlalchemy.engine import Connection, Engine

from dashboard import _sql as sql
from studies.keys import Status, StudyKey, TrialKey
from studies.storage import (
    StorageError,
    epochs_table,
    open_storage,
    read_only_engine_kwargs,
    resolve_storage_url,
    session,
)

__all__ = [
    "FIXED_COLUMNS",
    "STATUS_OF_STATE",
    "UNFINISHED",
    "StudyData",
    "StudyInfo",
    "fingerprint",
    "list_studies",
    "load_curves",
    "load_promotion",
    "load_study",
    "load_trial",
    "open_readonly",
    "readonly_optuna_storage",
    "study_info",
    "study_names",
]

#: Columns of :attr:`StudyData.trials` besides the objectives and the knobs.
FIXED_COLUMNS = ("number", "state", "status", "reason", "arch_id", "epochs_reached",
                 "cost_params", "cost_madds", "started", "completed", "duration_s")
# The scalar trial attributes the study views show, and their columns (the architecture itself
# is read per trial; ``TrialKey.COST`` gives ``cost_params`` and ``cost_madds``).
_SCALAR_ATTRS = {TrialKey.STATUS: "status", TrialKey.REASON: "reason",
                 TrialKey.ARCH_ID: "arch_id", TrialKey.EPOCHS_REACHED: "epochs_reached"}
#: The words of trials that have not finished, beside ``studies.keys.Status``' six.
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
    url = resolve_storage_url(storage_url)
    with session(url):
        engine = sa.create_engine(url, **read_only_engine_kwargs(url))
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("studies"):
                shown = sa.make_url(url).render_as_string(hide_password=True)
                raise StorageError(f"Storage {shown!r} holds no Optuna studies (no `studies` "
                                   "table); point --storage at a study database.")
    return engine


def readonly_optuna_storage(storage_url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage over read-only connections (for code that reads through Optuna's API,
    such as ``studies.export``): it creates no tables and cannot write."""
    return open_storage(storage_url, read_only=True)


# ----------------------------------------------------------------------------- studies
@dataclass(frozen=True)
class StudyInfo:
    """A study's identity, objectives and ``nas.*`` study attributes."""

    study_id: int
    name: str
    objectives: tuple[str, ...]
    directions: tuple[str, ...]  # "minimize" / "maximize", one per objective
    attrs: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.attrs.get(StudyKey.SPEC) or {})

    @property
    def task(self) -> str | None:
        task = self.spec.get("task")
        return task.get("name") if isinstance(task, dict) else task

    @property
    def constraints(self) -> dict[str, float]:
        return dict(self.spec.get("constraints") or {})


def _objective_names(attrs: dict[str, Any], n: int) -> tuple[str, ...]:
    names = attrs.get(StudyKey.OBJECTIVES)
    if isinstance(names, list) and len(names) == n:
        return tuple(str(x) for x in names)
    spec = attrs.get(StudyKey.SPEC)
    names = spec.get("objectives") if isinstance(spec, dict) else None
    if isinstance(names, list) and len(names) == n:
        return tuple(str(o.get("name")) for o in names)
    return tuple(f"objective_{i}" for i in range(n))


def _infos(conn: Connection, where: Any = None) -> list[StudyInfo]:
    s = sql.studies
    query = sa.select(s.c.study_id, s.c.study_name).order_by(s.c.study_id)
    if where is not None:
        query = query.where(where)
    rows = conn.execute(query).all()
    ids = [r.study_id for r in rows]
    directions: dict[int, dict[int, str]] = {i: {} for i in ids}
    d = sql.study_directions
    for r in conn.execute(sa.select(d).where(d.c.study_id.in_(ids))):
        directions[r.study_id][r.objective] = str(r.direction).lower()
    attrs: dict[int, dict[str, Any]] = {i: {} for i in ids}
    for r in conn.execute(sa.select(sql.study_attrs).where(sql.study_attrs.c.study_id.in_(ids))):
        attrs[r.study_id][r.key] = sql.loads(r.value_json)
    out = []
    for r in rows:
        dirs = tuple(d for _, d in sorted(directions[r.study_id].items()))
        out.append(StudyInfo(r.study_id, r.study_name, _objective_names(attrs[r.study_id],
                                                                        len(dirs)),
                             dirs, attrs[r.study_id]))
    return out


def study_names(engine: Engine) -> list[str]:
    """Every study's name, in creation order."""
    with sql.reading(engine) as conn:
        return [r[0] for r in conn.execute(
            sa.select(sql.studies.c.study_name).order_by(sql.studies.c.study_id))]


def study_info(engine: Engine, name: str) -> StudyInfo:
    """The study called ``name``; ``StorageError`` naming the studies there otherwise."""
    with sql.reading(engine) as conn:
        found = _infos(conn, sql.studies.c.study_name == name)
        if found:
            return found[0]
        names = [r[0] for r in conn.execute(sa.select(sql.studies.c.study_name))]
    raise StorageError(f"Unknown study {name!r}; studies in this database: "
                       f"{', '.join(sorted(names)) or 'none'}.")


def list_studies(engine: Engine) -> tuple[list[StudyInfo], pd.DataFrame]:
    """Every study, and a frame with one row per study: trials by status (one column per
    ``studies.keys.Status`` word and per :data:`UNFINISHED` one, by ``TrialKey.STATUS`` or else
    the state), last activity, and each objective's values of the completed trials (columns
    ``study_id``, ``objective``, ``value``) in ``frame.attrs["values"]``, for the caller's best
    values and hypervolume."""
    t, v = sql.trials, sql.trial_values
    with sql.reading(engine) as conn:
        infos = _infos(conn)
        states = pd.DataFrame(conn.execute(
            sa.select(t.c.study_id, t.c.state, sa.func.count().label("n"),
                      sa.func.max(t.c.datetime_start).label("started"),
                      sa.func.max(t.c.datetime_complete).label("completed"))
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
    rows = []
    words = (*Status.ALL, *UNFINISHED)
    for info in infos:
        mine = states[states.study_id == info.study_id]
        counts = dict.fromkeys(words, 0)
        unlabelled = {str(s).lower(): int(n) for s, n in zip(mine.state, mine.n, strict=True)}
        labelled = statuses[statuses.study_id == info.study_id]
        for state, text, n in zip(labelled.state, labelled.status, labelled.n, strict=True):
            state = str(state).lower()
            word = sql.loads(text)
            if state in UNFINISHED or word not in Status.ALL:
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
            "last_activity": max(stamps) if stamps else None,
        })
    frame = pd.DataFrame(rows, columns=["study_id", "name", "task", "trials", *words,
                                        "last_activity"])
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
    """

    info: StudyInfo
    trials: pd.DataFrame
    knobs: dict[str, str]
    distributions: dict[str, BaseDistribution]
    version: str = ""

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
    with sql.reading(engine) as conn:
        n, last_id, finished, last_done = conn.execute(
            sa.select(sa.func.count(), sa.func.max(t.c.trial_id),
                      sa.func.sum(sa.case((sql.as_text(t.c.state).in_(_FINISHED), 1),
                                          else_=0)),
                      sa.func.max(t.c.datetime_complete))
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


def _wide_attrs(conn: Connection, mine: Any) -> pd.DataFrame:
    """The scalar ``nas.*`` attributes and ``TrialKey.COST``'s params and MAdds, one row per
    trial."""
    t, a = sql.trials, sql.trial_attrs
    columns = [sql.pivot(a.c.key == key, a.c.value_json).label(name)
               for key, name in _SCALAR_ATTRS.items()]
    is_cost = a.c.key == TrialKey.COST
    params = sql.json_number(a.c.value_json, "params", conn.dialect.name)
    if params is not None:  # the database parses the cost JSON (0.5 s in Python for 10,000)
        madds = sql.json_number(a.c.value_json, "madds", conn.dialect.name)
        columns += [sql.pivot(is_cost, params).label("cost_params"),
                    sql.pivot(is_cost, madds).label("cost_madds")]
    else:
        columns.append(sql.pivot(is_cost, a.c.value_json).label("cost"))
    names = [c.name for c in columns]
    df = sql.frame(conn, sa.select(a.c.trial_id, *columns).join(t, t.c.trial_id == a.c.trial_id)
                .where(mine, a.c.key.in_([*_SCALAR_ATTRS, TrialKey.COST]))
                .group_by(a.c.trial_id), ["trial_id", *names])
    for name in _SCALAR_ATTRS.values():
        df[name] = sql.scalars(df[name])
    if "cost" in df:
        costs = [sql.loads(x) if isinstance(x, str) else None for x in df.pop("cost")]
        for part in ("params", "madds"):
            df[f"cost_{part}"] = [c.get(part) if isinstance(c, dict) else None for c in costs]
    for column in ("cost_params", "cost_madds"):
        df[column] = pd.to_numeric(df[column], errors="coerce").astype(float)
    return df.set_index("trial_id")


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


def _wide_params(conn: Connection, mine: Any) -> tuple[pd.DataFrame, dict[str, BaseDistribution]]:
    """Parameters in external representation (a categorical one is stored as its choice's
    index), one column per parameter, one row per trial; and each parameter's distribution."""
    t, p = sql.trials, sql.trial_params
    joined = sa.select().select_from(p).join(t, t.c.trial_id == p.c.trial_id).where(mine)
    kinds = conn.execute(joined.with_only_columns(p.c.param_name, p.c.distribution_json)
                         .distinct()).all()
    by_name: dict[str, list[str]] = {}
    for name, text in kinds:
        by_name.setdefault(str(name), []).append(str(text))
    simple = sorted(n for n, texts in by_name.items() if len(texts) == 1)
    columns = [sql.pivot(p.c.param_name == n, p.c.param_value).label(f"p{i}")
               for i, n in enumerate(simple)]
    df = sql.frame(conn, joined.with_only_columns(p.c.trial_id, *columns).group_by(p.c.trial_id),
                ["trial_id", *simple]).set_index("trial_id")
    distributions: dict[str, BaseDistribution] = {}
    for name in simple:
        dist = distributions[name] = json_to_distribution(by_name[name][0])
        df[name] = sql.external(df[name], dist)
    mixed = sorted(set(by_name) - set(simple))  # a parameter whose distribution changed
    if mixed:
        rows = conn.execute(joined.with_only_columns(
            p.c.trial_id, p.c.param_name, p.c.param_value, p.c.distribution_json)
            .where(p.c.param_name.in_(mixed))).all()
        for name in mixed:
            df[name] = pd.Series(dtype=object)
            distributions[name] = json_to_distribution(by_name[name][-1])
        for trial_id, name, value, text in rows:
            df.loc[trial_id, name] = sql.external(pd.Series([value]), json_to_distribution(text))[0]
    return df, distributions


def load_study(engine: Engine, info: StudyInfo, version: str = "") -> StudyData:
    """Every trial of the study with what the study page shows (see :class:`StudyData`)."""
    t = sql.trials
    mine = t.c.study_id == info.study_id
    with sql.reading(engine) as conn:
        df = sql.frame(conn, sa.select(t.c.trial_id, t.c.number, t.c.state, t.c.datetime_start,
                                    t.c.datetime_complete).where(mine),
                    ["trial_id", "number", "state", "started", "completed"])
        values = _wide_values(conn, mine, len(info.objectives))
        attrs = _wide_attrs(conn, mine)
        params, dists = _wide_params(conn, mine)
    df = df.set_index("trial_id")
    df["state"] = df.state.astype(str).str.lower()
    df["started"] = pd.to_datetime(df.started)
    df["completed"] = pd.to_datetime(df.completed)
    df["duration_s"] = (df.completed - df.started).dt.total_seconds()
    df = df.join(attrs)
    for column in ("status", "reason", "arch_id", "epochs_reached"):
        df[column] = df[column].astype(object) if column in df else None
    df["status"] = df.status.where(df.status.notna(), df.state.map(STATUS_OF_STATE))
    for i, name in enumerate(info.objectives):
        df[name] = values[f"v{i}"] if f"v{i}" in values else float("nan")
        df[name] = df[name].astype(float)
    taken = set(FIXED_COLUMNS) | set(info.objectives)
    knobs = {(f"param:{p}" if p in taken else p): p for p in params.columns}
    for column, param in knobs.items():
        df[column] = params[param].reindex(df.index).astype(object)
    df = df.reset_index().sort_values("number", kind="stable").reset_index(drop=True)
    columns = [*FIXED_COLUMNS, *info.objectives, *knobs]
    return StudyData(info, df[["trial_id", *columns]], knobs,
                     {c: dists[p] for c, p in knobs.items()}, version)


def load_curves(engine: Engine, info: StudyInfo) -> pd.DataFrame:
    """Every trial's learning curve: its intermediate values (the metric reported after each
    epoch), as rows (number, step, value) ordered by trial and step."""
    t, i = sql.trials, sql.trial_intermediate
    with sql.reading(engine) as conn:
        df = sql.frame(conn, sa.select(t.c.number, i.c.step, i.c.intermediate_value,
                                       i.c.intermediate_value_type)
                       .join(i, i.c.trial_id == t.c.trial_id)
                       .where(t.c.study_id == info.study_id),
                       ["number", "step", "value", "type"])
    df["value"] = sql.with_infinities(df.value, df.type)
    return df.drop(columns="type").sort_values(["number", "step"], kind="stable").reset_index(
        drop=True)


def load_promotion(engine: Engine, info: StudyInfo) -> pd.DataFrame:
    """A promoted study's links to its source (``nas promote``): rows number (the promoted
    trial), source_trial and proxy (its accuracy in the source study)."""
    t, a = sql.trials, sql.trial_attrs
    keys = (TrialKey.SOURCE_TRIAL, TrialKey.SOURCE_VALUE)
    with sql.reading(engine) as conn:
        df = sql.frame(conn, sa.select(t.c.number, a.c.key, a.c.value_json)
                       .join(a, a.c.trial_id == t.c.trial_id)
                       .where(t.c.study_id == info.study_id, a.c.key.in_(keys)),
                       ["number", "key", "value"])
    wide = df.assign(value=[sql.loads(v) for v in df.value]).pivot_table(
        index="number", columns="key", values="value", aggfunc="first")
    wide = wide.reindex(columns=list(keys)).dropna()
    return pd.DataFrame({"number": wide.index.to_numpy(dtype=int),
                         "source_trial": wide[keys[0]].to_numpy(dtype=int),
                         "proxy": wide[keys[1]].to_numpy(dtype=float)})


# ----------------------------------------------------------------------------- one trial
def load_trial(engine: Engine, info: StudyInfo, number: int) -> dict[str, Any]:
    """One trial: state, values, parameters, every user attribute, per-epoch rows (from
    ``nas_epochs``) and intermediate values; ``StorageError`` for an unknown number."""
    t = sql.trials
    with sql.reading(engine) as conn:
        row = conn.execute(sa.select(t).where(t.c.study_id == info.study_id,
                                              t.c.number == number)).first()
        if row is None:
            n = conn.execute(sa.select(sa.func.count()).select_from(t)
                             .where(t.c.study_id == info.study_id)).scalar() or 0
            span = f"0-{n - 1}" if n else "none yet"
            raise StorageError(f"Unknown trial {number} of study {info.name!r}; its trials "
                               f"are {span}.")
        trial_id = row.trial_id
        v, p = sql.trial_values, sql.trial_params
        values = {r.objective: (sql.INFINITIES.get(r.value_type, r.value))
                  for r in conn.execute(sa.select(v).where(v.c.trial_id == trial_id))}
        params = pd.DataFrame(conn.execute(
            sa.select(p.c.trial_id, p.c.param_name, p.c.param_value, p.c.distribution_json)
            .where(p.c.trial_id == trial_id)).all(),
            columns=["trial_id", "param_name", "param_value", "distribution_json"])
        attrs = {r.key: sql.loads(r.value_json) for r in conn.execute(
            sa.select(sql.trial_attrs).where(sql.trial_attrs.c.trial_id == trial_id))}
        steps = [(r.step, sql.INFINITIES.get(r.intermediate_value_type, r.intermediate_value))
                 for r in conn.execute(sa.select(sql.trial_intermediate)
                                       .where(sql.trial_intermediate.c.trial_id == trial_id)
                                       .order_by(sql.trial_intermediate.c.step))]
        epochs: list[dict[str, Any]] = []
        if sa.inspect(conn).has_table(epochs_table.name):
            epochs = [dict(r._mapping) for r in conn.execute(
                sa.select(epochs_table).where(epochs_table.c.study_name == info.name,
                                              epochs_table.c.trial_number == number)
                .order_by(epochs_table.c.epoch))]
    wide, _ = sql.decode_params(params)
    param_values = {str(k): v for k, v in wide.iloc[0].items()} if len(wide) else {}
    for e in epochs:
        e.pop("id", None)
        e["extra"] = sql.loads(e.get("extra")) or {}
    return {
        "number": number, "state": str(row.state).lower(),
        "status": attrs.get(TrialKey.STATUS) or STATUS_OF_STATE.get(str(row.state).lower(),
                                                                    str(row.state).lower()),
        "reason": attrs.get(TrialKey.REASON),
        "values": {name: values.get(i) for i, name in enumerate(info.objectives)},
        "params": param_values, "attrs": attrs,
        "arch": attrs.get(TrialKey.ARCH), "cost": attrs.get(TrialKey.COST),
        "train": attrs.get(TrialKey.TRAIN), "arch_id": attrs.get(TrialKey.ARCH_ID),
        "epochs": epochs, "intermediate": steps,
        "started": row.datetime_start, "completed": row.datetime_complete,
    }
