"""The study database as a trust boundary: every value read from it is parsed here, once.

A study database is shared. Teammates, Optuna's own tools (``optuna.copy_study``,
optuna-dashboard, a notebook) and other programs write to the same tables, so whatever a reader
finds there is data of unknown origin: never code, never a path to follow blindly. Every reader
(``nas status``, ``pareto``, ``export``, ``promote``, ``resume`` and the dashboard) turns the
stored ``nas.*`` attributes into the typed records below before it uses them. A value of the
wrong type, not JSON, too deep or too large becomes one ``StoredValueError`` naming the study,
the trial and the key (exit code 2); a listing marks that study unreadable and shows the rest.

The records are parsed the same way whichever way the values were read: through Optuna's API
(already decoded from JSON) or with the dashboard's own SQL (decoded here by :func:`loads`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from nas.errors import NasError, first_line
from studies.store.keys import Status, StudyKey, TrialKey

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from nas.config import ArchConfig
    from nas.tasks import TaskGeometry
    from search_spaces import SearchSpace
    from studies.spec import StudySpec

__all__ = [
    "MAX_DEPTH",
    "MAX_TEXT",
    "InertStream",
    "StoredValueError",
    "StudyAttrs",
    "TrialAttrs",
    "check_value",
    "guarded",
    "inert",
    "loads",
    "parsed_trials",
    "read_epochs",
    "stored_geometry",
    "stored_text",
    "study_attrs",
    "trial_attrs",
]

#: The deepest nesting a stored value may have (the engine's deepest is 4: a cost's parts).
MAX_DEPTH = 32
#: The largest stored value, in characters of its JSON (the engine's largest, a study file with
#: an inline space, is a few kilobytes).
MAX_TEXT = 1_000_000
#: Integers beyond this are no count the engine writes (and overflow a float).
_MAX_INT = 2**63

T = TypeVar("T")


class StoredValueError(NasError):
    """A value in the study database that no nas version wrote: one line naming where."""

    def __init__(self, study: str, key: str, problem: str, *, trial: int | None = None) -> None:
        where = f"study {inert(study)!r}" + (f", trial {trial}" if trial is not None else "")
        super().__init__(f"Stored value `{inert(key)}` of {where} {problem}; it was written "
                         "outside nas: repair or delete it (read-only commands never change it).")
        self.study, self.key, self.trial = study, key, trial


# ----------------------------------------------------------------------------- raw values
def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "null" if value is None else type(value).__name__


def check_value(value: Any) -> str | None:
    """What is wrong with a decoded JSON value as such (too deep, too large, a non-finite or
    huge number), or ``None``. Iterative: a value nested 100,000 deep is measured, not
    recursed into."""
    size, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"is nested deeper than {MAX_DEPTH} levels"
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, bool) or item is None:
            size += 4
        elif isinstance(item, int):
            if abs(item) >= _MAX_INT:
                return "holds an integer too large for a count"
            size += 8
        elif isinstance(item, float):
            size += 8
        elif isinstance(item, Mapping):
            size += 2
            for k, v in item.items():
                if not isinstance(k, str):
                    return "holds a mapping key that is not a string"
                size += len(k) + 3
                stack.append((v, depth + 1))
        elif isinstance(item, (list, tuple)):
            size += 2
            stack.extend((v, depth + 1) for v in item)
        else:
            return f"holds {_describe(item)}, which JSON does not"
        if size > MAX_TEXT:
            return f"is larger than {MAX_TEXT:,} characters"
    return None


def loads(text: Any, *, study: str, key: str, trial: int | None = None) -> Any:
    """One stored JSON text decoded and checked (:func:`check_value`), or ``StoredValueError``."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise StoredValueError(study, key, "is not JSON text", trial=trial)
    if len(text) > MAX_TEXT:
        raise StoredValueError(study, key, f"is larger than {MAX_TEXT:,} characters",
                               trial=trial)
    try:
        value = json.loads(text)
    except RecursionError:
        raise StoredValueError(study, key, f"is nested deeper than {MAX_DEPTH} levels",
                               trial=trial) from None
    except ValueError as exc:  # JSONDecodeError, and integers of more than 4,300 digits
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise StoredValueError(study, key, f"is not valid JSON ({reason.split(';')[0]})",
                               trial=trial) from None
    problem = check_value(value)
    if problem is not None:
        raise StoredValueError(study, key, problem, trial=trial)
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def inert(text: Any, *, newlines: bool = False) -> str:
    """``text`` safe to print to a terminal: control characters (escape sequences, carriage
    returns, bidirectional overrides) written as ``\\xNN`` / ``\\uNNNN`` escapes; with
    ``newlines`` line feeds are kept (a whole printed report)."""
    text = text if isinstance(text, str) else str(text)

    def escape(m: re.Match[str]) -> str:
        char = m.group()
        if newlines and char == "\n":
            return char
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _CONTROL.sub(escape, text)


