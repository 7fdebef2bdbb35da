"""Bad input to every command: exit code 2, one line on stderr, nothing written.

Each case runs ``nas`` in-process against a workspace holding a study database (a finished study
``s`` with a few trials) and whatever files the case brings (written before the snapshot). Every
file under the workspace is hashed before and after: a case passes only if it changed nothing
and created nothing, whatever it was pointed at. Cases that would start Ray or train are refused
before either.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import study_helpers as h
import yaml
from optuna.trial import TrialState

from nas.cost import estimate_cost
from nas_cli.main import main as nas_main
from studies import StudySpec, create_study
from studies.store import Status, TrialKey

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Case:
    """``argv`` with ``{root}``, ``{db}`` (the study database's URL), ``{corrupt}`` (a copy whose
    trial attribute holds broken JSON) filled in; ``files`` written under the case's folder."""

    id: str
    argv: tuple[str, ...]
    files: dict[str, bytes | str] = field(default_factory=dict)
    code: int = 2
    contains: str = ""


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def _study(**overrides: Any) -> str:
    return _yaml({**h.study_dict("fuzzed"), **overrides})


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}]\n" for i in range(9))
BINARY = bytes(range(256)) * 8

# ----------------------------------------------------------------------------- nas cost
_KNOBS: list[tuple[str, Any]] = [
    ("d_model", -1), ("d_model", 0), ("d_model", 10**7), ("d_model", "wide"), ("d_model", 1.5),
    ("d_model", True), ("d_model", ".nan"), ("d_model", ".inf"), ("d_ff", -5), ("d_ff", 10**9),
    ("heads", 0), ("heads", 7), ("heads", 10**6), ("groups", 0), ("groups", -2), ("groups", 5),
    ("groups", 10**6), ("qk_multiplier", 0), ("qk_multiplier", 10**6), ("encoder_layers", 0),
    ("encoder_layers", 10**7), ("encoder_layers", "1e7"), ("patch_size", 0),
    ("patch_size", 10**5), ("layer_sharing", '"(0x1000000000)"'),
    ("layer_sharing", '"(0x3,1x3)"'), ("layer_sharing", '"' + "0," * 5000 + '0"'),
    ("layer_sharing", '"(x)"'), ("layer_sharing", "{colour: '(0x4)'}"),
    ("attention_sharing", "vk"), ("attention_sharing", 3), ("group_attention", "maybe"),
    ("weight_sharing", 2), ("radix_base", 1), ("family", "resnet"), ("colour", "red"),
    ("depths", "[2, 2]"), ("window_size", 0),
]
COST = [Case(f"cost-{k}={v}", ("cost", "deit-tiny", "--set", f"{k}={v}")) for k, v in _KNOBS]
COST += [
    Case("cost-unknown-preset", ("cost", "deit-colossal")),
    Case("cost-unknown-task", ("cost", "deit-tiny", "--task", "mnist")),
    Case("cost-set-no-equals", ("cost", "deit-tiny", "--set", "d_model")),
    Case("cost-swin-groups", ("cost", "swin-tiny", "--set", "groups=5")),
    Case("cost-mcan-radix", ("cost", "mcan-small", "--set", "radix_base=2")),
    Case("cost-ort-radix-huge", ("cost", "ort-base", "--set", "radix_base=1000000000")),
    Case("cost-lxmert-layers", ("cost", "lxmert", "--set", "cross_layers=-1")),
]
_FILES: dict[str, bytes | str] = {
    "missing": "", "binary.yaml": BINARY, "binary.json": BINARY, "empty.yaml": "",
    "list.yaml": "- 1\n- 2\n", "scalar.json": "3", "broken.json": '{"family": "vit",',
    "broken.yaml": "family: [vit\n", "bomb.yaml": ALIAS_BOMB, "nul.yaml": "family: vi\x00t\n",
    "huge.yaml": "family: vit\n" + "#" * (3 << 20) + "\n",
    "unknown.yaml": "family: vit\ncolour: red\n", "nan.yaml": "family: vit\nd_model: .nan\n",
}
COST += [Case(f"cost-file-{name}", ("cost", f"{{root}}/{name}"),
              files={} if name == "missing" else {name: content})
         for name, content in _FILES.items()]

