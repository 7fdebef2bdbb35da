"""The study-file reference, rendered from what the study parser accepts.

The keys are not listed by hand: each section's keys are read from the parser's own refusal of
an unknown key (``StudySpec.from_dict`` answers ``valid keys are [...]``), the samplers and their
options from ``studies.samplers.make_sampler``'s, the defaults from the dataclasses a study file
becomes. What a key means is written here, in :data:`MEANINGS`; a key the parser accepts without
a meaning here (or a meaning for a key it no longer accepts) fails the docs build, so the page
cannot fall behind the parser.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

__all__ = ["MEANINGS", "SAMPLER_MEANINGS", "accepted_keys", "objective_names", "sampler_options",
           "study_keys"]

#: What each study key means: ``"budget.trials"`` for a section's key.
MEANINGS: dict[str, str] = {
    "name": "the study's name in the database (`nas run --name` overrides it); one line, no "
            "slashes, at most 200 characters",
    "description": "free text stored with the study",
    "task": "a task name (`digits`), or a mapping with `name` and the task's options "
            "(`{name: image-folder, root: /data/pets}`); see *Bring your own data*",
    "space": "a search space shipped in `search_spaces/` by name, a path to a space file, or "
             "a space inline",
    "objectives": "a list of `{name, direction}`; `direction` defaults to the objective's own",
    "objectives.name": "the objective (below)",
    "objectives.direction": "`maximize` or `minimize`",
    "constraints": "bounds checked on the meta-device cost before any training (latency after "
                   "it); a trial outside them is rejected with the reason and not counted",
    "constraints.params_max": "at most this many parameters",
    "constraints.madds_max": "at most this many multiply-adds per sample",
    "constraints.latency_ms_max": "at most this latency (measured after training)",
    "constraints.params_min": "at least this many parameters",
    "constraints.madds_min": "at least this many multiply-adds",
    "sampler": "`{name: ..., OPTION: VALUE}`: which sampler draws the trials (below); `gp` "
               "where an objective is measured after training",
    "budget": "when the study is done; `nas resume --trials/--timeout-minutes` grows it",
    "budget.trials": "the total of counted trials: completed, pruned or failed; rejected and "
                     "interrupted trials are not counted",
    "budget.timeout_minutes": "the wall-clock limit of each run (`nas run`, and each "
                              "`nas resume`), as Optuna's `timeout` limits each `optimize` call",
    "budget.until": "`converged`: stop before `trials` once the default sampler's expected "
                    "hypervolume gains stay below the hypervolume's noise (needs `costaware`; "
                    "see *Budgets and growing a study*)",
    "fidelity": "how long each trial trains and when it is stopped early",
    "fidelity.epochs": "epochs per trial",
    "fidelity.early_stopping": "`none` or `asha`: multi-objective successive halving over "
                               "the trials that reached a rung",
    "fidelity.grace_epochs": "the first rung's epoch",
    "fidelity.reduction_factor": "rungs at `grace_epochs * reduction_factor**i`; a trial "
                                 "continues when non-dominated among the trials at its rung, or "
                                 "in their best 1/reduction_factor",
    "resources": "what each trial asks Ray for",
    "resources.cpu": "CPUs per trial",
    "resources.gpu": "GPUs per trial; a fraction shares a card (`0.5`: two trials a GPU)",
    "seed": "the study's seed: the sampler's and each trial's training seed",
    "train": "training settings over the task's defaults (those `nas train` uses); a space may "
             "search some; `epochs` and `seed` come from `fidelity.epochs` and `seed`",
    "enqueue": "architectures evaluated first: preset names, architecture files or mappings",
    "evaluator": "`module:function`, your own training function (the signature of "
                 "`studies.worker.evaluate_trial`) run instead of the built-in trainer; "
                 "importable on the driver and every Ray worker",
    "checkpoints": "a folder: each trained trial keeps its weights in "
                   "`<folder>/<study>/trial-<N>/` (stored absolute; on a cluster, a shared path)",
    "tune": "Ray Tune's options",
    "tune.callbacks": "Tune's loggers, from `csv`, `json`, `tensorboard`, `mlflow`, `wandb` "
                      "(`json` is always written)",
    "tune.max_failures": "how often Tune retries a trial that raised before it is recorded "
                         "failed",
    "tune.storage_path": "where Tune's experiment folders go (default `nas_runs/<study>` under "
                         "the current folder; on a cluster, a folder every node sees)",
    "smoke": "`true`, or a mapping of the caps below: try the space at a laptop's scale (every "
             "architecture drawn is shrunk before it is costed; on `synthetic-vqa` the trials "
             "train batches of 16 at a constant rate unless `train` says otherwise)",
    "smoke.width": "`d_model` at most this (a multiple of heads and groups; `d_ff` in "
                   "proportion)",
    "smoke.depth": "each stack and each Swin stage at most this many layers",
    "smoke.steps": "each epoch at most this many batches",
}

#: What each sampler is (its options are Optuna's, listed from the code).
SAMPLER_MEANINGS: dict[str, str] = {
    "costaware": "the default: costs candidates exactly before training and learns only "
                 "accuracy, with a Gaussian process (`studies/costaware.py`)",
    "gp": "Optuna's `GPSampler`; the default where an objective is measured after training "
          "(`latency_ms`)",
    "tpe": "Optuna's `TPESampler` (multivariate, constant liar)",
    "nsga2": "Optuna's `NSGAIISampler`",
    "nsga3": "Optuna's `NSGAIIISampler`",
    "auto": "TPE for the first trials, then NSGA-II",
    "random": "Optuna's `RandomSampler`",
    "qmc": "Optuna's `QMCSampler` (quasi-Monte Carlo)",
}

#: A study file that parses: each probe adds one unknown key to one section of it.
_BASE: dict[str, Any] = {"name": "probe", "task": "digits", "space": "quickstart",
                         "budget": {"trials": 1}}
_PROBE = "__docs_probe__"
_LISTED = re.compile(r"(?:valid keys|objectives|samplers|its options) are (\[.*?\])")


def _listed(parse: Callable[[dict[str, Any]], object], data: dict[str, Any]) -> list[str]:
    """The list ``parse`` names when it refuses ``data`` (``valid keys are [...]``)."""
    from nas.errors import ConfigError

    try:
        parse(data)
    except ConfigError as exc:
        match = _LISTED.search(str(exc))
        if match:
            return list(ast.literal_eval(match.group(1)))
        raise
    raise AssertionError(f"{parse.__qualname__} accepted {data!r}")


def _refusal(data: dict[str, Any]) -> list[str]:
    """The list the study parser names when it refuses ``data``."""
    from studies import StudySpec

    return _listed(StudySpec.from_dict, data)


def accepted_keys() -> dict[str, list[str]]:
    """Section (``""`` for the file's top level) -> the keys the study parser accepts there."""
    keys = {"": _refusal({**_BASE, _PROBE: 1})}
    for section in _SECTIONS:
        value = {**_BASE.get(section, {}), _PROBE: 1}
        keys[section] = _refusal({**_BASE, section: value})
    keys["objectives"] = _refusal({**_BASE, "objectives": [{"name": "accuracy", _PROBE: 1}]})
    return keys


def objective_names() -> list[str]:
    """The objectives a study may name."""
    return _refusal({**_BASE, "objectives": [{"name": _PROBE}]})


def sampler_options() -> dict[str, list[str]]:
    """Sampler name -> the options a study file may give it."""
    from studies.samplers import make_sampler

    def parse(spec: dict[str, Any]) -> object:
        return make_sampler(spec, 0)

    return {name: _listed(parse, {"name": name, _PROBE: 1})
            for name in _listed(parse, {"name": _PROBE})}


def _defaults() -> dict[str, Any]:
    """Dotted key -> its default: what the parser makes of a file that leaves it out."""
    from studies import StudySpec
    from studies.smoke import parse_smoke

    parsed = StudySpec.from_dict(_BASE).to_dict()
    out: dict[str, Any] = {}
    for key, value in parsed.items():
        if isinstance(value, dict) and key not in ("task", "sampler", "train"):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    out["objectives"] = [o["name"] for o in parsed["objectives"]]
    smoke = parse_smoke(True)
    out.update({f"smoke.{k}": v for k, v in (smoke.to_dict() if smoke else {}).items()})
    return out


def _direction(name: str) -> str:
    from studies import StudySpec

    spec = StudySpec.from_dict({**_BASE, "objectives": [{"name": name}]})
    return str(spec.objectives[0].direction)


#: Keys a study file must give (the parser's defaults for them are placeholders).
_REQUIRED = {"name": "(required, or `--name`)", "task": "(required)", "space": "(required)",
             "budget": "(required)", "budget.trials": "(required)"}
_SECTIONS = ("constraints", "budget", "fidelity", "resources", "tune", "smoke")


def _text(value: Any) -> str:
    if value is None or value == "" or value == () or value == {}:
        return "-"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list, dict)):
        import yaml

        return f"`{yaml.safe_dump(value, default_flow_style=True, sort_keys=False).strip()}`"
    return f"`{value}`"