class InertStream:
    """A text stream that writes through :func:`inert` (line feeds kept): what a read command
    prints of the database cannot drive the terminal."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._stream.write(inert(text, newlines=True)) or 0)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, encoding, fileno: the stream's own
        return getattr(self._stream, name)


# ----------------------------------------------------------------------------- typed fields
class _Reader:
    """Typed access to one attribute mapping, every failure naming study, trial and key."""

    def __init__(self, study: str, raw: Mapping[str, Any], trial: int | None = None) -> None:
        self.study, self.raw, self.trial = study, raw, trial

    def fail(self, key: str, problem: str) -> StoredValueError:
        return StoredValueError(self.study, key, problem, trial=self.trial)

    def get(self, key: str) -> Any:
        value = self.raw.get(key)
        problem = check_value(value)
        if problem is not None:
            raise self.fail(key, problem)
        return value

    def typed(self, key: str, kinds: tuple[type, ...], what: str) -> Any:
        value = self.get(key)
        if value is None:
            return None
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise self.fail(key, f"must be {what}, but is {_describe(value)}")
        return value

    def text(self, key: str, *, limit: int = 4096) -> str | None:
        value = self.typed(key, (str,), "a string")
        if value is not None and len(value) > limit:
            raise self.fail(key, f"is a string longer than {limit:,} characters")
        return value

    def integer(self, key: str, *, minimum: int = 0) -> int | None:
        value = self.get(key)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        value = self.typed(key, (int,), "an integer")
        if value is not None and value < minimum:
            raise self.fail(key, f"must be an integer >= {minimum}, but is {value}")
        return value

    def number(self, key: str) -> float | None:
        value = self.typed(key, (int, float), "a number")
        if value is None:
            return None
        if not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, but is {value}")
        return float(value)

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self.typed(key, (Mapping,), "a mapping")
        return None if value is None else dict(value)

    def strings(self, key: str) -> tuple[str, ...] | None:
        value = self.typed(key, (list, tuple), "a list of strings")
        if value is None:
            return None
        if not all(isinstance(v, str) and len(v) <= 4096 for v in value):
            raise self.fail(key, "must be a list of strings")
        return tuple(value)

    def parse(self, key: str, build: Callable[[Any], T]) -> T:
        """``build(value)``, its errors (our ``ConfigError`` and the built-ins a constructor
        raises on an odd value) as one line naming the key."""
        value = self.get(key)
        try:
            return build(value)
        except NasError as exc:
            raise self.fail(key, f"is not valid: {inert(first_line(exc, limit=300))}") from None
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError,
                RecursionError) as exc:
            raise self.fail(key, f"is not valid: {inert(first_line(exc, limit=300))}") from None


# ----------------------------------------------------------------------------- studies
@dataclass(frozen=True)
class StudyAttrs:
    """A study's ``nas.*`` attributes, typed. ``spec`` is ``None`` for a study nas did not
    create (no stored study file): such a study can be listed and viewed, not run."""

    name: str
    n_objectives: int
    objectives: tuple[str, ...]
    spec: StudySpec | None = None
    space: SearchSpace | None = None
    space_hash: str | None = None
    training_key: str | None = None
    geometry: TaskGeometry | None = None
    tune_dir: str | None = None
    reference: tuple[float | None, ...] | None = None
    promoted_from: str | None = None
    promotions: tuple[str, ...] = ()
    fidelity: dict[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def task(self) -> str | None:
        return self.spec.task if self.spec is not None else None

    def require_spec(self) -> StudySpec:
        """The study file, or one line saying the study was not made by nas."""
        if self.spec is None:
            raise NasError(f"Study {inert(self.name)!r} was not created by nas (it has no "
                           "stored study file).")
        return self.spec


def _spec(name: str) -> Callable[[Any], StudySpec]:
    def build(value: Any) -> StudySpec:
        from studies.spec import StudySpec

        if not isinstance(value, Mapping):
            raise TypeError(f"must be a mapping, but is {_describe(value)}")
        # The study's name is the database's: a copy (optuna.copy_study) keeps its source's
        # study file, and must run, lease and log as itself. (A name nas could not have given,
        # e.g. with a slash, is read; ``nas resume`` refuses to run under it.) So the file's
        # own name is not read at all: another tool's may hold what no nas name may.
        return dataclasses.replace(StudySpec.from_dict(value, name="stored"), name=name)

    return build


def _space(value: Any) -> SearchSpace:
    from search_spaces import SearchSpace

    if not isinstance(value, Mapping):
        raise TypeError(f"must be a mapping, but is {_describe(value)}")
    return SearchSpace.from_dict(value)


def _geometry(value: Any) -> TaskGeometry:
    from dataclasses import fields

    from nas.tasks import TaskGeometry

    if not isinstance(value, Mapping):
        raise TypeError(f"must be a mapping, but is {_describe(value)}")
    known = {f.name for f in fields(TaskGeometry)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}")
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, str, type(None))):
            raise ValueError(f"field {k!r} is {_describe(v)}")
        if isinstance(v, int) and not 0 <= v < 2**31:
            raise ValueError(f"field {k!r} is {v}")
    return TaskGeometry(**value)


def study_attrs(name: str, raw: Mapping[str, Any], n_objectives: int, *,
                full: bool = True) -> StudyAttrs:
    """The typed study attributes of study ``name`` (``raw``: its user attributes as stored,
    ``n_objectives``: how many directions Optuna stores for it).

    ``full=False`` parses what a listing shows (the study file, objectives) and leaves the
    search space unparsed."""
    r = _Reader(name, raw)
    spec = r.parse(StudyKey.SPEC, _spec(name)) if raw.get(StudyKey.SPEC) is not None else None
    names = r.strings(StudyKey.OBJECTIVES)
    if names is not None and len(names) != n_objectives:
        raise r.fail(StudyKey.OBJECTIVES, f"names {len(names)} objectives where the study has "
                                          f"{n_objectives}")
    if names is not None and len(set(names)) != len(names):
        raise r.fail(StudyKey.OBJECTIVES, "names an objective twice")
    if names is None and spec is not None and len(spec.objectives) == n_objectives:
        names = tuple(spec.objective_names)
    if spec is not None and len(spec.objectives) != n_objectives:
        raise r.fail(StudyKey.SPEC, f"declares {len(spec.objectives)} objectives where the "
                                    f"study has {n_objectives}")
    objectives = names or tuple(f"objective_{i}" for i in range(n_objectives))
    reference = r.typed(StudyKey.REFERENCE, (list, tuple), "a list of numbers")
    if reference is not None:
        if len(reference) != n_objectives or not all(
                v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                              and math.isfinite(v)) for v in reference):
            raise r.fail(StudyKey.REFERENCE, f"must be a list of {n_objectives} finite numbers "
                                             "(or null)")
        reference = tuple(None if v is None else float(v) for v in reference)
    space = None
    if full and spec is not None:
        if raw.get(StudyKey.SPACE) is None:
            raise r.fail(StudyKey.SPACE, "is missing (the study's search space)")
        space = r.parse(StudyKey.SPACE, _space)
    geometry = (r.parse(StudyKey.GEOMETRY, _geometry)
                if raw.get(StudyKey.GEOMETRY) is not None else None)
    return StudyAttrs(
        name=name, n_objectives=n_objectives, objectives=objectives, spec=spec, space=space,
        space_hash=r.text(StudyKey.SPACE_HASH, limit=128),
        training_key=r.text(StudyKey.TRAINING_KEY, limit=128), geometry=geometry,
        tune_dir=r.text(StudyKey.TUNE_DIR), reference=reference,
        promoted_from=r.text(StudyKey.PROMOTED_FROM, limit=512),
        promotions=r.strings(StudyKey.PROMOTIONS) or (),
        fidelity=r.mapping(StudyKey.FIDELITY), raw=raw,
    )


# ----------------------------------------------------------------------------- trials
_STATUSES = frozenset(Status.ALL)
_COST_TOTALS = ("params", "params_matrix", "madds")


def _cost(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"must be a mapping, but is {_describe(value)}")
    for key in _COST_TOTALS:
        v = value.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v) or v < 0):
            raise ValueError(f"`{key}` must be a count >= 0, but is {_describe(v)}")
    parts = value.get("parts")
    if parts is not None and not (isinstance(parts, Mapping)
                                  and all(isinstance(p, Mapping) for p in parts.values())):
        raise ValueError("`parts` must map each part to its counts")
    return dict(value)


def _train(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"must be a mapping, but is {_describe(value)}")
    return dict(value)


@dataclass(frozen=True)
class TrialAttrs:
    """A trial's ``nas.*`` attributes, typed (each ``None`` where the trial has none)."""

    study: str
    number: int
    arch: dict[str, Any] | None = None
    arch_id: str | None = None
    cost: dict[str, Any] | None = None
    train: dict[str, Any] | None = None
    status: str | None = None
    reason: str | None = None
    epochs_reached: int | None = None
    seconds: float | None = None
    samples_per_second: float | None = None
    node: str | None = None
    latency_ms: float | None = None
    checkpoint: str | None = None
    reused_from: int | None = None
    rerun_of: int | None = None
    enqueued: str | None = None
    tune_trial: str | None = None
    source_trial: int | None = None
    source_value: float | None = None
    seed: int | None = None
    fault: str | None = None

    def config(self) -> ArchConfig:
        """The trial's architecture as an ``ArchConfig``; one line when it has none or the
        stored one is not valid."""
        from nas.config import ArchConfig

        if self.arch is None:
            raise NasError(f"Trial {self.number} of study {inert(self.study)!r} has no "
                           "architecture yet; export a trial that was sampled.")
        reader = _Reader(self.study, {TrialKey.ARCH: self.arch}, self.number)
        return reader.parse(TrialKey.ARCH, ArchConfig.from_dict)


