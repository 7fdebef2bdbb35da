"""The SQL side of ``dashboard.data``: Optuna's tables as the dashboard reads them, read
snapshots, and turning rows into frames quickly (10,000 trials are 100,000 rows). Read-only
connections are ``studies.storage.read_only_engine_kwargs``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from optuna.distributions import BaseDistribution, CategoricalDistribution, json_to_distribution
from sqlalchemy.engine import Connection, Engine

from studies.storage import session

# Optuna's tables, as much of them as the dashboard reads (the schema of optuna >= 3). Enumerated
# columns are read as text (see ``as_text``).
_meta = sa.MetaData()
_ID = sa.Integer
studies = sa.Table("studies", _meta, sa.Column("study_id", _ID),
                   sa.Column("study_name", sa.String))
study_directions = sa.Table("study_directions", _meta, sa.Column("study_id", _ID),
                            sa.Column("objective", sa.Integer),
                            sa.Column("direction", sa.String))
study_attrs = sa.Table("study_user_attributes", _meta, sa.Column("study_id", _ID),
                       sa.Column("key", sa.String), sa.Column("value_json", sa.Text))
trials = sa.Table("trials", _meta, sa.Column("trial_id", _ID), sa.Column("number", sa.Integer),
                  sa.Column("study_id", _ID), sa.Column("state", sa.String),
                  sa.Column("datetime_start", sa.DateTime),
                  sa.Column("datetime_complete", sa.DateTime))
trial_values = sa.Table("trial_values", _meta, sa.Column("trial_id", _ID),
                        sa.Column("objective", sa.Integer), sa.Column("value", sa.Float),
                        sa.Column("value_type", sa.String))
trial_params = sa.Table("trial_params", _meta, sa.Column("trial_id", _ID),
                        sa.Column("param_name", sa.String), sa.Column("param_value", sa.Float),
                        sa.Column("distribution_json", sa.Text))
trial_attrs = sa.Table("trial_user_attributes", _meta, sa.Column("trial_id", _ID),
                       sa.Column("key", sa.String), sa.Column("value_json", sa.Text))
trial_intermediate = sa.Table("trial_intermediate_values", _meta, sa.Column("trial_id", _ID),
                              sa.Column("step", sa.Integer),
                              sa.Column("intermediate_value", sa.Float),
                              sa.Column("intermediate_value_type", sa.String))


def as_text(column: Any) -> Any:
    """An enumerated column as text: PostgreSQL stores Optuna's states as a native enum, which
    does not compare with a string parameter."""
    return sa.cast(column, sa.String)


INFINITIES = {"INF_POS": float("inf"), "INF_NEG": float("-inf")}


@contextlib.contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """One consistent snapshot for several queries; driver errors become ``StorageError``."""
    url = engine.url.render_as_string(hide_password=True)
    with session(url), engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN")  # a read transaction: one WAL snapshot
        elif engine.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        yield conn


def loads(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


def frame(conn: Connection, query: Any, columns: Sequence[str]) -> pd.DataFrame:
    """The rows of ``query`` as a frame, fetched straight from the driver's cursor as plain
    tuples (SQLAlchemy's Row objects, and pandas on them, cost more than the query). Values
    come as the driver gives them: callers convert dates with ``pd.to_datetime``."""
    result = conn.execute(query)
    try:
        rows = result.cursor.fetchall() if result.cursor is not None else []
    finally:
        result.close()
    return pd.DataFrame(rows, columns=list(columns))


def with_infinities(values: pd.Series, types: pd.Series) -> np.ndarray:
    """Optuna stores infinite values as NULL with ``value_type`` INF_POS / INF_NEG."""
    kinds = types.astype(str).to_numpy()
    out = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    return np.where(kinds == "INF_POS", np.inf, np.where(kinds == "INF_NEG", -np.inf, out))


def scalars(texts: pd.Series) -> pd.Series:
    """JSON scalars (strings, numbers, null) decoded; plain strings without escapes take the
    fast path (most attributes are short strings such as ``"completed"``)."""
    raw = texts.astype(object).to_numpy()
    out = np.full(len(raw), None, dtype=object)
    for i, text in enumerate(raw):
        if not isinstance(text, str):
            continue
        if len(text) > 1 and text[0] == '"' == text[-1] and "\\" not in text:
            out[i] = text[1:-1]
        elif text.isascii() and text.isdigit():
            out[i] = int(text)
        else:
            out[i] = json.loads(text)
    return pd.Series(out, index=texts.index, dtype=object)


def decode_params(rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, BaseDistribution]]:
    """Optuna stores each parameter as a float (a categorical one as its choice's index) with
    its distribution as JSON: one column per parameter, in external representation."""
    if rows.empty:
        return pd.DataFrame(), {}
    distributions: dict[str, BaseDistribution] = {}
    values: list[Any] = [None] * len(rows)
    for text, index in rows.groupby("distribution_json", sort=False).groups.items():
        dist = json_to_distribution(str(text))
        positions = rows.index.get_indexer(index)
        internal = rows.param_value.to_numpy()[positions]
        if isinstance(dist, CategoricalDistribution):
            decoded: Sequence[Any] = [dist.choices[int(v)] for v in internal]
        else:
            decoded = [dist.to_external_repr(float(v)) for v in internal]
        for p, v in zip(positions, decoded, strict=True):
            values[p] = v
        for name in rows.param_name.iloc[positions].unique():
            distributions[str(name)] = dist
    rows = rows.assign(value=pd.Series(values, index=rows.index, dtype=object))
    wide = rows.pivot(index="trial_id", columns="param_name", values="value")
    return wide, distributions


def json_number(column: Any, key: str, dialect: str) -> Any:
    """SQL for the number under top-level ``key`` of a JSON text column, or None where the
    backend has no JSON functions we rely on (the caller then parses in Python)."""
    if dialect == "sqlite":
        return sa.func.json_extract(column, f"$.{key}")
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import JSONB

        return sa.cast(sa.cast(column, JSONB)[key].astext, sa.Float)
    return None


def pivot(where: Any, then: Any) -> Any:
    """One trial's value of a key-value child table as a column (conditional aggregation: the
    database returns one row per trial instead of one per key)."""
    return sa.func.max(sa.case((where, then)))


def external(internal: pd.Series, dist: BaseDistribution) -> pd.Series:
    """Stored parameter values (floats; a categorical one its choice's index) as the values
    the trials drew."""
    values = pd.to_numeric(internal, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    present = ~np.isnan(values)
    out = np.full(len(values), None, dtype=object)
    if isinstance(dist, CategoricalDistribution):
        choices = np.array([*dist.choices, None], dtype=object)
        out[present] = choices[values[present].astype(int)]
    else:
        out[present] = [dist.to_external_repr(float(v)) for v in values[present]]
    return pd.Series(out, index=internal.index, dtype=object)
