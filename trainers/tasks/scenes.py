"""CLEVR-like scenes and their noisy region features, shared by the synthetic proxy tasks.

A scene holds 3-8 objects, each with a colour, shape, size and material and a position on a
unit table. Its "detector output" is one region per object: a code of the attributes (one-hot
each) and of the box (centre, width, height), projected to ``region_dim`` by a fixed random
matrix, plus Gaussian noise; rows past the last object are all-zero padding. So a model has
to read attributes back out of mixed, noisy features, like a VQA model reading a detector's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "COLORS",
    "MATERIALS",
    "SHAPES",
    "SIZES",
    "Scene",
    "region_tensors",
    "sample_scene",
    "scene_projection",
]

COLORS = ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")
SHAPES = ("cube", "sphere", "cylinder")
SIZES = ("small", "large")
MATERIALS = ("rubber", "metal")
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "size": SIZES, "color": COLORS, "material": MATERIALS, "shape": SHAPES,
}
"""Attribute name -> its values, in the order adjectives are spoken ("large red metal cube")."""

_CODE_ORDER = (("color", COLORS), ("shape", SHAPES), ("size", SIZES), ("material", MATERIALS))
_CODE_DIM = sum(len(values) for _, values in _CODE_ORDER) + 4
_HALF_SIDE = (0.05, 0.09)  # half the box side of a small / large object
_MIN_GAP = 0.06  # objects' centres are at least this far apart, so boxes rarely coincide


@dataclass(frozen=True)
class Scene:
    """Objects of one scene: their attribute value indices and boxes (n, 4) in [0, 1].

    ``attributes`` maps each attribute name of :data:`ATTRIBUTES` to one value index per object
    (plain tuples: question generation looks at single objects far more than at arrays).
    """

    attributes: dict[str, tuple[int, ...]]
    boxes: np.ndarray

    def __len__(self) -> int:
        return len(self.boxes)

    def attribute(self, name: str) -> tuple[int, ...]:
        """The value indices of attribute ``name`` (``color``, ``shape``, ``size``, ``material``)."""
        return self.attributes[name]

    @property
    def centre_x(self) -> list[float]:
        return ((self.boxes[:, 0] + self.boxes[:, 2]) / 2).tolist()  # type: ignore[no-any-return]

    @property
    def centre_y(self) -> list[float]:
        return ((self.boxes[:, 1] + self.boxes[:, 3]) / 2).tolist()  # type: ignore[no-any-return]


def sample_scene(rng: np.random.Generator, min_objects: int = 3, max_objects: int = 8) -> Scene:
    """A random scene of ``min_objects..max_objects`` objects with well-separated centres."""
    n = int(rng.integers(min_objects, max_objects + 1))
    centres: list[tuple[float, float]] = []
    while len(centres) < n:  # one batch of candidates nearly always suffices
        for x, y in rng.uniform(0.1, 0.9, size=(2 * max_objects, 2)).tolist():
            if len(centres) < n and all(abs(x - a) + abs(y - b) >= _MIN_GAP for a, b in centres):
                centres.append((x, y))
    uniform = rng.random((len(ATTRIBUTES), n)).tolist()
    attributes = {
        name: tuple(int(u * len(options)) for u in row)
        for (name, options), row in zip(ATTRIBUTES.items(), uniform, strict=True)
    }
    half = np.asarray(_HALF_SIDE)[list(attributes["size"])] * rng.uniform(0.85, 1.15, size=n)
    xy = np.asarray(centres)
    boxes = np.clip(np.concatenate([xy - half[:, None], xy + half[:, None]], axis=1), 0.0, 1.0)
    return Scene(attributes, boxes)


def scene_projection(rng: np.random.Generator, region_dim: int) -> np.ndarray:
    """The fixed random matrix (code dim, region_dim) that turns codes into region features."""
    return rng.normal(0.0, 1.0 / np.sqrt(4.0), size=(_CODE_DIM, region_dim))


def _codes(scene: Scene) -> np.ndarray:
    """(n, code dim): one-hot colour, shape, size, material, then centre and extent."""
    parts = [np.eye(len(values))[list(scene.attribute(name))] for name, values in _CODE_ORDER]
    b = scene.boxes
    geometry = np.stack(
        [(b[:, 0] + b[:, 2] - 1) * 2, (b[:, 1] + b[:, 3] - 1) * 2,
         (b[:, 2] - b[:, 0]) * 10, (b[:, 3] - b[:, 1]) * 10], axis=1,
    )
    return np.concatenate([*parts, geometry], axis=1)


def region_tensors(
    scenes: list[Scene],
    projection: np.ndarray,
    rng: np.random.Generator,
    *,
    regions: int,
    noise: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Region features (N, regions, region_dim) and boxes (N, regions, 4) of ``scenes``.

    Objects fill the first rows in a random order; the remaining rows are all-zero padding.
    """
    region_dim = projection.shape[1]
    feats = np.zeros((len(scenes), regions, region_dim), dtype=np.float32)
    boxes = np.zeros((len(scenes), regions, 4), dtype=np.float32)
    for i, scene in enumerate(scenes):
        n = len(scene)
        order = rng.permutation(n)
        x = _codes(scene)[order] @ projection + rng.normal(0.0, noise, size=(n, region_dim))
        feats[i, :n] = x
        boxes[i, :n] = scene.boxes[order]
    return torch.from_numpy(feats), torch.from_numpy(boxes)
