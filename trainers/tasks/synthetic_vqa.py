"""``synthetic-vqa``: CLEVR-like template questions about noisy region features.

Each image is a random scene (:mod:`trainers.tasks.scenes`) with one question of five kinds:

- exist: "is there a large red cube ?" (yes/no, balanced),
- count: "how many metal spheres are there ?" (0-8),
- query: "what color is the small cylinder ?" about an object the words pick out uniquely,
- compare: "is the red object the same shape as the large cube ?" (yes/no, balanced),
- spatial: "is the blue sphere left of the small cube ?" (yes/no).

Queries take 45% of the questions (half of them about colour), counts 25%, each yes/no kind
10%, so the question alone is a weak guide to the answer: the majority answer scores about
0.14, answering each distinct question with its most frequent training answer about 0.39.
Questions use a fixed vocabulary of 39 words (ids from 2; 0 pads, 1 is unknown) and are at
most 16 tokens long; the 26 answers are classes with one-hot ``answer_scores``. The task is
generated entirely from ``seed``: the projection matrix, the training and the validation split
each from their own stream, so the validation split does not change with ``train_size``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from nas.tasks import TaskGeometry
from trainers.tasks.data import TaskData, VqaDataset, majority_answer_chance
from trainers.tasks.scenes import (
    ATTRIBUTES,
    COLORS,
    MATERIALS,
    SHAPES,
    SIZES,
    Scene,
    Streams,
    region_tensors,
    sample_scene,
    scene_bytes,
    scene_projection,
    task_streams,
)

__all__ = ["ANSWERS", "QUESTION_WORDS", "build", "generated_bytes"]

MAX_OBJECTS = 8
QUESTION_TOKENS = 16
PLURALS = tuple(f"{s}s" for s in SHAPES)
QUESTION_WORDS: tuple[str, ...] = (
    "?", "is", "there", "a", "an", "how", "many", "are", "what", "the", "same", "as", "left",
    "right", "of", "color", "shape", "size", "material", "object", "objects",
    *COLORS, *SHAPES, *PLURALS, *SIZES, *MATERIALS,
)
ANSWERS: tuple[str, ...] = (
    "no", "yes", *(str(i) for i in range(MAX_OBJECTS + 1)), *COLORS, *SHAPES, *SIZES, *MATERIALS,
)
_ATTRIBUTE_NAMES = tuple(ATTRIBUTES)
_WORD_ID = {w: i + 2 for i, w in enumerate(QUESTION_WORDS)}
_ANSWER_ID = {a: i for i, a in enumerate(ANSWERS)}
# Question kind -> probability, and the attribute a query asks for -> probability.
_KINDS = {"query": 0.45, "count": 0.25, "exist": 0.1, "compare": 0.1, "spatial": 0.1}
_QUERIED = {"color": 0.5, "shape": 0.25, "size": 0.125, "material": 0.125}
Description = dict[str, int]  # attribute -> value index
Question = tuple[list[str], str]


def _phrase(desc: Description, *, plural: bool = False) -> list[str]:
    """Adjectives in speaking order, then the shape (or "object"), e.g. "large red cube"."""
    words = [ATTRIBUTES[a][desc[a]] for a in ("size", "color", "material") if a in desc]
    if "shape" in desc:
        return [*words, (PLURALS if plural else SHAPES)[desc["shape"]]]
    return [*words, "objects" if plural else "object"]


def _article(words: list[str]) -> str:
    return "an" if words[0][0] in "aeiou" else "a"


def _matches(scene: Scene, desc: Description) -> list[int]:
    """Indices of the objects that ``desc`` fits."""
    columns = [(scene.attribute(name), value) for name, value in desc.items()]
    return [i for i in range(len(scene)) if all(col[i] == value for col, value in columns)]


def _describe(scene: Scene, i: int, rng: random.Random, exclude: str = "") -> Description | None:
    """A smallest set of ``i``'s attributes (not ``exclude``) that fits ``i`` alone, if any."""
    names = [a for a in ATTRIBUTES if a != exclude]
    for k in range(1, len(names) + 1):
        subsets = list(itertools.combinations(names, k))
        for subset in rng.sample(subsets, len(subsets)):
            desc = {a: scene.attribute(a)[i] for a in subset}
            if len(_matches(scene, desc)) == 1:
                return desc
    return None


def _random_desc(rng: random.Random, scene: Scene, k: int, from_object: bool) -> Description:
    names = rng.sample(_ATTRIBUTE_NAMES, k)
    if from_object:
        i = rng.randrange(len(scene))
        return {a: scene.attribute(a)[i] for a in names}
    return {a: rng.randrange(len(ATTRIBUTES[a])) for a in names}


def _exist(scene: Scene, rng: random.Random) -> Question | None:
    want = rng.random() < 0.5
    for _ in range(20):
        desc = _random_desc(rng, scene, rng.randint(1, 3), from_object=want)
        if (len(_matches(scene, desc)) > 0) == want:
            phrase = _phrase(desc)
            return ["is", "there", _article(phrase), *phrase, "?"], "yes" if want else "no"
    return None


