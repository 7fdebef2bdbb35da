"""``cifar``: image classification from CIFAR-10 or CIFAR-100 files already on disk.

Their "python version" layout (never downloaded): ``root`` is, or contains,
``cifar-10-batches-py`` (pickles ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``,
labels under ``labels``) or ``cifar-100-python`` (``train`` and ``test``, labels under
``fine_labels``); each pickle holds ``data``, uint8 (N, 3072) in channel-major order. Images
are normalised with the training split's per-channel mean and std, and resized when
``image_size`` is not 32. The test batch is the validation split. The pickles are read by a
restricted unpickler that admits only what CIFAR files hold (a dict of lists, bytes, numbers
and numpy uint8 arrays): a pickle naming anything else, which could run code when
loaded, is refused.

Chance is the accuracy of always answering the most frequent training class. (The
``image-folder`` task is :mod:`trainers.tasks.image_folder`.)
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from nas.errors import NasError
from nas.tasks import TaskGeometry
from trainers.tasks.data import Item, TaskData, TaskDataset, majority_chance

__all__ = ["build_cifar"]

class _CifarDataset(TaskDataset):
    """CIFAR images kept as uint8; normalised (and resized) per item."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, mean: torch.Tensor,
                 std: torch.Tensor, image_size: int) -> None:
        self.images, self.labels, self.mean, self.std = images, labels, mean, std
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Item:
        image = (self.images[index].float() - self.mean) / self.std  # (3, 32, 32)
        if self.image_size != image.shape[-1]:
            image = F.interpolate(image[None], size=(self.image_size, self.image_size),
                                  mode="bilinear", align_corners=False)[0]
        return {"images": image, "label": self.labels[index]}


def _latin1(text: object, encoding: object = "latin1") -> bytes:
    """``_codecs.encode`` as pickle protocol 2 uses it for ``bytes``: latin-1 text only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode applied to anything but latin-1 text")
    return text.encode("latin-1")


def _empty_bytes(*args: object) -> bytes:
    """``bytes`` as pickle protocol 2 uses it: ``bytes()`` for an empty string, nothing else."""
    if args:
        raise pickle.UnpicklingError("bytes called with arguments")
    return b""


def _numpy_core(name: str) -> Any:
    """``numpy._core.<name>`` (numpy >= 1.26), else ``numpy.core.<name>``."""
    try:
        return importlib.import_module(f"numpy._core.{name}")
    except ImportError:
        return importlib.import_module(f"numpy.core.{name}")


def _cifar_globals() -> dict[tuple[str, str], Any]:
    """Every global a CIFAR pickle may name, by (module, name) as it is written in the file.

    The files were written by Python 2 with numpy 1.x (``numpy.core.multiarray._reconstruct``,
    ``numpy.ndarray``, ``numpy.dtype``); copies written again by Python 3 also name
    ``numpy._core`` (numpy 2), ``_frombuffer`` (protocol 5), and ``_codecs.encode`` and
    ``bytes`` (protocol 2's spelling of bytes). Dicts, lists, strings and numbers need none.
    """
    import numpy as np

    reconstruct = _numpy_core("multiarray")._reconstruct
    frombuffer = _numpy_core("numeric")._frombuffer
    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray,
                                           ("numpy", "dtype"): np.dtype,
                                           ("_codecs", "encode"): _latin1,
                                           ("__builtin__", "bytes"): _empty_bytes,
                                           ("builtins", "bytes"): _empty_bytes}
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = reconstruct
        allowed[(f"{core}.numeric", "_frombuffer")] = frombuffer
    return allowed


class _CifarUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals of ``_cifar_globals``: a crafted file cannot
    name ``os.system``, ``builtins.eval`` or any other callable to run while loading."""

    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file, encoding="bytes")
        self.path, self.allowed = path, _cifar_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get((module, name))
        if found is None:
            what = ascii(f"{module}.{name}")[1:-1][:120]  # from the file: one line, bounded
            raise NasError(
                f"CIFAR batch '{self.path}' holds a pickled {what}, which a CIFAR file never "
                "does (it holds a dict of lists, bytes and numpy arrays); refusing to load it "
                "(it could run code)."
            )
        return found


def _unpickle(path: Path, label_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 3, 32, 32) uint8 and labels (N,) of one CIFAR pickle."""
    if not path.is_file():
        raise NasError(f"CIFAR batch '{path}' does not exist.")
    try:
        with path.open("rb") as f:
            batch: Any = _CifarUnpickler(f, path).load()
        data, labels = batch[b"data"], batch[label_key.encode()]
        images = torch.as_tensor(data, dtype=torch.uint8).reshape(-1, 3, 32, 32)
        targets = torch.as_tensor(labels, dtype=torch.long).reshape(-1)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError, RuntimeError,
            IndexError, AttributeError, OverflowError, MemoryError) as exc:
        raise NasError(f"CIFAR batch '{path}' is not a CIFAR python pickle "
                       f"({type(exc).__name__}).") from None
    if len(targets) != len(images):
        raise NasError(f"CIFAR batch '{path}' has {len(images)} images but {len(targets)} labels.")
    if not len(images):
        raise NasError(f"CIFAR batch '{path}' holds no images.")
    return images, targets


def _cifar_files(root: Path) -> tuple[list[Path], Path, str, int]:
    """The training pickles, the test pickle, the label key and the class count under ``root``."""
    for base in (root / "cifar-10-batches-py", root / "cifar-100-python", root):
        if not base.is_dir():
            continue
        if base.name == "cifar-10-batches-py" or (base / "data_batch_1").is_file():
            batches = [base / f"data_batch_{i}" for i in range(1, 6)]
            return batches, base / "test_batch", "labels", 10
        if base.name == "cifar-100-python" or (base / "train").is_file():  # not a folder
            return [base / "train"], base / "test", "fine_labels", 100
    raise NasError(f"No CIFAR data under '{root}': expected cifar-10-batches-py/ or "
                   "cifar-100-python/ (the python version), which is never downloaded.")


def build_cifar(*, root: str, image_size: int = 32) -> TaskData:
    """The ``cifar`` task (CIFAR-10 or CIFAR-100, whichever ``root`` holds)."""
    train_files, test_file, label_key, classes = _cifar_files(Path(root).expanduser())
    parts = [_unpickle(p, label_key) for p in train_files]
    train_x, train_y = torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
    val_x, val_y = _unpickle(test_file, label_key)
    mean = train_x.float().mean(dim=(0, 2, 3))[:, None, None]  # (3, 1, 1)
    std = train_x.float().std(dim=(0, 2, 3))[:, None, None].clamp(min=1e-3)
    geometry = TaskGeometry("cifar", "image", classes, image_size=image_size, in_chans=3)
    return TaskData(
        "cifar", geometry, _CifarDataset(train_x, train_y, mean, std, image_size),
        _CifarDataset(val_x, val_y, mean, std, image_size), "accuracy",
        majority_chance(train_y, val_y),
    )
