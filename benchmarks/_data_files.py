"""Files shaped like the real datasets, at any scale, for ``benchmarks/data.py``.

Nothing is downloaded: every file is generated from a seed. At ``scale=1`` the counts are the
real datasets' and the JSON files about as large as theirs:

- VQA v2 (``vqa-files``): 443,757 training and 214,354 validation questions over 82,783 and
  40,504 images, 10 answers each, with the fields of the real files (question type, answer
  type, confidence, answer ids): about 48 MB + 347 MB of training JSON. Questions are 4 - 12
  words of a 12,000-word Zipf vocabulary; each question's ten answers agree on one drawn from a
  20,000-answer Zipf list 70% of the time, in the spellings real annotators use (case,
  trailing periods, number words), so the answer normalisation does its real work.
- COCO captions in Karpathy's split file (``coco-files``): 123,287 images (82,783 train,
  30,504 restval, 5,000 val, 5,000 test) x 5 captions of 8 - 14 tokens from a 25,000-word
  vocabulary.
- one region feature file per image for both (``.npz``, named as OpenVQA names them), all alike
  and small (``FEATURE_REGIONS`` x ``FEATURE_DIM``): the cache benchmark lists them and reads
  one; ``feature_files`` writes real-size ones for the loader benchmark.
- an ImageNet-size ``image-folder`` listing: 1,281,167 training images in 1,000 class folders and
  50,000 validation images, as empty ``.JPEG`` files (listing them is the cost; none is read).
"""

from __future__ import annotations

import functools
import io
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FEATURE_DIM", "FEATURE_REGIONS", "feature_files", "write_coco", "write_image_folder",
           "write_vqa"]

VQA_QUESTIONS = {"train": 443_757, "val": 214_354}
VQA_IMAGES = {"train": 82_783, "val": 40_504}
COCO_SPLITS = {"train": 82_783, "restval": 30_504, "val": 5_000, "test": 5_000}
IMAGENET = {"classes": 1000, "train": 1_281_167, "val": 50_000}
FEATURE_REGIONS, FEATURE_DIM = 4, 16
_STARTS = ["what", "is", "how many", "what color is", "are", "does", "where is", "which",
           "what is the", "is this", "can you", "why", "who is"]
_TYPES = ["yes/no", "number", "other"]
_CONFIDENCE = ["yes", "maybe", "no"]
_NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _count(n: int, scale: float) -> int:
    return max(2, round(n * scale))


