"""What a trainable task is: its geometry, two datasets, its metric and chance level.

Every task, built-in or read from the user's files, is a :class:`TaskData`. Its datasets yield
``dict[str, Any]`` items whose keys are the model's forward arguments plus the targets, one
layout per task kind (``collate`` turns a list of them into a batch):

- ``vqa``: ``question`` (Lq,) long, 0 = padding, 1 = unknown word, words from 2; ``regions``
  (R, region_dim) float, padding regions all-zero; ``boxes`` (R, 4) normalised x0, y0, x1, y1;
  ``answer_scores`` (A,) soft VQA targets; ``answer`` long scalar (their argmax).
- ``caption``: ``regions``, ``boxes``; ``caption`` (one training caption, a list of words);
  ``references`` (every reference caption of the image, a list of word lists).
- ``image``: ``images`` (C, H, W) normalised float; ``label`` long scalar.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from nas.tasks import TaskGeometry
from trainers.tasks.metrics import cider_d

__all__ = [
    "CaptionDataset",
    "Item",
    "MetricName",
    "TaskData",
    "TaskDataset",
    "TensorDataset",
    "VqaDataset",
    "constant_caption_chance",
    "majority_answer_chance",
    "majority_chance",
]

Item = dict[str, Any]
MetricName = Literal["accuracy", "vqa_accuracy", "cider_d"]
RegionLoader = Callable[[int], tuple[torch.Tensor, torch.Tensor]]
"""Image index -> (regions (R, region_dim), boxes (R, 4)), already padded to the task's R."""


class TaskDataset(Dataset[Item]):
    """A map-style dataset of task items that knows its length (what :class:`TaskData` holds)."""

    def __len__(self) -> int:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __getitem__(self, index: int) -> Item:  # pragma: no cover
        raise NotImplementedError


@dataclass(frozen=True)
class TaskData:
    """A trainable task.

    Attributes:
        name: the task name (``get_task``'s key).
        geometry: input geometry and output size; ``num_outputs`` and the other sizes match the
            data (answers, ``WordTokenizer(words).vocab_size``, classes).
        train / val: the two splits; items as this module's docstring describes.
        metric: the task's metric on ``val`` (captions also report ``bleu4``).
        chance: that metric for a trivial predictor on ``val``: the majority training answer or
            class, or the most frequent training caption for every image.
        words: caption tasks only: the word vocabulary in descending training frequency (fit the
            radix or word tokenizer on it); ``None`` otherwise.
    """

    name: str
    geometry: TaskGeometry
    train: TaskDataset
    val: TaskDataset
    metric: MetricName
    chance: float
    words: tuple[str, ...] | None = None


class TensorDataset(TaskDataset):
    """Items sliced from tensors that share their first dimension."""

    def __init__(self, **tensors: torch.Tensor) -> None:
        sizes = {name: t.shape[0] for name, t in tensors.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"Tensors must share their first dimension, but got {sizes}.")
        self._tensors = tensors
        self._len = next(iter(sizes.values()))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> Item:
        return {name: t[index] for name, t in self._tensors.items()}


class VqaDataset(TaskDataset):
    """Questions about images: token ids, sparse soft answer scores and the image's regions.

    ``answers[i]`` holds question ``i``'s ``(answer index, score)`` pairs (answers outside the
    vocabulary left out); ``image[i]`` indexes ``regions``, so features are loaded per access.
    """

    def __init__(
        self,
        questions: torch.Tensor,
        answers: Sequence[Sequence[tuple[int, float]]],
        image: Sequence[int],
        regions: RegionLoader,
        num_answers: int,
    ) -> None:
        if not len(questions) == len(answers) == len(image):
            raise ValueError(
                f"`len(questions) == len(answers) == len(image)` must hold, but got "
                f"{len(questions)}, {len(answers)}, {len(image)}."
            )
        self._questions, self._answers, self._image = questions, answers, image
        self._regions, self._num_answers = regions, num_answers

    def __len__(self) -> int:
        return len(self._questions)

    def __getitem__(self, index: int) -> Item:
        regions, boxes = self._regions(self._image[index])
        scores = torch.zeros(self._num_answers)
        for answer, score in self._answers[index]:
            scores[answer] = score
        return {
            "question": self._questions[index],
            "regions": regions,
            "boxes": boxes,
            "answer_scores": scores,
            "answer": scores.argmax(),
        }

    def labels(self) -> torch.Tensor:
        """Every item's ``answer`` (N,), read from the targets alone (no features loaded)."""
        best = [max(pairs, key=lambda p: (p[1], -p[0]))[0] if pairs else 0
                for pairs in self._answers]
        return torch.tensor(best, dtype=torch.long)

    def mean_score(self, answer: int) -> float:
        """VQA accuracy of answering ``answer`` to every question (a chance level)."""
        total = sum(score for pairs in self._answers for a, score in pairs if a == answer)
        return total / len(self) if len(self) else 0.0


class CaptionDataset(TaskDataset):
    """Images with reference captions.

    With ``sample=True`` (training) each access draws one reference as ``caption`` from
    ``torch``'s global generator, so a seeded run sees the same draws; otherwise ``caption``
    is the first reference. ``caption`` is cut to ``max_words`` words; references are kept whole.
    """

    def __init__(
        self,
        references: Sequence[Sequence[Sequence[str]]],
        regions: RegionLoader,
        *,
        max_words: int,
        sample: bool,
    ) -> None:
        empty = [i for i, refs in enumerate(references) if not refs]
        if empty:
            raise ValueError(f"Every image needs a reference caption; image {empty[0]} has none.")
        self._references = references
        self._regions, self._max_words, self._sample = regions, max_words, sample

    def __len__(self) -> int:
        return len(self._references)

    def __getitem__(self, index: int) -> Item:
        regions, boxes = self._regions(index)
        refs = [list(r) for r in self._references[index]]
        pick = int(torch.randint(len(refs), ()).item()) if self._sample else 0
        return {
            "regions": regions,
            "boxes": boxes,
            "caption": refs[pick][: self._max_words],
            "references": refs,
        }

    @property
    def references(self) -> Sequence[Sequence[Sequence[str]]]:
        """Every image's reference captions, without loading features."""
        return self._references


def majority_chance(train_labels: torch.Tensor, val_labels: torch.Tensor) -> float:
    """Accuracy on ``val_labels`` of always answering the most frequent training label."""
    if not val_labels.numel() or not train_labels.numel():
        return 0.0
    majority = torch.bincount(train_labels.flatten()).argmax()
    return float((val_labels == majority).float().mean())


def majority_answer_chance(train: VqaDataset, val: VqaDataset) -> float:
    """VQA accuracy on ``val`` of always giving the most frequent training answer."""
    labels = train.labels()
    return val.mean_score(int(torch.bincount(labels).argmax())) if len(labels) else 0.0


def constant_caption_chance(train: CaptionDataset, val: CaptionDataset) -> float:
    """CIDEr-D on ``val`` of captioning every image with the most frequent training caption."""
    counts: Counter[tuple[str, ...]] = Counter(
        tuple(c) for refs in train.references for c in refs
    )
    if not counts or not len(val):
        return 0.0
    best = list(min(counts.items(), key=lambda item: (-item[1], item[0]))[0])
    return cider_d([best] * len(val), val.references)
