"""Bounds before allocation: a few bytes of input never blow memory up or end in a traceback.

Each case is refused with one line on stderr (exit code 2), quickly, without a traceback and
without writing anything: sizes of the architecture (``nas.config.LIMITS``), sharing patterns,
files (size, binary content, YAML alias bombs, non-finite numbers), search spaces, task options,
training settings, and the training-memory estimate of ``nas.memory``.
"""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import nas.memory
from nas.config import LIMITS, ArchConfig
from nas.cost import estimate_cost
from nas.errors import ConfigError, NasError
from nas.memory import estimate_training_memory, training_memory
from nas.presets import PRESETS, get_preset
from nas.tasks import GEOMETRY_LIMITS, TaskGeometry
from nas_cli.main import main
from search_spaces import load_space
from trainers.tasks import check_task, list_tasks, task_options
from trainers.tasks.registry import OPTION_LIMITS

TINY_VIT = ["deit-tiny", "--set", "d_model=32", "--set", "d_ff=64", "--set", "heads=2",
            "--set", "encoder_layers=1", "--set", "patch_size=8"]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, float]:
    """Run ``nas`` in-process; assert exit 2, one stderr line, no traceback, nothing on stdout."""
    start = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    seconds = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err, seconds


# ----------------------------------------------------------------------------- knobs, patterns
KNOB_CASES = [
    (["mcan-small", "--set", "d_model=16384"], "`d_model <= 8192`"),
    (["mcan-small", "--set", "d_ff=100000"], "`d_ff <= 32768`"),
    (["mcan-small", "--set", "heads=512"], "`heads <= 256`"),
    (["mcan-small", "--set", "groups=512"], "`groups <= 256`"),
    (["mcan-small", "--set", "qk_multiplier=100"], "`qk_multiplier <= 16`"),
    (["mcan-small", "--set", "encoder_layers=10000000"], "`encoder_layers <= 128`"),
    (["ort-base", "--set", "decoder_layers=129"], "`decoder_layers <= 128`"),
    (["lxmert", "--set", "language_layers=1000"], "`language_layers <= 128`"),
    (["lxmert", "--set", "vision_layers=129"], "`vision_layers <= 128`"),
    (["lxmert", "--set", "cross_layers=129"], "`cross_layers <= 128`"),
    (["deit-tiny", "--set", "encoder_layers=4096"], "`encoder_layers <= 128`"),
    (["swin-tiny", "--set", "depths=[2, 2, 200, 2]"], "`sum(depths) <= 128`"),
    (["swin-tiny", "--set", "depths=[1, 1, 1, 1, 1, 1, 1, 1, 1]"], "`len(depths) <= 8`"),
    (["swin-tiny", "--set", "d_model=4096"], "last stage"),
    (["deit-tiny", "--set", "patch_size=256"], "`patch_size <= 128`"),
    (["swin-tiny", "--set", "window_size=1000"], "`window_size <= 64`"),
    (["acort-base", "--set", "radix_base=10000000"], "`radix_base <= 100000`"),
    (["mcan-small", "--set", "encoder_layers=true"], "must be an integer"),
    (["mcan-small", "--set", "d_model=1e7"], "must be an integer"),
    (["mcan-small", "--set", "d_model=.nan"], "finite"),
    (["mcan-small", "--set", "d_model=.inf"], "finite"),
    (["mcan-small", "--set", "groups=1e999"], "finite"),
    (["mcan-small", "--set", "layer_sharing=(0x1000000000)"], "expands to 1000000000 depths"),
    (["mcan-small", "--set", "layer_sharing=" + "0," * 600 + "0"], "at most 1024 characters"),
    (["mcan-small", "--set", "layer_sharing={encoder: (0x129)}"], "at most 128 layers"),
    (["mcan-small", "--set", "layer_sharing=(999999999x6)"], "indices must be < 128"),
    (["mcan-small", "--set", "layer_sharing={encoder: " + str([0] * 200) + "}"],
     "at most 128 entries"),
    (["mcan-small", "--set", "layer_sharing=(0x3,1x4)"], "has length 7"),
]


@pytest.mark.parametrize(("argv", "fragment"), KNOB_CASES)
def test_oversized_knobs_and_patterns_are_one_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err, seconds = run_cli(["cost", *argv], capsys)
    assert fragment in err, err
    assert seconds < 5.0  # refused before any model is built


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_within_the_limits(name: str) -> None:
    config = get_preset(name)
    for key, limit in LIMITS.items():
        value = getattr(config, key)
        values = value if isinstance(value, tuple) else (value,)
        assert all(v is None or v <= limit for v in values), (key, value)


