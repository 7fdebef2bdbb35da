"""Do the quick proxy tasks discriminate? A dense baseline against a ten-times-smaller model.

    python benchmarks/proxies.py [--tasks digits synthetic-vqa synthetic-captions] [--seeds 0 1 2]
        [--threads 1]

For each task, trains a small but real preset-derived network (``dense``) and one with at least
ten times fewer parameters (``tiny``) under the task's quick default budget
(``trainers.loop.quick_defaults``), once per training seed (weights, dropout and batch order; the
task's data stay fixed), and prints one row per run: task, model, params, seed, metric, seconds.
Then, per task, the verdict on the claims of the quick budget:

- the dense baseline reaches the task's bar (digits: accuracy >= 0.90; synthetic-vqa and
  synthetic-captions: at least twice the chance level, VQA accuracy or CIDEr-D of the most
  frequent caption) in every seed;
- the tiny model scores lower: the gap between the two models' mean metric is larger than the
  seed-to-seed spread (max - min) of either model;
- every run takes at most 60 seconds.

``--threads`` sets torch's intra-op threads (default: torch's own choice). On a shared two-core
machine one thread is the robust choice: two threads contending with other processes can run an
order of magnitude slower. The load average is printed so the timings can be judged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import torch

from nas.loading import load_arch
from trainers import TrainConfig, get_task, train
from trainers.loop import quick_defaults

# task -> model -> (preset, overrides); tiny has >= 10x fewer parameters than dense.
BASELINES: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {
    "digits": {
        "dense": ("deit-tiny", {"d_model": 64, "d_ff": 256, "heads": 2, "encoder_layers": 4,
                                "patch_size": 8}),
        "tiny": ("deit-tiny", {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1,
                               "patch_size": 8}),
    },
    "synthetic-vqa": {
        "dense": ("mcan-small", {"d_model": 64, "d_ff": 128, "heads": 4, "encoder_layers": 2,
                                 "decoder_layers": 2}),
        "tiny": ("mcan-small", {"d_model": 8, "d_ff": 16, "heads": 1, "encoder_layers": 1,
                                "decoder_layers": 1}),
    },
    "synthetic-captions": {
        "dense": ("ort-base", {"d_model": 64, "d_ff": 128, "heads": 4, "encoder_layers": 2,
                               "decoder_layers": 2}),
        "tiny": ("ort-base", {"d_model": 8, "d_ff": 16, "heads": 1, "encoder_layers": 1,
                              "decoder_layers": 1}),
    },
}
LIMIT_S = 60.0


def bar(task: str, chance: float) -> float:
    """The metric the dense baseline must reach on ``task``."""
    return 0.9 if task == "digits" else 2 * chance


def run_task(task: str, seeds: list[int], epochs: int | None) -> list[dict[str, Any]]:
    data = get_task(task)
    settings = quick_defaults(task) | ({"epochs": epochs} if epochs else {})
    rows = []
    for seed in seeds:
        for model, (preset, overrides) in BASELINES[task].items():
            cfg = TrainConfig.from_dict(settings | {"seed": seed})
            start = time.perf_counter()
            result = train(load_arch(preset, overrides), cfg, data)
            rows.append({"task": task, "model": model, "params": result.params, "seed": seed,
                         "metric": result.value, "seconds": time.perf_counter() - start,
                         "chance": result.chance, "name": result.metric,
                         "curve": [round(e["value"], 3) for e in result.epochs]})
            print(f"{task:<14} {model:<6} {result.params:>9,} {seed:>4} "
                  f"{result.metric} {result.value:.4f} {rows[-1]['seconds']:>7.1f} s  "
                  f"(per epoch: {rows[-1]['curve']})", flush=True)
    return rows


def verdict(task: str, rows: list[dict[str, Any]]) -> bool:
    values = {m: [r["metric"] for r in rows if r["model"] == m] for m in ("dense", "tiny")}
    params = {m: next(r["params"] for r in rows if r["model"] == m) for m in values}
    gap = statistics.mean(values["dense"]) - statistics.mean(values["tiny"])
    spread = max(max(v) - min(v) for v in values.values())
    need = bar(task, rows[0]["chance"])
    slowest = max(r["seconds"] for r in rows)
    checks = {
        f"dense >= {need:.3f} in every seed (min {min(values['dense']):.4f})":
            min(values["dense"]) >= need,
        f"params ratio {params['dense'] / params['tiny']:.1f} >= 10":
            params["dense"] >= 10 * params["tiny"],
        f"gap {gap:.4f} > seed spread {spread:.4f}": gap > spread,
        f"slowest run {slowest:.1f} s <= {LIMIT_S:.0f} s": slowest <= LIMIT_S,
    }
    means = {m: statistics.mean(v) for m, v in values.items()}
    print(f"\n{task}: chance {rows[0]['chance']:.4f}, dense mean {means['dense']:.4f}, "
          f"tiny mean {means['tiny']:.4f}")
    for text, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {text}")
    return all(checks.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(BASELINES), choices=list(BASELINES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None, help="override the quick budget")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    override = {"epochs": args.epochs} if args.epochs else {}
    for task in args.tasks:
        print(f"{task}: quick budget {quick_defaults(task) | override}")
    print(f"\n{'task':<14} {'model':<6} {'params':>9} {'seed':>4} metric {'seconds':>9}")
    rows = {task: run_task(task, args.seeds, args.epochs) for task in args.tasks}
    ok = [verdict(task, task_rows) for task, task_rows in rows.items()]
    print(f"\nload average now {os.getloadavg()[0]:.2f}")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    raise SystemExit(main())
