"""``digits``: scikit-learn's bundled handwritten digits, a real image task with no download.

``sklearn.datasets.load_digits`` holds 1,797 grayscale 8x8 images of the digits 0-9 (UCI
optdigits), shipped inside scikit-learn. They are upsampled bilinearly to ``image_size``
(default 32, so ViT/Swin patches of 4, 8 or 16 divide it) and normalised with the training
split's mean and std. ``in_chans`` is 1 by default (the data is grayscale); 3 repeats the
channel for networks that expect RGB. The train/val split is stratified by class and
deterministic from ``seed``. Chance is the accuracy of always answering the most frequent
training class (about 0.10).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nas.errors import ConfigError
from nas.tasks import TaskGeometry
from trainers.tasks.data import TaskData, TensorDataset, majority_chance

__all__ = ["IMAGES", "build", "generated_bytes"]

IMAGES = 1797  # in sklearn's bundled copy


def generated_bytes(options: Mapping[str, Any]) -> tuple[int, str]:
    """Bytes ``build`` holds at its peak for ``options`` (checked before it runs), and how.

    The upsampled float32 images exist twice with one channel (interpolated, normalised), then
    twice with ``in_chans`` (expanded, split).
    """
    size, chans = options["image_size"], options["in_chans"]
    return (IMAGES * size * size * 4 * (2 + 2 * chans),
            f"{IMAGES} images x image_size^2 x 4 B x (2 + 2 x in_chans) with "
            f"image_size={size}, in_chans={chans}")


def build(
    *, seed: int = 0, image_size: int = 32, in_chans: int = 1, val_fraction: float = 0.2
) -> TaskData:
    """The ``digits`` task."""
    if in_chans not in (1, 3):
        raise ConfigError(f"`in_chans` must be 1 or 3, but got in_chans={in_chans}.")
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"`0 < val_fraction < 1` must hold, but got val_fraction={val_fraction}.")
    # Imported here: scikit-learn takes about a second to import, and a driver that checks the
    # task without its data (a study with its own evaluator) never builds it.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.asarray(digits.images, dtype=np.float32)  # (1797, 8, 8), values 0..16
    labels = np.asarray(digits.target, dtype=np.int64)
    train_idx, val_idx = train_test_split(
        np.arange(len(labels)), test_size=val_fraction, random_state=seed, stratify=labels
    )
    x = F.interpolate(torch.from_numpy(images)[:, None], size=(image_size, image_size),
                      mode="bilinear", align_corners=False)  # (N, 1, S, S)
    mean, std = x[train_idx].mean(), x[train_idx].std()
    x = ((x - mean) / std).expand(-1, in_chans, -1, -1).contiguous()
    y = torch.from_numpy(labels)
    train_i, val_i = torch.from_numpy(train_idx), torch.from_numpy(val_idx)
    geometry = TaskGeometry("digits", "image", 10, image_size=image_size, in_chans=in_chans)
    return TaskData(
        "digits", geometry, TensorDataset(images=x[train_i], label=y[train_i]),
        TensorDataset(images=x[val_i], label=y[val_i]), "accuracy",
        majority_chance(y[train_i], y[val_i]),
    )
