"""``synthetic-captions``: scenes described by captions from a small grammar over a large lexicon.

Each image is a random scene (:mod:`trainers.tasks.scenes`, noisy region features and boxes)
with ``captions_per_image`` reference captions drawn independently from three templates:

- relation: "[the picture shows] a large red cube left of a small metal sphere",
- pair: "[the picture shows] a green cylinder and a rubber ball" (objects left to right),
- count: "[the picture shows] five objects with a large crimson block".

Captions mostly talk about the two most salient objects (large before small, near before far).
A noun phrase keeps each adjective (size, colour, material) with its own probability. Every
content word is its concept's first word or, with probability ``synonym_rate``, one of the
concept's other synonyms drawn with Zipf probability ``1 / rank`` (:mod:`trainers.tasks.lexicon`):
captions agree on what they say but vary in how. Word frequencies fall off as a power law
(log-log slope about -1.1), and the training vocabulary (words in descending frequency) holds
about 2,360 words at the default sizes. Captions have at most 15 words. Everything is generated
from ``seed``; the validation split does not depend on ``train_size``.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from nas.errors import ConfigError
from nas.radix import WordTokenizer
from nas.tasks import TaskGeometry
from trainers.tasks.data import CaptionDataset, TaskData, constant_caption_chance
from trainers.tasks.lexicon import concept_words, zipf_weights
from trainers.tasks.scenes import (
    ATTRIBUTES,
    Scene,
    Streams,
    region_tensors,
    sample_scene,
    scene_bytes,
    scene_projection,
    task_streams,
)

__all__ = ["CAPTION_WORDS", "build", "generated_bytes"]

CAPTION_WORDS = 16
MAX_OBJECTS = 8
_ADJECTIVE_P = {"size": 0.5, "color": 0.8, "material": 0.4}
_SALIENT_P = 0.8  # how often a caption's objects are the most salient ones
_TEMPLATES = ("relation", "pair", "count")
_TEMPLATE_CDF = (0.45, 0.8, 1.0)
_NUMBERS = ("three", "four", "five", "six", "seven", "eight")
_CAPTION_BYTES = 384  # a list of up to 15 interned words (measured: about 330 B)
Caption = list[str]


class _Speaker:
    """Draws the words of captions: Zipf-distributed synonyms of each concept."""

    def __init__(self, rng: random.Random, synonym_rate: float) -> None:
        self.rng, self.synonym_rate = rng, synonym_rate

    def word(self, concept: str) -> str:
        """The concept's first word, or with ``synonym_rate`` a Zipf-drawn other synonym."""
        words = concept_words(concept)
        if len(words) == 1 or self.rng.random() >= self.synonym_rate:
            return words[0]
        cdf = zipf_weights(len(words) - 1, 1.0)
        return words[1 + min(bisect.bisect(cdf, self.rng.random()), len(words) - 2)]

    def noun_phrase(self, scene: Scene, i: int) -> Caption:
        words = ["a"]
        for name, p in _ADJECTIVE_P.items():
            if self.rng.random() < p:
                words.append(self.word(ATTRIBUTES[name][scene.attribute(name)[i]]))
        generic = len(words) > 1 and self.rng.random() < 0.15
        shape = "object" if generic else ATTRIBUTES["shape"][scene.attribute("shape")[i]]
        return [*words, self.word(shape)]

    def subjects(self, scene: Scene) -> tuple[int, int]:
        """Two different objects to talk about: mostly the two most salient ones."""
        order = _salience(scene)
        i = order[0] if self.rng.random() < _SALIENT_P else self.rng.choice(order)
        rest = [k for k in order if k != i]
        j = rest[0] if self.rng.random() < _SALIENT_P else self.rng.choice(rest)
        return i, j

    def caption(self, scene: Scene) -> Caption:
        rng = self.rng
        intro = ["the", self.word("picture"), self.word("shows")] if rng.random() < 0.5 else []
        template = _TEMPLATES[bisect.bisect(_TEMPLATE_CDF, rng.random())]
        i, j = self.subjects(scene)
        if template == "count":
            number = _NUMBERS[len(scene) - 3]
            body = [self.word(number), self.word("objects"), "with", *self.noun_phrase(scene, i)]
        elif template == "pair":
            x = scene.centre_x
            first, second = (i, j) if x[i] <= x[j] else (j, i)
            body = [*self.noun_phrase(scene, first), "and", *self.noun_phrase(scene, second)]
        else:
            relation = _relation(scene, i, j)
            of = [] if relation == "behind" else ["of"]
            body = [*self.noun_phrase(scene, i), self.word(relation), *of,
                    *self.noun_phrase(scene, j)]
        return intro + body