def test_limits_name_the_key_the_value_and_the_limit() -> None:
    with pytest.raises(ConfigError) as info:
        ArchConfig.from_dict({"family": "mcan", "d_model": 10**9})
    assert str(info.value) == "`d_model <= 8192` must hold, but got d_model=1000000000."


def test_a_huge_repeat_count_is_refused_without_expanding() -> None:
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="expands to"):
        ArchConfig.from_dict({"family": "mcan", "layer_sharing": "(0x1000000000000)"})
    assert time.perf_counter() - start < 0.1


# ----------------------------------------------------------------------------- files
BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)
FILE_CASES: list[tuple[str, bytes, str]] = [
    ("binary.yaml", b"family: mcan\n\x00\x01\x02\xff", "NUL byte"),
    ("binary.json", b'{"family": "mcan"}\x00', "NUL byte"),
    ("latin1.yaml", "family: mcan  # café\n".encode("latin-1"), "not UTF-8"),
    ("image.yaml", b"\x89PNG\r\n\x1a\n" + bytes(range(1, 200)), "not UTF-8"),
    ("laughs.yaml", BILLION_LAUGHS.encode(), "100,000 nodes"),
    ("recursive.yaml", b"family: mcan\nx: &x [*x]\n", "recursive"),
    ("aliases.yaml", ("v: &v 1\nlist: [" + ", ".join(["*v"] * 101) + "]\n").encode(),
     "more than 100 aliases"),
    ("deep.yaml", b"family: " + b"[" * 100_000, "more than 64 deep"),
    ("deep.json", b"[" * 100_000, "too deeply"),
    ("large.yaml", b"family: mcan\n" + b"# padding\n" * 110_000, "more than the 1,048,576"),
    ("nan.yaml", b"family: mcan\nd_model: .nan\n", "`d_model` is nan"),
    ("inf.yaml", b"family: mcan\nlayer_sharing: {encoder: .inf}\n", "`layer_sharing.encoder`"),
    ("nan.json", b'{"family": "mcan", "d_model": NaN}', "`d_model` is nan"),
    ("inf.json", b'{"family": "mcan", "heads": -Infinity}', "`heads` is -inf"),
    ("digits.yaml", b"family: mcan\nd_model: " + b"9" * 5000 + b"\n", "4300 digits"),
    ("layers.yaml", b"family: mcan\nencoder_layers: 10000000\n", "`encoder_layers <= 128`"),
    ("layers.json", b'{"family": "vit", "encoder_layers": 1e7}', "must be an integer"),
]


@pytest.mark.parametrize(("name", "content", "fragment"), FILE_CASES,
                         ids=[c[0] for c in FILE_CASES])
def test_bad_files_are_one_line(
    name: str, content: bytes, fragment: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    err, seconds = run_cli(["cost", str(path)], capsys)
    assert fragment in err, err
    assert name in err or name.startswith("layers")  # the file, or the config key it holds
    assert seconds < 1.0


def test_a_billion_laughs_takes_neither_time_nor_memory(tmp_path: Path) -> None:
    import tracemalloc

    from nas.loading import read_mapping

    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="100,000 nodes"):
        read_mapping(path)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 0.5 and peak < 8 * 2**20


def test_a_study_file_bomb_is_refused_before_the_storage_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "bomb.yaml"
    study.write_text("name: bomb\ntask: digits\nspace: quickstart\n" + BILLION_LAUGHS)
    db = tmp_path / "studies.db"
    err, _ = run_cli(["run", str(study), "--storage", f"sqlite:///{db}"], capsys)
    assert "100,000 nodes" in err
    assert not db.exists()


def test_exported_geometry_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    geometry = {"name": "big", "kind": "image", "num_outputs": 10, "image_size": 100_000}
    path = tmp_path / "trial.json"
    path.write_text(json.dumps({"arch": PRESETS["deit-tiny"], "task": {"geometry": geometry}}))
    err, seconds = run_cli(["cost", str(path)], capsys)
    assert "image_size <= 1024" in err and seconds < 1.0


@pytest.mark.parametrize("key", sorted(GEOMETRY_LIMITS))
def test_geometry_sizes_have_limits(key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} <= {GEOMETRY_LIMITS[key]}"):
        TaskGeometry(**{"name": "t", "kind": "vqa", "num_outputs": 10,  # type: ignore[arg-type]
                        key: GEOMETRY_LIMITS[key] + 1})


