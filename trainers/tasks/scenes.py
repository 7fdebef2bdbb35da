"""CLEVR-like scenes and their noisy region features, shared by the synthetic proxy tasks.

A scene holds 3-8 objects, each with a colour, shape, size and material and a box on a unit
table. Its "detector output" is one region per object: a code of the attributes (one-hot each)
and of the box (centre, width, height), projected to ``region_dim`` by a fixed random matrix,
plus Gaussian noise; rows past the last object are all-zero padding. So a model has to read the
attributes back out of mixed, noisy features, as a VQA model reads a detector's.

Scenes are drawn with :class:`random.Random` (question and caption grammars make many small
draws, which the standard library makes cheaply and reproducibly); features with numpy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "ATTRIBUTES",
    "COLORS",
    "MATERIALS",
    "SHAPES",
    "SIZES",
    "Scene",
    "Streams",
    "region_tensors",
    "sample_scene",
    "scene_bytes",
    "scene_projection",
    "task_streams",
]

COLORS = ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")
SHAPES = ("cube", "sphere", "cylinder")
SIZES = ("small", "large")
MATERIALS = ("rubber", "metal")
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "size": SIZES, "color": COLORS, "material": MATERIALS, "shape": SHAPES,
}
"""Attribute name -> its values, in the order adjectives are spoken ("large red metal cube")."""

_CODE_DIM = sum(len(values) for values in ATTRIBUTES.values()) + 4
_HALF_SIDE = (0.05, 0.09)  # half the box side of a small / large object
_MIN_GAP = 0.06  # objects' centres are at least this far apart (L1), so boxes rarely coincide


@dataclass(frozen=True)
class Scene:
    """The objects of one scene.

    Attributes:
        attributes: attribute name (a key of :data:`ATTRIBUTES`) -> one value index per object.
        boxes: per object ``(x0, y0, x1, y1)`` in [0, 1]; larger y is nearer the viewer.
    """

    attributes: dict[str, tuple[int, ...]]
    boxes: tuple[tuple[float, float, float, float], ...]

    def __len__(self) -> int:
        return len(self.boxes)

    def attribute(self, name: str) -> tuple[int, ...]:
        """The value indices of attribute ``name`` (a key of :data:`ATTRIBUTES`)."""
        return self.attributes[name]

    @property
    def centre_x(self) -> tuple[float, ...]:
        return tuple((b[0] + b[2]) / 2 for b in self.boxes)

    @property
    def centre_y(self) -> tuple[float, ...]:
        return tuple((b[1] + b[3]) / 2 for b in self.boxes)


def sample_scene(rng: random.Random, min_objects: int = 3, max_objects: int = 8) -> Scene:
    """A random scene of ``min_objects..max_objects`` objects with well-separated centres."""
    n = rng.randint(min_objects, max_objects)
    centres: list[tuple[float, float]] = []
    while len(centres) < n:  # 8 points rarely crowd the table: a few redraws at most
        x, y = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9)
        if all(abs(x - a) + abs(y - b) >= _MIN_GAP for a, b in centres):
            centres.append((x, y))
    attributes = {
        name: tuple(rng.randrange(len(values)) for _ in range(n))
        for name, values in ATTRIBUTES.items()
    }
    boxes = []
    for (x, y), size in zip(centres, attributes["size"], strict=True):
        half = _HALF_SIDE[size] * rng.uniform(0.85, 1.15)
        boxes.append((max(x - half, 0.0), max(y - half, 0.0), min(x + half, 1.0),
                      min(y + half, 1.0)))
    return Scene(attributes, tuple(boxes))


Streams = tuple[random.Random, np.random.Generator]


def task_streams(seed: int) -> tuple[np.random.Generator, Streams, Streams]:
    """Independent random streams of a synthetic task: projection, training and validation.

    Each split has its own stream, so the validation split does not change with the training
    split's size.
    """
    projection, *splits = np.random.SeedSequence(seed).spawn(3)
    train, val = (
        (random.Random(int.from_bytes(s.generate_state(2).tobytes(), "little")),
         np.random.default_rng(s))
        for s in splits
    )
    return np.random.default_rng(projection), train, val


def scene_projection(rng: np.random.Generator, region_dim: int) -> np.ndarray:
    """The fixed random matrix (code dim, region_dim) that turns codes into region features."""
    return rng.normal(0.0, 0.5, size=(_CODE_DIM, region_dim))


def _codes(scenes: list[Scene], b: np.ndarray) -> np.ndarray:
    """(objects of all scenes, code dim): one-hot attributes, then centre and extent.

    ``b`` holds the boxes (objects, 4) of all scenes.
    """
    parts = [
        np.eye(len(values))[[v for s in scenes for v in s.attribute(name)]]
        for name, values in ATTRIBUTES.items()
    ]
    geometry = np.stack(
        [(b[:, 0] + b[:, 2] - 1) * 2, (b[:, 1] + b[:, 3] - 1) * 2,
         (b[:, 2] - b[:, 0]) * 10, (b[:, 3] - b[:, 1]) * 10], axis=1,
    )
    return np.concatenate([*parts, geometry], axis=1)


# Measured per generated item: about 8 KiB of Python objects (the scene, its question or
# captions), and per region feature value 4 bytes kept plus float64 temporaries while projecting.
_ITEM_BYTES = 8 * 1024
_FEATURE_BYTES = 16


def scene_bytes(items: int, regions: int, region_dim: int) -> int:
    """Peak bytes of generating ``items`` scenes with their region features (an estimate that
    the task registry checks before a synthetic task is built)."""
    return items * (_ITEM_BYTES + regions * region_dim * _FEATURE_BYTES)


def region_tensors(
    scenes: list[Scene],
    projection: np.ndarray,
    rng: np.random.Generator,
    *,
    regions: int,
    noise: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Region features (N, regions, region_dim) and boxes (N, regions, 4) of ``scenes``.

    Each scene's objects fill its first rows in a random order; the other rows are all-zero
    padding.
    """
    flat_boxes = np.asarray([box for s in scenes for box in s.boxes]).reshape(-1, 4)
    codes = _codes(scenes, flat_boxes)  # (objects, code dim)
    feats = codes @ projection + rng.normal(0.0, noise, size=(len(codes), projection.shape[1]))
    sizes = [len(s) for s in scenes]
    scene_of = np.repeat(np.arange(len(scenes)), sizes)
    slot = np.concatenate([rng.permutation(n) for n in sizes]) if scenes else np.zeros(0, int)
    out = np.zeros((len(scenes), regions, projection.shape[1]), dtype=np.float32)
    boxes = np.zeros((len(scenes), regions, 4), dtype=np.float32)
    out[scene_of, slot] = feats
    boxes[scene_of, slot] = flat_boxes
    return torch.from_numpy(out), torch.from_numpy(boxes)
