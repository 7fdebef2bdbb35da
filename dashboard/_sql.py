"""The SQL side of ``dashboard.data``: Optuna's tables as the dashboard reads them, read
snapshots, and turning rows into frames quickly (10,000 trials are 100,000 rows). Read-only
connections are ``studies.store.read_only_engine``'s, each read one snapshot
(``studies.store.reading``).

Every stored JSON text is decoded by ``studies.store.stored``'s rules (``loads``: size, depth, valid
JSON) and every value of Optuna's own columns is checked before use: a column of SQLite may hold
any type, whatever its declared one. The fast paths here (a plain short string, a JSON object
the database itself checks) accept only what those rules accept; anything else takes the exact
path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    json_to_distribution,
)
from sqlalchemy.engine import Connection

from nas.errors import first_line
from studies.store import StoredValueError, stored

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
trial_system_attrs = sa.Table("trial_system_attributes", _meta, sa.Column("trial_id", _ID),
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


def frame(conn: Connection, query: Any, columns: Sequence[str]) -> pd.DataFrame:
    """The rows of ``query`` as a frame, fetched straight from the driver's cursor as plain
    tuples (SQLAlchemy's Row objects, and pandas on them, cost more than the query). Values
    come as the driver gives them, of any type in SQLite: callers convert them (``dates``,
    ``pd.to_numeric``)."""
    result = conn.execute(query)
    try:
        rows = result.cursor.fetchall() if result.cursor is not None else []
    finally:
        result.close()
    return pd.DataFrame(rows, columns=list(columns))


def dates(values: pd.Series) -> pd.Series:
    """Stored timestamps (SQLite's text, a driver's datetimes) as pandas' naive ones, NaT where
    a value is none (another tool may have written anything there: a number, a word, a time
    zone that Optuna's never have)."""
    kept = values.astype(object)
    if pd.api.types.infer_dtype(kept, skipna=True) not in ("string", "datetime", "empty"):
        kept = kept.map(lambda v: v if isinstance(v, (str, datetime)) else None)
    try:
        out = pd.to_datetime(kept, errors="coerce", format="ISO8601")
    except (ValueError, TypeError):  # time zones mixed with naive times: one by one
        out = pd.to_datetime(kept.map(_naive), errors="coerce")
    return out.dt.tz_convert(None) if out.dt.tz is not None else out


def _naive(value: Any) -> Any:
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        return None
    return stamp.tz_convert(None) if stamp.tzinfo is not None else stamp


def number(value: Any) -> float | None:
    """A stored number as a float, None where it is none (SQLite keeps text in a REAL column)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def with_infinities(values: pd.Series, types: pd.Series) -> np.ndarray:
    """Optuna stores infinite values as NULL with ``value_type`` INF_POS / INF_NEG."""
    kinds = types.astype(str).to_numpy()
    out = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    return np.where(kinds == "INF_POS", np.inf, np.where(kinds == "INF_NEG", -np.inf, out))


# A JSON string without escapes, quotes or control characters: its text, unquoted, is its value.
_PLAIN_STRING = re.compile(r'"[^"\\\x00-\x1f]*"')
# Every digit as 0 (of UTF-8 bytes: no other character's bytes are ASCII), so that a run of 19
# (an integer of 2**63 or more has 19 digits or more) is a plain substring search.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_DIGITS = b"0" * 19
# The longest text the fast path takes: no value measures (``stored.check_value``) more than
# eight times its JSON text, so such a text measures at most ``MAX_TEXT``.
_FAST = stored.MAX_TEXT // 8


def _decode(text: Any, study: str, key: str) -> Any:
    """``studies.store.stored.loads(text)``, faster where its checks cannot fail: a string without
    escapes or a count of at most 18 digits needs no parser, and a text short enough, with at
    most ``MAX_DEPTH`` brackets (so nested no deeper) and no 19 digits in a row (so no integer
    of 2**63), needs only ``json.loads``."""
    if not isinstance(text, str) or len(text) > _FAST:
        return stored.loads(text, study=study, key=key)
    if _PLAIN_STRING.fullmatch(text):
        return text[1:-1]
    if text.isascii() and text.isdigit() and len(text) <= 18 and (text[0] != "0" or
                                                                   len(text) == 1):
        return int(text)
    if text.count("[") + text.count("{") <= stored.MAX_DEPTH and _NINETEEN_DIGITS not in (
            text.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_ZERO)):
        try:
            return json.loads(text)
        except ValueError:
            pass  # stored.loads says what is wrong
    return stored.loads(text, study=study, key=key)


def scalars(texts: pd.Series, *, study: str, key: str,
            check: Callable[[Any], Any] | None = None) -> tuple[pd.Series, np.ndarray]:
    """A column of stored JSON texts (attribute ``key`` of trials of ``study``) decoded by
    ``stored.loads``' rules and then ``check`` (which raises ``StoredValueError``), once per
    distinct text: most attributes are a few distinct short strings (``"completed"``),
    which take the fast path. Returns the values (``None`` where there is no text or it does
    not decode) and a mask of the texts that do not."""
    codes, uniques = pd.factorize(texts.astype(object).to_numpy(), use_na_sentinel=True)
    values = np.full(len(uniques) + 1, None, dtype=object)  # code -1 (no text): the last
    bad = np.zeros(len(uniques) + 1, dtype=bool)
    for j, text in enumerate(uniques):
        try:
            value = _decode(text, study, key)
            values[j] = value if check is None else check(value)
        except StoredValueError:
            bad[j] = True
    return pd.Series(values[codes], index=texts.index, dtype=object), bad[codes]


_CHOICE_TYPES = (type(None), bool, int, float, str)
# What Optuna's decoding raises on a distribution of the wrong shape (a missing key, an
# unexpected argument, low above high, a name it does not know).
_DISTRIBUTION_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError,
                        OverflowError, RecursionError)


def _choices(value: Any) -> Any:
    """The categorical choices a decoded distribution names, if any (either of Optuna's
    spellings)."""
    if not isinstance(value, dict):
        return None
    attributes = value.get("attributes")
    if value.get("name") == "CategoricalDistribution" and isinstance(attributes, dict):
        return attributes.get("choices")
    return value.get("choices") if value.get("type") == "categorical" else None


def distribution(text: Any, *, study: str, name: str,
                 trial: int | None = None) -> BaseDistribution:
    """Parameter ``name``'s distribution from its stored JSON (``distribution_json``), or
    ``StoredValueError`` naming ``param:<name>``."""
    key = f"param:{name}"
    value = stored.loads(text, study=study, key=key, trial=trial)
    choices = _choices(value)
    if isinstance(choices, list) and not all(isinstance(c, _CHOICE_TYPES) for c in choices):
        raise StoredValueError(study, key, "holds a categorical choice that is not a number, "
                                           "a string, a boolean or null", trial=trial)
    try:
        return json_to_distribution(text)
    except _DISTRIBUTION_ERRORS as exc:
        reason = stored.inert(first_line(exc, limit=200, default="no detail"))
        raise StoredValueError(study, key, f"is not an Optuna distribution "
                                           f"({type(exc).__name__}: {reason})",
                               trial=trial) from None


def decode_params(rows: pd.DataFrame, *, study: str,
                  trial: int) -> tuple[dict[str, Any], dict[str, BaseDistribution]]:
    """One trial's parameters (``rows``: its ``trial_params`` rows) in external representation
    (Optuna stores each as a float, a categorical one as its choice's index, with its
    distribution as JSON), and their distributions; ``StoredValueError`` for one that does not
    decode."""
    values: dict[str, Any] = {}
    distributions: dict[str, BaseDistribution] = {}
    for name, internal, text in zip(rows.param_name, rows.param_value, rows.distribution_json,
                                    strict=True):
        name = str(name)
        dist = distribution(text, study=study, name=name, trial=trial)
        value, bad = external(pd.Series([internal], dtype=object), dist)
        if bad[0]:
            raise StoredValueError(study, f"param:{name}", f"holds {stored.inert(internal)[:80]}"
                                   ", which is no value of its distribution", trial=trial)
        values[name], distributions[name] = value.iloc[0], dist
    return values, distributions


def pivot(where: Any, then: Any) -> Any:
    """One trial's value of a key-value child table as a column (conditional aggregation: the
    database returns one row per trial instead of one per key)."""
    return sa.func.max(sa.case((where, then)))


def external(internal: pd.Series, dist: BaseDistribution) -> tuple[pd.Series, np.ndarray]:
    """Stored parameter values (floats; a categorical one its choice's index) as the values
    the trials drew, and a mask of those that are no value of ``dist`` (not a number, not an
    index of its choices, infinite); those, and the trials without the parameter, are None."""
    values = pd.to_numeric(internal, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    present = internal.notna().to_numpy()
    with np.errstate(invalid="ignore"):
        if isinstance(dist, CategoricalDistribution):
            ok = (values >= 0) & (values < len(dist.choices)) & (values == np.floor(values))
        else:
            ok = np.isfinite(values)
    out = np.full(len(values), None, dtype=object)
    if isinstance(dist, CategoricalDistribution):
        choices = np.empty(len(dist.choices), dtype=object)
        choices[:] = list(dist.choices)
        out[ok] = choices[values[ok].astype(int)]
    else:
        out[ok] = [dist.to_external_repr(float(v)) for v in values[ok]]
    return pd.Series(out, index=internal.index, dtype=object), present & ~ok

