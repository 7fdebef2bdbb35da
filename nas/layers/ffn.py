"""Position-wise feed-forward network with G-FFN (group-wise W2) and G-IL (group-wise W1)."""

from __future__ import annotations

import torch
from torch import nn

from nas.layers.grouped import GroupLinear

__all__ = ["FeedForward"]


class FeedForward(nn.Module):
    """``fc2(drop(act(fc1(x))))`` with optionally group-wise projections.

    Args:
        dim: input and output width d.
        hidden: hidden width d_ff.
        groups: groups of ``fc2`` (G-FFN): hidden chunk g produces output chunk g.
        intermediate_groups: groups of ``fc1`` (G-IL): input chunk g produces hidden chunk g.
        weight_sharing: the groups of a group-wise projection share one weight and bias (WS).
        act_layer: activation (ReLU for MCAN/ORT/LXMERT-style FFNs is GELU in BERT and timm).

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
        act_layer: type[nn.Module] = nn.ReLU,
        drop: float = 0.0,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw = {"bias": bias, "shared": weight_sharing, "device": device, "dtype": dtype}
        self.fc1 = GroupLinear(dim, hidden, intermediate_groups, **kw)  # type: ignore[arg-type]
        self.act = act_layer()
        self.drop = nn.Dropout(drop)
        self.fc2 = GroupLinear(hidden, dim, groups, **kw)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))
