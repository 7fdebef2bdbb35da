"""Reusable blocks of the model space: group-wise linear, attention, FFN, shared stacks."""

from nas.layers.attention import Attention, Cache
from nas.layers.ffn import FeedForward
from nas.layers.grouped import GroupLinear
from nas.layers.stack import SharedStack

__all__ = ["Attention", "Cache", "FeedForward", "GroupLinear", "SharedStack"]
