"""Training memory, estimated on the ``meta`` device before a model is allocated.

The rule (documented here, used by ``trainers.train`` and by the study engine before a trial):

- **parameters**: every unique parameter x 4 bytes (float32) x 4: the weights, their gradients
  and Adam's two moment buffers; plus the model's buffers (e.g. Swin's attention masks);
- **training activations**: one training-mode forward pass over one sample on ``meta`` records,
  with ``torch.autograd.graph.saved_tensors_hooks``, every tensor autograd keeps for the backward
  pass (parameters and repeated saves of one tensor counted once, not at all for parameters);
  x 2 for what the backward pass allocates besides (activation gradients, transients, allocator
  slack), x ``batch_size``;
- **evaluation**: without a graph only a few tensors are alive at once: the largest tensor one
  operator allocates for one sample x 3 (an operator's inputs and its output) x
  ``eval_batch_size``;
- the estimate is parameters + buffers + the inputs of one batch + the larger of the two
  activation figures.

Measured on CPU (DeiT-Ti and MCAN-small at batch 16, Swin-T at 8), the peak of a real training
step with AdamW was 0.55 to 0.6 of the estimate. On CUDA (an H200, torch 2.11,
``benchmarks/cuda_memory.py``: two AdamW steps and an evaluation, the allocator's peak) the six
presets at batches of 16 to 64 peaked at 0.41 to 0.80 of it with bf16 mixed precision
(0.51 to 0.78 in fp32). A CUDA process also holds what no model's estimate contains: cuBLAS's
workspaces (64 MiB there, from the first matrix product on), cuDNN's RNN workspace (about 8 MiB
for a tiny MCAN's LSTM) and the caching allocator's rounding of small tensors to 512 bytes; so
on CUDA the checks add :data:`CUDA_LIBRARY_BYTES` (:func:`device_bytes`). It is cheap: nothing
is allocated, and the pass on ``meta`` only propagates shapes.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from nas.config import ArchConfig
from nas.errors import ConfigError
from nas.models import create_model, resolve_task
from nas.tasks import TaskGeometry

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "CUDA_CONTEXT_BYTES",
    "CUDA_LIBRARY_BYTES",
    "MemoryEstimate",
    "MemoryProfile",
    "available_memory",
    "check_training_memory",
    "device_bytes",
    "estimate_training_memory",
    "format_bytes",
    "memory_profile",
    "profile_memory",
    "training_memory",
]

#: float32 weight + gradient + Adam's first and second moments.
ADAM_BYTES_PER_PARAM = 4 * 4
#: What a CUDA training process holds beside its model (see the module): 64 MiB of cuBLAS
#: workspaces measured on an H200, cuDNN's RNN workspace and allocator rounding, with margin.
CUDA_LIBRARY_BYTES = 96 * 2**20
#: What a CUDA process holds outside PyTorch's allocator (its CUDA context and the libraries'
#: loaded kernels): about 765 MiB a process on an H200 with torch 2.11 (the card's use less
#: PyTorch's reserved bytes, ``benchmarks/gpu_packing.py``), counted against a trial's share.
CUDA_CONTEXT_BYTES = 768 * 2**20
_BACKWARD_FACTOR = 2  # activations kept for backward, plus their gradients
_EVAL_LIVE_TENSORS = 3  # without a graph: an operator's inputs and its output


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated bytes of one training run's largest step (see the module's rule)."""

    params: int
    parameter_bytes: int
    buffer_bytes: int
    input_bytes: int
    train_activation_bytes: int
    eval_activation_bytes: int

    @property
    def total(self) -> int:
        return (self.parameter_bytes + self.buffer_bytes + self.input_bytes
                + max(self.train_activation_bytes, self.eval_activation_bytes))