def _check(keys: dict[str, list[str]]) -> list[str]:
    """Every accepted key as a dotted name, after checking each has a meaning and back."""
    dotted = [*keys[""]]
    dotted += [f"{section}.{key}" for section, names in keys.items() if section
               for key in names]
    missing = [k for k in dotted if k not in MEANINGS]
    stale = [k for k in MEANINGS if k not in dotted]
    if missing or stale:
        raise ValueError(f"docs/_study_keys.py MEANINGS is out of step with the study parser: "
                         f"no meaning for {missing}, meanings for keys it refuses {stale}")
    return dotted


def study_keys() -> str:
    """The reference of every study-file key, as Markdown tables."""
    keys = accepted_keys()
    _check(keys)
    defaults = _defaults()
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for key in keys[""]:
        default = _REQUIRED.get(key) or ("see below" if key in _SECTIONS
                                         else _text(defaults.get(key)))
        lines.append(f"| `{key}` | {default} | {MEANINGS[key]} |")
    for section, names in keys.items():
        if not section:
            continue
        lines += ["", f"### `{section}`", "", MEANINGS[section][0].upper()
                  + MEANINGS[section][1:] + ".", "", "| key | default | meaning |",
                  "|---|---|---|"]
        for key in names:
            dotted = f"{section}.{key}"
            default = _REQUIRED.get(dotted) or _text(defaults.get(dotted))
            lines.append(f"| `{key}` | {default} | {MEANINGS[dotted]} |")
    lines += ["", "### Objective names", "", "| `objectives.name` | default direction |",
              "|---|---|"]
    lines += [f"| `{name}` | {_direction(name)} |" for name in objective_names()]
    options = sampler_options()
    unknown = sorted(set(options) ^ set(SAMPLER_MEANINGS))
    if unknown:
        raise ValueError(f"docs/_study_keys.py SAMPLER_MEANINGS is out of step with "
                         f"studies.samplers: {unknown}")
    lines += ["", "### Samplers", "", "| `sampler.name` | what it is | options |",
              "|---|---|---|"]
    lines += [f"| `{name}` | {SAMPLER_MEANINGS[name]} | "
              f"{', '.join(f'`{o}`' for o in opts) or '-'} |" for name, opts in options.items()]
    return "\n".join(lines) + "\n"
