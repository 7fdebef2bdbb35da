"""A stack of layers executed in a cross-layer sharing pattern."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

__all__ = ["SharedStack"]


class SharedStack(nn.Module):
    """Unique layers reused at several depths.

    ``layers`` holds one module per distinct index of ``pattern``; executing the stack runs
    ``layers[pattern[0]]``, ``layers[pattern[1]]``, ... A shared layer's parameters count once and
    its MAdds once per executed depth. Per-depth state (a decoder's key/value cache) belongs to
    the executed depth, never to the module: callers iterate ``executed()`` and key state by depth.
    """

    def __init__(self, layers: Sequence[nn.Module], pattern: Sequence[int]) -> None:
        super().__init__()
        if sorted(set(pattern)) != list(range(len(layers))):
            raise ValueError(
                f"`pattern` must use every index 0..{len(layers) - 1} of `layers`, "
                f"but got {tuple(pattern)}."
            )
        self.layers = nn.ModuleList(layers)
        self.pattern = tuple(pattern)

    @classmethod
    def build(cls, make_layer: Callable[[], nn.Module], pattern: Sequence[int]) -> SharedStack:
        """One ``make_layer()`` per distinct index of ``pattern``, executed in that pattern."""
        return cls([make_layer() for _ in range(len(set(pattern)))], pattern)

    def __len__(self) -> int:
        return len(self.pattern)

    def executed(self) -> Iterator[tuple[int, nn.Module]]:
        """``(depth, module)`` in execution order."""
        for depth, index in enumerate(self.pattern):
            yield depth, self.layers[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run single-input layers (``x -> layer(x)``) in pattern order."""
        for _, layer in self.executed():
            x = layer(x)
        return x

    def extra_repr(self) -> str:
        return f"pattern={self.pattern}"
