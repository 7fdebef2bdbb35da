"""Study files: one frozen, validated description of a search.

A study file (YAML) has the keys of the contract: ``name``, ``task``, ``space``, ``objectives``,
``constraints``, ``sampler``, ``budget``, ``fidelity``, ``resources``, ``seed``; and, documented
here, ``train`` (fixed training settings), ``enqueue`` (architectures to evaluate first: preset
names, architecture files or inline mappings) and ``evaluator`` (``"module:function"``: a training
function with the signature of ``studies.worker.evaluate_trial`` that replaces the built-in
trainer on the workers, e.g. a user's own training loop; its module must be importable by the
driver and by every Ray worker, e.g. through ``PYTHONPATH``), and ``checkpoints`` (a folder,
stored absolute: each trained trial saves its weights in ``<folder>/<study>/trial-<N>/`` as
``nas train --out`` does, recorded as the trial's ``nas.checkpoint``; an evaluator of one's own
then receives ``checkpoint_dir`` and returns ``checkpoint``), and ``tune`` (Ray Tune's options:
``callbacks``, a list from ``csv``, ``json``, ``tensorboard``, ``mlflow``, ``wandb``;
``max_failures``, Tune's retries of a trial that raised; ``storage_path``, where Tune's
experiment folders go, default ``nas_runs/<study>`` under the current folder, stored absolute).
Unknown keys are an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nas.errors import ConfigError
from nas.loading import read_mapping
from studies.objectives import OBJECTIVES, Direction, Objective
from studies.smoke import Smoke, parse_smoke

__all__ = [
    "DEFAULT_SAMPLER",
    "MEASURED_DEFAULT",
    "OBJECTIVES",
    "UNTIL",
    "Budget",
    "Fidelity",
    "Objective",
    "Resources",
    "StudySpec",
    "TuneOptions",
    "default_sampler",
    "known_before_training",
    "load_study_spec",
]

_CONSTRAINTS = ("params_max", "madds_max", "latency_ms_max", "params_min", "madds_min")
_KEYS = ("name", "task", "space", "objectives", "constraints", "sampler", "budget", "fidelity",
         "resources", "seed", "train", "enqueue", "description", "evaluator", "checkpoints",
         "tune", "smoke")
# Bounds of the numbers in a study file (sizes are bounded by the architecture and task checks).
_MAX_TRIALS = 1_000_000
_MAX_MINUTES = 60 * 24 * 365.0
#: The values of ``budget.until``: what, besides the trial budget, ends a study.
UNTIL = ("converged",)
_MAX_EPOCHS = 100_000
_MAX_DEVICES = 4096.0
#: Seeds are the samplers' and numpy's: 0 .. 2**32 - 1 (a sampler adds the trial count).
_MAX_SEED = 2**32 - 1 - _MAX_TRIALS
#: Tune logger callbacks by name; ``json`` is always written (``ExperimentAnalysis`` reads it).
TUNE_CALLBACKS = ("csv", "json", "tensorboard", "mlflow", "wandb")
_EVALUATOR = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


#: The sampler a study file without ``sampler`` gets (chosen by ``benchmarks/search.py``).
DEFAULT_SAMPLER: Mapping[str, Any] = {"name": "costaware"}
#: The default where an objective is measured after training (``latency_ms``), which
#: ``costaware`` cannot know before it: the best measured of the others.
MEASURED_DEFAULT: Mapping[str, Any] = {"name": "gp"}


def known_before_training(sources: Sequence[str]) -> bool:
    """Whether objectives from ``sources`` (``metric``, ``cost``, ``measured``) are one metric
    and costs known before training: what ``costaware`` needs."""
    return sources.count("metric") == 1 and all(s in ("metric", "cost") for s in sources)


def default_sampler(sources: Sequence[str]) -> dict[str, Any]:
    """The default sampler of a study whose objectives come from ``sources``:
    :data:`DEFAULT_SAMPLER` where :func:`known_before_training`, else
    :data:`MEASURED_DEFAULT` (``studies.samplers`` builds it)."""
    return dict(DEFAULT_SAMPLER if known_before_training(sources) else MEASURED_DEFAULT)


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"Study key `{key}` must be a mapping, but got {value!r}.")
    return dict(value)


def _only(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigError(
            f"Unknown key {unknown[0]!r} in study `{where}`; valid keys are {list(allowed)}."
        )


def _number(value: Any, key: str, *, minimum: float = 0.0, maximum: float = math.inf,
            integer: bool = False) -> Any:
    """A finite number in [minimum, maximum] (an integer where ``integer``), or a ConfigError
    naming the key, the value and the rule."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"Study key `{key}` must be a number, but got {value!r}.")
    if not math.isfinite(value):
        raise ConfigError(f"Study key `{key}` must be a finite number, but got {value!r}.")
    if integer:
        if float(value) != int(value):
            raise ConfigError(f"Study key `{key}` must be an integer, but got {value!r}.")
        value = int(value)
    if value < minimum:
        raise ConfigError(f"Study key `{key} >= {minimum:g}` must hold, but got {value!r}.")
    if value > maximum:
        bound = int(maximum) if float(maximum).is_integer() else maximum
        raise ConfigError(f"Study key `{key} <= {bound}` must hold, but got {value!r}.")
    return value


