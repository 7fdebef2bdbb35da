"""``vqa-files``: VQA v2 questions and answers over precomputed region features (MCAN/OpenVQA).

Files, per split (``train`` and ``val``); relative paths are taken from ``root``:

- questions (VQA v2 ``v2_OpenEnded_mscoco_<split>2014_questions.json``)::

      {"questions": [{"image_id": 9, "question": "What is on the plate?", "question_id": 90}]}

- annotations (``v2_mscoco_<split>2014_annotations.json``)::

      {"annotations": [{"question_id": 90, "image_id": 9, "multiple_choice_answer": "food",
                        "answers": [{"answer": "food"}, {"answer": "pizza"}, ...]}]}

- a directory of region features, one ``.npz`` per image (see :class:`RegionFeatures`):
  ``feats/train2014/COCO_train2014_000000000009.jpg.npz`` or ``feats/train2014/9.npz``, with
  ``x`` (R, 2048) (or OpenVQA's (2048, R)), ``bbox`` (R, 4) in pixels, ``image_w``, ``image_h``.

Answers are normalised (lowercase, punctuation and articles dropped, number words as digits, a
simplified form of the official VQA evaluation's). The answer vocabulary holds the values of
``multiple_choice_answer`` seen at least ``min_count`` times in training, most frequent first; a
question's soft target is ``min(1, #annotators giving the answer / 3)``. The question vocabulary
is every word of the training questions (lowercased, punctuation stripped, as OpenVQA does),
most frequent first, with ids from 2 (0 pads, 1 is unknown); questions are cut to
``max_tokens``. The metric is VQA accuracy; chance answers the most frequent training answer.

Parsed once per node (:mod:`trainers.tasks.cache`): the token ids, answer scores, each
question's feature file and the vocabularies are written as memory-mapped arrays, which every
later process opens instead of the JSON; ``nas data prepare vqa-files --task-set root=...`` does
it ahead of a study.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nas.errors import NasError
from nas.tasks import TaskGeometry
from trainers.tasks._io import RegionFeatures, feature_files, feature_index, resolve
from trainers.tasks._vqa_read import VqaSplit, read_split
from trainers.tasks.cache import Built, Prepared, encode_strings, open_or_build
from trainers.tasks.data import SparseScores, TaskData, VqaDataset

__all__ = ["VERSION", "build", "normalize_answer", "prepare", "tokenize_question"]

#: What the prepared arrays mean; raised whenever the parse below changes what it writes.
VERSION = 1
_SPLITS = ("train", "val")
_NUMBERS = {w: str(i) for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])}
_ARTICLES = {"a", "an", "the"}
_QUESTION_PUNCT = re.compile(r"[.,'!?\"()*#:;]")
_ANSWER_PUNCT = re.compile(r"[;/\[\]\"{}()=+\\_\-><@`,?!*#%^&$~|:']")
_PERIOD = re.compile(r"(?<!\d)\.(?!\d)")


def tokenize_question(question: str) -> list[str]:
    """OpenVQA's question words: lowercase, punctuation dropped, ``-`` and ``/`` split words."""
    text = _QUESTION_PUNCT.sub("", question.lower()).replace("-", " ").replace("/", " ")
    return text.split()


def normalize_answer(answer: str) -> str:
    """An answer in the form answers are compared in: ``"Two dogs."`` -> ``"2 dogs"``."""
    text = _PERIOD.sub("", _ANSWER_PUNCT.sub("", answer.lower().strip()))
    words = [_NUMBERS.get(w, w) for w in text.split() if w not in _ARTICLES]
    return " ".join(words)


class _Normalized(dict[str, str]):
    """``normalize_answer`` of each answer, computed once: VQA's 10 answers a question repeat
    a lot (``self[answer]``)."""

    def __missing__(self, answer: str) -> str:
        normal = self[answer] = normalize_answer(answer)
        return normal


def _main_answer(entry: tuple[str | None, list[str]], norm: _Normalized) -> str:
    main, given = entry
    if main is not None:
        return norm[main]
    votes = Counter(map(norm.__getitem__, given))
    return min(votes, key=lambda a: (-votes[a], a)) if votes else ""


def _split_arrays(
    split: str, data: VqaSplit, features: Path, q_path: Path, word_id: dict[str, int],
    answer_id: dict[str, int], max_tokens: int, norm: _Normalized,
) -> dict[str, np.ndarray]:
    """One split's arrays: token ids, sparse answer scores, each question's feature file."""
    lengths, ids = [], []
    counts, answers, scores = [], [], []
    for text, qid in zip(data.texts, data.question_ids, strict=True):
        words = [word_id.get(w, 1) for w in tokenize_question(text)][:max_tokens]
        lengths.append(len(words))
        ids += words
        votes = Counter(map(norm.__getitem__, data.answers[qid][1]))
        kept = [(answer_id[a], n) for a, n in votes.items() if a in answer_id]
        counts.append(len(kept))
        answers += [a for a, _ in kept]
        scores += [min(1.0, n / 3) for _, n in kept]
    tokens = np.zeros((len(lengths), max_tokens), dtype=np.int32)
    tokens[np.arange(max_tokens) < np.asarray(lengths)[:, None]] = ids  # row by row, in order
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    names, image = feature_index(feature_files(features), data.image_ids, features, q_path)
    return {f"{split}.questions": tokens, f"{split}.answer_offsets": offsets,
            f"{split}.answer_ids": np.asarray(answers, dtype=np.int32),
            f"{split}.answer_scores": np.asarray(scores, dtype=np.float32),
            f"{split}.image": image, **encode_strings(f"{split}.features", names)}


