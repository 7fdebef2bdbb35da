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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nas.errors import NasError
from nas.radix import WordTokenizer
from nas.tasks import TaskGeometry
from trainers.tasks._io import RegionFeatures, json_records, read_json, resolve
from trainers.tasks.data import CaptionDataset, TaskData, constant_caption_chance

__all__ = ["build"]


def _sentences(image: dict[str, Any], path: Path) -> list[list[str]]:
    out = []
    for sentence in image["sentences"]:
        tokens = sentence.get("tokens") if isinstance(sentence, dict) else None
        if not isinstance(tokens, list):
            raise NasError(f"Karpathy split file '{path}': a sentence of image "
                           f"{image['cocoid']} has no 'tokens' list.")
        out.append([str(t).lower() for t in tokens])
    return out


def _side(
    images: list[dict[str, Any]], splits: Sequence[str], path: Path, directory: Path,
    max_regions: int, region_dim: int, limit: int | None, sample: bool, max_words: int,
) -> CaptionDataset:
    chosen = [im for im in images if im["split"] in splits][:limit]
    chosen = [im for im in chosen if im["sentences"]]
    if not chosen:
        raise NasError(
            f"Karpathy split file '{path}' has no image with sentences in split(s) "
            f"{list(splits)}."
        )
    ids = [int(im["cocoid"]) for im in chosen]
    features = RegionFeatures(directory, region_dim=region_dim, max_regions=max_regions)
    features.require(ids, path)
    references = [_sentences(im, path) for im in chosen]
    return CaptionDataset(references, lambda i: features.load(ids[i]), max_words=max_words,
                          sample=sample)


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
    path, directory = resolve(root, captions), resolve(root, features)
    images = json_records(read_json(path, "Karpathy split file"), "images", path,
                          "Karpathy split file", ("cocoid", "split", "sentences"))
    for im in images:
        if not isinstance(im["sentences"], list) or not str(im["cocoid"]).isdigit():
            raise NasError(f"Karpathy split file '{path}': image {im['cocoid']!r} needs a "
                           "numeric 'cocoid' and a 'sentences' list.")
    common = (path, directory, max_regions, region_dim)
    train = _side(images, tuple(train_splits), *common, train_size, True, max_words)
    val = _side(images, (val_split,), *common, val_size, False, max_words)

    counts = Counter(w for refs in train.references for s in refs for w in s)
    ordered = sorted(counts, key=lambda w: (-counts[w], w))
    words = tuple(w for w in ordered if counts[w] >= min_count)
    if not words:
        raise NasError(f"No word of '{path}' occurs min_count={min_count} times in training; "
                       "lower min_count.")
    geometry = TaskGeometry(
        "coco-files", "caption", WordTokenizer(words).vocab_size, regions=max_regions,
        region_dim=region_dim, caption_words=max_words,
    )
    return TaskData("coco-files", geometry, train, val, "cider_d",
                    constant_caption_chance(train, val), words)