#: Characters a study name may not hold: it names folders (checkpoints, Tune's runs).
_NAME_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("The study needs a `name` (a non-empty string), or pass --name.")
    name = name.strip()
    if _NAME_FORBIDDEN.search(name) or len(name) > 200 or name.startswith("."):
        raise ConfigError(f"Study name {name!r} must be one line of at most 200 characters, "
                          "without slashes or control characters, not starting with '.'.")
    return name


def _folder(value: Any, key: str) -> str | None:
    """A folder a study file names (``checkpoints``, ``tune.storage_path``), relative to where
    ``nas run`` runs, stored absolute so that a resume finds the same place."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"Study key `{key}` must be a directory path, but got {value!r}.")
    return str(Path(value.strip()).expanduser().absolute())


@dataclass(frozen=True)
class Budget:
    """``trials``: the total of counted trials; ``timeout_minutes``: the wall-clock limit of
    each run (``nas run``, and each ``nas resume``), as Optuna's ``timeout`` limits each
    ``optimize`` call; ``until``: ``converged`` stops the study earlier, once the default
    sampler's expected gains stay below the hypervolume's noise (``studies.convergence``)."""

    trials: int
    timeout_minutes: float | None = None
    until: str | None = None

    @classmethod
    def from_dict(cls, value: Any) -> Budget:
        """Study key ``budget``: ``{trials: N, timeout_minutes: M, until: converged}``,
        ``trials`` required."""
        data = _mapping(value, "budget")
        _only(data, ("trials", "timeout_minutes", "until"), "budget")
        if "trials" not in data:
            raise ConfigError("Study key `budget` needs `trials`, e.g. {trials: 12}.")
        timeout, until = data.get("timeout_minutes"), data.get("until")
        if until is not None and until not in UNTIL:
            raise ConfigError(f"Study key `budget.until` must be one of {', '.join(UNTIL)}, "
                              f"but got {until!r}.")
        return cls(
            trials=_number(data["trials"], "budget.trials", minimum=1, maximum=_MAX_TRIALS,
                           integer=True),
            timeout_minutes=None if timeout is None else float(
                _number(timeout, "budget.timeout_minutes", maximum=_MAX_MINUTES)),
            until=until,
        )

    def to_dict(self) -> dict[str, Any]:
        """The mapping :meth:`from_dict` reads (``until`` only where set: a study stored
        before it existed reads back equal)."""
        return {"trials": self.trials, "timeout_minutes": self.timeout_minutes,
                **({"until": self.until} if self.until else {})}

    def grown(self, *, counted: int, trials: int | None = None,
              timeout_minutes: float | None = None, until: str | None = None) -> Budget:
        """This budget with a new total of ``trials``, a new ``timeout_minutes`` and/or a new
        ``until`` (``nas resume --trials N --timeout-minutes M --until converged|budget``;
        ``budget`` drops ``until``: the study runs to its trials), for a study that has
        ``counted`` trials.

        Raises:
            ConfigError: a total below ``counted`` (the message names both numbers), or a value
                outside the bounds a study file has.
        """
        if trials is not None:
            if isinstance(trials, bool) or not isinstance(trials, int) or not (
                    1 <= trials <= _MAX_TRIALS):
                raise ConfigError(f"--trials must be an integer from 1 to {_MAX_TRIALS}, but "
                                  f"got {trials!r}.")
            if trials < counted:
                raise ConfigError(
                    f"--trials {trials} is fewer than the {counted} trials the study has already "
                    f"counted; --trials is the new total budget: pass {counted} or more.")
        if timeout_minutes is not None and not (
                isinstance(timeout_minutes, (int, float)) and not isinstance(timeout_minutes, bool)
                and 0 < timeout_minutes <= _MAX_MINUTES):
            raise ConfigError(f"--timeout-minutes must be a number of minutes above 0 and at "
                              f"most {_MAX_MINUTES:g}, but got {timeout_minutes!r}.")
        if until is not None and until not in (*UNTIL, "budget"):
            raise ConfigError(f"--until must be one of {', '.join((*UNTIL, 'budget'))}, but got "
                              f"{until!r}.")
        return Budget(trials=self.trials if trials is None else trials,
                      timeout_minutes=(self.timeout_minutes if timeout_minutes is None
                                       else float(timeout_minutes)),
                      until=self.until if until is None else None if until == "budget" else until)


@dataclass(frozen=True)
class Fidelity:
    """Epochs per trial and the early-stopping schedule across trials.

    ``early_stopping`` is ``none`` or ``asha`` (multi-objective: a trial continues past a rung
    when it is non-dominated among the trials that reached that rung, or in the best
    1/reduction_factor of them); rungs at ``grace_epochs * reduction_factor**i``.
    """

    epochs: int = 3
    early_stopping: Literal["none", "asha"] = "none"
    grace_epochs: int = 1
    reduction_factor: int = 2

    @classmethod
    def from_dict(cls, value: Any) -> Fidelity:
        """Study key ``fidelity`` (each key optional)."""
        data = _mapping(value, "fidelity")
        _only(data, ("epochs", "early_stopping", "grace_epochs", "reduction_factor"), "fidelity")
        stopping = data.get("early_stopping", "none")
        if stopping is None or stopping is False:
            stopping = "none"
        if stopping not in ("none", "asha"):
            raise ConfigError(f"Study key `fidelity.early_stopping` must be 'none' or 'asha', "
                              f"but got {stopping!r}.")
        return cls(
            epochs=_number(data.get("epochs", 3), "fidelity.epochs", minimum=1,
                           maximum=_MAX_EPOCHS, integer=True),
            early_stopping=stopping,
            grace_epochs=_number(data.get("grace_epochs", 1), "fidelity.grace_epochs",
                                 minimum=1, maximum=_MAX_EPOCHS, integer=True),
            reduction_factor=_number(data.get("reduction_factor", 2),
                                     "fidelity.reduction_factor", maximum=_MAX_EPOCHS,
                                     minimum=2, integer=True),
        )


@dataclass(frozen=True)
class Resources:
    """What each trial asks Ray for (study key ``resources``)."""

    cpu: float = 1.0
    gpu: float = 0.0

    @classmethod
    def from_dict(cls, value: Any) -> Resources:
        """Study key ``resources``: ``{cpu: 1, gpu: 0.5}``, some cpu or gpu."""
        data = _mapping(value, "resources")
        _only(data, ("cpu", "gpu"), "resources")
        resources = cls(
            cpu=float(_number(data.get("cpu", 1), "resources.cpu", maximum=_MAX_DEVICES)),
            gpu=float(_number(data.get("gpu", 0), "resources.gpu", maximum=_MAX_DEVICES)))
        if resources.cpu <= 0 and resources.gpu <= 0:
            raise ConfigError("Study key `resources` must ask for some cpu or gpu per trial.")
        return resources


@dataclass(frozen=True)
class TuneOptions:
    """Ray Tune's options of a study (study key ``tune``)."""

    callbacks: tuple[str, ...] = ("csv", "json")
    max_failures: int = 0
    storage_path: str | None = None  # absolute; None: nas_runs/<study> where the run starts

    def to_dict(self) -> dict[str, Any]:
        return {"callbacks": list(self.callbacks), "max_failures": self.max_failures,
                **({"storage_path": self.storage_path} if self.storage_path else {})}

    @classmethod
    def from_dict(cls, value: Any) -> TuneOptions:
        """Study key ``tune`` (each key optional; ``json`` is always among the callbacks)."""
        options = _mapping(value, "tune")
        _only(options, ("callbacks", "max_failures", "storage_path"), "tune")
        callbacks = options.get("callbacks", ["csv", "json"])
        if isinstance(callbacks, str):
            callbacks = [callbacks]
        if not isinstance(callbacks, list) or not all(isinstance(c, str) for c in callbacks):
            raise ConfigError(f"Study key `tune.callbacks` must be a list of names from "
                              f"{list(TUNE_CALLBACKS)}, but got {callbacks!r}.")
        for name in callbacks:
            if name not in TUNE_CALLBACKS:
                raise ConfigError(f"Unknown Tune callback {name!r} in `tune.callbacks`; "
                                  f"callbacks are {list(TUNE_CALLBACKS)}.")
        ordered = tuple(dict.fromkeys([*callbacks, "json"]))
        return cls(
            callbacks=ordered, storage_path=_folder(options.get("storage_path"),
                                                    "tune.storage_path"),
            max_failures=_number(options.get("max_failures", 0), "tune.max_failures",
                                 maximum=1000,
                                 integer=True))


