"""The trainer: every family learns on its proxy task, checkpoints, seeds, failures, the CLI.

Models are tiny and epochs capped with ``max_steps_per_epoch`` so the whole file runs in well
under a minute and a half on a two-core CPU. The calibrated claims about the quick budget itself
(a dense baseline vs. a ten-times-smaller model vs. seed spread) live in
``benchmarks/proxies.py``; the digits half of them is checked here by one slow test.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tiny_models import DIGITS_DENSE, DIGITS_TINY, TINY, VIT_ARGS, fast, tiny, tiny_tasks

import trainers.loop as loop
from nas.errors import ConfigError
from nas.loading import load_arch
from nas_cli.main import main
from trainers import EpochReport, TaskData, TrainConfig, learning_rate, train
from trainers.loop import load_checkpoint, quick_defaults


@pytest.fixture(scope="module")
def tasks() -> dict[str, TaskData]:
    """Each built-in proxy task, small enough to train and evaluate in a second."""
    return tiny_tasks()


# ----------------------------------------------------------------------------- learning
@pytest.mark.parametrize("name", list(TINY))
def test_every_family_trains_on_its_task_with_the_loss_going_down(
    name: str, tasks: dict[str, TaskData]
) -> None:
    data = tasks[TINY[name][2]]
    # image transformers sit on the uniform-guess plateau for their first dozen steps
    steps = 30 if data.geometry.kind == "image" else 6
    result = train(tiny(name), fast(max_steps_per_epoch=steps), data)
    assert result.status == "completed", result.reason
    losses = [e["train_loss"] for e in result.epochs]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.95 * losses[0], losses
    assert result.metric == data.metric and math.isfinite(result.value)
    assert result.value == result.epochs[-1]["value"]
    assert result.params > 0 and result.madds > 0 and result.samples_per_second > 0
    if data.geometry.kind == "caption":
        assert {"bleu4"} == set(result.epochs[-1]["extra"])


@pytest.mark.parametrize(("name", "dropout", "expected"), [
    ("vit", 0.25, 0.25), ("swin", 0.25, 0.25), ("mcan", 0.0, 0.0), ("ort-word", 0.3, 0.3),
    ("vit", None, 0.0), ("swin", None, 0.0), ("mcan", None, 0.1), ("lxmert", None, 0.1),
])
def test_dropout_reaches_every_dropout_of_the_model_through_create_model(
    name: str, dropout: float | None, expected: float, tasks: dict[str, TaskData],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TrainConfig.dropout is create_model's drop_rate (None: the family's own, 0.1 in the
    papers' VQA and captioning models, 0 in DeiT and Swin): no module is patched afterwards.
    (Where a family applies dropout on the residual, the sublayer's own output dropout stays an
    identity, so that no path is dropped twice.)"""
    built: list[torch.nn.Module] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        built.append(real(*args, **kwargs))
        return built[-1]

    real = loop.create_model
    monkeypatch.setattr(loop, "create_model", spy)
    result = train(tiny(name), fast(epochs=1, max_steps_per_epoch=1, dropout=dropout),
                   tasks[TINY[name][2]])
    assert result.status == "completed", result.reason
    rates = {m.p for m in built[0].modules() if isinstance(m, torch.nn.Dropout)}
    assert rates - {0.0} == ({expected} if expected else set())
    assert expected in rates