# ----------------------------------------------------------------------------- search spaces
SPACE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"arch": {"d_model": {"low": 64, "high": 1e9}}}, "`1 <= d_model <= 8192`"),
    ({"arch": {"d_model": {"low": 64, "high": "1e9", "step": 64}}}, "can draw 1000000000"),
    ({"arch": {"encoder_layers": {"low": 1, "high": 10**9}}}, "`1 <= encoder_layers <= 128`"),
    ({"arch": {"groups": {"choices": [1, 1000]}}}, "`1 <= groups <= 256`"),
    ({"arch": {"qk_multiplier": {"low": 1, "high": 1000}}}, "qk_multiplier <= 16"),
    ({"arch": {"heads_per_group": {"low": 1, "high": 10**6}}}, "heads_per_group <= 256"),
    ({"arch": {"head_dim": {"choices": [64, 4096]}}}, "d_model=32768"),
    ({"arch": {"ffn_ratio": {"choices": [4, 1000]}}}, "`d_ff <= 32768`"),
    ({"arch": {"layer_sharing": {"choices": ["(0x1000000000)"]}}}, "expands to"),
    ({"base": "swin-tiny", "arch": {"depths": {"choices": [[2, 2, 6, 2], [2, 2, 1000, 2]]}}},
     "sum(depths)"),
    ({"base": "acort-base", "arch": {"radix_base": {"low": 2, "high": 10**9}}},
     "radix_base <= 100000"),
    ({"base": {"family": "mcan", "d_model": 100_000}}, "`d_model <= 8192`"),
    ({"arch": {"groups": {"low": 1, "high": float("nan")}}}, "finite"),
    ({"train": {"batch_size": {"low": 1, "high": 10**9}}}, "`batch_size <= 65536`"),
    ({"train": {"lr": {"low": float("nan"), "high": 1e-2}}}, "finite"),
    ({"train": {"warmup_epochs": {"low": 0, "high": float("inf")}}}, "finite"),
    ({"train": {"dropout": {"choices": [0.1, float("nan")]}}}, "finite"),
]


@pytest.mark.parametrize(("changes", "fragment"), SPACE_CASES)
def test_space_bounds_are_checked_when_the_space_is_loaded(
    changes: dict[str, Any], fragment: str, tmp_path: Path
) -> None:
    path = tmp_path / "space.json"  # JSON keeps 1e9 a number and writes NaN / Infinity
    path.write_text(json.dumps({"name": "s", "base": "mcan-small", **changes}))
    start = time.perf_counter()
    with pytest.raises(NasError) as info:
        load_space(str(path))
    message = str(info.value)
    assert "\n" not in message and fragment in message, message
    assert time.perf_counter() - start < 2.0


def test_a_bad_space_writes_no_study(tmp_path: Path) -> None:
    from studies import create_study
    from studies.spec import StudySpec

    spec = StudySpec.from_dict({
        "name": "big", "task": "digits",
        "space": {"base": "deit-tiny", "arch": {"d_model": {"low": 64, "high": 10**9}}},
        "objectives": [{"name": "params", "direction": "minimize"}],
        "budget": {"trials": 1},
    })
    db = tmp_path / "studies.db"
    with pytest.raises(ConfigError, match="d_model <= 8192"):
        create_study(spec, f"sqlite:///{db}")
    assert not db.exists()


# ----------------------------------------------------------------------------- tasks
TASK_CASES = [
    ("digits", ["image_size=100000"], "must be <= 1024"),
    ("digits", ["image_size=1e5"], "must be an integer"),
    ("digits", ["seed=4294967296"], "must be <= 4294967295"),
    ("synthetic-vqa", ["train_size=1000000000"], "must be <= 10000000"),
    ("synthetic-vqa", ["val_size=100000000"], "must be <= 10000000"),
    ("synthetic-vqa", ["region_dim=100000"], "must be <= 8192"),
    ("synthetic-vqa", ["train_size=true"], "must be an integer"),
    ("synthetic-vqa", ["noise=.nan"], "finite"),
    ("synthetic-vqa", ["train_size=9000000", "region_dim=8192"], "would generate about"),
    ("synthetic-captions", ["captions_per_image=1000"], "must be <= 100"),
    ("synthetic-captions", ["train_size=10000000", "region_dim=8192", "captions_per_image=100"],
     "would generate about"),
    ("vqa-files", ["max_regions=100000"], "must be <= 1024"),
    ("vqa-files", ["max_tokens=100000"], "must be <= 512"),
    ("coco-files", ["max_words=100000"], "must be <= 512"),
    ("coco-files", ["min_count=1e999"], "finite"),
]


@pytest.mark.parametrize(("task", "options", "fragment"), TASK_CASES)
def test_task_sizes_are_refused_before_data_is_generated(
    task: str, options: list[str], fragment: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    task_options(task)  # imports the task's module (scikit-learn for digits) outside the timing
    out = tmp_path / "run"
    argv = ["train", *TINY_VIT, "--task", task, "--out", str(out)]
    for option in options:
        argv += ["--task-set", option]
    err, seconds = run_cli(argv, capsys)
    assert fragment in err, err
    assert seconds < 1.0  # "image_size: 1e5" (72 TB of activations) is refused in no time
    assert not out.exists()


def test_digits_that_would_not_fit_in_memory_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nas.memory, "available_memory", lambda device="cpu": 2**30)
    with pytest.raises(ConfigError, match=r"would generate about 56.2 GiB .* 1.0 GiB available"):
        check_task("digits", {"image_size": 1024, "in_chans": 3})
    check_task("digits", {"image_size": 64})  # 59 MiB: fine


