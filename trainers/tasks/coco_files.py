"""``coco-files``: COCO captions in the Karpathy split layout over precomputed region features.

Files (relative paths are taken from ``root``):

- ``dataset_coco.json``, Karpathy's split file::

      {"images": [{"filename": "COCO_val2014_000000391895.jpg", "cocoid": 391895,
                   "split": "train", "sentences": [{"tokens": ["a", "man", "riding", ...]}]}]}

  ``split`` is ``train``, ``restval``, ``val`` or ``test``; ``train_splits`` (default train and
  restval, Karpathy's training set) and ``val_split`` pick the images of each side.
- a directory of region features, one ``.npz`` per image named by its ``cocoid``
  (``391895.npz``; see :class:`~trainers.tasks._io.RegionFeatures` for the keys and names
  accepted).

Words are lowercased. The vocabulary holds the training words seen at least ``min_count``
times, most frequent first (ties alphabetical, as ``nas.radix`` orders them); rarer words become
``<unk>`` through the tokenizer. A training item's ``caption`` is one of its image's sentences
drawn at random, cut to ``max_words``; validation scores against all of them. The metric is
CIDEr-D; chance captions every image with the most frequent training sentence.

Parsed once per node (:mod:`trainers.tasks.cache`): every caption as word ids, each image's
feature file and the vocabulary are written as memory-mapped arrays, which every later process
opens instead of the JSON (``nas data prepare coco-files --task-set root=...`` ahead of a study).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from nas.errors import NasError
from nas.radix import WordTokenizer
from nas.tasks import TaskGeometry
from trainers.tasks._io import (
    RegionFeatures,
    feature_files,
    feature_index,
    json_records,
    read_json,
    resolve,
)
from trainers.tasks.cache import Built, Prepared, encode_strings, open_or_build
from trainers.tasks.data import (
    CaptionDataset,
    EncodedCaptions,
    TaskData,
    constant_caption_chance,
)

__all__ = ["VERSION", "build", "prepare"]

#: What the prepared arrays mean; raised whenever the parse below changes what it writes.
VERSION = 1
_SPLITS = ("train", "val")


class _Sentence(msgspec.Struct):
    tokens: list[str]


class _Image(msgspec.Struct):
    cocoid: int
    split: str
    sentences: list[_Sentence]


class _Karpathy(msgspec.Struct):
    images: list[_Image]


_KARPATHY = msgspec.json.Decoder(_Karpathy)


def _images(path: Path) -> list[_Image]:
    """The split file's images. A well-formed file is decoded into typed records of only the
    fields used (fast, and a fraction of the memory); any other goes through ``json`` and a
    check of every image, which names what it refuses (its sentences are read as written, and
    checked in :func:`_sentences`)."""
    try:
        return _KARPATHY.decode(path.read_bytes()).images
    except (OSError, msgspec.DecodeError):
        pass
    images = json_records(read_json(path, "Karpathy split file"), "images", path,
                          "Karpathy split file", ("cocoid", "split", "sentences"))
    for im in images:
        if not isinstance(im["sentences"], list) or not str(im["cocoid"]).isdigit():
            raise NasError(f"Karpathy split file '{path}': image {im['cocoid']!r} needs a "
                           "numeric 'cocoid' and a 'sentences' list.")
    return [_Image(int(im["cocoid"]), im["split"], im["sentences"]) for im in images]


def _references(chosen: list[_Image], path: Path) -> list[list[list[str]]]:
    """Each image's sentences as lists of lowercase words. Karpathy's tokens are lowercase
    already: decoded records whose words all are keep their lists (one check of every
    character at once, instead of a new list per sentence)."""
    if chosen and isinstance(chosen[0].sentences[0], _Sentence):  # decoded (all are, or none)
        refs = [[s.tokens for s in im.sentences] for im in chosen]
        text = "".join(chain.from_iterable(chain.from_iterable(refs)))
        if text.lower() == text:  # lowering changes a word only where it changes a character
            return refs
    return [_sentences(im, path) for im in chosen]


def _sentences(image: _Image, path: Path) -> list[list[str]]:
    out = []
    for sentence in image.sentences:
        if isinstance(sentence, _Sentence):
            out.append(list(map(str.lower, sentence.tokens)))
            continue
        tokens = sentence.get("tokens") if isinstance(sentence, dict) else None
        if not isinstance(tokens, list):
            raise NasError(f"Karpathy split file '{path}': a sentence of image "
                           f"{image.cocoid} has no 'tokens' list.")
        out.append([str(t).lower() for t in tokens])
    return out


def _side(images: list[_Image], splits: Sequence[str], path: Path, directory: Path,
          limit: int | None) -> tuple[list[list[list[str]]], list[str], np.ndarray]:
    """One side's references, the feature files they need and each image's index into them."""
    chosen = [im for im in images if im.split in splits][:limit]
    chosen = [im for im in chosen if im.sentences]
    if not chosen:
        raise NasError(
            f"Karpathy split file '{path}' has no image with sentences in split(s) "
            f"{list(splits)}."
        )
    names, index = feature_index(feature_files(directory), (im.cocoid for im in chosen),
                                 directory, path)
    return _references(chosen, path), names, index


def _vocabulary(references: list[list[list[str]]]) -> tuple[list[str], np.ndarray,
                                                             np.ndarray]:
    """The words of ``references``, most frequent first (ties alphabetical), their counts, and
    every word of every sentence, in order, as its id (its place in that list)."""
    flat = list(chain.from_iterable(chain.from_iterable(references)))
    first = {w: i for i, w in enumerate(dict.fromkeys(flat))}  # ids in order of first use
    ids = np.fromiter(map(first.__getitem__, flat), dtype=np.int64, count=len(flat))
    counts = np.bincount(ids, minlength=len(first))
    words, n = list(first), counts.tolist()
    order = sorted(range(len(words)), key=lambda i: (-n[i], words[i]))
    rank = np.empty(len(words), dtype=np.int32)
    rank[order] = np.arange(len(words), dtype=np.int32)
    return [words[i] for i in order], counts[order], rank[ids]


def _encoded(split: str, references: list[list[list[str]]],
             tokens: np.ndarray) -> dict[str, np.ndarray]:
    """One side's arrays: its word ids (``tokens``, every sentence's in order), where each
    sentence starts in them, where each image's sentences start."""
    images = np.zeros(len(references) + 1, dtype=np.int64)
    np.cumsum([len(refs) for refs in references], out=images[1:])
    starts = np.zeros(images[-1] + 1, dtype=np.int64)
    np.cumsum([len(s) for refs in references for s in refs], out=starts[1:])
    return {f"{split}.tokens": tokens, f"{split}.sentences": starts, f"{split}.images": images}