# ----------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("name", ["vit", "ort-radix", "mcan"])
def test_checkpoint_reloads_to_identical_outputs(
    name: str, tasks: dict[str, TaskData], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[torch.nn.Module] = []
    create_model = loop.create_model

    def keep(*args: Any, **kwargs: Any) -> Any:  # the trainer's model, to compare against
        built.append(create_model(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(loop, "create_model", keep)
    config, data = tiny(name), tasks[TINY[name][2]]
    result = train(config, fast(epochs=1, max_steps_per_epoch=2), data, checkpoint_dir=tmp_path)
    assert result.checkpoint == str(tmp_path / f"{config.arch_id}.pt")

    model, loaded_config, blob = load_checkpoint(result.checkpoint)
    assert loaded_config == config and blob["arch_id"] == config.arch_id
    assert blob["arch"] == config.to_dict() and blob["task"] == data.name
    assert blob["result"]["value"] == result.value
    trained = built[0].eval()
    model.eval()
    inputs = model.example_inputs(batch=3)
    with torch.no_grad():
        assert torch.equal(trained(**inputs), model(**inputs))
    if name == "ort-radix":
        tokenizer = blob["tokenizer_object"]
        assert tokenizer.to_dict() == loop.make_tokenizer(config, data).to_dict()  # type: ignore[union-attr]
        regions, boxes = inputs["regions"], inputs["boxes"]
        with torch.no_grad():
            assert torch.equal(trained.generate(regions, boxes, max_len=6),  # type: ignore[operator]
                               model.generate(regions, boxes, max_len=6))  # type: ignore[operator]


# ----------------------------------------------------------------------------- seeds
def _curve(result: loop.TrainResult) -> list[tuple[float, float]]:
    return [(e["train_loss"], e["value"]) for e in result.epochs]


def test_a_seed_reproduces_its_run_and_another_seed_differs(tasks: dict[str, TaskData]) -> None:
    config, data = tiny("vit"), tasks["digits"]
    cfg = fast(epochs=2, max_steps_per_epoch=3, dropout=0.1)
    first, again = train(config, cfg, data), train(config, cfg, data)
    other = train(config, fast(epochs=2, max_steps_per_epoch=3, dropout=0.1, seed=1), data)
    assert _curve(first) == _curve(again)
    assert _curve(first) != _curve(other)


def test_caption_runs_reproduce_their_sampled_references(tasks: dict[str, TaskData]) -> None:
    config, data = tiny("ort-word"), tasks["synthetic-captions"]
    cfg = fast(epochs=1, max_steps_per_epoch=2)
    assert _curve(train(config, cfg, data)) == _curve(train(config, cfg, data))


# ----------------------------------------------------------------------------- failures
def test_a_nan_loss_fails_the_run_at_once(tasks: dict[str, TaskData]) -> None:
    result = train(tiny("vit"), fast(epochs=5, lr=1e30, grad_clip=None), tasks["digits"])
    assert result.status == "failed"
    assert result.reason is not None and ("nan" in result.reason or "inf" in result.reason)
    assert "epoch 1," in result.reason and result.epochs == []  # not after the whole budget


def test_a_model_emitting_nan_fails_the_run(
    tasks: dict[str, TaskData], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = loop.create_model

    def poisoned(*args: Any, **kwargs: Any) -> Any:
        model = original(*args, **kwargs)
        model.register_forward_hook(lambda module, inputs, output: output * float("nan"))
        return model

    monkeypatch.setattr(loop, "create_model", poisoned)
    result = train(tiny("mcan"), fast(), tasks["synthetic-vqa"])
    assert result.status == "failed" and "nan" in (result.reason or "")
    assert "step 1" in (result.reason or "")


def test_report_returning_true_stops_the_run(tasks: dict[str, TaskData]) -> None:
    seen: list[EpochReport] = []

    def report(epoch: EpochReport) -> bool:
        seen.append(epoch)
        return epoch.epoch == 2

    result = train(tiny("vit"), fast(epochs=5, max_steps_per_epoch=1), tasks["digits"], report)
    assert result.status == "stopped" and [e.epoch for e in seen] == [1, 2]
    assert len(result.epochs) == 2 and result.value == seen[-1].value


# ----------------------------------------------------------------------------- schedule
def test_warm_up_rises_linearly_to_the_base_rate() -> None:
    rates = [learning_rate(s, 100, 10, 1e-3, "cosine") for s in range(10)]
    assert rates == pytest.approx([1e-3 * (s + 1) / 10 for s in range(10)])
    assert learning_rate(10, 100, 10, 1e-3, "cosine") == pytest.approx(1e-3)


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_decay_falls_monotonically_to_about_zero(schedule: str) -> None:
    rates = [learning_rate(s, 100, 10, 1.0, schedule) for s in range(10, 101)]
    assert rates[0] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates))
    assert rates[-2] < 0.03 and rates[-1] == pytest.approx(0.0, abs=1e-12)


def test_linear_is_halfway_at_the_midpoint_and_constant_stays_put() -> None:
    assert learning_rate(55, 100, 10, 1.0, "linear") == pytest.approx(0.5)
    assert learning_rate(55, 100, 10, 1.0, "cosine") == pytest.approx(0.5)
    assert {learning_rate(s, 100, 10, 2.0, "constant") for s in range(10, 100)} == {2.0}
    assert learning_rate(0, 100, 0, 1.0, "cosine") == pytest.approx(1.0)  # no warm-up


@pytest.mark.parametrize(("sqrt_groups", "factor"), [(False, 1.0), (True, 2.0)])
def test_lr_sqrt_groups_scales_the_base_rate_by_sqrt_k(
    sqrt_groups: bool, factor: float, tasks: dict[str, TaskData]
) -> None:
    config = load_arch("deit-tiny", {"d_model": 32, "d_ff": 64, "heads": 4, "encoder_layers": 1,
                                     "patch_size": 8, "groups": 4, "group_attention": True})
    cfg = fast(epochs=1, max_steps_per_epoch=1, lr=1e-3, lr_sqrt_groups=sqrt_groups)
    result = train(config, cfg, tasks["digits"])
    assert result.epochs[0]["lr"] == pytest.approx(1e-3 * factor)


def test_training_settings_are_checked_and_yaml_style_numbers_read() -> None:
    assert TrainConfig.from_dict({"lr": "1e-3", "grad_clip": None}).lr == 1e-3  # YAML 1.1 string
    for bad in ({"amp": "yes"}, {"dropout": 1.0}, {"seed": -1}, {"max_steps_per_epoch": 0},
                {"epochs": True}, {"schedule": "step"}, {"no_such_key": 1}, {"seed": 2**32},
                {"lr": "nan"}, {"weight_decay": float("inf")}, {"batch_size": 10**6},
                {"epochs": 10**6}, {"device": "cuda:x"}, {"grad_clip": float("nan")}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            TrainConfig.from_dict(bad)


def test_a_device_that_is_not_there_is_refused_naming_those_that_are() -> None:
    from trainers.loop import available_devices, select_device

    assert select_device("cpu").type == "cpu" and "cpu" in available_devices()
    with pytest.raises(ConfigError, match=r"device='cuda:64' is not available here; the devices "
                                          r"are \['cpu'"):
        select_device("cuda:64")


def test_quick_defaults_are_valid_training_configs() -> None:
    for task in ("digits", "synthetic-vqa", "synthetic-captions"):
        assert TrainConfig.from_dict(quick_defaults(task)).epochs >= 1
    assert quick_defaults("cifar") == {}


# ----------------------------------------------------------------------------- the CLI
def test_nas_train_json_prints_one_object_and_writes_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", *VIT_ARGS, "--task", "digits", "--epochs", "2", "--seed", "3",
                 "--train-set", "max_steps_per_epoch=2", "--out", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("\n") == 1
    result = json.loads(out)
    assert {"metric", "value", "chance", "epochs", "seconds", "samples_per_second", "params",
            "madds"} <= set(result)
    assert result["metric"] == "accuracy" and len(result["epochs"]) == 2
    assert 0.0 <= result["value"] <= 1.0 and result["chance"] == pytest.approx(0.1, abs=0.01)
    assert result["params"] > 0 and result["madds"] > 0 and result["samples_per_second"] > 0
    _, _, blob = load_checkpoint(result["checkpoint"])
    assert blob["train_config"]["seed"] == 3 and blob["train_config"]["epochs"] == 2


def test_nas_train_reports_a_failed_run_with_exit_code_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["train", *VIT_ARGS, "--task", "digits", "--train-set", "lr=1e30",
                 "--train-set", "grad_clip=null", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["status"] == "failed" and "nan" in result["reason"]


def _vqa_files(root: Path, *, dim: int = 16, questions: bool = True) -> list[str]:
    """One question per split over ``dim``-wide features, as ``--task-set`` options."""
    for split, image in (("train", 1), ("val", 2)):
        qs = [{"image_id": image, "question": "What is it?", "question_id": image}]
        anns = [{"question_id": image, "answers": [{"answer": "cat"}] * 3}]
        (root / f"{split}_q.json").write_text(json.dumps({"questions": qs if questions else []}))
        (root / f"{split}_a.json").write_text(json.dumps({"annotations": anns}))
        feats = root / f"feats_{split}"
        feats.mkdir(exist_ok=True)
        np.savez(feats / f"{image}.npz", x=np.ones((3, dim), np.float32),
                 bbox=np.zeros((3, 4), np.float32))
    options = {"root": str(root), "min_count": 1, "region_dim": 16, "max_regions": 3}
    for split in ("train", "val"):
        options |= {f"{split}_questions": f"{split}_q.json", f"{split}_annotations":
                    f"{split}_a.json", f"{split}_features": f"feats_{split}"}
    return [arg for k, v in options.items() for arg in ("--task-set", f"{k}={v}")]


@pytest.mark.parametrize("breakage", ["missing file", "malformed json", "feature size",
                                      "empty split"])
def test_nas_train_bad_task_files_give_one_line_naming_the_file(
    breakage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task_set = _vqa_files(tmp_path, dim=8 if breakage == "feature size" else 16,
                          questions=breakage != "empty split")
    culprit = {"missing file": "val_a.json", "malformed json": "train_q.json",
               "feature size": "feats_train", "empty split": "train_q.json"}[breakage]
    if breakage == "missing file":
        (tmp_path / culprit).unlink()
    elif breakage == "malformed json":
        (tmp_path / culprit).write_text('{"questions": [')
    code = main(["train", "mcan-small", "--task", "vqa-files", *task_set, "--json"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("nas train: error:") and culprit in err


def test_nas_train_runs_on_well_formed_task_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", "mcan-small", "--set", "d_model=32", "--set", "d_ff=64", "--set",
                 "heads=2", "--set", "encoder_layers=1", "--set", "decoder_layers=1",
                 "--task", "vqa-files", *_vqa_files(tmp_path), "--epochs", "1", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["metric"] == "vqa_accuracy"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--task", "no-such-task"], "'no-such-task'"),
        (["--task", "digits", "--train-set", "no_such_key=1"], "'no_such_key'"),
        (["--task", "digits", "--train-set", "lr=-1"], "lr=-1"),
        (["--task", "digits", "--train-set", "lr=fast"], "lr='fast'"),
        (["--task", "digits", "--train-set", "epochs=2.5"], "epochs=2.5"),
        (["--task", "digits", "--task-set", "image_size=-4"], "image_size"),
        (["--task", "synthetic-vqa"], "vqa task"),  # a ViT cannot answer questions
    ],
)
def test_nas_train_bad_options_give_one_line_and_exit_2(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", *VIT_ARGS, *argv, "--json"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and fragment in err, err


# ----------------------------------------------------------------------------- the proxy
@pytest.mark.slow
def test_digits_quick_budget_separates_a_dense_vit_from_a_tiny_one(
    tasks: dict[str, TaskData],
) -> None:
    """The digits half of ``benchmarks/proxies.py`` (same two models): one run of each.

    The 60-second bound on a run is the benchmark's to check: timings on a shared machine
    would make this test flaky."""
    cfg = TrainConfig.from_dict(quick_defaults("digits"))
    dense, small = (train(load_arch("deit-tiny", arch), cfg, tasks["digits"])
                    for arch in (DIGITS_DENSE, DIGITS_TINY))
    assert dense.params >= 10 * small.params
    assert dense.value >= 0.9, dense.epochs
    assert small.value < dense.value - 0.05  # the seed spread is under 0.02
