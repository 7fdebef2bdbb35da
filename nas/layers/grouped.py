"""Group-wise linear layer: k block-diagonal (or one shared) projections in one matrix product."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GroupLinear"]


class GroupLinear(nn.Module):
    """Linear map applied group-wise: chunk ``g`` of the input produces chunk ``g`` of the output.

    The input's ``in_features`` channels are split into ``groups`` contiguous chunks of
    ``in_features / groups``; each maps to ``out_features / groups`` channels and the results are
    concatenated. With ``shared=True`` (WS) every group uses ONE weight and bias; otherwise each
    group has its own (a block-diagonal matrix, ``groups`` times the parameters, the same MAdds).
    ``groups=1`` is an ordinary dense ``nn.Linear`` (same parameter names and shapes).

    Computed as one batched matrix product, never a Python loop over groups.
    """

    weight: nn.Parameter
    bias: nn.Parameter | None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        groups: int = 1,
        *,
        shared: bool = False,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if in_features % groups or out_features % groups:
            raise ValueError(
                f"`in_features % groups == 0` and `out_features % groups == 0` must hold, but got "
                f"{in_features=}, {out_features=}, {groups=}."
            )
        self.in_features, self.out_features, self.groups = in_features, out_features, groups
        self.shared = shared and groups > 1
        gi, go = in_features // groups, out_features // groups
        kw = {"device": device, "dtype": dtype}
        if groups == 1 or self.shared:
            self.weight = nn.Parameter(torch.empty(go, gi, **kw))  # type: ignore[arg-type]
            bias_shape: tuple[int, ...] = (go,)
        else:
            self.weight = nn.Parameter(torch.empty(groups, go, gi, **kw))  # type: ignore[arg-type]
            bias_shape = (out_features,)
        self.bias = nn.Parameter(torch.empty(bias_shape, **kw)) if bias else None  # type: ignore[arg-type]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's initialisation with each group's fan-in.
        fan_in = self.in_features // self.groups
        bound = 1.0 / math.sqrt(fan_in)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.groups == 1:
            return F.linear(x, self.weight, self.bias)
        lead = x.shape[:-1]
        xg = x.reshape(*lead, self.groups, self.in_features // self.groups)  # (..., k, in/k)
        if self.shared:
            y = F.linear(xg, self.weight, self.bias)  # (..., k, out/k): one GEMM over all chunks
            return y.reshape(*lead, self.out_features)
        # (k, N, in/k) @ (k, in/k, out/k) -> (k, N, out/k): one batched GEMM
        xk = xg.reshape(-1, self.groups, xg.shape[-1]).transpose(0, 1)
        y = torch.bmm(xk, self.weight.transpose(1, 2)).transpose(0, 1)
        y = y.reshape(*lead, self.out_features)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"groups={self.groups}, shared={self.shared}, bias={self.bias is not None}"
        )
