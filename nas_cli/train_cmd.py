"""``nas train``: train one architecture on one task with a progress bar (see
``trainers.train``); torch and the task are imported only when it runs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from nas.errors import NasError
from nas_cli._common import add_arch_args

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from nas.loading import load_arch, parse_overrides, unwritable_ancestor
    from trainers import TrainConfig, get_task, train
    from trainers.loop import quick_defaults

    if args.out is not None and (blocked := unwritable_ancestor(args.out)) is not None:
        raise NasError(f"--out {args.out!r} cannot be made: {str(blocked)!r} is not a writable "
                       "folder.")  # found before training, not after it
    config = load_arch(args.arch, args.set)
    data = get_task(args.task, **parse_overrides(args.task_set))
    settings: dict[str, Any] = {**quick_defaults(args.task), **parse_overrides(args.train_set)}
    if args.epochs is not None:
        settings["epochs"] = args.epochs
    if args.seed is not None:
        settings["seed"] = args.seed
    cfg = TrainConfig.from_dict(settings)

    def progress(batches: Any, total: int, desc: str) -> Any:
        return tqdm(batches, total=total, desc=desc, leave=False, file=sys.stderr,
                    disable=args.json and not sys.stderr.isatty())

    def report(epoch: Any) -> None:
        if not args.json:
            print(f"epoch {epoch.epoch}: loss {epoch.train_loss:.4f}  {epoch.metric} "
                  f"{epoch.value:.4f}  ({epoch.seconds:.1f} s)")

    result = train(config, cfg, data, report, checkpoint_dir=args.out, progress=progress)
    if args.json:
        keys = ("metric", "value", "chance", "epochs", "seconds", "samples_per_second",
                "params", "madds", "status", "reason", "checkpoint", "arch_id")
        print(json.dumps({k: getattr(result, k) for k in keys}))
    else:
        print(f"{result.status}: {result.metric} {result.value:.4f} (chance {result.chance:.4f}) "
              f"in {result.seconds:.1f} s, {result.samples_per_second:.0f} samples/s, "
              f"{result.params:,} params, {result.madds:,} MAdds")
        if result.reason:
            print(f"reason: {result.reason}")
        if result.checkpoint:
            print(f"checkpoint: {result.checkpoint}")
    return 0 if result.status != "failed" else 1


def register(subparsers: Any) -> None:
    """Add ``train`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser(
        "train", help="train one architecture on one task",
        description="Train ARCH on TASK with a progress bar; writes a checkpoint holding its "
        "config to --out. Exit code 1 when the run fails (e.g. the loss turns NaN).",
    )
    add_arch_args(p)
    p.add_argument("--task", required=True, help="a trainable task (synthetic-vqa, "
                   "synthetic-captions, digits, vqa-files, coco-files, image-folder, cifar)")
    p.add_argument("--task-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a task option, e.g. root=/data/coco (repeatable)")
    p.add_argument("--train-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a training setting, e.g. lr=0.002 (repeatable)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", default=None, metavar="DIR", help="write the checkpoint here")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(func=_run)