def _salience(scene: Scene) -> list[int]:
    """Objects from the most to the least salient: large before small, near before far."""
    size, y = scene.attribute("size"), scene.centre_y
    return sorted(range(len(scene)), key=lambda k: (-size[k], -y[k]))


def _relation(scene: Scene, i: int, j: int) -> str:
    """Where object ``i`` is seen from object ``j``: left/right, else front/behind."""
    x, y = scene.centre_x, scene.centre_y
    if abs(x[i] - x[j]) >= 0.1:
        return "left" if x[i] < x[j] else "right"
    return "front" if y[i] > y[j] else "behind"


def _split(
    streams: Streams, size: int, captions: int, projection: np.ndarray, noise: float,
    synonym_rate: float, *, sample: bool,
) -> CaptionDataset:
    rng, np_rng = streams
    speaker = _Speaker(rng, synonym_rate)
    scenes = [sample_scene(rng, 3, MAX_OBJECTS) for _ in range(size)]
    references = [[speaker.caption(s) for _ in range(captions)] for s in scenes]
    regions, boxes = region_tensors(scenes, projection, np_rng, regions=MAX_OBJECTS, noise=noise)
    return CaptionDataset(references, lambda i: (regions[i], boxes[i]), max_words=CAPTION_WORDS,
                          sample=sample)


def generated_bytes(options: Mapping[str, Any]) -> tuple[int, str]:
    """Peak bytes ``build`` takes for ``options`` (checked before it runs), and the formula."""
    items = options["train_size"] + options["val_size"]
    captions = items * options["captions_per_image"] * _CAPTION_BYTES
    return (scene_bytes(items, MAX_OBJECTS, options["region_dim"]) + captions,
            f"(train_size + val_size) x (8 KiB + {MAX_OBJECTS} regions x region_dim x 16 B + "
            f"captions_per_image x {_CAPTION_BYTES} B) with {items} items, "
            f"region_dim={options['region_dim']}, "
            f"captions_per_image={options['captions_per_image']}")


def build(
    *,
    seed: int = 0,
    train_size: int = 4000,
    val_size: int = 500,
    captions_per_image: int = 5,
    region_dim: int = 64,
    noise: float = 0.5,
    synonym_rate: float = 0.4,
) -> TaskData:
    """The ``synthetic-captions`` task.

    ``synonym_rate`` is the probability that a content word is not its concept's first word
    but another synonym (Zipf-drawn); ``noise`` is the std of the Gaussian on each feature.
    """
    if synonym_rate > 1:
        raise ConfigError(
            f"`0 <= synonym_rate <= 1` must hold, but got synonym_rate={synonym_rate}."
        )
    projection_rng, train_streams, val_streams = task_streams(seed)
    projection = scene_projection(projection_rng, region_dim)
    args = (captions_per_image, projection, noise, synonym_rate)
    train = _split(train_streams, train_size, *args, sample=True)
    val = _split(val_streams, val_size, *args, sample=False)
    counts = Counter(w for refs in train.references for caption in refs for w in caption)
    words = tuple(w for _, w in sorted((-c, w) for w, c in counts.items()))
    geometry = TaskGeometry(
        "synthetic-captions", "caption", WordTokenizer(words).vocab_size, regions=MAX_OBJECTS,
        region_dim=region_dim, caption_words=CAPTION_WORDS,
    )
    return TaskData("synthetic-captions", geometry, train, val, "cider_d",
                    constant_caption_chance(train, val), words)

