"""The cost model: parameters, weight-matrix parameters and multiply-adds, split by part.

The model is built on the ``meta`` device (no weights allocated) and its forward pass on the
task geometry is traced with ``torch.utils.flop_counter``: every matrix product, batched matrix
product and convolution is counted at the shapes it actually runs with, so shared layers count
once per executed depth and group-wise layers at 1/k of the dense cost. One multiply-add is two
FLOPs. Biases, norms, softmax, activations and residual adds are not counted (knobs.md).

``madds_norms`` is reported beside: the elements normalised by LayerNorms in one forward pass,
which some papers add to their MAdds as one each (the Swin code's ``flops()`` does, so Swin-T's
published 4.5G and LW-Swin's 3.3G / 2.6G are ``madds + madds_norms``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nas.config import ArchConfig
from nas.layers.grouped import GroupLinear
from nas.memory import MemoryProfile, profile_memory
from nas.models import FamilyModel, create_model, resolve_task
from nas.tasks import TaskGeometry

__all__ = [
    "Cost",
    "PartCost",
    "cost_and_memory",
    "count_params",
    "estimate_cost",
    "estimate_params",
    "model_cost",
    "trace_madds",
]

_MATRIX_MODULES = (nn.Linear, nn.Embedding, nn.modules.conv._ConvNd, GroupLinear)


@dataclass(frozen=True)
class PartCost:
    params: int
    params_matrix: int
    madds: int


@dataclass(frozen=True)
class Cost:
    """What ``nas cost --json`` prints."""

    arch_id: str
    family: str
    task: str
    params: int
    params_matrix: int
    madds: int
    parts: dict[str, PartCost]
    madds_norms: int = 0  # LayerNorm elements per sample: what Swin's own count adds to madds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_matrix(module: nn.Module, name: str) -> bool:
    if isinstance(module, _MATRIX_MODULES):
        return name == "weight"
    if isinstance(module, nn.RNNBase):
        return name.startswith(("weight_ih", "weight_hh"))
    return False


def count_params(model: FamilyModel) -> dict[str, tuple[int, int]]:
    """(params, params_matrix) per part, each unique trainable tensor counted once.

    A tensor reachable under two names (a tied embedding) counts once, in the part of the first
    name ``named_modules`` reaches it by.
    """
    seen: set[int] = set()
    out = {part: (0, 0) for part in model.PARTS}
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            path = f"{module_name}.{name}" if module_name else name
            part = model.part_of(path)
            if part is None:
                raise ValueError(f"parameter {path!r} of {type(model).__name__} is in no part")
            n, nm = out[part]
            out[part] = (n + p.numel(), nm + (p.numel() if _is_matrix(module, name) else 0))
    return out


def _mkldnn_rnn_flops(input_shape: Any, w_ih_shape: Any, w_hh_shape: Any, *args: Any,
                      **kwargs: Any) -> int:
    """FLOPs of one oneDNN RNN layer (how ``nn.LSTM`` runs on CPU): input and hidden GEMMs."""
    tokens = input_shape[0] * input_shape[1]
    gates, n_in = w_ih_shape
    return 2 * tokens * gates * (n_in + w_hh_shape[1])


# Ops the flop counter has no formula for, yet which do matrix products (torch 2.x on CPU runs
# nn.LSTM through oneDNN; on meta and CUDA it decomposes into counted matmuls).
_EXTRA_FLOPS: dict[Any, Any] = {}
if hasattr(torch.ops.aten, "mkldnn_rnn_layer"):
    _EXTRA_FLOPS[torch.ops.aten.mkldnn_rnn_layer] = _mkldnn_rnn_flops


def _counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping=_EXTRA_FLOPS)


@contextlib.contextmanager
def _counting_norms(model: FamilyModel, norms: list[int] | None) -> Iterator[None]:
    """While open, ``norms`` (when given) receives the elements each LayerNorm normalises."""
    hooks = [] if norms is None else [
        m.register_forward_hook(lambda _m, args, _out: norms.append(args[0].numel()))
        for m in model.modules() if isinstance(m, nn.LayerNorm)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def _madds_by_part(model: FamilyModel, counter: FlopCounterMode) -> dict[str, int]:
    """The multiply-adds ``counter`` counted, split by ``model.PARTS``."""
    root = type(model).__name__
    counts = counter.get_flop_counts()
    out = dict.fromkeys(model.PARTS, 0)
    for part, prefixes in model.PARTS.items():
        for prefix in prefixes:
            out[part] += int(sum(counts.get(f"{root}.{prefix}", {}).values())) // 2
    rest = int(counter.get_total_flops()) // 2 - sum(out.values())
    if rest:
        raise ValueError(
            f"{type(model).__name__}.forward does {rest} multiply-adds outside its parts; "
            "move that computation into a module listed in PARTS."
        )
    return out


def trace_madds(model: FamilyModel, inputs: dict[str, torch.Tensor],
                norms: list[int] | None = None) -> dict[str, int]:
    """Multiply-adds per part of one forward pass on ``inputs`` (any device, ``meta`` too).

    ``norms``, when given, receives the number of elements each LayerNorm normalised."""
    counter = _counter()
    with _counting_norms(model, norms), torch.no_grad(), counter:
        model(**inputs)
    return _madds_by_part(model, counter)


def _cost(model: FamilyModel, config: ArchConfig, task: TaskGeometry,
          params: dict[str, tuple[int, int]], madds: dict[str, int], norms: list[int],
          batch: int) -> Cost:
    parts = {
        part: PartCost(params[part][0], params[part][1], madds[part] // batch)
        for part in model.PARTS
    }
    return Cost(
        arch_id=config.arch_id,
        family=config.family,
        task=task.name,
        params=sum(p.params for p in parts.values()),
        params_matrix=sum(p.params_matrix for p in parts.values()),
        madds=sum(p.madds for p in parts.values()),
        parts=parts,
        madds_norms=sum(norms) // batch,
    )


def model_cost(
    model: FamilyModel, config: ArchConfig, task: TaskGeometry, batch: int = 1
) -> Cost:
    """The cost of an already built ``model`` (MAdds per sample)."""
    params = count_params(model)
    was_training = model.training
    model.eval()
    norms: list[int] = []
    madds = trace_madds(model, model.example_inputs(batch), norms)
    model.train(was_training)
    return _cost(model, config, task, params, madds, norms, batch)


def estimate_cost(config: ArchConfig, task: TaskGeometry | str | None = None) -> Cost:
    """Cost of ``config`` on ``task``, computed on the meta device (no weights allocated)."""
    geometry = resolve_task(config, task)
    model = create_model(config, geometry, device="meta")
    return model_cost(model, config, geometry)


def estimate_params(config: ArchConfig, task: TaskGeometry | str | None = None) -> int:
    """``estimate_cost(config, task).params`` from the build alone: no forward pass is traced
    (what a search for the largest model of a space needs, many builds at a study's start)."""
    geometry = resolve_task(config, task)
    return sum(n for n, _ in count_params(create_model(config, geometry,
                                                       device="meta")).values())


#: A model of at most this many parameters and buffer elements is traced by
#: :func:`cost_and_memory` on real CPU tensors rather than on ``meta``: at one sample its
#: arithmetic takes less than the meta device's Python shape functions (a quickstart ViT:
#: about half the time; ``benchmarks/candidate_cost.py``). Larger models stay on ``meta``,
#: where nothing is allocated.
REAL_PASS_MAX_ELEMENTS = 1_000_000


def _real_pass(model: FamilyModel) -> bool:
    """Whether :func:`cost_and_memory` traces ``model`` (built on meta) on the CPU: small
    enough (:data:`REAL_PASS_MAX_ELEMENTS`), and no ``nn.RNNBase``, which the CPU runs through
    oneDNN with other tensors saved for backward than its decomposition saves."""
    if any(isinstance(m, nn.RNNBase) for m in model.modules()):
        return False
    elements = sum(t.numel() for t in (*model.parameters(), *model.buffers()))
    return elements <= REAL_PASS_MAX_ELEMENTS


def _to_cpu(model: FamilyModel, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Move ``model`` (built on meta) to the CPU in place, every parameter and buffer zero
    (shared ones stay shared), and return ``inputs``' CPU twins: floats zero, integers one (a
    token id every vocabulary holds). Only shapes decide what the pass records."""
    model.to_empty(device="cpu")
    with torch.no_grad():
        for t in (*model.parameters(), *model.buffers()):
            t.zero_()
    return {k: (torch.zeros if v.is_floating_point() else torch.ones)(v.shape, dtype=v.dtype,
                                                                        device="cpu")
            for k, v in inputs.items()}


def cost_and_memory(config: ArchConfig,
                    task: TaskGeometry | str | None = None) -> tuple[Cost, MemoryProfile]:
    """:func:`estimate_cost` and ``nas.memory.memory_profile`` of ``config`` from one build and
    one traced pass: the training-mode pass the memory rule needs, counted by the same flop
    counter (no family's forward computes differently in training mode). The build is on
    meta; a small model's pass runs on zeroed CPU tensors instead (:func:`_real_pass`), with
    the same shapes and so the same figures, in less time, the global random state untouched.
    ``tests/test_flop_counter.py`` checks both figures against the separate passes on meta."""
    geometry = resolve_task(config, task)
    model = create_model(config, geometry, device="meta")
    params = count_params(model)
    inputs = model.example_inputs(1)
    counter, norms = _counter(), list[int]()
    with contextlib.ExitStack() as stack:
        if _real_pass(model):
            stack.enter_context(torch.random.fork_rng(devices=[]))  # dropout draws
            inputs = _to_cpu(model, inputs)
        stack.enter_context(_counting_norms(model, norms))
        profile = profile_memory(model, inputs, also=counter)
    return _cost(model, config, geometry, params, _madds_by_part(model, counter), norms,
                 1), profile