# ----------------------------------------------------------------------------- nas train
TRAIN = [
    Case("train-no-task", ("train", "deit-tiny")),
    Case("train-unknown-task", ("train", "deit-tiny", "--task", "mnist")),
    Case("train-cost-only-task", ("train", "deit-tiny", "--task", "imagenet")),
    Case("train-family-task", ("train", "mcan-small", "--task", "digits")),
    Case("train-epochs-0", ("train", "deit-tiny", "--task", "digits", "--epochs", "0")),
    Case("train-epochs-word", ("train", "deit-tiny", "--task", "digits", "--epochs", "x")),
    Case("train-seed-huge", ("train", "deit-tiny", "--task", "digits", "--seed", str(2**40))),
    Case("train-seed-negative", ("train", "deit-tiny", "--task", "digits", "--seed", "-1")),
]
_TRAIN_SET = ["lr=.nan", "lr=-1", "lr=.inf", "lr=fast", "batch_size=0", "batch_size=1e9",
              "device=cuda", "device=tpu", "colour=red", "grad_clip=-1", "warmup_epochs=-1",
              "max_steps_per_epoch=0", "dropout=2", "seed=.nan"]
TRAIN += [Case(f"train-set-{s}", ("train", "deit-tiny", "--task", "digits", "--train-set", s,
                                  "--out", "{root}/out"))
          for s in _TRAIN_SET]
_TASK_SET = [("digits", "train_size=1e9"), ("digits", "image_size=100000"),
             ("digits", "colour=red"), ("synthetic-vqa", "train_size=1e9"),
             ("synthetic-vqa", "regions=-3"), ("synthetic-captions", "vocab_size=1e9"),
             ("image-folder", "root={root}/nowhere"), ("cifar", "root={root}/nowhere"),
             ("vqa-files", "root={root}/nowhere"), ("coco-files", "root={root}/nowhere"),
             ("image-folder", "image_size=100000")]
TRAIN += [Case(f"train-task-{task}-{s.split('=')[0]}",
               ("train", "mcan-small" if "vqa" in task else "ort-base" if "coco" in task
                or "captions" in task else "deit-tiny", "--task", task, "--task-set", s))
          for task, s in _TASK_SET]
TRAIN += [
    Case("train-out-is-a-file", ("train", "deit-tiny", "--task", "digits", "--out",
                                 "{root}/a-file/x"), files={"a-file": "x"}),
    Case("train-cifar-pickle-bomb", ("train", "deit-tiny", "--task", "cifar", "--task-set",
                                     "root={root}/cifar"),
         files={"cifar/cifar-10-batches-py/data_batch_1": b"cos\nsystem\n(S'true'\ntR.",
                **{f"cifar/cifar-10-batches-py/data_batch_{i}": b"x" for i in range(2, 6)},
                "cifar/cifar-10-batches-py/test_batch": b"x"}),
]

