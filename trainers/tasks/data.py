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
from itertools import pairwise
from typing import Any, Literal, overload

import numpy as np
import torch
from torch.utils.data import Dataset

from nas.tasks import TaskGeometry
from trainers.tasks.metrics import cider_d_constant

__all__ = [
    "CaptionDataset",
    "EncodedCaptions",
    "Item",
    "MetricName",
    "SparseScores",
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


@dataclass(frozen=True)
class SparseScores:
    """Soft answer scores of N questions in compressed rows: question ``i``'s answers are
    ``answers[offsets[i]:offsets[i + 1]]`` with their ``scores`` (numpy arrays, possibly
    memory-mapped from the prepared data)."""

    offsets: np.ndarray  # (N + 1,) int64, from 0 to nnz
    answers: np.ndarray  # (nnz,) answer indices
    scores: np.ndarray  # (nnz,) float

    @classmethod
    def from_pairs(cls, pairs: Sequence[Sequence[tuple[int, float]]]) -> SparseScores:
        """From each question's ``(answer index, score)`` pairs."""
        offsets = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in pairs], out=offsets[1:])
        flat = [pair for row in pairs for pair in row]
        answers = np.fromiter((a for a, _ in flat), dtype=np.int32, count=len(flat))
        scores = np.fromiter((s for _, s in flat), dtype=np.float32, count=len(flat))
        return cls(offsets, answers, scores)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Question ``index``'s answer indices and scores."""
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        return self.answers[start:end], self.scores[start:end]

    def labels(self) -> np.ndarray:
        """Each question's best answer (N,): the highest score, ties to the lowest index; 0
        for a question without one."""
        counts = np.diff(np.asarray(self.offsets))
        rows = np.repeat(np.arange(len(self)), counts)
        answers, scores = np.asarray(self.answers), np.asarray(self.scores)
        order = np.lexsort((answers, -scores, rows))  # by row, score down, index up
        first = np.asarray(self.offsets[:-1])[counts > 0]  # each row's first place in `order`
        best = np.zeros(len(self), dtype=np.int64)
        best[counts > 0] = answers[order[first]]
        return best

    def total(self, answer: int) -> float:
        """The sum of ``answer``'s scores over all questions."""
        answers, scores = np.asarray(self.answers), np.asarray(self.scores, dtype=np.float64)
        return float(scores[answers == answer].sum())


class VqaDataset(TaskDataset):
    """Questions about images: token ids, sparse soft answer scores and the image's regions.

    ``answers`` holds each question's ``(answer index, score)`` pairs (answers outside the
    vocabulary left out), as lists or as :class:`SparseScores`; ``image[i]`` is what
    ``regions`` loads question ``i``'s features from, per access. ``questions`` (N, Lq) may be a
    numpy array (memory-mapped, any integer type): an item's ``question`` is a long tensor.
    """

    def __init__(
        self,
        questions: torch.Tensor | np.ndarray,
        answers: Sequence[Sequence[tuple[int, float]]] | SparseScores,
        image: Sequence[int] | np.ndarray,
        regions: RegionLoader,
        num_answers: int,
    ) -> None:
        if not len(questions) == len(answers) == len(image):
            raise ValueError(
                f"`len(questions) == len(answers) == len(image)` must hold, but got "
                f"{len(questions)}, {len(answers)}, {len(image)}."
            )
        if not isinstance(answers, SparseScores):
            answers = SparseScores.from_pairs(answers)
        self._questions, self._answers, self._image = questions, answers, image
        self._regions, self._num_answers = regions, num_answers

    def __len__(self) -> int:
        return len(self._questions)

    def __getitem__(self, index: int) -> Item:
        regions, boxes = self._regions(int(self._image[index]))
        scores = torch.zeros(self._num_answers)
        answers, values = self._answers.row(index)
        scores[torch.from_numpy(answers.astype(np.int64))] = torch.from_numpy(
            values.astype(np.float32))
        question = self._questions[index]
        if isinstance(question, np.ndarray):
            question = torch.from_numpy(question.astype(np.int64))
        return {
            "question": question,
            "regions": regions,
            "boxes": boxes,
            "answer_scores": scores,
            "answer": scores.argmax(),
        }

    @property
    def answers(self) -> SparseScores:
        """Every question's answer scores (no features loaded)."""
        return self._answers

    def labels(self) -> torch.Tensor:
        """Every item's ``answer`` (N,), read from the targets alone (no features loaded)."""
        return torch.from_numpy(self._answers.labels())

    def mean_score(self, answer: int) -> float:
        """VQA accuracy of answering ``answer`` to every question (a chance level)."""
        return self._answers.total(answer) / len(self) if len(self) else 0.0


class EncodedCaptions(Sequence[list[list[str]]]):
    """Each image's reference captions as word ids (numpy arrays, possibly memory-mapped),
    decoded into word lists on access: image ``i``'s captions are sentences
    ``images[i]:images[i + 1]``, sentence ``j`` is ``tokens[sentences[j]:sentences[j + 1]]``,
    token ``t`` is ``words[t]``."""

    def __init__(self, words: Sequence[str], tokens: np.ndarray, sentences: np.ndarray,
                 images: np.ndarray) -> None:
        self._words, self._tokens = words, tokens
        self._sentences, self._images = sentences, images

    def __len__(self) -> int:
        return len(self._images) - 1

    @overload
    def __getitem__(self, index: int) -> list[list[str]]: ...

    @overload
    def __getitem__(self, index: slice) -> list[list[list[str]]]: ...

    def __getitem__(self, index: int | slice) -> list[list[str]] | list[list[list[str]]]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if not -len(self) <= index < len(self):
            raise IndexError(f"image index {index} out of range for {len(self)} images")
        index %= len(self)
        bounds = np.asarray(self._sentences[self._images[index]: self._images[index + 1] + 1])
        if not len(bounds):
            return []
        ids = np.asarray(self._tokens[bounds[0]: bounds[-1]]).tolist()
        cuts = (bounds - bounds[0]).tolist()
        return [[self._words[t] for t in ids[a:b]] for a, b in pairwise(cuts)]

    def empty(self) -> list[int]:
        """The images without a caption."""
        return np.flatnonzero(np.diff(np.asarray(self._images)) == 0).tolist()


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
        empty = (references.empty() if isinstance(references, EncodedCaptions)
                 else [i for i, refs in enumerate(references) if not refs])
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
    return cider_d_constant(best, val.references)  # cider_d([best] * len(val), ...), at once
