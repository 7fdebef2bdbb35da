"""The tiny model of each family the trainer tests train (CPU in seconds; CUDA in
``tests/test_cuda.py``), and their few-step training settings. Imports torch and the model code
only, so it also runs where the study stack (Optuna, Ray) is not installed."""

from __future__ import annotations

from typing import Any

import torch

from nas.config import ArchConfig
from nas.loading import load_arch
from nas.radix import UNK, RadixTokenizer, WordTokenizer
from nas.tasks import TaskGeometry, decoder_positions
from trainers import TaskData, TrainConfig, get_task
from trainers.tasks.collate import collate

# name -> (preset, overrides making it tiny, task)
TINY: dict[str, tuple[str, dict[str, Any], str]] = {
    "mcan": ("mcan-small", {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1,
                            "decoder_layers": 1}, "synthetic-vqa"),
    "lxmert": ("lxmert", {"d_model": 32, "d_ff": 64, "heads": 2, "language_layers": 1,
                          "vision_layers": 1, "cross_layers": 1}, "synthetic-vqa"),
    "ort-word": ("ort-base", {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1,
                              "decoder_layers": 1}, "synthetic-captions"),
    "ort-radix": ("ort-base", {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1,
                               "decoder_layers": 1, "radix_base": 16}, "synthetic-captions"),
    "vit": ("deit-tiny", {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1,
                          "patch_size": 8}, "digits"),
    "swin": ("swin-tiny", {"d_model": 16, "d_ff": 32, "heads": 1, "depths": [1, 1],
                           "patch_size": 4, "window_size": 4}, "digits"),
}
# The digits baseline and its ten-times-smaller rival, as in benchmarks/proxies.py.
DIGITS_DENSE = {"d_model": 64, "d_ff": 256, "heads": 2, "encoder_layers": 4, "patch_size": 8}
DIGITS_TINY = {"d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1, "patch_size": 8}
VIT_ARGS = ["deit-tiny", "--set", "d_model=32", "--set", "d_ff=64", "--set", "heads=2",
            "--set", "encoder_layers=1", "--set", "patch_size=8"]


def tiny(name: str) -> ArchConfig:
    preset, overrides, _ = TINY[name]
    return load_arch(preset, overrides)


#: Each built-in proxy task, small enough to train and evaluate in a second (digits as it is).
TINY_TASK_OPTIONS: dict[str, dict[str, Any]] = {
    "synthetic-vqa": {"train_size": 192, "val_size": 64},
    "synthetic-captions": {"train_size": 192, "val_size": 32},
    "digits": {},
}


def tiny_tasks() -> dict[str, TaskData]:
    """The tasks of :data:`TINY_TASK_OPTIONS`, built."""
    return {name: get_task(name, **options) for name, options in TINY_TASK_OPTIONS.items()}


def fast(**changes: Any) -> TrainConfig:
    """A few constant-lr steps per epoch, short caption decoding, no dropout."""
    settings: dict[str, Any] = {"epochs": 3, "batch_size": 32, "lr": 3e-3, "schedule": "constant",
                                "warmup_epochs": 0.0, "max_steps_per_epoch": 6, "dropout": 0.0,
                                "max_decode_len": 6, "eval_batch_size": 128}
    return TrainConfig(**{**settings, **changes})


def task_words(task: TaskGeometry) -> list[str]:
    """The task's words: its word-level vocabulary minus PAD, BOS and EOS, ``<unk>`` last."""
    words = [f"w{i}" for i in range(task.num_outputs - 4)] + [UNK]
    assert WordTokenizer(words).vocab_size == task.num_outputs
    return words


def one_sample(config: ArchConfig, task: TaskGeometry, gen: torch.Generator) -> dict[str, Any]:
    """One sample of ``task`` as the family's ``forward`` takes it, built from the geometry."""
    if task.kind == "image":
        return {"images": torch.randn(1, task.in_chans, task.image_size, task.image_size,
                                      generator=gen)}
    regions = torch.randn(1, task.regions, task.region_dim, generator=gen)
    corners = torch.rand(1, task.regions, 2, 2, generator=gen).sort(dim=-1).values
    boxes = torch.cat([corners[..., 0], corners[..., 1] + 1e-2], dim=-1)  # x0, y0, x1, y1
    if task.kind == "vqa":
        question = torch.randint(1, task.question_vocab, (1, task.question_tokens), generator=gen)
        out = {"question": question, "regions": regions}
        return {**out, "boxes": boxes} if config.family == "lxmert" else out
    words = task_words(task)
    tokenizer = (WordTokenizer(words) if config.radix_base is None
                 else RadixTokenizer(words, config.radix_base))
    picks = torch.randint(0, len(words), (task.caption_words,), generator=gen).tolist()
    caption = [words[i] for i in picks]
    item = {"regions": regions[0], "boxes": boxes[0], "caption": caption,
            "references": [caption]}
    batch = collate("caption", [item], tokenizer)  # what the trainer feeds the decoder
    per_word = tokenizer.digits if isinstance(tokenizer, RadixTokenizer) else 1
    assert batch["tokens"].shape == (1, decoder_positions(task, per_word))
    return {key: batch[key] for key in ("regions", "boxes", "tokens")}