# ----------------------------------------------------------------------------- nas run
_STUDIES: dict[str, Any] = {
    "unknown-key": {"colour": "red"}, "budget-inf": {"budget": {"trials": ".inf"}},
    "budget-nan": {"budget": {"trials": ".nan"}}, "budget-0": {"budget": {"trials": 0}},
    "budget-huge": {"budget": {"trials": 10**12}}, "budget-word": {"budget": {"trials": "many"}},
    "timeout-nan": {"budget": {"trials": 3, "timeout_minutes": ".nan"}},
    "timeout-negative": {"budget": {"trials": 3, "timeout_minutes": -1}},
    "epochs-0": {"fidelity": {"epochs": 0}}, "epochs-huge": {"fidelity": {"epochs": 10**9}},
    "asha-unknown": {"fidelity": {"epochs": 2, "early_stopping": "median"}},
    "grace-0": {"fidelity": {"epochs": 2, "grace_epochs": 0}},
    "objective-unknown": {"objectives": ["speed"]}, "objectives-empty": {"objectives": []},
    "objective-twice": {"objectives": ["params", "params"]},
    "direction-bad": {"objectives": [{"name": "params", "direction": "down"}]},
    "constraint-nan": {"constraints": {"params_max": ".nan"}},
    "constraint-inf": {"constraints": {"params_max": "-.inf"}},
    "constraint-unknown": {"constraints": {"params_maximum": 5}},
    "constraint-hopeless": {"constraints": {"params_max": 10}},
    "sampler-unknown": {"sampler": {"name": "annealing"}},
    "sampler-option": {"sampler": {"name": "nsga2", "populaton_size": 8}},
    "sampler-bad-value": {"sampler": {"name": "nsga2", "population_size": -1}},
    "resources-cpu-100": {"resources": {"cpu": 100}},
    "resources-gpu": {"resources": {"cpu": 1, "gpu": 1}},
    "resources-nan": {"resources": {"cpu": ".nan"}}, "resources-none": {"resources": {"cpu": 0}},
    "resources-unknown": {"resources": {"tpu": 1}},
    "seed-huge": {"seed": 2**40}, "seed-negative": {"seed": -1}, "seed-nan": {"seed": ".nan"},
    "train-unknown": {"train": {"colour": "red"}}, "train-lr-nan": {"train": {"lr": ".nan"}},
    "train-epochs": {"train": {"epochs": 3}}, "train-device": {"train": {"device": "cuda"}},
    "train-batch": {"train": {"batch_size": 0}},
    "task-unknown": {"task": "mnist"}, "task-option": {"task": {"name": "digits", "size": 3}},
    "task-root": {"task": {"name": "image-folder", "root": "/nonexistent/pets"}},
    "task-huge": {"task": {"name": "digits", "train_size": 10**9}},
    "space-unknown": {"space": "no_such_space"},
    "space-knob": {"space": {**h.SMALL_SPACE, "arch": {"colour": {"choices": [1, 2]}}}},
    "space-bound": {"space": {**h.SMALL_SPACE,
                              "arch": {"d_model": {"low": 32, "high": 10**9, "step": 32}}}},
    "space-inverted": {"space": {**h.SMALL_SPACE, "arch": {"heads": {"low": 8, "high": 2}}}},
    "name-dotdot": {"name": ".."}, "name-slash": {"name": "a/b"}, "name-empty": {"name": " "},
    "name-newline": {"name": "a\nb"}, "name-long": {"name": "n" * 300},
    "tune-callback": {"tune": {"callbacks": ["csv", "carrier-pigeon"]}},
    "tune-failures": {"tune": {"max_failures": -1}}, "tune-unknown": {"tune": {"retries": 2}},
    "enqueue-unknown": {"enqueue": ["deit-colossal"]},
    "enqueue-outside": {"enqueue": [{**h.SMALL_SPACE["base"], "d_model": 48}]},
    "evaluator-bad": {"evaluator": "not a target"},
    "evaluator-missing": {"evaluator": "no_such_module:evaluate"},
    "checkpoints-file": {"checkpoints": "{root}/a-file/weights"},
}
RUN = [Case(f"run-{name}", ("run", "{root}/study.yaml", "--storage", "{root}/new.db"),
            files={"study.yaml": _study(**overrides), "a-file": "x"})
       for name, overrides in _STUDIES.items()]
RUN += [
    Case(f"run-file-{name}", ("run", f"{{root}}/{name}", "--storage", "{root}/new.db"),
         files={} if name == "missing" else {name: content})
    for name, content in _FILES.items() if name not in ("unknown.yaml", "nan.yaml")
]
RUN += [
    Case("run-existing-name", ("run", "{root}/study.yaml", "--storage", "{db}"),
         files={"study.yaml": _yaml(h.study_dict("s"))}),
    Case("run-memory-db", ("run", "{root}/study.yaml", "--storage", "sqlite://"),
         files={"study.yaml": _study()}),
    Case("run-memory-db-2", ("run", "{root}/study.yaml", "--storage", "sqlite:///:memory:"),
         files={"study.yaml": _study()}),
    Case("run-driver-missing", ("run", "{root}/study.yaml", "--storage",
                                "postgresql+pg8000://u@127.0.0.1:1/x"),
         files={"study.yaml": _study()}),
    Case("run-bad-url", ("run", "{root}/study.yaml", "--storage", "nonsense://"),
         files={"study.yaml": _study()}),
    Case("run-address-closed", ("run", "{root}/study.yaml", "--storage", "{root}/new.db",
                                "--address", "127.0.0.1:1"), files={"study.yaml": _study()}),
    Case("run-address-junk", ("run", "{root}/study.yaml", "--storage", "{root}/new.db",
                              "--address", "nowhere"), files={"study.yaml": _study()}),
]

