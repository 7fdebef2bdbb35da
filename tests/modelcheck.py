"""Shared checks for family models: the cost model against the materialised network."""

from __future__ import annotations

import random
from typing import Any

import torch

from nas.config import ArchConfig
from nas.cost import count_params, estimate_cost, trace_madds
from nas.models import create_model, resolve_task
from nas.tasks import TaskGeometry


def check_against_materialised(
    config: ArchConfig, task: TaskGeometry | str | None = None, *, batch: int = 2, seed: int = 0
) -> None:
    """The meta-device cost equals the real model's, outputs are finite, every parameter learns.

    - params: the cost model's count equals the unique parameters of the real (CPU) model;
    - MAdds: the cost model equals a trace of the real forward pass within 1% (per sample);
    - the output is finite and a backward pass gives every parameter a gradient.
    """
    geometry = resolve_task(config, task)
    cost = estimate_cost(config, geometry)
    torch.manual_seed(seed)
    model = create_model(config, geometry)
    unique = {id(p): p.numel() for p in model.parameters()}
    assert cost.params == sum(unique.values()), (cost.params, sum(unique.values()))
    assert sum(n for n, _ in count_params(model).values()) == cost.params

    inputs = model.example_inputs(batch)
    for v in inputs.values():
        assert v.device.type == "cpu"
    model.eval()
    traced = sum(trace_madds(model, inputs).values()) / batch
    assert abs(traced - cost.madds) <= 0.01 * max(cost.madds, 1), (traced, cost.madds)

    model.train()
    out = model(**inputs)
    assert torch.isfinite(out).all()
    out.float().square().mean().backward()
    unused = set(model.unused_parameter_names())
    missing = [n for n, p in model.named_parameters() if p.grad is None and n not in unused]
    assert not missing, f"no gradient for {missing[:5]}"
    assert all(p.grad is None for n, p in model.named_parameters() if n in unused)


def random_knobs(rng: random.Random, *, groups: tuple[int, ...] = (1, 2, 4),
                 sharings: tuple[str, ...] = ("none", "kv", "qk")) -> dict[str, Any]:
    """A random combination of the group-wise and sharing knobs (layer sharing left to callers)."""
    sharing = rng.choice(sharings)
    return {
        "groups": rng.choice(groups),
        "group_attention": rng.random() < 0.5,
        "group_ffn": rng.random() < 0.5,
        "weight_sharing": rng.random() < 0.5,
        "group_merge": rng.random() < 0.3,
        "group_intermediate": rng.random() < 0.3,
        "qk_multiplier": rng.choice((1, 2, 3)) if sharing in ("none", "qk") else 1,
        "attention_sharing": sharing,
    }


def random_pattern(rng: random.Random, depth: int) -> str:
    """A random sharing pattern of length ``depth`` such as '0,0,1,0'."""
    return ",".join(str(rng.randrange(0, max(1, depth // 2 + 1))) for _ in range(depth))