@dataclass(frozen=True)
class StudySpec:
    """A validated study file. ``to_dict()`` is what is stored with the study."""

    name: str
    task: str
    task_options: dict[str, Any]
    space: str | dict[str, Any]
    objectives: tuple[Objective, ...]
    constraints: dict[str, float] = field(default_factory=dict)
    sampler: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_SAMPLER))
    budget: Budget = Budget(trials=12)
    fidelity: Fidelity = Fidelity()
    resources: Resources = Resources()
    seed: int = 0
    train: dict[str, Any] = field(default_factory=dict)
    enqueue: tuple[Any, ...] = ()
    description: str = ""
    evaluator: str | None = None
    checkpoints: str | None = None  # absolute directory: each trial's weights, when set
    tune: TuneOptions = TuneOptions()
    smoke: Smoke | None = None  # the smoke scale (studies.smoke), None: the space as it is

    @property
    def directions(self) -> list[Direction]:
        return [o.direction for o in self.objectives]

    @property
    def objective_names(self) -> list[str]:
        return [o.name for o in self.objectives]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description,
            "task": {"name": self.task, **self.task_options}, "space": self.space,
            "objectives": [{"name": o.name, "direction": o.direction} for o in self.objectives],
            "constraints": dict(self.constraints), "sampler": dict(self.sampler),
            "budget": self.budget.to_dict(),
            "fidelity": {"epochs": self.fidelity.epochs,
                         "early_stopping": self.fidelity.early_stopping,
                         "grace_epochs": self.fidelity.grace_epochs,
                         "reduction_factor": self.fidelity.reduction_factor},
            "resources": {"cpu": self.resources.cpu, "gpu": self.resources.gpu},
            "seed": self.seed, "train": dict(self.train), "enqueue": list(self.enqueue),
            **({"evaluator": self.evaluator} if self.evaluator else {}),
            **({"checkpoints": self.checkpoints} if self.checkpoints else {}),
            "tune": self.tune.to_dict(),
            **({"smoke": self.smoke.to_dict()} if self.smoke else {}),
        }

    def checkpoint_dir(self, number: int) -> str | None:
        """Where trial ``number`` saves its weights (``checkpoints/<study>/trial-<N>``)."""
        if self.checkpoints is None:
            return None
        return str(Path(self.checkpoints) / self.name / f"trial-{number}")

    def training_key(self) -> str:
        """Hash of everything besides the architecture that decides a trial's result."""
        blob = json.dumps({"task": {"name": self.task, **self.task_options},
                           "train": self.train, "epochs": self.fidelity.epochs,
                           "seed": self.seed,
                           **({"evaluator": self.evaluator} if self.evaluator else {})},
                          sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str | None = None) -> StudySpec:
        """A study file's mapping, validated key by key (in the order of the file's keys
        below, so the first error is always the same); ``name`` overrides its ``name``."""
        if not isinstance(data, Mapping):
            raise ConfigError("A study file must hold a mapping.")
        _only(data, _KEYS, "file")
        study_name = _check_name(name or data.get("name"))
        task_name, task_options = _task(data.get("task"))
        space = data.get("space")
        if not isinstance(space, (str, Mapping)):
            raise ConfigError(f"Study key `space` must name a search space or hold one inline, "
                              f"but got {space!r}.")
        objectives = _objectives(data.get("objectives"))
        constraints = _constraints(data.get("constraints"))
        sampler = _sampler(data.get("sampler"), objectives)
        budget = Budget.from_dict(data.get("budget"))
        check_until(budget, sampler)
        fidelity = Fidelity.from_dict(data.get("fidelity"))
        resources = Resources.from_dict(data.get("resources"))
        train = _train(data.get("train"))
        enqueue = data.get("enqueue") or []
        if not isinstance(enqueue, list):
            raise ConfigError("Study key `enqueue` must be a list of presets, files or mappings.")
        evaluator = data.get("evaluator")
        if evaluator is not None and not (isinstance(evaluator, str)
                                          and _EVALUATOR.fullmatch(evaluator)):
            raise ConfigError(f"Study key `evaluator` must be 'module:function' (e.g. "
                              f"'my_trainer:evaluate'), but got {evaluator!r}.")
        checkpoints = _folder(data.get("checkpoints"), "checkpoints")
        tune = TuneOptions.from_dict(data.get("tune"))
        return cls(
            name=study_name, task=task_name, task_options=task_options,
            space=dict(space) if isinstance(space, Mapping) else space,
            objectives=objectives, constraints=constraints, sampler=sampler, budget=budget,
            fidelity=fidelity, resources=resources,
            seed=_number(data.get("seed", 0), "seed", maximum=_MAX_SEED, integer=True),
            train=train, enqueue=tuple(enqueue), description=str(data.get("description") or ""),
            evaluator=evaluator, checkpoints=checkpoints, tune=tune,
            smoke=parse_smoke(data.get("smoke")),
        )


