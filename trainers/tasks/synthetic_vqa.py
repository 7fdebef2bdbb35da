"""``synthetic-vqa``: CLEVR-like template questions about noisy region features.

Each image is a random scene (:mod:`trainers.tasks.scenes`) with one question of five kinds:

- exist: "is there a large red cube ?" (yes/no, balanced),
- count: "how many metal spheres are there ?" (0-8),
- query: "what color is the small cylinder ?" about an object the words pick out uniquely,
- compare: "is the red object the same shape as the large cube ?" (yes/no, balanced),
- spatial: "is the blue sphere left of the small cube ?" (yes/no).

Questions use a fixed vocabulary of 39 words (ids from 2; 0 pads, 1 is unknown) and are at
most 16 tokens long; the 26 answers are classes with one-hot ``answer_scores``. The task is
generated entirely from ``seed``: the projection matrix, the training and the validation split
each from their own stream, so the validation split does not change with ``train_size``.
"""

from __future__ import annotations

import bisect
import itertools

import numpy as np
import torch

from nas.tasks import TaskGeometry
from trainers.tasks.data import TaskData, VqaDataset, majority_chance
from trainers.tasks.scenes import (
    ATTRIBUTES,
    COLORS,
    MATERIALS,
    SHAPES,
    SIZES,
    Scene,
    region_tensors,
    sample_scene,
    scene_projection,
)

__all__ = ["ANSWERS", "QUESTION_WORDS", "build"]

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
# question kind -> probability; yes/no kinds take 45% of the questions
_KINDS = {"exist": 0.15, "count": 0.2, "query": 0.35, "compare": 0.15, "spatial": 0.15}
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


def _describe(scene: Scene, i: int, rng: np.random.Generator, exclude: str = "") -> Description | None:
    """A smallest set of ``i``'s attributes (not ``exclude``) that fits ``i`` alone, if any."""
    names = [a for a in ATTRIBUTES if a != exclude]
    for k in range(1, len(names) + 1):
        subsets = list(itertools.combinations(names, k))
        for j in rng.permutation(len(subsets)).tolist():
            desc = {a: scene.attribute(a)[i] for a in subsets[j]}
            if len(_matches(scene, desc)) == 1:
                return desc
    return None


def _random_desc(rng: np.random.Generator, scene: Scene, k: int, from_object: bool) -> Description:
    names = [_ATTRIBUTE_NAMES[j] for j in rng.permutation(len(ATTRIBUTES))[:k].tolist()]
    if from_object:
        i = int(rng.integers(len(scene)))
        return {a: scene.attribute(a)[i] for a in names}
    return {a: int(rng.integers(len(ATTRIBUTES[a]))) for a in names}


def _exist(scene: Scene, rng: np.random.Generator) -> Question | None:
    want = bool(rng.random() < 0.5)
    for _ in range(20):
        desc = _random_desc(rng, scene, int(rng.integers(1, 4)), from_object=want)
        if (len(_matches(scene, desc)) > 0) == want:
            phrase = _phrase(desc)
            return ["is", "there", _article(phrase), *phrase, "?"], "yes" if want else "no"
    return None


def _count(scene: Scene, rng: np.random.Generator) -> Question | None:
    desc = _random_desc(rng, scene, int(rng.integers(1, 3)), from_object=bool(rng.random() < 0.8))
    words = ["how", "many", *_phrase(desc, plural=True), "are", "there", "?"]
    return words, str(len(_matches(scene, desc)))


def _query(scene: Scene, rng: np.random.Generator) -> Question | None:
    attribute = _ATTRIBUTE_NAMES[int(rng.integers(len(ATTRIBUTES)))]
    for i in rng.permutation(len(scene)).tolist():
        desc = _describe(scene, i, rng, exclude=attribute)
        if desc is not None:
            answer = ATTRIBUTES[attribute][scene.attribute(attribute)[i]]
            return ["what", attribute, "is", "the", *_phrase(desc), "?"], answer
    return None


def _pairs(scene: Scene, rng: np.random.Generator) -> list[tuple[int, int]]:
    pairs = [(i, j) for i in range(len(scene)) for j in range(len(scene)) if i != j]
    return [pairs[k] for k in rng.permutation(len(pairs)).tolist()]


def _compare(scene: Scene, rng: np.random.Generator) -> Question | None:
    attribute = _ATTRIBUTE_NAMES[int(rng.integers(len(ATTRIBUTES)))]
    want = bool(rng.random() < 0.5)
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


def _spatial(scene: Scene, rng: np.random.Generator) -> Question | None:
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


def _split(
    rng: np.random.Generator, size: int, projection: np.ndarray, noise: float
) -> VqaDataset:
    scenes: list[Scene] = []
    questions: list[list[int]] = []
    answers: list[list[tuple[int, float]]] = []
    kinds, cumulative = list(_KINDS), np.cumsum(list(_KINDS.values())).tolist()
    while len(scenes) < size:
        scene = sample_scene(rng, 3, MAX_OBJECTS)
        kind = kinds[bisect.bisect(cumulative, rng.random() * cumulative[-1])]
        made = _MAKERS[kind](scene, rng)
        if made is None:  # e.g. no object can be singled out: draw another scene
            continue
        words, answer = made
        ids = [_WORD_ID[w] for w in words]
        questions.append(ids + [0] * (QUESTION_TOKENS - len(ids)))
        answers.append([(_ANSWER_ID[answer], 1.0)])
        scenes.append(scene)
    regions, boxes = region_tensors(scenes, projection, rng, regions=MAX_OBJECTS, noise=noise)
    return VqaDataset(torch.tensor(questions, dtype=torch.long).reshape(size, -1), answers, range(size), lambda i: (regions[i], boxes[i]),
                      len(ANSWERS))


def build(
    *,
    seed: int = 0,
    train_size: int = 4000,
    val_size: int = 1000,
    region_dim: int = 64,
    noise: float = 0.5,
) -> TaskData:
    """The ``synthetic-vqa`` task; ``noise`` is the std of the Gaussian added to each feature."""
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]
    projection = scene_projection(streams[0], region_dim)
    train = _split(streams[1], train_size, projection, noise)
    val = _split(streams[2], val_size, projection, noise)
    geometry = TaskGeometry(
        "synthetic-vqa", "vqa", len(ANSWERS), question_tokens=QUESTION_TOKENS,
        question_vocab=len(QUESTION_WORDS) + 2, regions=MAX_OBJECTS, region_dim=region_dim,
    )
    chance = majority_chance(train.answer_scores().argmax(1), val.answer_scores().argmax(1))
    return TaskData("synthetic-vqa", geometry, train, val, "vqa_accuracy", chance)
