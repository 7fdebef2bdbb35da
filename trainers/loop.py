"""The trainer: one plain function of (architecture, training config, data, report callback).

Read top to bottom: the learning-rate schedule (a small pure function), the loss and metric
of each task kind, then ``train`` itself; its settings are ``trainers.config``'s
:class:`TrainConfig` (re-exported here). The Ray worker of the study engine is a thin
adapter around ``train``; ``nas train`` calls it directly.
"""

from __future__ import annotations

import inspect
import itertools
import math
import multiprocessing
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from nas.config import ArchConfig
from nas.cost import model_cost
from nas.errors import ConfigError
from nas.memory import (
    CUDA_CONTEXT_BYTES,
    check_training_memory,
    device_bytes,
    format_bytes,
    training_memory,
)
from nas.models import FamilyModel, create_model
from nas.radix import RadixTokenizer, WordTokenizer, tokenizer_from_dict
from trainers.config import DEVICE_PATTERN, TRAIN_LIMITS, TrainConfig, quick_defaults
from trainers.devices import gpu_budget
from trainers.tasks import TaskData, collate
from trainers.tasks.metrics import bleu4, cider_d

__all__ = [
    "TRAIN_LIMITS",
    "EpochReport",
    "TrainConfig",
    "TrainResult",
    "check_gpu_share",
    "learning_rate",
    "load_checkpoint",
    "quick_defaults",
    "select_device",
    "train",
]


@dataclass(frozen=True)
class EpochReport:
    epoch: int
    train_loss: float
    metric: str
    value: float
    lr: float
    seconds: float
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class TrainResult:
    """What one training run produced (``nas train --json`` prints most of it)."""

    arch_id: str
    task: str
    metric: str
    value: float
    chance: float
    epochs: list[dict[str, Any]]
    seconds: float
    samples_per_second: float
    params: int
    madds: int
    status: Literal["completed", "stopped", "failed"] = "completed"
    reason: str | None = None
    checkpoint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- pieces
def learning_rate(step: int, total: int, warmup: int, base: float, schedule: str) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine / linear decay to zero, or constant."""
    if step < warmup:
        return base * (step + 1) / warmup
    if schedule == "constant":
        return base
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "linear":
        return base * max(0.0, 1.0 - progress)
    return base * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def available_devices() -> list[str]:
    """The devices this process can train on: ``cpu``, then ``cuda:N`` and ``mps`` if present."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def select_device(name: str = "auto") -> torch.device:
    """CUDA when available (``auto``), else CPU; an explicit name must be a device that exists.

    Raises:
        ConfigError: ``name`` is not a device name, or names a device this machine lacks (the
            message lists the devices there are).
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not DEVICE_PATTERN.fullmatch(name):
        raise ConfigError(f"`device` must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', but got "
                          f"device={name!r}.")
    kind, _, index = name.partition(":")
    wanted = f"cuda:{int(index or 0)}" if kind == "cuda" else kind
    there = available_devices()
    if wanted not in there:  # checked before torch parses it ("cuda:200" would wrap around)
        raise ConfigError(f"device={name!r} is not available here; the devices are {there} "
                          "(or use device: auto).")
    return torch.device(name)


def check_gpu_share(config: ArchConfig, cfg: TrainConfig, data: TaskData, fraction: float,
                    mem_info: tuple[int, int]) -> int:
    """The memory check of a trial that holds ``fraction`` of a GPU (``resources.gpu`` < 1):
    the estimate with the CUDA libraries' share (``nas.memory.device_bytes``) against
    :func:`trainers.devices.gpu_budget` of the card's ``(free, total)`` bytes
    (``torch.cuda.mem_get_info``): the share, less the process's CUDA context
    (``nas.memory.CUDA_CONTEXT_BYTES``), and no more than is free.

    Raises:
        ConfigError: the estimate exceeds the trial's share (one line, both figures).
    """
    estimate = training_memory(config, data.geometry, cfg.batch_size,
                               eval_batch_size=cfg.eval_batch_size)
    needed = device_bytes(estimate, "cuda")
    free, total = mem_info
    budget = gpu_budget(free, total, fraction, CUDA_CONTEXT_BYTES)
    if needed > budget:
        raise ConfigError(
            f"Training arch {config.arch_id} ({config.family}, {estimate.params:,} params) at "
            f"batch_size={cfg.batch_size} needs about {format_bytes(needed)}, but the "
            f"trial holds {fraction:g} of a GPU: {format_bytes(budget)} of its "
            f"{format_bytes(total)} ({format_bytes(free)} free, "
            f"{format_bytes(CUDA_CONTEXT_BYTES)} of the share for the CUDA context); lower "
            "batch_size or eval_batch_size, raise resources.gpu, or choose a smaller "
            "architecture.")
    return needed


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_tokenizer(config: ArchConfig, data: TaskData) -> RadixTokenizer | WordTokenizer | None:
    """The caption tokenizer the architecture needs (radix when ``radix_base`` is set)."""
    if data.geometry.kind != "caption":
        return None
    assert data.words is not None
    if config.radix_base is not None:
        return RadixTokenizer(data.words, config.radix_base)
    return WordTokenizer(data.words)


def _to(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v
            for k, v in batch.items()}


def _input_names(model: FamilyModel) -> tuple[str, ...]:
    """The batch keys the model's forward takes (MCAN ignores boxes, LXMERT and ORT use them)."""
    return tuple(inspect.signature(model.forward).parameters)


