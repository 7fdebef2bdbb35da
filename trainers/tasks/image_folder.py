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
files, which each process would list again. The file names and classes are written as
memory-mapped arrays, checked against every folder of the listing (a file added, removed or
renamed changes its folder).
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
from trainers.tasks.cache import (
    Built,
    Prepared,
    StringArray,
    encode_strings,
    open_or_build,
    settled_stat,
)
from trainers.tasks.data import Item, TaskData, TaskDataset, majority_chance

__all__ = ["VERSION", "build", "prepare"]

#: What the prepared arrays mean; raised whenever the listing below changes what it writes.
VERSION = 1
_IMAGENET_MEAN, _IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_SPLITS = ("train", "val")


def _walk(folder: Path, sources: list[list[Any]]) -> list[tuple[str, list[str]]]:
    """``os.walk(folder, followlinks=True)``'s folders and their file names, each folder's
    ``settled_stat`` taken before it is listed."""
    found = []
    pending = [str(folder)]
    while pending:
        top = pending.pop()
        sources.append(settled_stat(Path(top)))
        files: list[str] = []
        subfolders: list[str] = []
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    (subfolders if entry.is_dir() else files).append(entry.name)
        except OSError:  # os.walk skips a folder it cannot list
            continue
        found.append((top, files))
        pending += [os.path.join(top, name) for name in subfolders]
    return found


def _listing(split: Path, sources: list[list[Any]]) -> tuple[list[str], list[str], list[int]]:
    """ImageFolder's classes, images (relative to ``split``) and their class indices."""
    if not split.is_dir():
        raise NasError(f"Image folder '{split}' does not exist.")
    sources.append(settled_stat(split))
    with os.scandir(split) as entries:
        classes = sorted(e.name for e in entries if e.is_dir())
    names: list[str] = []
    targets: list[int] = []
    for index, cls in enumerate(classes):
        found: list[str] = []
        for top, files in sorted(_walk(split / cls, sources)):
            prefix = os.path.relpath(top, split) + os.sep
            found += [prefix + f for f in sorted(files) if f.lower().endswith(IMG_EXTENSIONS)]
        if not found:  # ImageFolder refuses a class without images, as it does no class
            classes = []
            break
        names += found
        targets += [index] * len(found)
    if not classes:
        raise NasError(f"Image folder '{split}' holds no class folder with .png/.jpg images; "
                       "expected <split>/<class>/<image>.")
    return classes, names, targets


def _parse(base: Path, train: str, val: str) -> Built:
    sources: list[list[Any]] = []
    (classes, train_names, train_y), (val_classes, val_names, val_y) = (
        _listing(base / split, sources) for split in (train, val))
    if classes != val_classes:
        raise NasError(
            f"Image folder '{base / val}' has classes {val_classes}, but '{base / train}' "
            f"has {classes}; both splits need the same class folders."
        )
    train_targets, val_targets = (np.asarray(y, dtype=np.int32) for y in (train_y, val_y))
    chance = majority_chance(torch.from_numpy(train_targets.astype(np.int64)),
                             torch.from_numpy(val_targets.astype(np.int64)))
    arrays = {**encode_strings("classes", classes), **encode_strings("train.images", train_names),
              **encode_strings("val.images", val_names), "train.targets": train_targets,
              "val.targets": val_targets}
    return Built(arrays, {"classes": len(classes), "chance": chance, "train": len(train_names),
                          "val": len(val_names)}, sources)


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
