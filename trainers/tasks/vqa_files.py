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
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from nas.errors import NasError
from nas.tasks import TaskGeometry
from trainers.tasks._io import RegionFeatures, json_records, read_json, resolve
from trainers.tasks.data import TaskData, VqaDataset, majority_answer_chance

__all__ = ["build", "normalize_answer", "tokenize_question"]

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


def _read_split(
    questions_path: Path, annotations_path: Path, limit: int | None
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The split's questions (the first ``limit``) and their annotations by question id."""
    questions = json_records(read_json(questions_path, "VQA questions file"), "questions",
                             questions_path, "VQA questions file",
                             ("image_id", "question", "question_id"))[:limit]
    if not questions:
        raise NasError(f"VQA questions file '{questions_path}' holds no questions.")
    annotations = json_records(read_json(annotations_path, "VQA annotations file"),
                               "annotations", annotations_path, "VQA annotations file",
                               ("question_id", "answers"))
    by_id = {a["question_id"]: a for a in annotations}
    for q in questions:
        if not isinstance(q["image_id"], int) and not str(q["image_id"]).isdigit():
            raise NasError(f"VQA questions file '{questions_path}': image_id "
                           f"{q['image_id']!r} of question {q['question_id']} is not a number.")
        if q["question_id"] not in by_id:
            raise NasError(
                f"VQA annotations file '{annotations_path}' has no entry for question "
                f"{q['question_id']} of '{questions_path}'."
            )
    return questions, by_id


def _answers(annotation: dict[str, Any]) -> list[str]:
    return [normalize_answer(str(a["answer"])) for a in annotation["answers"]
            if isinstance(a, dict) and "answer" in a]


def _main_answer(annotation: dict[str, Any]) -> str:
    if "multiple_choice_answer" in annotation:
        return normalize_answer(str(annotation["multiple_choice_answer"]))
    answers = Counter(_answers(annotation))
    return min(answers, key=lambda a: (-answers[a], a)) if answers else ""


def _dataset(
    questions: list[dict[str, Any]],
    annotations: dict[int, dict[str, Any]],
    features: RegionFeatures,
    word_id: dict[str, int],
    answer_id: dict[str, int],
    max_tokens: int,
) -> VqaDataset:
    tokens = torch.zeros(len(questions), max_tokens, dtype=torch.long)
    targets = []
    for i, q in enumerate(questions):
        ids = [word_id.get(w, 1) for w in tokenize_question(str(q["question"]))][:max_tokens]
        tokens[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        votes = Counter(_answers(annotations[q["question_id"]]))
        targets.append([(answer_id[a], min(1.0, n / 3)) for a, n in votes.items()
                        if a in answer_id])
    images = [int(q["image_id"]) for q in questions]  # checked by _read_split
    return VqaDataset(tokens, targets, images, features.load, len(answer_id))


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
    paths = {k: resolve(root, v) for k, v in (
        ("tq", train_questions), ("ta", train_annotations), ("tf", train_features),
        ("vq", val_questions), ("va", val_annotations), ("vf", val_features))}
    train_q, train_a = _read_split(paths["tq"], paths["ta"], train_size)
    val_q, val_a = _read_split(paths["vq"], paths["va"], val_size)

    main = Counter(_main_answer(train_a[q["question_id"]]) for q in train_q)
    answers = [a for a in sorted(main, key=lambda a: (-main[a], a)) if main[a] >= min_count]
    if not answers:
        raise NasError(
            f"No answer of '{paths['ta']}' occurs min_count={min_count} times; lower min_count."
        )
    words = Counter(w for q in train_q for w in tokenize_question(str(q["question"])))
    vocab = sorted(words, key=lambda w: (-words[w], w))
    word_id = {w: i + 2 for i, w in enumerate(vocab)}
    answer_id = {a: i for i, a in enumerate(answers)}

    splits = []
    for questions, by_id, feats, q_path in (
        (train_q, train_a, paths["tf"], paths["tq"]), (val_q, val_a, paths["vf"], paths["vq"])
    ):
        features = RegionFeatures(feats, region_dim=region_dim, max_regions=max_regions)
        features.require((int(q["image_id"]) for q in questions), q_path)
        splits.append(_dataset(questions, by_id, features, word_id, answer_id, max_tokens))
    train, val = splits
    geometry = TaskGeometry(
        "vqa-files", "vqa", len(answers), question_tokens=max_tokens,
        question_vocab=len(vocab) + 2, regions=max_regions, region_dim=region_dim,
    )
    return TaskData("vqa-files", geometry, train, val, "vqa_accuracy",
                    majority_answer_chance(train, val))