# ----------------------------------------------------------------------------- read commands
READ = []
for command in ("status", "pareto", "resume"):
    READ += [
        Case(f"{command}-missing-study", (command, "nope", "--storage", "{db}"),
             contains="no study 'nope'"),
        Case(f"{command}-missing-db", (command, "s", "--storage", "sqlite:///{root}/none.db")),
        Case(f"{command}-empty-db", (command, "s", "--storage", "sqlite:///{root}/empty.db"),
             files={"empty.db": b""}),
        Case(f"{command}-not-a-db", (command, "s", "--storage", "sqlite:///{root}/junk.db"),
             files={"junk.db": BINARY}),
        Case(f"{command}-bad-url", (command, "s", "--storage", "nonsense://")),
        Case(f"{command}-driver-missing", (command, "s", "--storage",
                                           "postgresql+pg8000://u@127.0.0.1:1/x")),
        Case(f"{command}-no-folder", (command, "s", "--storage",
                                      "sqlite:///{root}/no/such/x.db")),
    ]
READ += [
    Case("status-list-not-a-db", ("status", "--storage", "sqlite:///{root}/junk.db"),
         files={"junk.db": BINARY}),
    Case("resume-address-closed", ("resume", "s", "--storage", "{db}", "--address",
                                   "127.0.0.1:1")),
]
_EXPORTS = [
    ("no-selection", ("--format", "yaml", "--out", "{root}/x")),
    ("both-selections", ("--trial", "0", "--pareto", "--format", "yaml", "--out", "{root}/x")),
    ("unknown-format", ("--trial", "0", "--format", "onnx", "--out", "{root}/x")),
    ("wrong-family-format", ("--trial", "0", "--format", "openvqa", "--out", "{root}/x")),
    ("trial-missing", ("--trial", "99", "--format", "yaml", "--out", "{root}/x")),
    ("trial-negative", ("--trial", "-1", "--format", "yaml", "--out", "{root}/x")),
    ("trial-word", ("--trial", "one", "--format", "yaml", "--out", "{root}/x")),
    ("out-is-a-file", ("--trial", "0", "--format", "yaml", "--out", "{root}/a-file")),
    ("out-under-a-file", ("--trial", "0", "--format", "yaml", "--out", "{root}/a-file/x")),
    ("no-out", ("--trial", "0", "--format", "yaml")),
]
READ += [Case(f"export-{name}", ("export", "s", *args, "--storage", "{db}"),
              files={"a-file": "x"}) for name, args in _EXPORTS]
READ += [
    Case("export-missing-study", ("export", "nope", "--trial", "0", "--format", "yaml",
                                  "--out", "{root}/x", "--storage", "{db}")),
    Case("export-running-trial", ("export", "s", "--trial", "4", "--format", "yaml",
                                  "--out", "{root}/x", "--storage", "{db}")),
    Case("export-corrupt-attribute", ("export", "s", "--trial", "0", "--format", "yaml",
                                      "--out", "{root}/x", "--storage", "{corrupt}")),
    Case("pareto-corrupt-attribute", ("pareto", "s", "--storage", "{corrupt}")),
    Case("status-corrupt-attribute", ("status", "s", "--storage", "{corrupt}")),
    Case("export-link-at-staging", ("export", "s", "--trial", "0", "--format", "yaml",
                                    "--out", "{root}/linked", "--storage", "{db}"),
         files={"linked/.trial-0.yaml.partial": "@link:../victim", "victim": "keep me"}),
    Case("export-link-at-target", ("export", "s", "--trial", "0", "--format", "yaml",
                                   "--out", "{root}/linked", "--storage", "{db}", "--force"),
         files={"linked/trial-0.yaml": "@link:../victim", "victim": "keep me"}),
]