class _LargestAllocation(TorchDispatchMode):
    """Remembers the bytes of the largest tensor one operator allocates."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        schema = func._schema
        if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
            return out  # a view or an in-place result: no new memory
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, _nbytes(t))
        return out


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass(frozen=True)
class MemoryProfile:
    """What one training-mode forward pass over one sample on ``meta`` shows: the per-sample
    figures the module's rule scales by batch size (:meth:`estimate`), so one pass serves every
    batch size."""

    params: int
    buffer_bytes: int
    input_bytes: int  # one sample's inputs
    saved_bytes: int  # what autograd keeps for the backward pass, one sample
    largest_bytes: int  # the largest tensor one operator allocates, one sample

    def estimate(self, batch_size: int, *, eval_batch_size: int | None = None) -> MemoryEstimate:
        """The estimate at ``batch_size`` (``eval_batch_size``, default ``batch_size``, for the
        validation passes)."""
        evals = batch_size if eval_batch_size is None else eval_batch_size
        return MemoryEstimate(
            params=self.params,
            parameter_bytes=self.params * ADAM_BYTES_PER_PARAM,
            buffer_bytes=self.buffer_bytes,
            input_bytes=self.input_bytes * max(batch_size, evals),
            train_activation_bytes=self.saved_bytes * _BACKWARD_FACTOR * batch_size,
            eval_activation_bytes=self.largest_bytes * _EVAL_LIVE_TENSORS * evals,
        )


def profile_memory(model: nn.Module, inputs: dict[str, torch.Tensor], *,
                   also: contextlib.AbstractContextManager[Any] | None = None) -> MemoryProfile:
    """Run ``model`` (train mode, gradients on) once on ``inputs`` (one sample, ``meta``
    tensors) and record what the rule needs. ``also`` is entered around the same pass (the
    cost model's flop counter: one pass gives both, ``nas.cost.cost_and_memory``)."""
    parameters = {id(p) for p in model.parameters()}
    saved: dict[int, torch.Tensor] = {}  # keeps each tensor alive, so ids stay unique

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t if t._base is None else t._base
        if id(base) not in parameters:
            saved[id(base)] = base
        return t

    model.train()
    largest = _LargestAllocation()
    with (torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, _unpack),
          also if also is not None else contextlib.nullcontext(), largest):
        model(**inputs)
    return MemoryProfile(
        params=sum(p.numel() for p in model.parameters() if p.requires_grad),
        buffer_bytes=sum(_nbytes(b) for b in model.buffers()),
        input_bytes=sum(_nbytes(t) for t in inputs.values()),
        saved_bytes=sum(_nbytes(t) for t in saved.values()),
        largest_bytes=largest.largest,
    )


def memory_profile(config: ArchConfig, geometry: TaskGeometry | str | None) -> MemoryProfile:
    """:func:`profile_memory` of ``config`` built on the ``meta`` device."""
    task = resolve_task(config, geometry)
    model = create_model(config, task, device="meta")
    return profile_memory(model, model.example_inputs(1))


def training_memory(
    config: ArchConfig,
    geometry: TaskGeometry | str | None,
    batch_size: int,
    *,
    eval_batch_size: int | None = None,
) -> MemoryEstimate:
    """The estimate of training ``config`` on ``geometry`` at ``batch_size``, part by part.

    ``eval_batch_size`` (default: ``batch_size``) is the batch of the validation passes.
    """
    return memory_profile(config, geometry).estimate(batch_size, eval_batch_size=eval_batch_size)


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def estimate_training_memory(
    config: ArchConfig,
    geometry: TaskGeometry | str | None,
    batch_size: int,
    *,
    eval_batch_size: int | None = None,
) -> int:
    """Estimated bytes to train ``config`` on ``geometry`` at ``batch_size`` with Adam (the
    module's rule), computed on the meta device: nothing is allocated."""
    return training_memory(config, geometry, batch_size, eval_batch_size=eval_batch_size).total


def device_bytes(estimate: MemoryEstimate, device: torch.device | str) -> int:
    """What a run on ``device`` needs: the estimate, plus :data:`CUDA_LIBRARY_BYTES` on CUDA."""
    extra = CUDA_LIBRARY_BYTES if torch.device(device).type == "cuda" else 0
    return estimate.total + extra


def _host_available() -> int:
    try:
        import psutil  # not a dependency; used when installed
    except ImportError:
        pass
    else:
        return int(psutil.virtual_memory().available)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def available_memory(device: torch.device | str = "cpu") -> int:
    """Bytes free for a run on ``device``: free GPU memory on CUDA (``torch.cuda.mem_get_info``),
    else the host's available memory (``psutil`` when installed, else ``/proc/meminfo``)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return _host_available()


def format_bytes(n: float) -> str:
    """``n`` bytes for a message: ``13.8 GiB``, ``59.0 MiB``."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


def check_training_memory(
    config: ArchConfig,
    geometry: TaskGeometry | str | None,
    batch_size: int,
    device: torch.device | str = "cpu",
    *,
    eval_batch_size: int | None = None,
) -> int:
    """The estimate of :func:`estimate_training_memory`; ``ConfigError`` (one line giving the
    estimate and what ``device`` has free) when it exceeds :func:`available_memory`."""
    estimate = training_memory(config, geometry, batch_size, eval_batch_size=eval_batch_size)
    free = available_memory(device)
    needed = device_bytes(estimate, device)
    if needed > free:
        size = format_bytes
        activations = max(estimate.train_activation_bytes, estimate.eval_activation_bytes)
        libraries = needed - estimate.total
        raise ConfigError(
            f"Training arch {config.arch_id} ({config.family}, {estimate.params:,} params) at "
            f"batch_size={batch_size} needs about {size(needed)} (parameters with Adam "
            f"{size(estimate.parameter_bytes)}, activations {size(activations)}"
            + (f", CUDA libraries {size(libraries)}" if libraries else "") + "), but "
            f"{torch.device(device).type} has {size(free)} available; lower batch_size or "
            "eval_batch_size, or choose a smaller architecture."
        )
    return needed