def _model_inputs(names: tuple[str, ...], batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: batch[k] for k in names if k in batch}


def _loss(kind: str, logits: torch.Tensor, batch: dict[str, Any], pad: int | None) -> torch.Tensor:
    if kind == "vqa":  # MCAN: binary cross-entropy against soft VQA scores
        target = batch["answer_scores"]
        return F.binary_cross_entropy_with_logits(logits.float(), target) * target.shape[-1]
    if kind == "caption":
        return F.cross_entropy(logits.float().flatten(0, 1), batch["targets"].flatten(),
                               ignore_index=-100 if pad is None else pad)
    return F.cross_entropy(logits.float(), batch["label"])


def _loader(dataset: Any, batch_size: int, workers: int, collate_fn: Callable[[Any], Any],
            generator: torch.Generator | None = None) -> DataLoader[Any]:
    """Batches of ``dataset``: shuffled with ``generator`` when given, in order otherwise;
    ``workers`` processes load them (forked where the platform can: the datasets of the
    user's files hold memory maps and closures, which a spawned worker would have to pickle)."""
    extra: dict[str, Any] = {}
    if workers:
        extra = {"num_workers": workers, "persistent_workers": generator is not None}
        if "fork" in multiprocessing.get_all_start_methods():
            extra["multiprocessing_context"] = "fork"
    return DataLoader(dataset, batch_size=batch_size, shuffle=generator is not None,
                      drop_last=False, generator=generator, collate_fn=collate_fn, **extra)


@torch.no_grad()
def evaluate(model: FamilyModel, data: TaskData, cfg: TrainConfig, device: torch.device,
             tokenizer: RadixTokenizer | WordTokenizer | None) -> dict[str, float]:
    """The task's metric on the validation split (captions: greedy decoding, CIDEr-D, BLEU-4)."""
    model.eval()
    kind = data.geometry.kind
    loader = _loader(data.val, cfg.eval_batch_size, cfg.loader_workers,
                     partial(collate, kind, tokenizer=tokenizer))
    total, score = 0, 0.0
    candidates: list[list[str]] = []
    references: list[list[list[str]]] = []
    for raw in loader:
        batch = _to(raw, device)
        if kind == "caption":
            assert tokenizer is not None
            ids = model.generate(batch["regions"], batch["boxes"],  # type: ignore[operator]
                                 max_len=cfg.max_decode_len)
            candidates += [tokenizer.decode(row) for row in ids.cpu()]
            references += raw["references"]
            continue
        logits = model(**_model_inputs(_input_names(model), batch)).float()
        pred = logits.argmax(-1)
        if kind == "vqa":
            score += batch["answer_scores"].gather(1, pred[:, None]).sum().item()
        else:
            score += (pred == batch["label"]).sum().item()
        total += pred.shape[0]
    model.train()
    if kind == "caption":
        return {"cider_d": cider_d(candidates, references), "bleu4": bleu4(candidates, references)}
    return {data.metric: score / max(1, total)}


