"""Batching task items: ``collate(kind, items, tokenizer)``, a ``DataLoader``'s ``collate_fn``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nas.radix import CaptionTokenizer
from nas.tasks import TaskKind
from trainers.tasks.data import Item

__all__ = ["Batch", "collate"]

Batch = dict[str, Any]
"""Batched tensors by key; caption batches also carry ``references`` (lists of word lists)."""

_KEYS: dict[str, tuple[str, ...]] = {
    "vqa": ("question", "regions", "boxes", "answer_scores", "answer"),
    "caption": ("regions", "boxes"),
    "image": ("images", "label"),
}


def _stack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack along a new first dim, zero-padding every dim to the largest item when they differ."""
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) == 1:
        return torch.stack(list(tensors))
    size = [max(dims) for dims in zip(*shapes, strict=True)]
    out = tensors[0].new_zeros((len(tensors), *size))
    for i, t in enumerate(tensors):
        index: tuple[int | slice, ...] = (i, *(slice(0, n) for n in t.shape))
        out[index] = t
    return out


def _tokens(
    captions: Sequence[Sequence[str]], tokenizer: CaptionTokenizer
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder inputs ``BOS + ids[:-1]`` and targets ``ids[1:]``, (B, T) each, PAD-padded.

    ``ids`` is ``[BOS, caption..., EOS]``, so the decoder runs on BOS + the whole caption: for a
    full-length caption T is ``nas.tasks.decoder_positions``, the length the cost counts."""
    ids = [tokenizer.encode(list(c)) for c in captions]  # [BOS, ..., EOS] each
    length = max(len(seq) for seq in ids) - 1
    tokens = torch.full((len(ids), length), tokenizer.PAD, dtype=torch.long)
    targets = torch.full((len(ids), length), tokenizer.PAD, dtype=torch.long)
    for b, seq in enumerate(ids):
        tokens[b, : len(seq) - 1] = torch.tensor(seq[:-1])
        targets[b, : len(seq) - 1] = torch.tensor(seq[1:])
    return tokens, targets


def collate(
    kind: TaskKind, items: Sequence[Item], tokenizer: CaptionTokenizer | None = None
) -> Batch:
    """Batch the items of a ``kind`` task (keys as in :mod:`trainers.tasks.data`).

    vqa: ``question`` (B, Lq), ``regions`` (B, R, D), ``boxes`` (B, R, 4), ``answer_scores``
    (B, A), ``answer`` (B,). image: ``images`` (B, C, H, W), ``label`` (B,). caption:
    ``regions``, ``boxes``, ``tokens`` and ``targets`` (B, T) encoded with ``tokenizer`` (the
    radix or the word tokenizer of ``nas.radix``), and ``references`` (B lists of word lists).
    """
    if kind not in _KEYS:
        raise ValueError(f"`kind` must be one of {sorted(_KEYS)}, but got kind={kind!r}.")
    if not items:
        raise ValueError("Cannot collate an empty list of items.")
    batch: Batch = {key: _stack([it[key] for it in items]) for key in _KEYS[kind]}
    if kind == "caption":
        if tokenizer is None:
            raise ValueError("Caption batches need a tokenizer (RadixTokenizer or WordTokenizer).")
        batch["tokens"], batch["targets"] = _tokens([it["caption"] for it in items], tokenizer)
        batch["references"] = [it["references"] for it in items]
    return batch
