"""A trial's checkpoint, as named in the database: confined, and checked to be one of ours.

The checkpoint path is a trial attribute, and anything in the database may have been written by
another tool: a path to ``/proc/self/environ`` or ``~/.ssh/id_rsa`` must never be copied into an
export or served by the dashboard. A stored path is accepted only when it is

- absolute, without ``..``, and inside the study's own checkpoint folder (its study file's
  ``checkpoints`` key, where each trial saves into ``<study>/trial-<N>/``; a reused result
  names another trial's, a copied study its source's), named ``<arch_id>.pt`` after the
  trial's architecture, as ``trainers.loop.save_checkpoint`` names it;
- a regular file that is not a symbolic link, whose real path is still inside the folder's real
  path (a link in the folder leading out is refused);
- a checkpoint of ours: it loads with ``torch.load(weights_only=True)`` (no pickled code runs)
  and holds the trial's own architecture and a state dict of tensors.

The bytes checked are the bytes copied: the file is read once.
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from typing import Any

from nas.errors import NasError
from studies.store import StoredValueError, TrialKey

__all__ = ["MAX_CHECKPOINT_BYTES", "Checkpoint", "read_checkpoint"]

#: The largest checkpoint an export copies (a ViT-B is about 350 MB).
MAX_CHECKPOINT_BYTES = 8 << 30


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file read and checked: its bytes and what ``torch.load`` made of them."""

    path: str
    data: bytes
    blob: dict[str, Any]


def _refuse(study: str, number: int, problem: str) -> StoredValueError:
    return StoredValueError(study, TrialKey.CHECKPOINT, problem, trial=number)


def read_checkpoint(stored: str | None, folder: str | None, *, study: str, number: int,
                    arch_id: str) -> Checkpoint | None:
    """The checkpoint trial ``number`` of ``study`` stored at ``stored``, checked as the module
    says; ``None`` when the trial kept none or the file is not on this machine (a study run on
    a cluster). ``StoredValueError`` for a path or a file that is not the trial's checkpoint."""
    if stored is None:
        return None
    if folder is None or not os.path.isabs(folder):
        raise _refuse(study, number, "names a file, but the study keeps no checkpoint folder "
                                     "(its `checkpoints` key); only files there are read")
    if not os.path.isabs(stored) or ".." in stored.replace("\\", "/").split("/"):
        raise _refuse(study, number, "must be an absolute path without '..'")
    path, folder = os.path.normpath(stored), os.path.normpath(folder)
    if (path == folder or os.path.commonpath([path, folder]) != folder
            or os.path.basename(path) != f"{arch_id}.pt"):
        raise _refuse(study, number, f"must be a file {arch_id}.pt inside the study's "
                                     f"checkpoint folder {folder!a}")
    try:
        info = os.lstat(path)
    except OSError:
        return None  # not here (moved, or written on another machine of the cluster)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(study, number, "names a symbolic link or something else than a regular "
                                     "file")
    real_folder, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([real, real_folder]) != real_folder:
        raise _refuse(study, number, "leads out of the study's checkpoint folder")
    if info.st_size > MAX_CHECKPOINT_BYTES:
        raise _refuse(study, number, f"names a file larger than {MAX_CHECKPOINT_BYTES:,} bytes")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise _refuse(study, number, "names something else than a regular file")
            data = f.read(MAX_CHECKPOINT_BYTES + 1)
    except OSError as exc:
        raise NasError(f"Cannot read the checkpoint {path!a} of trial {number} of study "
                       f"{study!a}: {exc.strerror}.") from None
    return Checkpoint(path, data, _checked(data, study=study, number=number, arch_id=arch_id))


def _checked(data: bytes, *, study: str, number: int, arch_id: str) -> dict[str, Any]:
    import torch

    try:
        blob = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception:
        raise _refuse(study, number, "names a file that is not a checkpoint (torch.load with "
                                     "weights_only=True cannot read it)") from None
    state = blob.get("state_dict") if isinstance(blob, dict) else None
    if (not isinstance(blob, dict) or blob.get("arch_id") != arch_id
            or not isinstance(blob.get("arch"), dict) or not isinstance(state, dict)
            or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                       for k, v in state.items())):
        raise _refuse(study, number, "names a file that is not this trial's checkpoint (no "
                                     f"state dict of architecture {arch_id})")
    return blob