def trial_attrs(study: str, number: int, raw: Mapping[str, Any]) -> TrialAttrs:
    """The typed ``nas.*`` attributes of trial ``number`` of ``study`` (``raw``: its user
    attributes as stored)."""
    r = _Reader(study, raw, number)
    status = r.text(TrialKey.STATUS, limit=64)
    if status is not None and status not in _STATUSES:
        raise r.fail(TrialKey.STATUS, f"must be one of {list(Status.ALL)}, but is "
                                      f"{inert(status[:64])!r}")
    arch = r.mapping(TrialKey.ARCH)
    return TrialAttrs(
        study=study, number=number, arch=arch,
        arch_id=r.text(TrialKey.ARCH_ID, limit=128),
        cost=r.parse(TrialKey.COST, _cost) if raw.get(TrialKey.COST) is not None else None,
        train=r.parse(TrialKey.TRAIN, _train) if raw.get(TrialKey.TRAIN) is not None else None,
        status=status, reason=r.text(TrialKey.REASON, limit=100_000),
        epochs_reached=r.integer(TrialKey.EPOCHS_REACHED),
        seconds=r.number(TrialKey.SECONDS),
        samples_per_second=r.number(TrialKey.SAMPLES_PER_SECOND),
        node=r.text(TrialKey.NODE), latency_ms=r.number(TrialKey.LATENCY_MS),
        checkpoint=r.text(TrialKey.CHECKPOINT),
        reused_from=r.integer(TrialKey.REUSED_FROM), rerun_of=r.integer(TrialKey.RERUN_OF),
        enqueued=r.text(TrialKey.ENQUEUED), tune_trial=r.text(TrialKey.TUNE_TRIAL),
        source_trial=r.integer(TrialKey.SOURCE_TRIAL),
        source_value=r.number(TrialKey.SOURCE_VALUE),
        seed=_seed(r), fault=r.text(TrialKey.FAULT, limit=64),
    )


