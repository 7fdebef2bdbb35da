"""What every family network provides to the rest of the system."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from nas.config import ArchConfig
from nas.knobs import KNOBS, Site

__all__ = ["FamilyModel", "attention_knobs", "block_knobs", "ffn_knobs"]


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
        ``self(**self.example_inputs())`` runs the cost-defining forward pass: the cost model,
        the latency measure and the memory estimate run it.

        The lengths are what training feeds: ``question_tokens`` question tokens and
        ``regions`` regions (vqa), ``image_size`` pixels a side (image), and for a caption
        decoder the input of a full-length caption, BOS + its tokens
        (``nas.tasks.decoder_positions``)."""
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


def block_knobs(config: ArchConfig, site: Site) -> dict[str, Any]:
    """The keyword arguments the knob table (``Knob.block_arg``) sets on the blocks of ``site``
    (``attention``: ``nas.layers.Attention``; ``ffn``: ``nas.layers.FeedForward``)."""
    return {k.block_arg: getattr(config, k.reads or k.name) for k in KNOBS
            if site in k.acts_on and k.block_arg is not None}


def attention_knobs(config: ArchConfig) -> dict[str, Any]:
    """The keyword arguments of ``nas.layers.Attention`` that ``config``'s knobs set."""
    return block_knobs(config, "attention")


def ffn_knobs(config: ArchConfig) -> dict[str, Any]:
    """The keyword arguments of ``nas.layers.FeedForward`` that ``config``'s knobs set."""
    return block_knobs(config, "ffn")
