"""Reading the user's files: paths, JSON, and per-image region features (``.npz``).

Every failure a user can cause (a missing file, malformed JSON, a feature of the wrong size)
raises :class:`~nas.errors.NasError` with one line that names the file.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas.errors import NasError, first_line

__all__ = ["RegionFeatures", "feature_files", "feature_index", "json_records", "read_json",
           "resolve"]


def resolve(root: str | Path | None, path: str | Path) -> Path:
    """``path`` itself when absolute or when there is no ``root``, else ``root / path``."""
    p = Path(path).expanduser()
    return p if root is None or p.is_absolute() else Path(root).expanduser() / p


def read_json(path: Path, what: str) -> Any:
    """The parsed JSON of ``path``; ``what`` names the file's role in messages."""
    if not path.is_file():
        raise NasError(f"{what} '{path}' does not exist.")
    try:
        with path.open("rb") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NasError(f"{what} '{path}' is not valid JSON: {first_line(exc)}") from None


def json_records(data: Any, key: str, path: Path, what: str, fields: Iterable[str]) -> list[Any]:
    """``data[key]``: a list of objects that each hold ``fields``; a clear error otherwise."""
    records = data.get(key) if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise NasError(f"{what} '{path}' must hold an object with a list under {key!r}.")
    needed = tuple(fields)
    for i, record in enumerate(records):
        missing = [f for f in needed if not isinstance(record, dict) or f not in record]
        if missing:
            raise NasError(f"{what} '{path}': entry {i} of {key!r} lacks {missing[0]!r}.")
    return records


_IMAGE_ID = re.compile(r"(\d+)(?:\.(?:jpg|jpeg|png))?\.npz$", re.IGNORECASE)


def feature_files(directory: Path) -> dict[int, str]:
    """The ``.npz`` files of a region feature directory by image id (see :class:`RegionFeatures`
    for the names accepted)."""
    if not directory.is_dir():
        raise NasError(f"Region feature directory '{directory}' does not exist.")
    files: dict[int, str] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            match = _IMAGE_ID.search(entry.name)
            if match:
                files[int(match.group(1))] = entry.name
    return files


def feature_index(files: Mapping[int, str], image_ids: Iterable[int], directory: Path,
                  needed_by: Path) -> tuple[list[str], np.ndarray]:
    """The file names the images need (each once, in first use order) and each image's index
    into them; raises naming the first image without a file."""
    names: list[str] = []
    where: dict[int, int] = {}
    index = []
    for image_id in image_ids:
        if image_id not in where:
            if image_id not in files:
                raise NasError(
                    f"Region feature directory '{directory}' has no file for image "
                    f"{image_id} (listed in '{needed_by}')."
                )
            where[image_id] = len(names)
            names.append(files[image_id])
        index.append(where[image_id])
    return names, np.asarray(index, dtype=np.int32)


class RegionFeatures:
    """Region features of images, one ``.npz`` per image in ``directory``, by index into
    ``names`` (a list, or a memory-mapped ``StringArray``).

    A file is named ``<image_id>.npz`` or after its image (``COCO_train2014_000000000009.jpg.npz``):
    the digits before the extension are the id. It holds ``x``, the features, (R, D) or, as
    OpenVQA's extracted files store them, (D, R) (the orientation is read from the number of
    boxes); ``bbox`` (R, 4) pixel boxes x0, y0, x1, y1; and optionally ``image_w``, ``image_h``.
    Boxes are divided by the image size, or without it by the largest box corner, and clipped
    to [0, 1]. The first ``max_regions`` regions are kept; fewer are padded with zero rows.
    """

    def __init__(self, directory: Path, names: Sequence[str], *, region_dim: int,
                 max_regions: int) -> None:
        self.directory, self.names = directory, names
        self.region_dim, self.max_regions = region_dim, max_regions

    def check_first(self) -> None:
        """Load the first file, so a wrong ``region_dim`` or an unreadable file is found now."""
        if len(self.names):
            self.load(0)

    def load(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Regions (max_regions, region_dim) and normalised boxes (max_regions, 4) of the image
        of ``names[index]``."""
        path = self.directory / self.names[index]
        try:
            with np.load(path, allow_pickle=False) as f:
                x, bbox = np.asarray(f["x"], np.float32), np.asarray(f["bbox"], np.float32)
                size = (float(f["image_w"]), float(f["image_h"])) if "image_w" in f else None
        except KeyError as exc:
            raise NasError(f"Region features '{path}' lack the array {exc.args[0]!r}.") from None
        except (OSError, ValueError, TypeError, zipfile.BadZipFile) as exc:
            raise NasError(f"Region features '{path}' are not a readable .npz file "
                           f"({type(exc).__name__}).") from None
        if bbox.ndim != 2 or bbox.shape[1] != 4 or x.ndim != 2 or bbox.shape[0] not in x.shape:
            raise NasError(
                f"Region features '{path}' must hold x (R, D) and bbox (R, 4), but hold x "
                f"{x.shape} and bbox {bbox.shape}."
            )
        if x.shape[0] != bbox.shape[0]:
            x = x.T  # OpenVQA layout (D, R)
        if x.shape[1] != self.region_dim:
            raise NasError(
                f"Region features '{path}' are {x.shape[1]}-d, but the task expects "
                f"region_dim={self.region_dim}; set region_dim to match the files."
            )
        scale = size if size is not None else (bbox[:, 2].max(initial=1.0),
                                               bbox[:, 3].max(initial=1.0))
        boxes = np.clip(bbox / np.asarray([*scale, *scale], np.float32), 0.0, 1.0)
        r = min(len(x), self.max_regions)
        regions = torch.zeros(self.max_regions, self.region_dim)
        out_boxes = torch.zeros(self.max_regions, 4)
        regions[:r] = torch.from_numpy(x[:r])
        out_boxes[:r] = torch.from_numpy(boxes[:r])
        return regions, out_boxes
