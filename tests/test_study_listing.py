"""``nas status``'s listing (``studies.report.list_studies``), read for every study at once
(``studies.store.study_summaries``): each row as Optuna's own load of the study gives it, and a
study whose stored values Optuna cannot decode listed as unreadable, naming the value, while the
others still show; on SQLite (whose ``json_valid`` screens the texts first) and PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from dashboard_helpers import write_engine_study
from postgres_fixture import postgres_url

from studies.report import list_studies
from studies.store import TrialKey

__all__ = ["postgres_url"]  # a fixture, imported for this module's tests

A, B = "listed-a", "listed-b"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("listing") / "studies.db"
    for name in (A, B):
        write_engine_study(f"sqlite:///{path}", name=name)
    return path


@pytest.fixture
def db(base: Path, tmp_path: Path) -> Path:
    path = tmp_path / "studies.db"
    path.write_bytes(base.read_bytes())
    return path


def _set(url: str, sql: str, value: str) -> None:
    """Run ``sql`` (with ``:v`` = ``value``) on the first trial of study A, as another program
    could."""
    engine = sa.create_engine(url)
    trial = ("(SELECT min(t.trial_id) FROM trials t JOIN studies s ON s.study_id = t.study_id "
             f"WHERE s.study_name = '{A}')")
    with engine.begin() as conn:
        conn.execute(sa.text(sql.replace("{trial}", trial)), {"v": value})
    engine.dispose()


def _rows(url: str) -> dict[str, dict]:
    return {r["name"]: r for r in list_studies(url)}


def test_each_row_is_what_optuna_reads(db: Path) -> None:
    url = f"sqlite:///{db}"
    rows = list_studies(url)
    assert [r["name"] for r in rows] == [A, B]
    for row in rows:
        trials = optuna.load_study(study_name=row["name"], storage=url).trials
        first = min(t.datetime_start for t in trials if t.datetime_start is not None)
        assert row == {"name": row["name"], "task": "digits", "trials": len(trials),
                       "started": first.isoformat()}


_ATTR = ("UPDATE trial_user_attributes SET value_json = :v WHERE trial_id = {trial} AND "
         f"key = '{TrialKey.COST}'")
_DISTRIBUTION = ("UPDATE trial_params SET distribution_json = :v WHERE trial_id = {trial} AND "
                 "param_name = 'groups'")


@pytest.mark.parametrize(("sql", "text", "named"), [
    (_ATTR, "{oops", f"`{TrialKey.COST}`"),
    (_ATTR, "[" * 100_000 + "]" * 100_000, "nested deeper"),
    (_DISTRIBUTION, "{oops", "`param:groups`"),
])
def test_a_value_optuna_cannot_decode(db: Path, sql: str, text: str, named: str) -> None:
    url = f"sqlite:///{db}"
    _set(url, sql, text)
    rows = _rows(url)
    assert named in rows[A]["unreadable"] and f"study '{A}'" in rows[A]["unreadable"]
    assert rows[A]["trials"] is None and "unreadable" not in rows[B]
    assert rows[B]["trials"] == 10


def test_a_text_python_reads_and_sqlite_does_not_is_listed(db: Path) -> None:
    """``NaN`` is no JSON to SQLite's ``json_valid``, but Python's json (and so Optuna) reads
    it: the screen flags the study, and decoding it clears it."""
    url = f"sqlite:///{db}"
    _set(url, _ATTR, "NaN")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT json_valid('NaN')").fetchone() == (0,)
    assert "unreadable" not in _rows(url)[A] and _rows(url)[A]["trials"] == 10


def test_a_database_without_studies_lists_none(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    assert list_studies(f"sqlite:///{path}") == []


def test_on_postgresql(postgres_url: str) -> None:
    for name in (A, B):
        write_engine_study(postgres_url, name=name)
    assert [r["trials"] for r in list_studies(postgres_url)] == [10, 10]
    _set(postgres_url, _ATTR, "{oops")
    rows = _rows(postgres_url)
    assert f"`{TrialKey.COST}`" in rows[A]["unreadable"] and rows[B]["trials"] == 10