# ----------------------------------------------------------------------------- the keys
def check_until(budget: Budget, sampler: Mapping[str, Any]) -> None:
    """``budget.until: converged`` needs the sampler that records the gains it reads.

    Raises:
        ConfigError: another sampler (one line).
    """
    if budget.until == "converged" and sampler["name"] != "costaware":
        raise ConfigError(
            "Study key `budget.until: converged` needs the default sampler 'costaware' (it "
            "estimates each trial's expected hypervolume gain), but the study's sampler is "
            f"{sampler['name']!r}.")


def _task(value: Any) -> tuple[str, dict[str, Any]]:
    """Study key ``task``: a task name, or a mapping with ``name`` and the task's options."""
    if isinstance(value, str):
        return value, {}
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        return value["name"], {k: v for k, v in value.items() if k != "name"}
    raise ConfigError(f"Study key `task` must be a task name or a mapping with `name`, "
                      f"but got {value!r}.")


def _objectives(value: Any) -> tuple[Objective, ...]:
    """Study key ``objectives``: names of :data:`OBJECTIVES`, each with its default direction
    unless it gives one (default: accuracy, params, madds)."""
    if value is None:
        value = [{"name": "accuracy"}, {"name": "params"}, {"name": "madds"}]
    if not isinstance(value, list) or not value:
        raise ConfigError("Study key `objectives` must be a non-empty list of "
                          "{name, direction}.")
    out: list[Objective] = []
    for item in value:
        entry = {"name": item} if isinstance(item, str) else item
        if not isinstance(entry, Mapping):
            raise ConfigError(f"An objective must be {{name, direction}}, got {item!r}.")
        _only(entry, ("name", "direction"), "objectives")
        name = entry.get("name")
        if not isinstance(name, str) or name not in OBJECTIVES:
            raise ConfigError(f"Unknown objective {name!r}; objectives are "
                              f"{list(OBJECTIVES)}.")
        declared = OBJECTIVES[name]
        direction = entry.get("direction", declared.direction)
        if direction not in ("minimize", "maximize"):
            raise ConfigError(f"Objective {name!r}: direction must be 'minimize' or "
                              f"'maximize', but got {direction!r}.")
        if any(o.name == name for o in out):
            raise ConfigError(f"Objective {name!r} is listed twice.")
        chosen: Direction = "minimize" if direction == "minimize" else "maximize"
        out.append(dataclasses.replace(declared, direction=chosen))
    return tuple(out)


