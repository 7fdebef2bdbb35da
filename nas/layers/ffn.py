"""Position-wise feed-forward network with G-FFN (group-wise W2) and G-IL (group-wise W1)."""

from __future__ import annotations

import torch
from torch import nn

from nas.layers.grouped import GroupLinear

__all__ = ["ACTIVATIONS", "FeedForward"]

#: Activations by name, as configs and timm's ``get_act_layer`` spell them.
ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class FeedForward(nn.Module):
    """``fc2(drop(act(fc1(x))))`` with optionally group-wise projections.

    Args:
        dim: input and output width d.
        hidden: hidden width d_ff.
        groups: groups of ``fc2`` (G-FFN): hidden chunk g produces output chunk g.
        intermediate_groups: groups of ``fc1`` (G-IL): input chunk g produces hidden chunk g.
        weight_sharing: the groups of a group-wise projection share one weight and bias (WS).
        act_layer: the activation, a module class or a name of :data:`ACTIVATIONS` (ReLU in
            MCAN and ORT, GELU in BERT, DeiT and Swin).

    Parameter names follow timm's ``Mlp`` (``fc1``, ``fc2``) so timm's models accept it.
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        *,
        groups: int = 1,
        intermediate_groups: int = 1,
        weight_sharing: bool = False,
        act_layer: type[nn.Module] | str = nn.ReLU,
        drop: float = 0.0,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw = {"bias": bias, "shared": weight_sharing, "device": device, "dtype": dtype}
        self.fc1 = GroupLinear(dim, hidden, intermediate_groups, **kw)  # type: ignore[arg-type]
        if isinstance(act_layer, str):
            if act_layer not in ACTIVATIONS:
                raise ValueError(f"`act_layer` must be a module class or one of "
                                 f"{list(ACTIVATIONS)}, but got {act_layer!r}.")
            act_layer = ACTIVATIONS[act_layer]
        self.act = act_layer()
        self.drop = nn.Dropout(drop)
        self.fc2 = GroupLinear(hidden, dim, groups, **kw)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))