def _parse(path: Path, directory: Path, train_splits: Sequence[str], val_split: str,
           min_count: int, train_size: int | None, val_size: int | None) -> Built:
    """Read the split file and the feature folder into the task's arrays."""
    images = _images(path)
    train_refs, train_names, train_index = _side(images, tuple(train_splits), path, directory,
                                                 train_size)
    val_refs, val_names, val_index = _side(images, (val_split,), path, directory, val_size)

    ordered, counts, train_tokens = _vocabulary(train_refs)
    known = int(np.count_nonzero(counts >= min_count))  # a prefix: most frequent first
    if not known:
        raise NasError(f"No word of '{path}' occurs min_count={min_count} times in training; "
                       "lower min_count.")
    word_id = {w: i for i, w in enumerate(ordered)}
    val_words = list(chain.from_iterable(chain.from_iterable(val_refs)))
    for word in sorted(set(val_words) - word_id.keys()):  # references keep every word
        word_id[word] = len(word_id)
    vocabulary = list(word_id)
    val_tokens = np.fromiter(map(word_id.__getitem__, val_words), dtype=np.int32,
                             count=len(val_words))

    def unused(_: int) -> Any:  # the chance level reads references only
        raise AssertionError("features are not loaded while parsing")

    chance = constant_caption_chance(
        CaptionDataset(train_refs, unused, max_words=1, sample=False),
        CaptionDataset(val_refs, unused, max_words=1, sample=False))
    arrays = {**encode_strings("words", vocabulary),
              **_encoded("train", train_refs, train_tokens),
              **_encoded("val", val_refs, val_tokens),
              "train.image": train_index, "val.image": val_index,
              **encode_strings("train.features", train_names),
              **encode_strings("val.features", val_names)}
    return Built(arrays, {"words": known, "chance": chance, "train": len(train_refs),
                          "val": len(val_refs)})


def _paths(options: Mapping[str, Any]) -> tuple[Path, Path]:
    return (resolve(options["root"], options["captions"]).resolve(),
            resolve(options["root"], options["features"]).resolve())


def prepare(options: Mapping[str, Any]) -> Prepared:
    """The task's prepared arrays for ``options`` (all of :func:`build`'s), parsed on first use
    on this node and opened after (see :mod:`trainers.tasks.cache`)."""
    path, directory = _paths(options)
    key = {"captions": str(path), "features": str(directory),
           "train_splits": list(options["train_splits"]),
           **{k: options[k] for k in ("val_split", "min_count", "train_size", "val_size")}}
    return open_or_build(
        "coco-files", key, [path, directory],
        lambda: _parse(path, directory, tuple(options["train_splits"]), options["val_split"],
                       options["min_count"], options["train_size"], options["val_size"]),
        version=VERSION)


def _dataset(prepared: Prepared, split: str, words: Sequence[str], directory: Path,
             max_words: int, max_regions: int, region_dim: int) -> CaptionDataset:
    a = prepared.arrays
    features = RegionFeatures(directory, prepared.strings(f"{split}.features"),
                              region_dim=region_dim, max_regions=max_regions)
    features.check_first()
    references = EncodedCaptions(words, a[f"{split}.tokens"], a[f"{split}.sentences"],
                                 a[f"{split}.images"])
    image = a[f"{split}.image"]
    return CaptionDataset(references, lambda i: features.load(int(image[i])),
                          max_words=max_words, sample=split == "train")
def build(
    *,
    root: str | None = None,
    captions: str = "dataset_coco.json",
    features: str = "feats",
    train_splits: Sequence[str] = ("train", "restval"),
    val_split: str = "val",
    min_count: int = 5,
    max_words: int = 16,
    max_regions: int = 36,
    region_dim: int = 2048,
    train_size: int | None = None,
    val_size: int | None = None,
) -> TaskData:
    """The ``coco-files`` task; ``train_size``/``val_size`` keep only the first images."""
    options = dict(locals())
    prepared = prepare(options)
    _, directory = _paths(options)
    vocabulary = tuple(prepared.strings("words"))
    train, val = (_dataset(prepared, s, vocabulary, directory, max_words, max_regions,
                           region_dim) for s in _SPLITS)
    words = vocabulary[: int(prepared.meta["words"])]
    geometry = TaskGeometry(
        "coco-files", "caption", WordTokenizer(words).vocab_size, regions=max_regions,
        region_dim=region_dim, caption_words=max_words,
    )
    return TaskData("coco-files", geometry, train, val, "cider_d", float(prepared.meta["chance"]),
                    words)
