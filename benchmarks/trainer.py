"""The trainer's throughput against a minimal hand-written PyTorch loop, side by side.

    python benchmarks/trainer.py [--tasks digits synthetic-vqa] [--steps 20] [--repeats 5]
                                 [--threads 1]

For each task the same network (the dense baseline of ``benchmarks/proxies.py``, built from the
same seed) is trained at the task's quick batch size by ``trainers.train`` and by a hand-written
loop: the whole training split collated once into tensors, a random permutation sliced into
batches, forward, loss, ``zero_grad``, backward, gradient clipping, optimizer step. Same
optimizer (AdamW, same learning rate and weight decay), same clipping, no evaluation, no schedule.

Two measurements, each repeated ``--repeats`` times:

- lockstep (the verdict): one ``train`` run and one hand loop advance together, one step each in
  turn. The trainer's ``progress`` hook times the trainer's steps (fetching and collating its
  batch, then everything ``train`` does until it asks for the next one) and runs a hand step in
  between, so both see the same machine load within a fraction of a second. Ratios of hand to
  trainer step time over the same equal-sized steps (the first two of each left out): of the
  median steps (a step that another process preempted does not move it), of the total wall
  times, and of the total CPU times of the process. The last is the verdict: it is blind to
  time spent descheduled, so on a shared machine it still measures the work each loop does
  (with several threads it also counts their spinning, alike for both loops).
- separate runs, alternating (trainer, hand, hand, trainer, ...): ``train``'s own
  ``samples_per_second`` (training phase, evaluation excluded) against the hand loop's.

Each line prints the median ratio over repeats, and every repeat's. Target: trainer / hand >=
0.95. On a quiet machine all four agree; where other processes load it, separate runs scatter
by +-20% from one repeat to the next, lockstep wall times by +-10%, CPU times by +-3%.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Iterator
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
SKIP = 2  # first steps of a run left out of lockstep timing (allocator warm-up)


class HandLoop:
    """The minimal loop, one step per call; the data are collated once, up front."""

    def __init__(self, config: ArchConfig, cfg: TrainConfig, data: TaskData) -> None:
        seed_everything(cfg.seed)
        self.kind, self.batch_size = data.geometry.kind, cfg.batch_size
        self.grad_clip = cfg.grad_clip
        self.model = create_model(config, data.geometry)
        tokenizer = make_tokenizer(config, data)
        self.pad = tokenizer.PAD if tokenizer is not None else None
        full = collate(self.kind, [data.train[i] for i in range(len(data.train))], tokenizer)
        self.tensors = {k: v for k, v in full.items() if torch.is_tensor(v)}
        self.inputs = [k for k in _input_names(self.model) if k in self.tensors]  # MCAN: no boxes
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr,
                                           weight_decay=cfg.weight_decay)
        self.order = torch.randperm(len(data.train))
        self.model.train()

    def step(self, i: int) -> None:
        index = self.order[i * self.batch_size:(i + 1) * self.batch_size]
        batch = {k: v[index] for k, v in self.tensors.items()}
        logits = self.model(**{k: batch[k] for k in self.inputs})
        loss = _loss(self.kind, logits, batch, self.pad)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()

    def run(self, steps: int) -> float:
        """Samples per second over ``steps`` steps."""
        start = time.perf_counter()
        for i in range(steps):
            self.step(i)
        return steps * self.batch_size / (time.perf_counter() - start)


def lockstep(config: ArchConfig, cfg: TrainConfig, data: TaskData,
             steps: int) -> tuple[float, float, float]:
    """Hand / trainer time, the two loops taking turns step by step: ratios of the median steps,
    of the total wall times, and of the total CPU times of this process."""
    hand = HandLoop(config, cfg, data)
    wall: dict[str, list[float]] = {"trainer": [], "hand": []}
    cpu: dict[str, list[float]] = {"trainer": [], "hand": []}

    def hook(batches: Iterator[Any], total: int, desc: str) -> Iterator[Any]:
        it = iter(batches)
        for i in range(total):
            start, start_cpu = time.perf_counter(), time.process_time()
            yield next(it)  # the trainer's fetch and collate, then its step until it asks again
            wall["trainer"].append(time.perf_counter() - start)
            cpu["trainer"].append(time.process_time() - start_cpu)
            start, start_cpu = time.perf_counter(), time.process_time()
            hand.step(i)
            wall["hand"].append(time.perf_counter() - start)
            cpu["hand"].append(time.process_time() - start_cpu)

    train(config, replace(cfg, epochs=1, max_steps_per_epoch=steps), data, progress=hook)
    hand_wall, trainer_wall = wall["hand"][SKIP:], wall["trainer"][SKIP:]
    return (statistics.median(hand_wall) / statistics.median(trainer_wall),
            sum(hand_wall) / sum(trainer_wall),
            sum(cpu["hand"][SKIP:]) / sum(cpu["trainer"][SKIP:]))


def separate(config: ArchConfig, cfg: TrainConfig, data: TaskData, steps: int,
             trainer_first: bool) -> float:
    """``train``'s own samples/s over the hand loop's, in two runs one after the other."""
    rates = {}
    for name in ("trainer", "hand") if trainer_first else ("hand", "trainer"):
        if name == "trainer":
            result = train(config, replace(cfg, epochs=1, max_steps_per_epoch=steps), data)
            rates[name] = result.samples_per_second
        else:
            rates[name] = HandLoop(config, cfg, data).run(steps)
    return rates["trainer"] / rates["hand"]


def bench(task: str, steps: int, repeats: int) -> float:
    options: dict[str, Any] = {"val_size": 16} if task.startswith("synthetic") else {}
    data = get_task(task, **options)
    config = load_arch(*MODELS[task])
    cfg = TrainConfig.from_dict(quick_defaults(task) | {"device": "cpu", "max_decode_len": 2})
    if steps * cfg.batch_size > len(data.train):
        raise SystemExit(f"--steps {steps} x batch {cfg.batch_size} exceeds {task}'s "
                         f"{len(data.train)} training samples.")
    lockstep(config, cfg, data, SKIP + 1)  # warm-up: lazy imports, first-call paths
    both = [lockstep(config, cfg, data, steps) for _ in range(repeats)]
    apart = [separate(config, cfg, data, steps, r % 2 == 0) for r in range(repeats)]
    print(f"{task} ({config.family}, {config.d_model} wide, batch {cfg.batch_size}, "
          f"{steps} steps, {repeats} repeats)")
    results = {"lockstep, median step": [b[0] for b in both],
               "lockstep, total": [b[1] for b in both],
               "lockstep, CPU time": [b[2] for b in both], "separate runs": apart}
    for how, ratios in results.items():
        ratio = statistics.median(ratios)
        print(f"  {how:<22} trainer / hand {ratio:.3f}  "
              f"[{'ok' if ratio >= TARGET else 'BELOW'} {TARGET}]  "
              f"(repeats: {', '.join(f'{x:.3f}' for x in ratios)})", flush=True)
    return statistics.median(results["lockstep, CPU time"])


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
