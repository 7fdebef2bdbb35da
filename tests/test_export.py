"""`nas export`: every format for trials of real studies, each read back.

The studies are real Optuna studies made by ``create_study``; their trials are written the way the
engine writes them (ask, the space's ``suggest``, the cost on the task geometry, the ``nas.*``
user attributes, tell), without Ray.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import random
import runpy
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
import timm
import torch
import yaml
from optuna.trial import TrialState

import nas_cli.main as cli_main
import studies.export._record as record_module
import studies.export._writer as writer_module
from nas.config import ArchConfig
from nas.cost import estimate_cost
from nas.errors import NasError
from nas.loading import exported_geometry, load_arch
from nas.models import create_model
from nas.presets import get_preset
from nas.tasks import TaskGeometry, get_geometry
from nas.timm_registry import _AfterImportHook, timm_model_args
from nas_cli.export_cmd import FORMAT_NAMES, export_hint, register
from nas_cli.main import main as nas_main
from studies import StudySpec, create_study, pareto_trials
from studies.export import FORMATS, export_trials, formats_for, git_commit, trial_record
from studies.store import Status, StudyKey, TrialKey
from trainers import get_task
from trainers.loop import TrainConfig, TrainResult, save_checkpoint

COMMIT = "0123456789abcdef0123456789abcdef01234567"
N_DONE = 4  # completed trials per study; then one pruned (number N_DONE), one rejected
OBJECTIVES = [{"name": "accuracy", "direction": "maximize"},
              {"name": "params", "direction": "minimize"}]
STUDIES: dict[str, dict[str, Any]] = {
    "vit-digits": {"task": "digits", "space": "quickstart", "fidelity": {"epochs": 4},
                   "train": {"batch_size": 64}},
    # A cost-only geometry: such a study trains with its own evaluator.
    "mcan-vqa": {"task": "vqa2", "evaluator": "study_helpers:instant", "space": {
        "name": "tiny-mcan",
        "base": {"family": "mcan", "d_model": 64, "d_ff": 128, "heads": 4, "encoder_layers": 2,
                 "decoder_layers": 2},
        "arch": {"groups": {"choices": [1, 2]}, "group_attention": {"choices": [False, True]},
                 "weight_sharing": {"choices": [False, True]},
                 "qk_multiplier": {"choices": [1, 2]},
                 "layer_sharing": {"encoder": {"choices": ["none", "full"]}}},
        "train": {"lr": {"low": 1.0e-4, "high": 1.0e-3, "log": True}}}},
    "ort-captions": {"task": "synthetic-captions", "space": {
        "name": "tiny-ort",
        "base": {"family": "ort", "d_model": 64, "d_ff": 128, "heads": 4, "encoder_layers": 2,
                 "decoder_layers": 2},
        "arch": {"radix_base": {"choices": [None, 64]},
                 "attention_sharing": {"choices": ["none", "kv"]},
                 "layer_sharing": {"encoder": {"choices": ["none", "full"]},
                                   "decoder": {"choices": ["none", "halves"]}}}}},
}


def _geometry(task: str) -> TaskGeometry:
    try:
        return get_geometry(task)
    except Exception:
        return get_task(task).geometry


def _write_trials(spec: StudySpec, url: str, geometry: TaskGeometry, n: int,
                  checkpoint_dir: Path | None = None) -> None:
    """``n`` completed trials, then a pruned and a constraint-rejected one, as the engine would;
    with ``checkpoint_dir`` (the study's ``checkpoints`` folder), each completed trial stores a
    checkpoint of its (untrained) model."""
    if checkpoint_dir is not None:
        spec = dataclasses.replace(spec, checkpoints=str(checkpoint_dir))
    run = create_study(spec, url, geometry=geometry)  # the data need not be here
    rng = random.Random(0)
    costs: dict[str, Any] = {}
    for i in range(n + 2):
        trial = run.study.ask()
        config, overrides = run.space.suggest(trial)
        if config.arch_id not in costs:
            costs[config.arch_id] = estimate_cost(config, geometry)
        cost = costs[config.arch_id]
        attrs = {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                 TrialKey.COST: {"params": cost.params, "params_matrix": cost.params_matrix,
                                 "madds": cost.madds,
                                 "parts": {k: vars(v) for k, v in cost.parts.items()}},
                 TrialKey.TRAIN: {**spec.train, "epochs": spec.fidelity.epochs,
                                  "seed": spec.seed, **overrides}}
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if i < n and checkpoint_dir is not None:
            data = SimpleNamespace(name=spec.task, geometry=geometry)
            result = TrainResult(config.arch_id, spec.task, "accuracy", 0.5, 0.0, [], 1.0, 1.0,
                                 cost.params, cost.madds)
            path = save_checkpoint(create_model(config, geometry), config, TrainConfig(), data,
                                   None, result, checkpoint_dir)
            trial.set_user_attr(TrialKey.CHECKPOINT, str(path))
        if i < n:
            trial.set_user_attr(TrialKey.STATUS, Status.COMPLETED)
            trial.set_user_attr(TrialKey.EPOCHS_REACHED, spec.fidelity.epochs)
            values = {"accuracy": rng.random(), "params": float(cost.params)}
            run.study.tell(trial, [values[o] for o in spec.objective_names])
        elif i == n:
            trial.set_user_attr(TrialKey.STATUS, Status.STOPPED)
            run.study.tell(trial, state=TrialState.PRUNED)
        else:
            trial.set_user_attr(TrialKey.STATUS, Status.REJECTED)
            trial.set_user_attr(TrialKey.REASON, "params breaks params_max")
            run.study.tell(trial, state=TrialState.FAIL)


@pytest.fixture(autouse=True)
def _no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_module, "git_commit", lambda root=None: COMMIT)


@pytest.fixture(autouse=True)
def _export_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """``nas export`` in ``nas_main`` even before ``nas_cli.main`` registers it itself."""
    build = cli_main.build_parser

    def build_with_export() -> argparse.ArgumentParser:
        parser = build()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if "export" not in sub.choices:
            register(sub)
        return parser

    monkeypatch.setattr(cli_main, "build_parser", build_with_export)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("export")
    url = f"sqlite:///{root / 'studies.db'}"
    geometries = {}
    for name, keys in STUDIES.items():
        spec = StudySpec.from_dict({"name": name, "objectives": OBJECTIVES, "seed": 3,
                                    "budget": {"trials": 6}, "sampler": {"name": "random"},
                                    **keys})
        geometries[name] = _geometry(spec.task)
        _write_trials(spec, url, geometries[name], n=N_DONE)
    return SimpleNamespace(url=url, root=root, geometries=geometries)


def _trial(db: SimpleNamespace, study: str, number: int) -> optuna.trial.FrozenTrial:
    return optuna.load_study(study_name=study, storage=db.url).trials[number]


def _best(db: SimpleNamespace, study: str) -> int:
    return pareto_trials(study, db.url)[0]["number"]


def _export(db: SimpleNamespace, out: Path, *args: str) -> None:
    assert nas_main(["export", *args, "--out", str(out), "--storage", db.url]) == 0


FAMILY = {"vit-digits": "vit", "mcan-vqa": "mcan", "ort-captions": "ort"}
CASES = [(study, fmt) for study in STUDIES for fmt in formats_for(FAMILY[study])]


@pytest.mark.parametrize(("study", "fmt"), CASES)
def test_every_format_is_written_and_loads_back(db, tmp_path, monkeypatch, capsys, study,
                                                fmt) -> None:
    number = _best(db, study)
    trial = _trial(db, study, number)
    arch = ArchConfig.from_dict(trial.user_attrs[TrialKey.ARCH])
    geometry = db.geometries[study]
    _export(db, tmp_path, study, "--trial", str(number), "--format", fmt)
    path = tmp_path / FORMATS[fmt].path(number)
    assert capsys.readouterr().out.split() == [str(path)]
    text = path.read_text()
    if fmt in ("yaml", "json"):
        doc = yaml.safe_load(text) if fmt == "yaml" else json.loads(text)
        prov = doc["provenance"]
        assert (prov["study"], prov["trial"], prov["arch_id"]) == (study, number, arch.arch_id)
        assert prov["objectives"] == dict(zip(["accuracy", "params"], trial.values, strict=True))
        assert prov["cost"] == trial.user_attrs["nas.cost"]
        assert prov["space_hash"] == optuna.load_study(
            study_name=study, storage=db.url).user_attrs["nas.space_hash"]
        assert (prov["seed"], prov["fidelity"]["epochs"]) == (3, trial.user_attrs["nas.train"][
            "epochs"])
        assert (prov["version"], prov["git_commit"]) == ("0.1.0", COMMIT)
        assert doc["train"] == trial.user_attrs["nas.train"]
        loaded = load_arch(str(path))
        assert loaded.arch_id == arch.arch_id
        if fmt == "json":  # the same document as yaml: costs checked once
            return
        cost = estimate_cost(loaded, exported_geometry(str(path)))
        assert {"params": cost.params, "params_matrix": cost.params_matrix,
                "madds": cost.madds, "parts": {k: vars(v) for k, v in cost.parts.items()}
                } == trial.user_attrs["nas.cost"]
    elif fmt == "hf-config":  # loaded by transformers in test_export_clients.py
        config = json.loads(text)
        assert ArchConfig.from_dict(config["nas_arch"]).arch_id == arch.arch_id
        assert config["model_type"] == {"vit": "vit", "mcan": "bart", "ort": "bart"}[arch.family]
        assert config.get("hidden_size", config.get("d_model")) == arch.d_model
    elif fmt == "openvqa":
        config = yaml.safe_load(text)
        assert (config["HIDDEN_SIZE"], config["FF_SIZE"], config["MULTI_HEAD"],
                config["LAYER"], config["GROUP"]) == (arch.d_model, arch.d_ff, arch.heads,
                                                      arch.encoder_layers, arch.groups)
        assert config["EXPAND"] == arch.qk_multiplier and config["NAS_ARCH_ID"] == arch.arch_id
        assert config["FEAT_SIZE"]["vqa"]["FRCN_FEAT_SIZE"] == [geometry.regions,
                                                                geometry.region_dim]
    elif fmt == "acort":
        subprocess.run(["sh", "-n", str(path)], check=True)
        words = shlex.split(text.split("\n", 5)[-1].replace("\\\n", " "), comments=True)
        opts = dict(zip(words[::2], words[1::2], strict=False))
        assert opts["--d_model"] == str(arch.d_model)
        assert opts.get("--radix_base") == (str(arch.radix_base) if arch.radix_base else None)
        assert opts.get("--share_att_encoder", "none") == arch.attention_sharing
        assert {"--share_layer_encoder", "--share_layer_decoder"} <= set(opts)
    elif fmt == "timm":
        spec = json.loads(text)
        assert spec["checkpoint"] is None  # these trials kept no weights
        model = timm.create_model(spec["model_name"], **spec["kwargs"])
        params = sum(p.numel() for p in model.parameters())
        ours = create_model(arch, geometry)
        assert params == sum(p.numel() for p in ours.parameters())
        assert params == trial.user_attrs["nas.cost"]["params"]
    elif fmt == "torch":
        monkeypatch.setattr(sys, "argv", [str(path)])
        namespace = runpy.run_path(str(path), run_name="__main__")
        printed = capsys.readouterr().out
        assert f"{trial.user_attrs['nas.cost']['params']:,} parameters" in printed
        assert namespace["CHECKPOINT"] is None and "randomly initialised" in text


def test_nas_cost_on_an_exported_file_reports_the_trial(db, tmp_path, capsys) -> None:
    number = _best(db, "mcan-vqa")
    trial = _trial(db, "mcan-vqa", number)
    for fmt in ("yaml", "json"):
        _export(db, tmp_path, "mcan-vqa", "--trial", str(number), "--format", fmt)
        capsys.readouterr()
        path = tmp_path / FORMATS[fmt].path(number)
        assert nas_main(["cost", str(path), "--task", "vqa2", "--json"]) == 0
        cost = json.loads(capsys.readouterr().out)
        assert cost["arch_id"] == trial.user_attrs["nas.arch_id"]
        stored = trial.user_attrs[TrialKey.COST]
        assert {k: cost[k] for k in stored} == stored


def test_pareto_writes_one_file_per_trial_and_an_index(db, tmp_path, capsys) -> None:
    front = pareto_trials("vit-digits", db.url)
    _export(db, tmp_path, "vit-digits", "--pareto", "--format", "yaml")
    written = capsys.readouterr().out.split()
    assert len(written) == len(front) + 1
    with (tmp_path / "pareto.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["number"]) for r in rows] == [t["number"] for t in front]
    for row, t in zip(rows, front, strict=True):
        assert float(row["accuracy"]) == pytest.approx(t["values"]["accuracy"])
        assert float(row["params"]) == t["values"]["params"]
        assert row["arch_id"] == t["arch_id"] and row["file"] == f"trial-{t['number']}.yaml"
        assert load_arch(str(tmp_path / row["file"])).arch_id == t["arch_id"]
    pruned = _trial(db, "vit-digits", N_DONE)
    assert pruned.state == TrialState.PRUNED
    assert not (tmp_path / f"trial-{N_DONE}.yaml").exists()


def test_an_exported_config_seeds_a_new_study(db, tmp_path) -> None:
    number = _best(db, "ort-captions")
    arch_id = _trial(db, "ort-captions", number).user_attrs[TrialKey.ARCH_ID]
    export_trials("ort-captions", fmt="yaml", out=tmp_path, trial=number, storage_url=db.url)
    spec = StudySpec.from_dict({"name": "seeded", "objectives": OBJECTIVES, "seed": 1,
                                "budget": {"trials": 2}, **STUDIES["ort-captions"],
                                "enqueue": [str(tmp_path / f"trial-{number}.yaml")]})
    run = create_study(spec, f"sqlite:///{tmp_path / 'new.db'}")
    first = run.study.ask()
    assert first.number == 0 and first.user_attrs["nas.enqueued"].endswith(".yaml")
    config, _ = run.space.suggest(first)
    assert config.arch_id == arch_id


def test_existing_files_are_kept_unless_forced(db, tmp_path, capsys) -> None:
    number = _best(db, "vit-digits")
    _export(db, tmp_path, "vit-digits", "--trial", str(number), "--format", "json")
    path = tmp_path / f"trial-{number}.json"
    path.write_text("mine")
    capsys.readouterr()
    argv = ["export", "vit-digits", "--trial", str(number), "--format", "json", "--out",
            str(tmp_path), "--storage", db.url]
    assert nas_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "--force" in err
    assert path.read_text() == "mine"
    assert nas_main([*argv, "--force"]) == 0
    assert json.loads(path.read_text())["provenance"]["trial"] == number


TINY_VQA = TaskGeometry("tiny-vqa", "vqa", 10, question_tokens=4, question_vocab=50, regions=4,
                       region_dim=16)


def _tiny_study(name: str, url: str, n: int, checkpoint_dir: Path | None = None) -> None:
    """A study on a tiny VQA geometry, stored with the study as ``StudyKey.GEOMETRY``."""
    spec = dataclasses.replace(StudySpec.from_dict({
        "name": "x", "task": "vqa-files", "objectives": OBJECTIVES, "budget": {"trials": n},
        "space": STUDIES["mcan-vqa"]["space"]}), name=name)  # names from_dict would refuse
    _write_trials(spec, url, TINY_VQA, n=n, checkpoint_dir=checkpoint_dir)
    study = optuna.load_study(study_name=name, storage=url)
    study.set_user_attr(StudyKey.GEOMETRY, dataclasses.asdict(TINY_VQA))


WEIRD = "x .. $(touch PWNED) `touch PWNED` 'q\" ; touch PWNED #"


@pytest.mark.parametrize("name", ["..", WEIRD, "../evil"])
def test_study_names_cannot_write_outside_out(tmp_path, monkeypatch, capsys, name) -> None:
    (tmp_path / "db").mkdir()
    url = f"sqlite:///{tmp_path / 'db' / 'names.db'}"
    _tiny_study(name, url, n=1)
    out = tmp_path / "a" / "out"
    codes = [nas_main(["export", name, "--pareto", "--format", fmt, "--out", str(out / fmt),
                       "--storage", url]) for fmt in ("yaml", "openvqa", "hf-config", "torch")]
    written = [Path(p) for p in capsys.readouterr().out.split("\n") if p]
    assert all(p.resolve().is_relative_to(out.resolve()) for p in written)
    # The name is data (the database's; its stored study file's own is not read): a name nas
    # would not give exports as any other, and names no path.
    assert codes == [0] * 4 and len(written) == 4 * 2  # 1 trial + pareto.csv, 4 formats
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "db"]
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["out"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["trial-0.py"])
    runpy.run_path(str(out / "torch" / "trial-0.py"), run_name="__main__")  # name = data
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(("argv", "fragment"), [
    (["vit-digits", "--trial", "0", "--format", "onnx"], "onnx"),
    (["vit-digits", "--trial", "99", "--format", "yaml"], "99"),
    (["no-such-study", "--trial", "0", "--format", "yaml"], "no-such-study"),
    (["vit-digits", "--trial", "0", "--format", "openvqa"], "mcan"),
    (["vit-digits", "--format", "yaml"], "--trial"),
])
def test_bad_input_gives_one_line_and_exit_2(db, tmp_path, capsys, argv, fragment) -> None:
    try:
        code = nas_main(["export", *argv, "--out", str(tmp_path / "out"), "--storage", db.url])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and fragment in err
    assert not (tmp_path / "out").exists()


def test_an_out_folder_that_cannot_be_made_is_one_line_and_exit_2(db, tmp_path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for out, fragment in [(blocker, "is a file"), (blocker / "out", "not a writable folder")]:
        code = nas_main(["export", "vit-digits", "--trial", "0", "--format", "yaml",
                         "--out", str(out), "--storage", db.url])
        printed, err = capsys.readouterr()
        assert code == 2 and printed == ""
        assert len(err.strip().splitlines()) == 1 and fragment in err and str(out) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    assert blocker.read_text() == "not a folder"


def test_a_failed_write_leaves_the_previous_export(db, tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    export_trials("vit-digits", fmt="yaml", out=out, pareto=True, storage_url=db.url)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert len(before) >= 2
    write_all, calls = writer_module._write_all, []

    def full_disk(fd: int, data: bytes) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        write_all(fd, data)

    monkeypatch.setattr(writer_module, "_write_all", full_disk)
    with pytest.raises(NasError, match="No space left on device"):
        export_trials("vit-digits", fmt="yaml", out=out, pareto=True, storage_url=db.url,
                      force=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert len(calls) == 2 and not list(out.rglob(".*.partial"))


def test_rejected_and_pruned_trials_export_without_objectives(db, tmp_path) -> None:
    rejected = N_DONE + 1
    record = trial_record("mcan-vqa", rejected, db.url)
    assert (record.state, record.status, record.objectives) == ("fail", "rejected", None)
    export_trials("mcan-vqa", fmt="json", out=tmp_path, trial=rejected, storage_url=db.url)
    doc = json.loads((tmp_path / f"trial-{rejected}.json").read_text())
    assert doc["provenance"]["objectives"] is None


def test_torch_file_loads_the_trials_checkpoint(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ckpt.db'}"
    _tiny_study("with-checkpoint", url, n=1, checkpoint_dir=tmp_path / "ckpt")
    out = tmp_path / "out"
    export_trials("with-checkpoint", fmt="torch", out=out, trial=0, storage_url=url)
    path = optuna.load_study(study_name="with-checkpoint", storage=url).trials[0].user_attrs[
        TrialKey.CHECKPOINT]
    assert str(tmp_path) not in (out / "trial-0.py").read_text()  # no absolute path
    moved = out.rename(tmp_path / "moved")  # the folder moves with its checkpoint copy
    namespace = runpy.run_path(str(moved / "trial-0.py"))
    assert namespace["CHECKPOINT"] == str((moved / "trial-0.pt").resolve())
    saved = torch.load(path, weights_only=True)["state_dict"]
    built = namespace["build"]().state_dict()
    assert saved.keys() == built.keys()
    assert all(torch.equal(built[k], v) for k, v in saved.items())


@pytest.mark.parametrize("preset", ["deit-tiny", "armour-tiny", "swin-tiny", "lw-swin-tiny"])
def test_timm_builds_our_families_with_the_same_parameters(preset) -> None:
    config = get_preset(preset)
    name, kwargs = timm_model_args(config, get_geometry("imagenet"))
    model = timm.create_model(name, device="meta", **kwargs)
    assert sum(p.numel() for p in model.parameters()) == estimate_cost(config).params


@pytest.mark.slow
def test_torch_script_runs_alone_and_import_nas_leaves_timm_alone(db, tmp_path) -> None:
    number = _best(db, "mcan-vqa")
    export_trials("mcan-vqa", fmt="torch", out=tmp_path, trial=number, storage_url=db.url)
    code = ("import runpy, sys, nas; assert 'timm' not in sys.modules; sys.argv[:] = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / f"trial-{number}.py")],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    params = _trial(db, "mcan-vqa", number).user_attrs[TrialKey.COST]["params"]
    assert f"{params:,} parameters" in done.stdout


def test_registration_waits_for_the_first_import(tmp_path, monkeypatch) -> None:
    package = tmp_path / "late_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    _AfterImportHook.install("late_pkg", lambda: seen.append(sys.modules["late_pkg"].VALUE))
    assert seen == [] and "late_pkg" not in sys.modules
    try:
        import late_pkg  # noqa: F401  (the import under test)

        assert seen == [42]
        assert not any(isinstance(f, _AfterImportHook) and f.name == "late_pkg"
                       for f in sys.meta_path)
        assert type(sys.modules["late_pkg"].__loader__).__name__ == "SourceFileLoader"
        _AfterImportHook.install("late_pkg", lambda: seen.append(0))  # imported: runs at once
        assert seen == [42, 0]
    finally:
        sys.modules.pop("late_pkg", None)
    assert timm.is_model("nas_vit") and timm.is_model("nas_swin")


def test_format_names_and_git_commit() -> None:
    assert tuple(FORMATS) == FORMAT_NAMES
    assert git_commit(Path("/")) is None  # not a checkout: no commit, and git is not run
    assert exported_geometry("deit-tiny") is None


# ----------------------------------------------------------------------------- planted links
def _planted(tmp_path: Path) -> tuple[Path, bytes, int]:
    """A file outside --out that a planted link points at: its path, bytes and mode."""
    outside = tmp_path / "outside" / "precious.txt"
    outside.parent.mkdir()
    outside.write_bytes(b"keep me\n")
    outside.chmod(0o600)
    return outside, b"keep me\n", 0o600


def _refused(db: SimpleNamespace, capsys: pytest.CaptureFixture[str], out: Path,
             *args: str) -> str:
    """Run ``nas export`` expecting a refusal: exit 2, nothing on stdout, one stderr line."""
    code = nas_main(["export", *args, "--out", str(out), "--storage", db.url])
    printed, err = capsys.readouterr()
    assert code == 2 and printed == "", err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


STAGED = [  # (study, arguments, the staging path below --out, for trial number n)
    ("vit-digits", ["--format", "yaml"], ".trial-{n}.yaml.partial"),
    ("vit-digits", ["--format", "hf-config"], "trial-{n}/.config.json.partial"),
    ("ort-captions", ["--format", "acort"], ".trial-{n}.acort.sh.partial"),
    ("vit-digits", ["--pareto", "--format", "json"], ".pareto.csv.partial"),
]


@pytest.mark.parametrize(("study", "args", "staging"), STAGED)
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_at_a_staging_path_is_refused(db, tmp_path, capsys, study, args, staging, force,
                                             dangling) -> None:
    outside, data, mode = _planted(tmp_path)
    number = _best(db, study)
    which = args if "--pareto" in args else ["--trial", str(number), *args]
    out = tmp_path / "out"
    link = out / staging.format(n=number)
    link.parent.mkdir(parents=True)
    target = outside.with_name("not-yet") if dangling else outside
    link.symlink_to(target)
    err = _refused(db, capsys, out, study, *which, *(["--force"] if force else []))
    assert str(link) in err and "in the way" in err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert outside.read_bytes() == data and stat.S_IMODE(outside.stat().st_mode) == mode
    assert not target.exists() if dangling else True
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]
    assert [p for p in out.rglob("*") if not p.is_dir()] == [link]  # nothing written


def test_a_file_at_a_staging_path_is_refused(db, tmp_path, capsys) -> None:
    number = _best(db, "vit-digits")
    planted = tmp_path / f".trial-{number}.yaml.partial"
    planted.write_text("someone else's")
    err = _refused(db, capsys, tmp_path, "vit-digits", "--trial", str(number), "--format", "yaml")
    assert str(planted) in err and planted.read_text() == "someone else's"
    assert not (tmp_path / f"trial-{number}.yaml").exists()


@pytest.mark.parametrize("force", [False, True])
def test_a_link_at_a_target_is_refused_even_with_force(db, tmp_path, capsys, force) -> None:
    outside, data, mode = _planted(tmp_path)
    number = _best(db, "vit-digits")
    out = tmp_path / "out"
    out.mkdir()
    link = out / f"trial-{number}.yaml"
    link.symlink_to(outside)
    err = _refused(db, capsys, out, "vit-digits", "--trial", str(number), "--format", "yaml",
                   *(["--force"] if force else []))
    assert str(link) in err and "symbolic link" in err and "even with --force" in err
    assert link.is_symlink() and os.readlink(link) == str(outside)
    assert outside.read_bytes() == data and stat.S_IMODE(outside.stat().st_mode) == mode
    assert sorted(p.name for p in out.iterdir()) == [link.name]


def test_a_linked_trial_folder_is_refused(db, tmp_path, capsys) -> None:
    """hf-config writes ``trial-<N>/config.json``: a link planted as ``trial-<N>`` would
    lead outside --out."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    number = _best(db, "vit-digits")
    out = tmp_path / "out"
    out.mkdir()
    (out / f"trial-{number}").symlink_to(elsewhere, target_is_directory=True)
    err = _refused(db, capsys, out, "vit-digits", "--trial", str(number), "--format",
                   "hf-config", "--force")
    assert str(out / f"trial-{number}") in err
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(("fmt", "planted"), [("yaml", ".trial-{n}.yaml.partial"),
                                              ("hf-config", "trial-{n}")])
def test_a_link_planted_after_the_checks_is_still_refused(db, tmp_path, capsys, monkeypatch,
                                                          fmt, planted) -> None:
    """The exclusive, no-follow opens themselves refuse a link that appears between the checks
    and the writes."""
    outside, data, mode = _planted(tmp_path)
    number = _best(db, "vit-digits")
    out = tmp_path / "out"
    check = writer_module._check_target

    def check_then_plant(out_dir: Path, parts: tuple[str, ...]) -> bool:
        exists = check(out_dir, parts)
        out_dir.mkdir(exist_ok=True)
        (out_dir / planted.format(n=number)).symlink_to(
            outside if fmt == "yaml" else outside.parent)
        return exists

    monkeypatch.setattr(writer_module, "_check_target", check_then_plant)
    err = _refused(db, capsys, out, "vit-digits", "--trial", str(number), "--format", fmt)
    assert str(out / planted.format(n=number)) in err
    assert outside.read_bytes() == data and stat.S_IMODE(outside.stat().st_mode) == mode
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]


