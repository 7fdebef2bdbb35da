"""The family networks and ``create_model``, the one way to build them (the built-in five and
those plugins register: ``nas.registry``)."""

from __future__ import annotations

import torch

from nas import registry
from nas.config import ArchConfig
from nas.config import drop_rate as family_drop_rate
from nas.errors import ConfigError
from nas.models.base import FamilyModel
from nas.registry import check_task_fits
from nas.tasks import TaskGeometry, get_geometry

__all__ = ["FamilyModel", "create_model", "resolve_task"]

def resolve_task(config: ArchConfig, task: TaskGeometry | str | None) -> TaskGeometry:
    """The task geometry to build ``config`` for: given, named, or the family's default."""
    if task is None:
        task = registry.get_family(config.family).task
    geometry = get_geometry(task) if isinstance(task, str) else task
    check_task_fits(config.family, geometry)
    return geometry


def create_model(
    config: ArchConfig,
    task: TaskGeometry | str | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    drop_rate: float | None = None,
) -> FamilyModel:
    """Build the network ``config`` describes for ``task`` (default: the family's task).

    ``device="meta"`` builds it without allocating weights (what the cost model does).
    ``drop_rate`` is the probability of every dropout in the network, as timm's ``drop_rate``
    (the trainer passes ``TrainConfig.dropout``); ``None`` is the family's own
    (``nas.config.drop_rate``).
    """
    geometry = resolve_task(config, task)
    build = registry.get_family(config.family).builder()
    model = build(config, geometry, device=device, dtype=dtype,
                  dropout=family_drop_rate(config.family, drop_rate))
    if not isinstance(model, FamilyModel):
        raise ConfigError(f"Family {config.family!r}: its build returned a "
                          f"{type(model).__name__}, not a nas.models.FamilyModel.")
    return model