def _words(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct pronounceable words."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    out: dict[str, None] = {}
    while len(out) < n:
        k = int(rng.integers(1, 4))
        out["".join(syllables[i] for i in rng.integers(len(syllables), size=k))] = None
    return list(out)


@functools.cache
def _zipf_cdf(n: int, exponent: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** exponent
    return np.cumsum(p / p.sum())


def _zipf(rng: np.random.Generator, n: int, size: int | tuple[int, ...],
          exponent: float = 1.1) -> np.ndarray:
    """Ranks ``0 .. n-1`` drawn with probability proportional to ``1 / (rank + 1)**exponent``."""
    return np.searchsorted(_zipf_cdf(n, exponent), rng.random(size)).clip(max=n - 1)


def _feature_bytes(regions: int, dim: int, rng: np.random.Generator) -> bytes:
    buf = io.BytesIO()
    x = rng.normal(size=(dim, regions)).astype(np.float32)  # OpenVQA's (D, R)
    boxes = np.tile(np.asarray([[10.0, 20.0, 300.0, 200.0]], np.float32), (regions, 1))
    np.savez(buf, x=x, bbox=boxes, image_w=np.asarray(640), image_h=np.asarray(480))
    return buf.getvalue()


def feature_files(directory: Path, names: list[str], *, regions: int, dim: int,
                  distinct: bool = False, seed: int = 0) -> None:
    """One ``.npz`` per name: alike (one drawn array), or each drawn apart (``distinct``)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    data = _feature_bytes(regions, dim, rng)
    for name in names:
        if distinct:
            data = _feature_bytes(regions, dim, rng)
        with open(directory / name, "wb") as f:
            f.write(data)


class _JsonList:
    """Writes ``{"<head>": [entry, entry, ...]<tail>}`` entry by entry (the whole list is
    never in memory)."""

    def __init__(self, path: Path, head: str) -> None:
        self.path, self.f, self.first = path, open(path, "w"), True  # noqa: SIM115
        self.f.write("{" + json.dumps(head) + ": [")

    def write(self, entries: Iterable[dict[str, Any]]) -> None:
        for entry in entries:
            self.f.write(("" if self.first else ", ") + json.dumps(entry))
            self.first = False

    def close(self, tail: str) -> int:
        self.f.write("]" + tail + "}")
        self.f.close()
        return self.path.stat().st_size


def _spelling(answer: str, rng: np.random.Generator) -> str:
    """How an annotator may have typed ``answer``."""
    r = rng.random()
    if r < 0.05:
        return answer.capitalize()
    if r < 0.08:
        return answer + "."
    if r < 0.10 and answer.isdigit() and int(answer) < len(_NUMBERS):
        return _NUMBERS[int(answer)]
    return answer


def _vqa_entries(first_id: int, n: int, images: np.ndarray, words: list[str],
                 answers: list[str], rng: np.random.Generator
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    image = images[np.sort(rng.integers(len(images), size=n))]
    lengths = rng.integers(4, 13, size=n)
    picks = _zipf(rng, len(words), int(lengths.sum()))
    truth = _zipf(rng, len(answers), n, exponent=1.3)
    agree = rng.random((n, 10)) < 0.7
    other = _zipf(rng, len(answers), (n, 10), exponent=1.3)
    questions, annotations, at = [], [], 0
    for i in range(n):
        start = _STARTS[int(picks[at]) % len(_STARTS)]
        text = " ".join([start, *(words[int(w)] for w in picks[at + 1: at + lengths[i]])])
        at += int(lengths[i])
        qid = first_id + i
        questions.append({"image_id": int(image[i]), "question": text.capitalize() + "?",
                          "question_id": qid})
        given = [answers[int(truth[i] if agree[i, k] else other[i, k])] for k in range(10)]
        main = max(set(given), key=given.count)
        annotations.append({
            "question_type": start, "multiple_choice_answer": main,
            "answers": [{"answer": _spelling(a, rng), "answer_confidence":
                         _CONFIDENCE[k % 3], "answer_id": k + 1} for k, a in enumerate(given)],
            "image_id": int(image[i]), "answer_type": _TYPES[int(truth[i]) % 3],
            "question_id": qid})
    return questions, annotations


def write_vqa(root: Path, scale: float, seed: int = 0) -> dict[str, int]:
    """The VQA v2 layout of ``vqa-files`` under ``root``; returns the files' sizes in bytes."""
    rng = np.random.default_rng(seed)
    words = _words(rng, 12_000)
    answers = ["yes", "no", *map(str, range(20)), *_words(rng, 20_000)]
    ids = rng.choice(600_000, size=sum(_count(n, scale) for n in VQA_IMAGES.values()),
                     replace=False)
    sizes: dict[str, int] = {}
    at = 0
    for split in ("train", "val"):
        images = np.sort(ids[at: at + _count(VQA_IMAGES[split], scale)])
        at += len(images)
        feature_files(root / "feats" / f"{split}2014",
                      [f"COCO_{split}2014_{int(i):012d}.jpg.npz" for i in images],
                      regions=FEATURE_REGIONS, dim=FEATURE_DIM, seed=seed)
        n = _count(VQA_QUESTIONS[split], scale)
        questions = _JsonList(root / f"v2_OpenEnded_mscoco_{split}2014_questions.json",
                              "questions")
        annotations = _JsonList(root / f"v2_mscoco_{split}2014_annotations.json", "annotations")
        for lo in range(0, n, 50_000):  # in chunks: one chunk's entries in memory
            first = (0 if split == "train" else 10_000_000) + lo  # ids unique over both
            q, a = _vqa_entries(first, min(50_000, n - lo), images, words, answers, rng)
            questions.write(q)
            annotations.write(a)
        tail = ', "license": {"name": "generated"}'
        sizes[questions.path.name] = questions.close(tail)
        sizes[annotations.path.name] = annotations.close(tail)
    return sizes


def write_coco(root: Path, scale: float, seed: int = 0) -> dict[str, int]:
    """Karpathy's ``dataset_coco.json`` and ``feats/`` under ``root``; returns the file size."""
    rng = np.random.default_rng(seed + 1)
    words = ["a", "of", "the", "on", "in", "with", "and", *_words(rng, 25_000)]
    counts = {split: _count(n, scale) for split, n in COCO_SPLITS.items()}
    total = sum(counts.values())
    ids = np.sort(rng.choice(600_000, size=total, replace=False))
    splits = np.repeat(list(counts), list(counts.values()))
    rng.shuffle(splits)

    def entries() -> Iterator[dict[str, Any]]:
        sentid = 0
        for i in range(total):
            lengths = rng.integers(8, 15, size=5)
            sentences = []
            for length in lengths:
                tokens = [words[int(w)] for w in _zipf(rng, len(words), int(length))]
                sentences.append({"tokens": tokens, "raw": " ".join(tokens).capitalize() + ".",
                                  "imgid": i, "sentid": sentid})
                sentid += 1
            folder = "train2014" if splits[i] == "train" else "val2014"
            yield {"filepath": folder, "sentids": [s["sentid"] for s in sentences],
                   "filename": f"COCO_{folder}_{int(ids[i]):012d}.jpg", "imgid": i,
                   "split": str(splits[i]), "sentences": sentences, "cocoid": int(ids[i])}

    out = _JsonList(root / "dataset_coco.json", "images")
    out.write(entries())
    size = out.close(', "dataset": "coco"')
    feature_files(root / "feats", [f"{int(i)}.npz" for i in ids], regions=FEATURE_REGIONS,
                  dim=FEATURE_DIM, seed=seed)
    return {"dataset_coco.json": size}


def write_image_folder(root: Path, scale: float) -> dict[str, int]:
    """``root/train/<class>/*.JPEG`` and ``root/val/<class>/*.JPEG``, empty files; returns
    the number of files of each split."""
    classes = max(2, round(IMAGENET["classes"] * min(1.0, scale * 10)))  # >= 2 images a class
    out = {}
    for split in ("train", "val"):
        n = _count(IMAGENET[split], scale)
        for c in range(classes):
            wnid = f"n{1440764 + c * 7919:08d}"
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for k in range(c, n, classes):
                os.close(os.open(folder / f"{wnid}_{k}.JPEG", os.O_CREAT | os.O_WRONLY, 0o644))
        out[split] = n
    return out