@pytest.mark.parametrize("task", list_tasks())
def test_every_numeric_task_option_has_a_limit(task: str) -> None:
    from trainers.tasks.registry import _builder

    for name, param in inspect.signature(_builder(task)).parameters.items():
        if str(param.annotation).removesuffix(" | None") in ("int", "float"):
            assert name in OPTION_LIMITS, (task, name)
    assert set(task_options(task))  # every task has options


# ----------------------------------------------------------------------------- train settings
TRAIN_CASES = [
    (["--seed", "4294967296"], "`seed <= 4294967295`"),
    (["--seed", "-1"], "`seed >= 0`"),
    (["--epochs", "1000000"], "`epochs <= 10000`"),
    (["--epochs", "0"], "`epochs >= 1`"),
    (["--train-set", "batch_size=1000000"], "`batch_size <= 65536`"),
    (["--train-set", "eval_batch_size=100000"], "`eval_batch_size <= 65536`"),
    (["--train-set", "max_decode_len=100000"], "`max_decode_len <= 1024`"),
    (["--train-set", "max_steps_per_epoch=0"], "`max_steps_per_epoch >= 1`"),
    (["--train-set", "lr=.nan"], "finite"),
    (["--train-set", "lr=nan"], "finite"),  # a string that reads as a number
    (["--train-set", "lr=1e999"], "finite"),
    (["--train-set", "lr=0"], "`lr > 0`"),
    (["--train-set", "weight_decay=.inf"], "finite"),
    (["--train-set", "warmup_epochs=-1"], "`warmup_epochs >= 0`"),
    (["--train-set", "grad_clip=0"], "`grad_clip > 0`"),
    (["--train-set", "dropout=1"], "`dropout < 1`"),
    (["--train-set", "seed=true"], "must be an integer"),
    (["--train-set", "device=gpu"], "'cuda:N'"),
    (["--train-set", "device=cuda:99"], "not available here; the devices are ['cpu'"),
    (["--train-set", "colour=red"], "Unknown training key 'colour'"),
]


@pytest.mark.parametrize(("args", "fragment"), TRAIN_CASES)
def test_bad_training_settings_are_one_line(
    args: list[str], fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    err, _ = run_cli(["train", *TINY_VIT, "--task", "digits", "--out", str(out), *args], capsys)
    assert fragment in err, err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_gpu_names_the_devices_there_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    err, _ = run_cli(["train", *TINY_VIT, "--task", "digits", "--out", str(out),
                      "--train-set", "device=cuda"], capsys)
    assert "device='cuda' is not available here; the devices are ['cpu']" in err
    assert not out.exists()


# ----------------------------------------------------------------------------- memory
def test_a_batch_that_cannot_fit_is_refused_before_the_model_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    err, seconds = run_cli(["train", "deit-base", "--set", "patch_size=4", "--task", "digits",
                            "--train-set", "batch_size=65536", "--out", str(out)], capsys)
    assert "needs about" in err and "available" in err and "batch_size=65536" in err, err
    assert not out.exists()
    assert seconds < 10.0


def test_the_memory_check_uses_what_the_device_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nas.loading import load_arch
    from trainers import TrainConfig, get_task, train

    data = get_task("digits")
    monkeypatch.setattr(nas.memory, "_host_available", lambda: 2**20)
    with pytest.raises(ConfigError, match=r"needs about .* but cpu has 1.0 MiB available"):
        train(load_arch(TINY_VIT[0], TINY_VIT[2::2]), TrainConfig(device="cpu"), data,
              checkpoint_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["mcan-small", "acort-base", "lxmert", "deit-tiny", "swin-tiny"])
def test_memory_estimate_is_cheap_and_follows_its_rule(name: str) -> None:
    config = get_preset(name)
    start = time.perf_counter()
    one = training_memory(config, None, 1, eval_batch_size=1)
    assert time.perf_counter() - start < 5.0
    assert one.params == estimate_cost(config).params
    assert one.parameter_bytes == 16 * one.params
    big = training_memory(config, None, 64, eval_batch_size=64)
    assert big.train_activation_bytes == 64 * one.train_activation_bytes > 0
    assert big.eval_activation_bytes == 64 * one.eval_activation_bytes > 0
    assert estimate_training_memory(config, None, 64, eval_batch_size=64) == big.total
