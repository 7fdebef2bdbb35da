"""``image-folder``: image classification over torchvision's ImageFolder layout.

One folder per class and split::

    root/train/<class>/*.png|jpg
    root/val/<class>/*.png|jpg

The listing is ImageFolder's: classes are the sorted sub-folders of each split, images every
file below a class folder (sub-folders included, symbolic links followed) with an image
extension (``torchvision.datasets.folder.IMG_EXTENSIONS``), in sorted order; a class folder
without an image is an error. Both splits must have the same classes. Images are read as
ImageFolder reads them (RGB), converted to grayscale with ``in_chans=1``, resized to
``image_size`` squared and normalised with the ImageNet mean and std. Chance is the accuracy of
always answering the most frequent training class.

Listed once per node (:mod:`trainers.tasks.cache`): an ImageNet-size folder holds 1.28 million
files, which each process would list again. The class folders are listed by several processes at
once (:func:`trainers.tasks._files.list_classes`, one per CPU). The file names and classes are
written as memory-mapped arrays, checked against every folder of the listing (a file added,
removed or renamed changes its folder).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchvision import transforms
from torchvision.datasets.folder import IMG_EXTENSIONS, default_loader

from nas.errors import ConfigError, NasError
from nas.tasks import TaskGeometry
from trainers.tasks._files import list_classes, settled_stat
from trainers.tasks.cache import (
    Built,
    Prepared,
    StringArray,
    encode_strings,
    open_or_build,
    string_arrays,
)
from trainers.tasks.data import Item, TaskData, TaskDataset, majority_chance

__all__ = ["VERSION", "build", "prepare"]

#: What the prepared arrays mean; raised whenever the listing below changes what it writes.
VERSION = 1
_IMAGENET_MEAN, _IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_SPLITS = ("train", "val")


def _classes(split: Path, sources: list[list[Any]]) -> list[str]:
    """ImageFolder's classes of ``split``: its sub-folders, sorted."""
    if not split.is_dir():
        raise NasError(f"Image folder '{split}' does not exist.")
    sources.append(settled_stat(split))
    with os.scandir(split) as entries:
        return sorted(e.name for e in entries if e.is_dir())


def _parse(base: Path, train: str, val: str) -> Built:
    sources: list[list[Any]] = []
    splits = [(base / folder, _classes(base / folder, sources)) for folder in (train, val)]
    listed = list_classes(splits, IMG_EXTENSIONS)
    for (split, classes), images in zip(splits, listed, strict=True):
        sources += images.sources
        # ImageFolder refuses a class without images, as it does no class
        if not classes or not all(images.counts):
            raise NasError(f"Image folder '{split}' holds no class folder with .png/.jpg "
                           "images; expected <split>/<class>/<image>.")
    (train_split, classes), (val_split, val_classes) = splits
    if classes != val_classes:
        raise NasError(
            f"Image folder '{val_split}' has classes {val_classes}, but '{train_split}' "
            f"has {classes}; both splits need the same class folders."
        )
    train_targets, val_targets = (
        np.repeat(np.arange(len(classes), dtype=np.int32), images.counts) for images in listed)
    chance = majority_chance(torch.from_numpy(train_targets.astype(np.int64)),
                             torch.from_numpy(val_targets.astype(np.int64)))
    arrays = {**encode_strings("classes", classes),
              **string_arrays("train.images", listed[0].text, listed[0].lengths),
              **string_arrays("val.images", listed[1].text, listed[1].lengths),
              "train.targets": train_targets, "val.targets": val_targets}
    return Built(arrays, {"classes": len(classes), "chance": chance,
                          "train": len(train_targets), "val": len(val_targets)}, sources)


def prepare(options: Mapping[str, Any]) -> Prepared:
    """The listing's prepared arrays for ``options`` (all of :func:`build`'s), made on first use
    on this node and opened after (see :mod:`trainers.tasks.cache`)."""
    base = Path(options["root"]).expanduser().resolve()
    key = {"root": str(base), "train": options["train"], "val": options["val"]}
    return open_or_build("image-folder", key, [base],
                         lambda: _parse(base, options["train"], options["val"]),
                         version=VERSION)


class _ListedImages(TaskDataset):
    """The images of one split's listing, read and transformed per access."""

    def __init__(self, folder: Path, names: StringArray, targets: np.ndarray,
                 transform: transforms.Compose) -> None:
        self.folder, self.names, self.targets, self.transform = folder, names, targets, transform

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> Item:
        image = self.transform(default_loader(str(self.folder / self.names[index])))
        return {"images": image, "label": torch.tensor(int(self.targets[index]))}


def _rgb(image: Any) -> Any:
    return image.convert("RGB")


def build(
    *, root: str, image_size: int = 224, in_chans: int = 3, train: str = "train",
    val: str = "val",
) -> TaskData:
    """The ``image-folder`` task over ``root/<train>`` and ``root/<val>``."""
    if in_chans not in (1, 3):
        raise ConfigError(f"`in_chans` must be 1 or 3, but got in_chans={in_chans}.")
    options = {"root": root, "train": train, "val": val}
    prepared = prepare(options)
    mean, std = (_IMAGENET_MEAN, _IMAGENET_STD) if in_chans == 3 else ((0.449,), (0.226,))
    transform = transforms.Compose([
        transforms.Grayscale(1) if in_chans == 1 else transforms.Lambda(_rgb),
        transforms.Resize((image_size, image_size)),
        transforms.ToTensor(),
        transforms.Normalize(mean, std),
    ])
    base = Path(root).expanduser()
    train_set, val_set = (
        _ListedImages(base / folder, prepared.strings(f"{split}.images"),
                      prepared.arrays[f"{split}.targets"], transform)
        for split, folder in (("train", train), ("val", val)))
    geometry = TaskGeometry("image-folder", "image", int(prepared.meta["classes"]),
                            image_size=image_size, in_chans=in_chans)
    return TaskData("image-folder", geometry, train_set, val_set, "accuracy",
                    float(prepared.meta["chance"]))