#: The training seeds the trainer takes (numpy's 32 bits).
_SEED_MAX = 2**32 - 1


def _seed(r: _Reader) -> int | None:
    """``TrialKey.SEED``: an integer the trainer takes as its seed."""
    seed = r.integer(TrialKey.SEED)
    if seed is not None and seed > _SEED_MAX:
        raise r.fail(TrialKey.SEED, f"must be an integer <= {_SEED_MAX}, but is {seed}")
    return seed


def first_bad(study: str, rows: Sequence[tuple[int | None, str, Any]]) -> StoredValueError | None:
    """The first of ``rows`` (trial number or None for the study, key, JSON text) that does
    not decode, as the error that names it: what a reader reports when Optuna's own decoding
    of the study failed."""
    for trial, key, text in rows:
        try:
            loads(text, study=study, key=key, trial=trial)
        except StoredValueError as exc:
            return exc
    return None


# ----------------------------------------------------------------------------- through Optuna
_RAW_ROWS = """
SELECT CAST(NULL AS INTEGER) AS number, 'study:' || a.key AS key, a.value_json
  FROM study_user_attributes a JOIN studies s ON s.study_id = a.study_id WHERE s.study_name = :name
UNION ALL
SELECT CAST(NULL AS INTEGER), 'study system:' || a.key, a.value_json FROM study_system_attributes a
  JOIN studies s ON s.study_id = a.study_id WHERE s.study_name = :name
UNION ALL
SELECT t.number, a.key, a.value_json FROM trial_user_attributes a
  JOIN trials t ON t.trial_id = a.trial_id JOIN studies s ON s.study_id = t.study_id
  WHERE s.study_name = :name
UNION ALL
SELECT t.number, 'system:' || a.key, a.value_json FROM trial_system_attributes a
  JOIN trials t ON t.trial_id = a.trial_id JOIN studies s ON s.study_id = t.study_id
  WHERE s.study_name = :name
UNION ALL
SELECT t.number, 'param:' || p.param_name, p.distribution_json FROM trial_params p
  JOIN trials t ON t.trial_id = p.trial_id JOIN studies s ON s.study_id = t.study_id
  WHERE s.study_name = :name
"""