def _parse(paths: Mapping[str, Path], max_tokens: int, min_count: int, train_size: int | None,
           val_size: int | None) -> Built:
    """Read the JSON files and feature folders into the task's arrays."""
    norm = _Normalized()
    train_data = read_split(paths["train_questions"], paths["train_annotations"], train_size)
    val_data = read_split(paths["val_questions"], paths["val_annotations"], val_size)

    main = Counter(_main_answer(train_data.answers[q], norm) for q in train_data.question_ids)
    answers = [a for a in sorted(main, key=lambda a: (-main[a], a)) if main[a] >= min_count]
    if not answers:
        raise NasError(f"No answer of '{paths['train_annotations']}' occurs "
                       f"min_count={min_count} times; lower min_count.")
    words: Counter[str] = Counter()
    for text in train_data.texts:
        words.update(tokenize_question(text))
    vocab = sorted(words, key=lambda w: (-words[w], w))
    word_id = {w: i + 2 for i, w in enumerate(vocab)}
    answer_id = {a: i for i, a in enumerate(answers)}

    arrays = {**encode_strings("words", vocab), **encode_strings("answers", answers)}
    for split, data in (("train", train_data), ("val", val_data)):
        arrays.update(_split_arrays(split, data, paths[f"{split}_features"],
                                    paths[f"{split}_questions"], word_id, answer_id, max_tokens,
                                    norm))
    train, val = (SparseScores(arrays[f"{s}.answer_offsets"], arrays[f"{s}.answer_ids"],
                               arrays[f"{s}.answer_scores"]) for s in _SPLITS)
    labels = train.labels()
    chance = (val.total(int(np.bincount(labels).argmax())) / len(val)
              if len(labels) and len(val) else 0.0)
    return Built(arrays, {"num_answers": len(answers), "question_vocab": len(vocab) + 2,
                          "chance": chance, "train": len(train), "val": len(val)})


def _paths(options: Mapping[str, Any]) -> dict[str, Path]:
    keys = [f"{s}_{part}" for s in _SPLITS for part in ("questions", "annotations", "features")]
    return {k: resolve(options["root"], options[k]).resolve() for k in keys}


def prepare(options: Mapping[str, Any]) -> Prepared:
    """The task's prepared arrays for ``options`` (all of :func:`build`'s), parsed on first use
    on this node and opened after (see :mod:`trainers.tasks.cache`)."""
    paths = _paths(options)
    key = {**{k: str(p) for k, p in paths.items()},
           **{k: options[k] for k in ("max_tokens", "min_count", "train_size", "val_size")}}
    return open_or_build(
        "vqa-files", key, list(paths.values()),
        lambda: _parse(paths, options["max_tokens"], options["min_count"],
                       options["train_size"], options["val_size"]),
        version=VERSION)


def _dataset(prepared: Prepared, split: str, features: Path, region_dim: int,
             max_regions: int) -> VqaDataset:
    a = prepared.arrays
    regions = RegionFeatures(features, prepared.strings(f"{split}.features"),
                             region_dim=region_dim, max_regions=max_regions)
    regions.check_first()
    scores = SparseScores(a[f"{split}.answer_offsets"], a[f"{split}.answer_ids"],
                          a[f"{split}.answer_scores"])
    return VqaDataset(a[f"{split}.questions"], scores, a[f"{split}.image"], regions.load,
                      int(prepared.meta["num_answers"]))
def build(
    *,
    root: str | None = None,
    train_questions: str = "v2_OpenEnded_mscoco_train2014_questions.json",
    train_annotations: str = "v2_mscoco_train2014_annotations.json",
    train_features: str = "feats/train2014",
    val_questions: str = "v2_OpenEnded_mscoco_val2014_questions.json",
    val_annotations: str = "v2_mscoco_val2014_annotations.json",
    val_features: str = "feats/val2014",
    max_regions: int = 100,
    region_dim: int = 2048,
    max_tokens: int = 14,
    min_count: int = 9,
    train_size: int | None = None,
    val_size: int | None = None,
) -> TaskData:
    """The ``vqa-files`` task; ``train_size``/``val_size`` keep only the first questions."""
    options = dict(locals())
    prepared = prepare(options)
    paths = _paths(options)
    train, val = (_dataset(prepared, s, paths[f"{s}_features"], region_dim, max_regions)
                  for s in _SPLITS)
    geometry = TaskGeometry(
        "vqa-files", "vqa", int(prepared.meta["num_answers"]), question_tokens=max_tokens,
        question_vocab=int(prepared.meta["question_vocab"]), regions=max_regions,
        region_dim=region_dim,
    )
    return TaskData("vqa-files", geometry, train, val, "vqa_accuracy",
                    float(prepared.meta["chance"]))
