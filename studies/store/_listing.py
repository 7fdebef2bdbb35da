"""What a listing (``nas status``) shows of every study in a database, read for all of them at
once: a few queries in all, rather than a load of each study's trials through Optuna (200
studies of 100 trials took minutes that way; one 10,000-trial study, 40 s).

A study is listed as Optuna reads it: where Optuna's own decoding of its stored values would
fail (a JSON text that does not decode, a parameter distribution that is none), the listing
names that value (``stored.diagnose``) and lists the study as unreadable, as before. Each
distinct text is decoded once, and on SQLite only where SQLite's ``json_valid`` does not
vouch for it (one text nested deeper than Python decodes yet within SQLite's limit, 1,000 to
2,000 levels, passes: the study is listed, and ``nas status NAME`` names that value).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from optuna.distributions import json_to_distribution

from nas.errors import NasError
from studies.store.storage import read_only_engine, resolve_storage_url, session
from studies.store.stored import DECODE_ERRORS, StudyAttrs, diagnose, study_attrs

__all__ = ["StudySummary", "read_summaries", "study_summaries"]


@dataclass(frozen=True)
class StudySummary:
    """What a listing shows of one study: its attributes as a listing parses them (the search
    space left unparsed), its number of trials and when its first one started."""

    attrs: StudyAttrs
    trials: int
    started: datetime | None


# The texts Optuna decodes when it loads a study's trials, each distinct one per study:
# (table, the column holding the text, how Optuna decodes it). A trial's attributes, the
# bulk of them, are first screened by SQLite itself where it can (``json_valid``, in C):
# only a study holding a text it finds invalid has its texts decoded here, to confirm.
_STUDY_TEXTS = (("study_system_attributes", "value_json", json.loads),)
_TRIAL_TEXTS = (("trial_user_attributes", "value_json", json.loads),
                ("trial_system_attributes", "value_json", json.loads),
                ("trial_params", "distribution_json", json_to_distribution))
_SCREENED = ("trial_user_attributes", "trial_system_attributes")


def _texts_query(table: str, column: str, where: str = "") -> sa.TextClause:
    """The distinct texts of ``column`` of ``table`` by study (a trial's table joined to
    ``trials``)."""
    if table.startswith("trial_"):
        return sa.text(f"SELECT DISTINCT t.study_id, x.{column} FROM {table} x "
                       f"JOIN trials t ON t.trial_id = x.trial_id {where}")
    return sa.text(f"SELECT DISTINCT study_id, {column} FROM {table} {where}")


def _suspects(conn: sa.Connection, table: str, column: str) -> set[int] | None:
    """The studies holding a text of ``table`` that SQLite finds is no JSON (a JSON extension
    of Python's, such as NaN, is confirmed after); None where the database cannot say."""
    if conn.dialect.name != "sqlite":
        return None
    try:
        return set(conn.execute(sa.text(
            f"SELECT DISTINCT t.study_id FROM {table} x JOIN trials t ON t.trial_id = x.trial_id "
            f"WHERE NOT json_valid(x.{column})")).scalars())
    except sa.exc.OperationalError:  # an SQLite built without its JSON functions
        return None


def _decoded_texts(conn: sa.Connection) -> dict[int, dict[Callable[[str], Any], list[Any]]]:
    """By study, the texts Optuna decodes when it loads it, by how it decodes them (those
    SQLite screened as valid left out)."""
    texts: dict[int, dict[Callable[[str], Any], list[Any]]] = {}
    for table, column, decode in (*_STUDY_TEXTS, *_TRIAL_TEXTS):
        query = _texts_query(table, column)
        suspects = _suspects(conn, table, column) if table in _SCREENED else None
        if suspects is not None:
            if not suspects:
                continue
            ids = ", ".join(str(int(i)) for i in suspects)
            query = _texts_query(table, column, f"WHERE t.study_id IN ({ids})")
        for study_id, values in _by_study(conn.execute(query)).items():
            texts.setdefault(study_id, {}).setdefault(decode, []).extend(values)
    return texts


def _by_study(rows: Iterable[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for study_id, *rest in rows:
        out.setdefault(study_id, []).append(rest[0] if len(rest) == 1 else tuple(rest))
    return out


def _started(value: Any) -> datetime | None:
    """The first trial's start as stored: SQLite's text, a server's datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _summary(name: str, attrs: list[tuple[str, Any]], objectives: int,
             counts: tuple[int, Any], texts: Mapping[Callable[[str], Any], list[Any]]
             ) -> StudySummary:
    """One study's summary from its rows; what Optuna cannot decode raises (see
    :func:`read_summaries`)."""
    for decode, values in texts.items():
        for text in values:
            decode(text)
    raw = {str(key): json.loads(text) for key, text in attrs}
    trials, started = counts
    return StudySummary(study_attrs(name, raw, objectives, full=False), int(trials),
                        _started(started))


def read_summaries(engine: sa.Engine) -> dict[str, StudySummary | NasError]:
    """Every study's summary by name, or the ``NasError`` that says why its stored values do not
    parse (the value named, as Optuna's load of it would have failed)."""
    with engine.connect() as conn:
        names = {r[0]: str(r[1]) for r in conn.execute(sa.text(
            "SELECT study_id, study_name FROM studies"))}
        objectives: dict[int, int] = {r[0]: int(r[1]) for r in conn.execute(sa.text(
            "SELECT study_id, count(*) FROM study_directions GROUP BY study_id"))}
        attrs = _by_study(conn.execute(sa.text(
            "SELECT study_id, key, value_json FROM study_user_attributes")))
        counts = {r[0]: (r[1], r[2]) for r in conn.execute(sa.text(
            "SELECT study_id, count(*), min(datetime_start) FROM trials GROUP BY study_id"))}
        texts = _decoded_texts(conn)
    out: dict[str, StudySummary | NasError] = {}
    for study_id, name in names.items():
        try:
            out[name] = _summary(name, attrs.get(study_id, []), objectives.get(study_id, 0),
                                 counts.get(study_id, (0, None)), texts.get(study_id, {}))
        except NasError as exc:
            out[name] = exc
        except (*DECODE_ERRORS, KeyError, AttributeError, IndexError) as exc:
            # What Optuna's load raises on a value it cannot decode (a distribution of the
            # wrong shape: a missing key, an unexpected argument): the value named, if it can be.
            out[name] = diagnose(engine, name, exc)
    return out


def study_summaries(url: str | None = None) -> dict[str, StudySummary | NasError]:
    """:func:`read_summaries` of the database at ``url`` (resolved as ``--storage``), over a
    bare read-only engine: a listing needs none of Optuna's storage, whose opening (its schema
    checks) took longer than the listing itself. Raises ``StorageError`` where the database
    cannot be read or holds no Optuna tables."""
    url = resolve_storage_url(url)
    engine = read_only_engine(url)
    try:
        with session(url):
            return read_summaries(engine)
    finally:
        engine.dispose()