# ----------------------------------------------------------------------------- the loop
def _placed(config: ArchConfig, cfg: TrainConfig, data: TaskData,
            gpu_fraction: float) -> torch.device:
    """The device to train on, once the run's memory is known to fit it: bounds before
    allocation, estimated on the meta device (on CUDA, for the trial's share of the GPU, to
    which PyTorch's allocator is then held)."""
    device = select_device(cfg.device)
    if device.type == "cuda" and device.index is None:  # the allocator's fraction needs an index
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "cuda" and gpu_fraction < 1:
        free, total = torch.cuda.mem_get_info(device)
        check_gpu_share(config, cfg, data, gpu_fraction, (free, total))
        # the allocator's cap: the share less the context, which the check left room for
        torch.cuda.set_per_process_memory_fraction(
            max(gpu_fraction - CUDA_CONTEXT_BYTES / total, 1e-3), device)
    else:
        check_training_memory(config, data.geometry, cfg.batch_size, device,
                              eval_batch_size=cfg.eval_batch_size)
    return device


@dataclass
class _Stepper:
    """One optimisation step: the optimizer, mixed precision (CUDA only) and its scaler."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    use_amp: bool
    amp_dtype: torch.dtype
    scaler: torch.amp.GradScaler
    grad_clip: float | None

    @classmethod
    def build(cls, model: nn.Module, cfg: TrainConfig, base_lr: float,
              device: torch.device) -> _Stepper:
        opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
        optimizer = opt_cls(model.parameters(), lr=base_lr,
                            weight_decay=cfg.weight_decay if cfg.optimizer == "adamw" else 0.0)
        use_amp = cfg.amp and device.type == "cuda"
        amp_dtype = torch.bfloat16 if use_amp and torch.cuda.is_bf16_supported() else torch.float16
        scaler = torch.amp.GradScaler("cuda", enabled=use_amp and amp_dtype == torch.float16)
        return cls(model, optimizer, device, use_amp, amp_dtype, scaler, cfg.grad_clip)

    def step(self, kind: str, names: tuple[str, ...], batch: dict[str, Any], pad: int | None,
             lr: float) -> float:
        """The batch's loss, after a step on it; a loss that is not finite takes no step."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.use_amp):
            logits = self.model(**_model_inputs(names, batch))
        loss = _loss(kind, logits, batch, pad)
        loss_value = float(loss.item())  # the step's one host-device sync
        if not math.isfinite(loss_value):
            return loss_value
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.grad_clip is not None:  # validated > 0; null turns clipping off
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss_value


