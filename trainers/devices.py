"""The device a trial trains on when Ray placed it, and its share of a GPU's memory.

Ray gives a trial with ``resources.gpu`` the ids of its GPUs (``ray.get_gpu_ids()``) and sets
``CUDA_VISIBLE_DEVICES`` to them, so inside the trial its first GPU is ``cuda:0``. Two rules
follow:

- a trial Ray assigned a GPU trains on it: when CUDA cannot use that GPU the trial fails with
  the reason (:class:`GpuUnavailable`) instead of training on the CPU unseen;
- a fractional trial (``resources.gpu: 0.5``) shares the card: its memory check plans for its
  share of the card, not for all the memory that is free when it starts.

The functions take their CUDA probes as arguments, so they are tested without CUDA.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["GpuUnavailable", "Placement", "gpu_budget", "probe_cuda", "trial_device"]


class GpuUnavailable(RuntimeError):
    """Ray assigned the trial a GPU that CUDA cannot use (the message is the one-line reason)."""


@dataclass(frozen=True)
class Placement:
    """What Ray gave one trial: its GPU ids (empty: none) and the share of each it holds."""

    gpu_ids: tuple[str, ...] = ()
    fraction: float = 1.0  # resources.gpu below 1; 1 for whole GPUs
    visible: str | None = field(default=None)  # CUDA_VISIBLE_DEVICES as the trial saw it

    @classmethod
    def from_ray(cls, gpu: float, gpu_ids: Sequence[object],
                 env: Mapping[str, str] = os.environ) -> Placement:
        """The placement of a trial that asked for ``gpu`` GPUs and got ``gpu_ids``."""
        return cls(tuple(str(i) for i in gpu_ids), min(1.0, gpu) if gpu > 0 else 1.0,
                   env.get("CUDA_VISIBLE_DEVICES"))


def probe_cuda() -> str | None:
    """Why CUDA cannot be used in this process (one line), or None when it can.

    ``torch.cuda.is_available()`` only answers False; ``torch.cuda.init()`` raises with the
    cause (no driver, a CPU-only build of torch, no visible device).
    """
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    try:
        torch.cuda.init()
    except (RuntimeError, AssertionError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return lines[0] if lines else type(exc).__name__
    return "torch.cuda.is_available() is False"


def trial_device(requested: str, placement: Placement,
                 probe: Callable[[], str | None] = probe_cuda,
                 device_count: Callable[[], int] | None = None) -> str:
    """The device name a trial trains on, from its training key ``device`` and its placement.

    Without a GPU the trial keeps ``requested`` (``auto`` picks CUDA when present, else the
    CPU). With one, ``auto`` and ``cuda`` become ``cuda:0``: Ray's ``CUDA_VISIBLE_DEVICES``
    makes the first assigned GPU index 0; ``cuda:N`` must be one of the trial's GPUs; ``cpu`` or
    ``mps`` are kept, as asked for.

    Raises:
        GpuUnavailable: a GPU is assigned but ``probe`` says why CUDA cannot use it, or
            ``cuda:N`` is past the GPUs Ray assigned.
    """
    if not placement.gpu_ids or requested in ("cpu", "mps"):
        return requested
    ids = ", ".join(placement.gpu_ids)
    noun = "GPU" if len(placement.gpu_ids) == 1 else "GPUs"
    why = probe()
    if why is not None:
        raise GpuUnavailable(f"Ray assigned {noun} {ids} (CUDA_VISIBLE_DEVICES="
                             f"{placement.visible!r}) but CUDA cannot use it: {why}")
    _, _, index = requested.partition(":")
    count = len(placement.gpu_ids) if device_count is None else device_count()
    if int(index or 0) >= min(count, len(placement.gpu_ids)):
        raise GpuUnavailable(f"Training key `device` is {requested!r}, but Ray assigned the "
                             f"trial {noun} {ids}, seen as cuda:0 to "
                             f"cuda:{len(placement.gpu_ids) - 1}.")
    return f"cuda:{int(index or 0)}"


def gpu_budget(free: int, total: int, fraction: float, context: int = 0) -> int:
    """Bytes a trial holding ``fraction`` of a GPU may plan for: ``min(free, total * fraction -
    context)``.

    The share of the card, ``total * fraction``, is what Ray promised the trial: its neighbours
    are entitled to theirs, however much is free when it starts. ``context`` is what the trial's
    process holds outside PyTorch's allocator (its CUDA context, ``nas.memory.
    CUDA_CONTEXT_BYTES``): it counts against the share, and is already out of ``free``, which is
    read after the process started CUDA. The budget is capped by ``free``, since memory the
    neighbours (or another program) already hold cannot be had. (``free * fraction`` would count
    the neighbours' allocations twice: ``free`` already excludes them.)
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"a GPU fraction is in (0, 1], not {fraction!r}")
    return max(0, min(free, int(total * fraction) - context))
