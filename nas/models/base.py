"""What every family network provides to the rest of the system."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from nas.config import ArchConfig

__all__ = ["FamilyModel", "attention_knobs", "ffn_knobs"]


class FamilyModel(nn.Module):
    """Base class of the five family networks.

    Subclasses set ``PARTS``: part name -> dotted names (module or parameter paths, such as
    ``"encoder"`` or ``"net.blocks"``) that make up that part. ``backbone`` is always a part. The
    names must not nest, and every parameter and every multiply-add of the forward pass must fall
    under exactly one of them, so the parts add up to the totals (the cost model checks this).
    """

    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def example_inputs(self, batch: int = 1) -> dict[str, torch.Tensor]:
        """Inputs of the task geometry, on the model's device (``meta`` included), such that
        ``self(**self.example_inputs())`` runs the cost-defining forward pass."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def part_of(self, name: str) -> str | None:
        """The part that the module or parameter path ``name`` falls under, if any."""
        for part, prefixes in self.PARTS.items():
            for prefix in prefixes:
                if name == prefix or name.startswith(prefix + "."):
                    return part
        return None

    def unused_parameter_names(self) -> list[str]:
        """Parameters that by design never reach the output (kept for fidelity to a paper's
        network, e.g. LXMERT's last-layer vision branch under a language-only VQA head)."""
        return []

    def extra_state_for_checkpoint(self) -> dict[str, Any]:
        """Anything besides the config and weights needed to rebuild the model (tokenizers)."""
        return {}


def attention_knobs(config: ArchConfig) -> dict[str, Any]:
    """The keyword arguments of ``nas.layers.Attention`` that ``config``'s knobs set."""
    return {
        "groups": config.attention_groups,
        "merge_groups": config.merge_groups,
        "weight_sharing": config.weight_sharing,
        "qk_multiplier": config.qk_multiplier,
        "sharing": config.attention_sharing,
    }


def ffn_knobs(config: ArchConfig) -> dict[str, Any]:
    """The keyword arguments of ``nas.layers.FeedForward`` that ``config``'s knobs set."""
    return {
        "groups": config.ffn_groups,
        "intermediate_groups": config.intermediate_groups,
        "weight_sharing": config.weight_sharing,
    }
