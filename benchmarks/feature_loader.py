"""Region features: the samples per second the loader delivers against what the model consumes.

    python benchmarks/feature_loader.py [--images 1500] [--batch 16] [--batches 40]
                                        [--workers 0 2] [--threads 1] [--tmp DIR]

A ``vqa-files`` task over ``--images`` generated feature files of real size (OpenVQA's layout:
``x`` (2048, R) float32 with R drawn from 10 - 100 adaptive boxes, ``bbox``, the image size;
uncompressed ``.npz``, 0.08 - 0.8 MB each; 5 questions an image) is loaded as a training run
loads it: a shuffled ``DataLoader`` of ``--batch`` items (a proxy's batch: the constant
schedule's 16), collated. Printed, in one run:

- the loader's samples/s with each ``--workers`` count (the training setting
  ``loader_workers``), with the feature files in the page
  cache (hot: a node's later epochs) and evicted from it (cold, ``posix_fadvise``: a first
  epoch, or a split larger than the node's memory), each after one batch of warm-up;
- the model's consumption: samples/s of training steps (forward, backward, AdamW step) on
  ready batches, for the study's proxy architecture at paper scale (``mcan-small``, the
  ``lw_transformer`` space's base) and at smoke scale (``studies.smoke``: width 64, depth 2),
  with ``--threads`` torch threads each.

The loader keeps up where its rate is above the model's. Timings on a shared machine move with
its load: each figure is also given per CPU second of the measuring process (blind to time spent
waiting for a core; for the loader, without workers only), which a loaded machine leaves
nearly as an idle one would measure it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _data_files import feature_files  # benchmarks/, this script's folder
from torch.utils.data import DataLoader

from nas.presets import get_preset
from nas.tasks import TaskGeometry
from studies.smoke import Smoke
from trainers import TaskData, get_task
from trainers.tasks import collate

REGIONS, DIM = 100, 2048


def write_task(root: Path, images: int, seed: int = 0) -> dict[str, Any]:
    """Feature files and VQA JSON for ``images`` images; the task's options."""
    rng = np.random.default_rng(seed)
    names = []
    for i in range(images):  # each image its own count of boxes, as adaptive features have
        name = f"COCO_train2014_{i + 1:012d}.jpg.npz"
        feature_files(root / "feats", [name], regions=int(rng.integers(10, REGIONS + 1)),
                      dim=DIM, seed=seed + i)
        names.append(name)
    questions = [{"image_id": i + 1, "question": f"what is thing {k}?",
                  "question_id": (i + 1) * 10 + k} for i in range(images) for k in range(5)]
    annotations = [{"question_id": q["question_id"], "multiple_choice_answer": "yes",
                    "answers": [{"answer": "yes" if k % 2 else "no"} for k in range(10)]}
                   for q in questions]
    for split in ("train", "val"):
        (root / f"{split}_q.json").write_text(json.dumps({"questions": questions}))
        (root / f"{split}_a.json").write_text(json.dumps({"annotations": annotations}))
    return {"root": str(root), "train_questions": "train_q.json", "train_annotations":
            "train_a.json", "train_features": "feats", "val_questions": "val_q.json",
            "val_annotations": "val_a.json", "val_features": "feats", "min_count": 1,
            "max_regions": REGIONS, "region_dim": DIM}


def evict(folder: Path) -> None:
    """Drop the files of ``folder`` from the page cache (written back first)."""
    for path in folder.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def loader_rate(data: TaskData, batch: int, batches: int, workers: int) -> tuple[float, float]:
    """Samples per second a shuffled DataLoader delivers, after one batch of warm-up, and per
    CPU second of this process (the loading itself where ``workers`` is 0)."""
    loader = DataLoader(data.train, batch_size=batch, shuffle=True, num_workers=workers,
                        collate_fn=partial(collate, "vqa"),
                        generator=torch.Generator().manual_seed(0))
    it = iter(loader)
    next(it)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(it)
    return (batches * batch / (time.perf_counter() - start),
            batches * batch / (time.process_time() - cpu))


def model_rate(preset: str, geometry: TaskGeometry, batch: int, steps: int,
               smoke: bool) -> tuple[float, float]:
    """Samples per second of training steps on ready batches, and per CPU second."""
    from nas.models import create_model
    from trainers.loop import _input_names, _loss

    config = get_preset(preset)
    if smoke:
        config = Smoke().shrink(config)
    model = create_model(config, geometry).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    batch_data = {
        "question": torch.randint(2, geometry.question_vocab, (batch, 14), generator=g),
        "regions": torch.rand(batch, REGIONS, DIM, generator=g),
        "boxes": torch.rand(batch, REGIONS, 4, generator=g),
        "answer_scores": (torch.rand(batch, geometry.num_outputs, generator=g) > 0.999).float(),
    }
    inputs = {k: batch_data[k] for k in _input_names(model) if k in batch_data}

    def step() -> None:
        loss = _loss("vqa", model(**inputs), batch_data, None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return (steps * batch / (time.perf_counter() - start),
            steps * batch / (time.process_time() - cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tmp", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="nas-loader-bench-", dir=args.tmp))
    os.environ["NAS_DATA_CACHE"] = str(tmp / "cache")
    try:
        options = write_task(tmp / "vqa", args.images)
        size = sum(p.stat().st_size for p in (tmp / "vqa" / "feats").iterdir())
        data = get_task("vqa-files", **options)
        print(f"{args.images} feature files, {size / 2**20:.0f} MB; batches of {args.batch}, "
              f"{args.batches} batches a figure; {os.cpu_count()} CPUs, {args.threads} torch "
              "thread(s)")
        print(f"{'loader':<40} {'samples/s':>10} {'per CPU s':>10}")
        for workers in args.workers:
            for cache in ("cold", "hot"):
                if cache == "cold":
                    evict(tmp / "vqa" / "feats")
                else:
                    loader_rate(data, args.batch, args.batches, workers)  # pages read in
                rate, per_cpu = loader_rate(data, args.batch, args.batches, workers)
                own = f"{per_cpu:>10.0f}" if not workers else f"{'':>10}"
                print(f"  {workers} workers, page cache {cache:<4}{'':<16} {rate:>10.0f} {own}")
        geometry = TaskGeometry("vqa-files", "vqa", 3129, question_tokens=14,
                                question_vocab=14_000, regions=REGIONS, region_dim=DIM)
        print(f"{'model (training steps)':<40} {'samples/s':>10} {'per CPU s':>10}")
        for smoke in (True, False):
            rate, per_cpu = model_rate("mcan-small", geometry, args.batch,
                                       5 if not smoke else 20, smoke)
            label = "mcan-small at smoke scale" if smoke else "mcan-small (paper scale)"
            print(f"  {label:<38} {rate:>10.1f} {per_cpu:>10.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