def _constraints(value: Any) -> dict[str, float]:
    """Study key ``constraints``: bounds from ``_CONSTRAINTS``, each a number."""
    constraints = _mapping(value, "constraints")
    _only(constraints, _CONSTRAINTS, "constraints")
    return {k: float(_number(v, f"constraints.{k}")) for k, v in constraints.items()}


def _sampler(value: Any, objectives: tuple[Objective, ...]) -> dict[str, Any]:
    """Study key ``sampler`` (default: :func:`default_sampler` of the objectives' sources);
    ``costaware`` only for objectives known before training."""
    sources = [o.source for o in objectives]
    sampler = _mapping(value or default_sampler(sources), "sampler")
    if not isinstance(sampler.get("name"), str):
        raise ConfigError("Study key `sampler` needs a `name`, e.g. {name: nsga2}.")
    if sampler["name"] == "costaware" and not known_before_training(sources):
        later = [o.name for o in objectives if o.source not in ("metric", "cost")]
        raise ConfigError(
            "Sampler 'costaware' needs the task's metric and costs known before training "
            "(params, madds) as the objectives; "
            + (f"{later[0]!r} is measured after training." if later
               else "the objectives have no metric."))
    return sampler


def _train(value: Any) -> dict[str, Any]:
    """Study key ``train``: fixed training settings, not the epochs nor the seed (the study's
    own keys)."""
    train = _mapping(value, "train")
    for key in ("epochs", "seed"):
        if key in train:
            raise ConfigError(f"Study key `train.{key}` is set by the study itself: use "
                              f"`{'fidelity.epochs' if key == 'epochs' else 'seed'}`.")
    return train


def load_study_spec(path: str | Path, *, name: str | None = None) -> StudySpec:
    """Read and validate a study file; ``name`` overrides its ``name``."""
    return StudySpec.from_dict(read_mapping(path, "study file"), name=name)