def _count(scene: Scene, rng: random.Random) -> Question | None:
    desc = _random_desc(rng, scene, rng.randint(1, 2), from_object=rng.random() < 0.8)
    words = ["how", "many", *_phrase(desc, plural=True), "are", "there", "?"]
    return words, str(len(_matches(scene, desc)))


def _query(scene: Scene, rng: random.Random) -> Question | None:
    attribute = rng.choices(list(_QUERIED), list(_QUERIED.values()))[0]
    for i in rng.sample(range(len(scene)), len(scene)):
        desc = _describe(scene, i, rng, exclude=attribute)
        if desc is not None:
            answer = ATTRIBUTES[attribute][scene.attribute(attribute)[i]]
            return ["what", attribute, "is", "the", *_phrase(desc), "?"], answer
    return None


def _pairs(scene: Scene, rng: random.Random) -> list[tuple[int, int]]:
    pairs = [(i, j) for i in range(len(scene)) for j in range(len(scene)) if i != j]
    return rng.sample(pairs, len(pairs))


def _compare(scene: Scene, rng: random.Random) -> Question | None:
    attribute = rng.choice(_ATTRIBUTE_NAMES)
    want = rng.random() < 0.5
    values = scene.attribute(attribute)
    for i, j in _pairs(scene, rng):
        if (values[i] == values[j]) != want:
            continue
        a, b = _describe(scene, i, rng, attribute), _describe(scene, j, rng, attribute)
        if a is not None and b is not None:
            words = ["is", "the", *_phrase(a), "the", "same", attribute, "as", "the",
                     *_phrase(b), "?"]
            return words, "yes" if want else "no"
    return None


def _spatial(scene: Scene, rng: random.Random) -> Question | None:
    x = scene.centre_x
    side = "left" if rng.random() < 0.5 else "right"
    for i, j in _pairs(scene, rng):
        if abs(x[i] - x[j]) < 0.05:
            continue
        a, b = _describe(scene, i, rng), _describe(scene, j, rng)
        if a is not None and b is not None:
            is_left = x[i] < x[j]
            answer = "yes" if is_left == (side == "left") else "no"
            return ["is", "the", *_phrase(a), side, "of", "the", *_phrase(b), "?"], answer
    return None


_MAKERS = {"exist": _exist, "count": _count, "query": _query, "compare": _compare,
           "spatial": _spatial}


def _split(streams: Streams, size: int, projection: np.ndarray, noise: float) -> VqaDataset:
    rng, np_rng = streams
    scenes: list[Scene] = []
    questions: list[list[int]] = []
    answers: list[list[tuple[int, float]]] = []
    kinds, weights = list(_KINDS), list(_KINDS.values())
    while len(scenes) < size:
        scene = sample_scene(rng, 3, MAX_OBJECTS)
        made = _MAKERS[rng.choices(kinds, weights)[0]](scene, rng)
        if made is None:  # e.g. no object can be singled out: draw another scene
            continue
        words, answer = made
        ids = [_WORD_ID[w] for w in words]
        questions.append(ids + [0] * (QUESTION_TOKENS - len(ids)))
        answers.append([(_ANSWER_ID[answer], 1.0)])
        scenes.append(scene)
    regions, boxes = region_tensors(scenes, projection, np_rng, regions=MAX_OBJECTS, noise=noise)
    return VqaDataset(
        torch.tensor(questions, dtype=torch.long).reshape(size, QUESTION_TOKENS), answers,
        range(size), lambda i: (regions[i], boxes[i]), len(ANSWERS),
    )


def generated_bytes(options: Mapping[str, Any]) -> tuple[int, str]:
    """Peak bytes ``build`` takes for ``options`` (checked before it runs), and the formula."""
    items = options["train_size"] + options["val_size"]
    return (scene_bytes(items, MAX_OBJECTS, options["region_dim"]),
            f"(train_size + val_size) x (8 KiB + {MAX_OBJECTS} regions x region_dim x 16 B) "
            f"with {items} items, region_dim={options['region_dim']}")


def build(
    *,
    seed: int = 0,
    train_size: int = 4000,
    val_size: int = 1000,
    region_dim: int = 64,
    noise: float = 0.5,
) -> TaskData:
    """The ``synthetic-vqa`` task; ``noise`` is the std of the Gaussian added to each feature."""
    projection_rng, train_streams, val_streams = task_streams(seed)
    projection = scene_projection(projection_rng, region_dim)
    train = _split(train_streams, train_size, projection, noise)
    val = _split(val_streams, val_size, projection, noise)
    geometry = TaskGeometry(
        "synthetic-vqa", "vqa", len(ANSWERS), question_tokens=QUESTION_TOKENS,
        question_vocab=len(QUESTION_WORDS) + 2, regions=MAX_OBJECTS, region_dim=region_dim,
    )
    return TaskData("synthetic-vqa", geometry, train, val, "vqa_accuracy",
                    majority_answer_chance(train, val))