def test_exported_files_are_regular_files_with_their_modes(db, tmp_path, capsys) -> None:
    number = _best(db, "ort-captions")
    umask = os.umask(0o022)
    try:
        for fmt in ("acort", "yaml", "hf-config"):
            _export(db, tmp_path, "ort-captions", "--trial", str(number), "--format", fmt)
    finally:
        os.umask(umask)
    capsys.readouterr()
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.lstat().st_mode)
             for p in tmp_path.rglob("*") if p.is_file()}
    assert modes == {f"trial-{number}.acort.sh": 0o755, f"trial-{number}.yaml": 0o644,
                     f"trial-{number}/config.json": 0o644}


# ----------------------------------------------------------------------------- the export hint
@pytest.mark.parametrize("name", ["my study", "it's $(touch PWNED); `touch PWNED` #", "-dash"])
def test_the_export_hint_is_shell_quoted_and_runs(tmp_path, monkeypatch, capsys, name) -> None:
    (tmp_path / "db dir").mkdir()
    url = f"sqlite:///{tmp_path / 'db dir' / 'a&b.db'}"
    _tiny_study(name, url, n=1)
    hint = export_hint(name, url)
    assert shlex.quote(name) in hint and shlex.quote(url) in hint
    words = shlex.split(hint)
    assert words[:2] == ["nas", "export"] and name in words and url in words
    monkeypatch.chdir(tmp_path)
    done = subprocess.run(["sh", "-c", f"set -- {hint}; printf '%s\\n' \"$@\""],
                          capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == words  # the shell splits it into exactly these words
    assert nas_main(words[1:]) == 0
    written = capsys.readouterr().out.split("\n")
    assert written[:2] == ["exported/trial-0.yaml", "exported/pareto.csv"]
    assert not (tmp_path / "PWNED").exists()


def test_dashboard_downloads_carry_the_weights_nas_export_writes(tmp_path) -> None:
    """A downloaded torch script comes with the checkpoint it says is beside it."""
    import io
    import zipfile

    from dashboard.exports import pareto_zip, trial_file
    from studies.export import trial_record

    url = f"sqlite:///{tmp_path / 'ckpt.db'}"
    _tiny_study("with-checkpoint", url, n=1, checkpoint_dir=tmp_path / "ckpt")
    record = trial_record("with-checkpoint", 0, url)
    name, content = trial_file(record, "torch")
    assert name == "trial-0-torch.zip" and isinstance(content, bytes)
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        assert sorted(archive.namelist()) == ["trial-0.pt", "trial-0.py"]
        saved = torch.load(io.BytesIO(archive.read("trial-0.pt")), weights_only=True)
    assert "state_dict" in saved
    name, content = trial_file(record, "yaml")  # one file: its text, as before
    assert name == "trial-0.yaml" and isinstance(content, str)
    with zipfile.ZipFile(io.BytesIO(pareto_zip([record], "torch"))) as archive:
        assert {"trial-0.py", "trial-0.pt"} <= set(archive.namelist())