def diagnose(engine: Any, name: str, exc: BaseException) -> StoredValueError:
    """The error naming the stored value that made Optuna's own decoding of study ``name``
    fail with ``exc`` (found by decoding its rows one by one)."""
    import sqlalchemy as sa

    try:
        with engine.connect() as conn:
            rows = [(r[0], r[1].removeprefix("study:"), r[2])
                    for r in conn.execute(sa.text(_RAW_ROWS), {"name": name})]
    except Exception:  # the database's own error is reported as it is below
        rows = []
    found = first_bad(name, rows)
    if found is not None:
        return found
    return StoredValueError(name, "(unknown)", f"could not be decoded "
                                               f"({type(exc).__name__}: "
                                               f"{inert(first_line(exc, limit=300))})")


#: What Optuna's decoding of a stored value raises: json's errors (ValueError), a value nested
#: too deep for the decoder, an integer too long to convert or to make a float of.
DECODE_ERRORS = (ValueError, RecursionError, OverflowError, TypeError)


def guarded(engine: Any, name: str, read: Callable[[], T]) -> T:
    """``read()`` (an Optuna read of study ``name``), a stored value it cannot decode as the
    ``StoredValueError`` that names it."""
    try:
        return read()
    except NasError:
        raise
    except DECODE_ERRORS as exc:
        raise diagnose(engine, name, exc) from None