def train(
    config: ArchConfig,
    cfg: TrainConfig,
    data: TaskData,
    report: Callable[[EpochReport], bool | None] | None = None,
    *,
    checkpoint_dir: str | Path | None = None,
    progress: Callable[[Iterator[Any], int, str], Iterator[Any]] | None = None,
    gpu_fraction: float = 1.0,
) -> TrainResult:
    """Train ``config`` on ``data`` and return per-epoch metrics and the final metric.

    ``report`` is called after every epoch; returning True stops the run early (status
    ``stopped``: early stopping by the study engine). A NaN or infinite loss ends the run with
    status ``failed`` and the reason, instead of wasting the budget. ``progress`` wraps the
    batch iterator (a progress bar) when given. ``gpu_fraction`` is the share of the GPU a
    study trial holds (``resources.gpu`` below 1): on CUDA its memory check plans for that share
    (:func:`check_gpu_share`), and PyTorch's allocator is held to it, less the CUDA context.
    """
    device = _placed(config, cfg, data, gpu_fraction)
    seed_everything(cfg.seed)
    kind = data.geometry.kind
    model = create_model(config, data.geometry, device=device, drop_rate=cfg.dropout)
    cost = model_cost(model, config, data.geometry)
    tokenizer = make_tokenizer(config, data)
    names = _input_names(model)
    pad = tokenizer.PAD if tokenizer is not None else None

    generator = torch.Generator().manual_seed(cfg.seed)
    loader = _loader(data.train, cfg.batch_size, cfg.loader_workers,
                     partial(collate, kind, tokenizer=tokenizer), generator=generator)
    steps_per_epoch = len(loader) if cfg.max_steps_per_epoch is None else min(
        len(loader), cfg.max_steps_per_epoch)
    total_steps = steps_per_epoch * cfg.epochs
    warmup = int(cfg.warmup_epochs * steps_per_epoch)
    base_lr = cfg.lr * (math.sqrt(config.groups) if cfg.lr_sqrt_groups else 1.0)
    stepper = _Stepper.build(model, cfg, base_lr, device)

    result = TrainResult(arch_id=config.arch_id, task=data.name, metric=data.metric, value=0.0,
                         chance=data.chance, epochs=[], seconds=0.0, samples_per_second=0.0,
                         params=cost.params, madds=cost.madds)
    start, train_time, samples, step = time.perf_counter(), 0.0, 0, 0
    model.train()
    lr = learning_rate(0, total_steps, warmup, base_lr, cfg.schedule)
    for epoch in range(1, cfg.epochs + 1):
        epoch_start, losses = time.perf_counter(), []
        # islice: a capped epoch must not collate one batch more than it trains on
        batches: Iterator[Any] = itertools.islice(loader, steps_per_epoch)
        if progress is not None:
            batches = progress(batches, steps_per_epoch, f"epoch {epoch}/{cfg.epochs}")
        for i, raw in enumerate(batches):
            lr = learning_rate(step, total_steps, warmup, base_lr, cfg.schedule)
            loss_value = stepper.step(kind, names, _to(raw, device), pad, lr)
            if not math.isfinite(loss_value):
                result.status = "failed"
                result.reason = f"loss became {loss_value} at epoch {epoch}, step {i + 1}"
                result.seconds = time.perf_counter() - start
                return result
            losses.append(loss_value)
            samples += next(v for v in raw.values() if torch.is_tensor(v)).shape[0]
            step += 1
        train_time += time.perf_counter() - epoch_start
        metrics = evaluate(model, data, cfg, device, tokenizer)
        value = metrics[data.metric]
        epoch_report = EpochReport(
            epoch=epoch, train_loss=float(np.mean(losses)) if losses else float("nan"),
            metric=data.metric, value=value, lr=lr, seconds=time.perf_counter() - epoch_start,
            extra={k: v for k, v in metrics.items() if k != data.metric},
        )
        result.epochs.append(asdict(epoch_report))
        result.value = value
        if report is not None and report(epoch_report):
            result.status = "stopped"
            break
    result.seconds = time.perf_counter() - start
    result.samples_per_second = samples / train_time if train_time > 0 else 0.0
    if checkpoint_dir is not None:
        result.checkpoint = str(save_checkpoint(model, config, cfg, data, tokenizer, result,
                                                Path(checkpoint_dir)))
    return result


# ----------------------------------------------------------------------------- checkpoints
def save_checkpoint(model: FamilyModel, config: ArchConfig, cfg: TrainConfig, data: TaskData,
                    tokenizer: RadixTokenizer | WordTokenizer | None, result: TrainResult,
                    directory: Path) -> Path:
    """Write ``<arch_id>.pt`` holding the weights and everything needed to rebuild the model."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{config.arch_id}.pt"
    torch.save({
        "arch": config.to_dict(), "arch_id": config.arch_id, "task": data.name,
        "geometry": asdict(data.geometry), "train_config": asdict(cfg),
        "tokenizer": tokenizer.to_dict() if tokenizer is not None else None,
        "state_dict": model.state_dict(), "result": {k: v for k, v in result.to_dict().items()
                                                    if k != "checkpoint"},
    }, path)
    return path


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> tuple[
    FamilyModel, ArchConfig, dict[str, Any]
]:
    """Rebuild the model a checkpoint holds; returns (model, config, the checkpoint dict)."""
    from nas.tasks import TaskGeometry

    blob = torch.load(path, map_location=device, weights_only=False)
    config = ArchConfig.from_dict(blob["arch"])
    model = create_model(config, TaskGeometry(**blob["geometry"]), device=device)
    model.load_state_dict(blob["state_dict"])
    if blob.get("tokenizer") is not None:
        blob["tokenizer_object"] = tokenizer_from_dict(blob["tokenizer"])
    return model, config, blob
