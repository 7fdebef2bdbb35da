"""The trainer's throughput against a minimal hand-written PyTorch loop, side by side.

    python benchmarks/trainer.py [--tasks digits synthetic-vqa] [--steps 20] [--repeats 5]
                                 [--threads 1]

For each task the same network (the dense baseline of ``benchmarks/proxies.py``, built with the
same seed) is trained for ``--steps`` steps at the task's quick batch size, by
``trainers.train`` (its own ``samples_per_second``: the training phase, evaluation excluded) and by
a hand-written loop: the whole training split collated once into tensors, a random permutation
sliced into batches, forward, loss, ``zero_grad``, backward, gradient clipping, optimizer step.
Same optimizer (AdamW, same learning rate and weight decay), same clipping, no evaluation, no
schedule. Runs alternate (trainer, hand, hand, trainer, ...) so drifting load hits both alike;
the median of the per-pair ratios is printed. Target: trainer / hand >= 0.95.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from nas.config import ArchConfig
from nas.loading import load_arch
from nas.models import create_model
from trainers import TaskData, TrainConfig, get_task, train
from trainers.loop import _input_names, _loss, make_tokenizer, quick_defaults, seed_everything
from trainers.tasks import collate

MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "digits": ("deit-tiny", {"d_model": 64, "d_ff": 256, "heads": 2, "encoder_layers": 4,
                             "patch_size": 8}),
    "synthetic-vqa": ("mcan-small", {"d_model": 64, "d_ff": 128, "heads": 4,
                                     "encoder_layers": 2, "decoder_layers": 2}),
    "synthetic-captions": ("ort-base", {"d_model": 64, "d_ff": 128, "heads": 4,
                                        "encoder_layers": 2, "decoder_layers": 2}),
}
TARGET = 0.95


def hand_loop(config: ArchConfig, cfg: TrainConfig, data: TaskData, steps: int) -> float:
    """Samples per second of a minimal loop over pre-collated tensors (no evaluation)."""
    seed_everything(cfg.seed)
    kind = data.geometry.kind
    model = create_model(config, data.geometry)
    tokenizer = make_tokenizer(config, data)
    pad = tokenizer.PAD if tokenizer is not None else None
    full = collate(kind, [data.train[i] for i in range(len(data.train))], tokenizer)
    tensors = {k: v for k, v in full.items() if torch.is_tensor(v)}
    inputs = [k for k in _input_names(model) if k in tensors]  # MCAN takes no boxes
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    n = len(data.train)
    model.train()
    start, samples = time.perf_counter(), 0
    order = torch.randperm(n)
    for step in range(steps):
        index = order[step * cfg.batch_size:(step + 1) * cfg.batch_size]
        batch = {k: v[index] for k, v in tensors.items()}
        logits = model(**{k: batch[k] for k in inputs})
        loss = _loss(kind, logits, batch, pad)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        samples += index.numel()
    return samples / (time.perf_counter() - start)


def trainer_loop(config: ArchConfig, cfg: TrainConfig, data: TaskData, steps: int) -> float:
    """``trainers.train``'s own samples per second over ``steps`` steps (one epoch)."""
    result = train(config, replace(cfg, epochs=1, max_steps_per_epoch=steps), data)
    return result.samples_per_second


def bench(task: str, steps: int, repeats: int) -> float:
    options: dict[str, Any] = {"val_size": 16} if task.startswith("synthetic") else {}
    data = get_task(task, **options)
    preset, overrides = MODELS[task]
    config = load_arch(preset, overrides)
    cfg = TrainConfig.from_dict(quick_defaults(task) | {"device": "cpu", "max_decode_len": 2})
    if steps * cfg.batch_size > len(data.train):
        raise SystemExit(f"--steps {steps} x batch {cfg.batch_size} exceeds {task}'s "
                         f"{len(data.train)} training samples.")
    runners: dict[str, Callable[..., float]] = {"trainer": trainer_loop, "hand": hand_loop}
    for run in runners.values():  # warm-up: allocator, lazy imports, first-call paths
        run(config, cfg, data, 3)
    rates: dict[str, list[float]] = {"trainer": [], "hand": []}
    for r in range(repeats):
        order = ["trainer", "hand"] if r % 2 == 0 else ["hand", "trainer"]
        for name in order:
            rates[name].append(runners[name](config, cfg, data, steps))
    ratios = [t / h for t, h in zip(rates["trainer"], rates["hand"], strict=True)]
    ratio = statistics.median(ratios)
    print(f"{task:<19} {config.family:<7} batch {cfg.batch_size:>3}  trainer "
          f"{statistics.median(rates['trainer']):8.1f}  hand {statistics.median(rates['hand']):8.1f}"
          f" samples/s  ratio {ratio:.3f} (per pair: {', '.join(f'{x:.3f}' for x in ratios)})"
          f"  [{'ok' if ratio >= TARGET else 'BELOW'} {TARGET}]", flush=True)
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["digits", "synthetic-vqa"],
                        choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    ratios = [bench(task, args.steps, args.repeats) for task in args.tasks]
    print(f"load average now {os.getloadavg()[0]:.2f}")
    return 0 if min(ratios) >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