def parsed_trials(name: str, trials: Sequence[Any]) -> list[TrialAttrs]:
    """Each Optuna trial's typed ``nas.*`` attributes, in the order given."""
    return [trial_attrs(name, t.number, t.user_attrs) for t in trials]


def stored_geometry(study: str, raw: Mapping[str, Any]) -> TaskGeometry | None:
    """The study's stored task geometry (``StudyKey.GEOMETRY``), typed, or ``None``."""
    if raw.get(StudyKey.GEOMETRY) is None:
        return None
    return _Reader(study, raw).parse(StudyKey.GEOMETRY, _geometry)


def stored_text(study: str, raw: Mapping[str, Any], key: str) -> str | None:
    """One string-valued study attribute (``StudyKey.SPACE_HASH``, ``TUNE_DIR``, ...)."""
    return _Reader(study, raw).text(key)


# ----------------------------------------------------------------------------- epochs
def read_epochs(engine: Engine, study_name: str,
                trial_number: int | None = None) -> list[dict[str, Any]]:
    """Per-epoch rows of a study (or of one trial), ordered by trial and epoch; none where the
    database has no ``nas_epochs`` table (a study written by plain Optuna). A row no nas
    process wrote (a value of the wrong type, ``extra`` not a JSON mapping) is a
    ``StoredValueError`` naming the study, the trial and the column."""
    import sqlalchemy as sa

    from studies.store.storage import epochs_table, session

    query = sa.select(epochs_table).where(epochs_table.c.study_name == study_name)
    if trial_number is not None:
        query = query.where(epochs_table.c.trial_number == trial_number)
    query = query.order_by(epochs_table.c.trial_number, epochs_table.c.epoch)
    with session(str(engine.url)), engine.connect() as conn:
        if not sa.inspect(conn).has_table(epochs_table.name):
            return []
        try:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        except (ValueError, TypeError, OverflowError) as exc:
            raise StoredValueError(study_name, "nas_epochs", f"holds a row that cannot be read "
                                   f"({exc})") from None
    for r in rows:
        trial = r["trial_number"]
        where = trial if isinstance(trial, int) and not isinstance(trial, bool) else None
        for column, kinds in (("trial_number", (int,)), ("epoch", (int,)),
                              ("train_loss", (int, float, type(None))),
                              ("value", (int, float, type(None))),
                              ("seconds", (int, float, type(None))),
                              ("metric", (str, type(None)))):
            v = r[column]
            if isinstance(v, bool) or not isinstance(v, kinds) or (
                    isinstance(v, str) and len(v) > 64):
                raise StoredValueError(study_name, f"nas_epochs.{column}",
                                       f"of epoch row {r['id']} is not of its column's type",
                                       trial=where)
        extra = loads(r["extra"] or "{}", study=study_name, key="nas_epochs.extra", trial=where)
        if not isinstance(extra, dict):
            raise StoredValueError(study_name, "nas_epochs.extra", "must be a JSON mapping",
                                   trial=where)
        r["extra"] = extra
        r.pop("id", None)
    return rows