# ----------------------------------------------------------------------------- the rest
OTHER = [
    Case("dashboard-refresh-nan", ("dashboard", "--storage", "{db}", "--refresh", "nan")),
    Case("dashboard-refresh-negative", ("dashboard", "--storage", "{db}", "--refresh", "-1")),
    Case("dashboard-port-huge", ("dashboard", "--storage", "{db}", "--port", "99999")),
    Case("dashboard-port-word", ("dashboard", "--storage", "{db}", "--port", "http")),
    Case("dashboard-missing-db", ("dashboard", "--storage", "sqlite:///{root}/none.db")),
    Case("dashboard-not-a-db", ("dashboard", "--storage", "sqlite:///{root}/junk.db"),
         files={"junk.db": BINARY}),
    Case("no-command", ()),
    Case("unknown-command", ("fly",)),
    Case("presets-extra", ("presets", "--colour")),
]

CASES = COST + TRAIN + RUN + READ + OTHER


# ----------------------------------------------------------------------------- the workspace
def _make_study(url: str) -> None:
    """Study ``s``: three completed trials, a rejected one, and one asked before its parameters
    were drawn (left RUNNING, as by a crash)."""
    spec = StudySpec.from_dict(h.study_dict("s", budget={"trials": 3}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    for i in range(4):
        trial = run.study.ask()
        config, _ = run.space.suggest(trial)
        cost = estimate_cost(config, h.GEOMETRY)
        attrs = {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                 TrialKey.COST: {"params": cost.params, "params_matrix": cost.params_matrix,
                                 "madds": cost.madds,
                                 "parts": {k: vars(v) for k, v in cost.parts.items()}},
                 TrialKey.TRAIN: {"epochs": 2, "seed": 0},
                 TrialKey.STATUS: Status.REJECTED if i == 3 else Status.COMPLETED}
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if i == 3:
            run.study.tell(trial, state=TrialState.FAIL)
        else:
            run.study.tell(trial, [0.5 + 0.1 * i, float(cost.params)])
    run.study.ask()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    _make_study(f"sqlite:///{root / 'studies.db'}")
    corrupt = root / "corrupt.db"
    _make_study(f"sqlite:///{corrupt}")
    with sqlite3.connect(corrupt) as conn:
        conn.execute("UPDATE trial_user_attributes SET value_json = '{\"family\": ' "
                     "WHERE key = ?", (TrialKey.ARCH,))
    for db in (root / "studies.db", corrupt):  # a finished study, as a reader finds it
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return root


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            out[rel] = "dir"
    return out


def _fill(text: str, root: Path) -> str:
    return (text.replace("{db}", f"sqlite:///{root / 'studies.db'}")
            .replace("{corrupt}", f"sqlite:///{root / 'corrupt.db'}")
            .replace("{root}", str(root)))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(case: Case, workspace: Path, capsys,
                                                  monkeypatch) -> None:
    root = workspace / f"case-{CASES.index(case)}"
    root.mkdir()
    for db in ("studies.db", "corrupt.db"):
        (root / db).write_bytes((workspace / db).read_bytes())
    for name, content in case.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("@link:"):
            path.symlink_to(content.removeprefix("@link:"))
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(_fill(content, root))
    monkeypatch.chdir(root)
    monkeypatch.delenv("NAS_STORAGE", raising=False)
    before = _snapshot(root)
    argv = [_fill(a, root) for a in case.argv]
    argv = [f"sqlite:///{a}" if a.endswith(".db") and "://" not in a else a for a in argv]
    try:
        code = nas_main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == case.code, (argv, err[-2000:])
    assert len(lines) == 1, err
    assert "Traceback" not in err
    if case.contains:
        assert case.contains in lines[-1]
    assert _snapshot(root) == before, "the command wrote or changed files"


def test_the_suite_is_broad() -> None:
    assert len(CASES) >= 150
    assert len({c.id for c in CASES}) == len(CASES)
    commands = {c.argv[0] for c in CASES if c.argv}
    assert {"cost", "train", "run", "resume", "status", "pareto", "export",
            "dashboard"} <= commands
    assert json.dumps([c.id for c in CASES])  # ids are plain strings
