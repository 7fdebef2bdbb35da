"""The training settings of one trial: :class:`TrainConfig`, its limits, and the quick
default budgets of the built-in tasks.

Nothing here imports torch: a study file's ``train`` section, a stored search space and
``nas status`` are checked and read against these fields without loading the trainer
(``trainers.loop``, which re-exports them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any, Literal

from nas.errors import ConfigError

__all__ = ["DEVICE_PATTERN", "TRAIN_LIMITS", "TrainConfig", "quick_defaults"]


# Ranges of the numeric settings (null is allowed where the annotation says so); every number
# must also be finite. The upper limits refuse typos before anything is allocated or a run is
# scheduled that cannot end: a seed must fit numpy's 32 bits, and a batch larger than 65,536 or
# a decode longer than 1,024 tokens is past any setting in the papers (ImageNet ViTs train at
# batch 1,024 to 4,096). The learning rate has no upper limit: a diverging run is a result
# (status failed), not a crash.
TRAIN_LIMITS: dict[str, tuple[float, float]] = {
    "epochs": (1, 10_000),
    "batch_size": (1, 65_536),
    "eval_batch_size": (1, 65_536),
    "max_decode_len": (1, 1024),
    "max_steps_per_epoch": (1, 10_000_000),
    "loader_workers": (0, 64),
    "seed": (0, 2**32 - 1),
    "lr": (0.0, math.inf),  # lr > 0: the lower end is open
    "weight_decay": (0.0, math.inf),
    "warmup_epochs": (0.0, 10_000.0),
    "grad_clip": (0.0, math.inf),  # > 0; null turns clipping off
    "dropout": (0.0, 1.0),  # 1 is open: nothing would reach the next layer
}
_OPEN_LOW = ("lr", "grad_clip")
_OPEN_HIGH = ("dropout",)
# "auto", "cpu", "cuda" or "cuda:N", "mps"; whether the device exists is checked by select_device
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d{1,3})?")


@dataclass(frozen=True)
class TrainConfig:
    """How to train one architecture (the proxy fidelity of a trial).

    Numbers must be finite and within ``TRAIN_LIMITS``; ``device`` is ``auto`` (CUDA when
    present, else CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``. ``loader_workers`` worker
    processes read and collate batches while the model trains (a ``DataLoader``'s
    ``num_workers``; kept across epochs): worth it where reading is slow next to the model, as
    region features from many ``.npz`` files are next to a GPU (``benchmarks/feature_loader.py``);
    a trial holding ``resources.cpu`` CPUs has that many minus one to give. Batches are the same
    as without workers, except a caption task's drawn caption (each worker draws from its own
    seeded generator).
    """

    epochs: int = 5
    batch_size: int = 64
    lr: float = 1e-3
    optimizer: Literal["adam", "adamw"] = "adamw"
    weight_decay: float = 0.01
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_epochs: float = 0.5
    lr_sqrt_groups: bool = False  # the LW papers' learning rate scaled by sqrt(k)
    grad_clip: float | None = 1.0
    dropout: float | None = None  # None: the family's own, nas.config.drop_rate
    seed: int = 0
    device: str = "auto"  # "auto" = CUDA when present, else CPU
    amp: bool = True  # mixed precision, on CUDA only
    max_steps_per_epoch: int | None = None
    eval_batch_size: int = 256
    max_decode_len: int = 40  # captions: greedy decoding length on validation
    loader_workers: int = 0  # processes loading batches beside training (0: in the loop)

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_type(f.name, getattr(self, f.name), str(f.type))
        for key, (low, high) in TRAIN_LIMITS.items():
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"Training key `{key}` must be a finite number, but got "
                                  f"{key}={value}.")
            if not (value > low if key in _OPEN_LOW else value >= low):
                rule = f"{key} {'>' if key in _OPEN_LOW else '>='} {_fmt(low)}"
                raise ConfigError(f"`{rule}` must hold, but got {key}={value}.")
            if not (value < high if key in _OPEN_HIGH else value <= high):
                rule = f"{key} {'<' if key in _OPEN_HIGH else '<='} {_fmt(high)}"
                raise ConfigError(f"`{rule}` must hold, but got {key}={value}.")
        if not DEVICE_PATTERN.fullmatch(self.device):
            raise ConfigError(f"Training key `device` must be 'auto', 'cpu', 'cuda', 'cuda:N' or "
                              f"'mps', but got device={self.device!r}.")
        if self.optimizer not in ("adam", "adamw"):
            raise ConfigError(f"`optimizer` must be 'adam' or 'adamw', got {self.optimizer!r}.")
        if self.schedule not in ("cosine", "linear", "constant"):
            raise ConfigError(
                f"`schedule` must be 'cosine', 'linear' or 'constant', got {self.schedule!r}."
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Settings from a mapping (a study file, ``--train-set``); unknown keys are an error.

        A string that reads as a number is taken as one where a number is due: YAML 1.1, which
        PyYAML follows, reads ``lr=1e-3`` as the string ``"1e-3"``.
        """
        types = {f.name: str(f.type) for f in fields(cls)}
        unknown = sorted(set(data) - set(types))
        if unknown:
            raise ConfigError(
                f"Unknown training key {unknown[0]!r}; valid keys are {sorted(types)}."
            )
        return cls(**{k: _number(v) if types[k].startswith("float") else v
                      for k, v in data.items()})


# annotation (postponed, without `` | None``) -> accepted types, and how a message names them
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((int,), "an integer"), "float": ((int, float), "a number"),
    "bool": ((bool,), "true or false"), "str": ((str,), "a string"),
}


def _check_type(key: str, value: Any, annotation: str) -> None:
    optional = annotation.endswith(" | None")
    kind = annotation.removesuffix(" | None")
    if kind not in _TYPES or (optional and value is None):
        return  # Literal keys are checked by value
    types, noun = _TYPES[kind]
    if not isinstance(value, types) or (isinstance(value, bool) and kind != "bool"):
        raise ConfigError(f"Training key `{key}` must be {noun}{' or null' if optional else ''}, "
                          f"but got {key}={value!r}.")


def _fmt(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


# Quick proxy budgets for a 2-core CPU, calibrated by benchmarks/proxies.py: each run of its
# dense baselines (a 206k-parameter ViT, a 306k-parameter MCAN, a 478k-parameter ORT) takes 30-50 s
# on one thread, and separates them from models ten times smaller by more than the seed-to-seed
# spread. Digits needs its 20 epochs to clear 90%; synthetic-vqa learns no better at a higher rate
# or with more epochs; synthetic-captions reaches 2x the constant caption's CIDEr-D in every seed
# at batch 32 (at batch 64 one seed of three only just did).
_QUICK: dict[str, dict[str, Any]] = {
    "digits": {"epochs": 20, "batch_size": 64, "lr": 2e-3, "warmup_epochs": 1.0},
    "synthetic-vqa": {"epochs": 6, "batch_size": 64, "lr": 1e-3},
    "synthetic-captions": {"epochs": 6, "batch_size": 32, "lr": 2e-3},
}


def quick_defaults(task: str) -> dict[str, Any]:
    """Training settings of the quick default budget for ``task`` (empty: TrainConfig's own)."""
    return dict(_QUICK.get(task, {}))
