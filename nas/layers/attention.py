"""Multi-head attention with every knob of the design space.

G-MHA (group-wise Q/K/V projections), WS, G-LML (group-wise W_O), the Q/K expansion multiplier n,
attention parameter sharing (``none``/``kv``/``qk``/``qv``), QK-norm, self- and cross-attention,
boolean masks, an additive logit bias (ORT's box geometry, Swin's relative positions and window
masks) and incremental decoding with a key/value cache owned by the caller (one per executed
depth).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from nas.layers.grouped import GroupLinear

__all__ = ["Attention", "Cache"]

Cache = dict[str, torch.Tensor]


class Attention(nn.Module):
    """Multi-head attention.

    Head ``j`` belongs to group ``j // (num_heads / groups)``: the group-wise projections produce
    group chunks in channel order, so the ordinary head split keeps every head inside its group
    and query group g attends only to key/value group g. ``proj`` (W_O) is the only cross-group
    mixing unless ``merge_groups > 1`` (G-LML).

    Args:
        dim: model width d (query and key/value streams both have width d).
        num_heads: total heads h.
        groups: groups k of W_Q, W_K, W_V (G-MHA); 1 means dense projections.
        merge_groups: groups of W_O (G-LML).
        weight_sharing: group-wise projections use one weight and bias for all groups (WS).
        qk_multiplier: Q and K are n*d wide; the softmax scale is 1/sqrt(n*d/h).
        sharing: ``none``; ``kv`` (V is the projected key); ``qk`` (K uses W_Q);
            ``qv`` (V is the projected query: self-attention only).
        qk_norm: normalise each head's queries and keys (``norm_layer`` over the n*d/h channels
            of a head, its own for Q and for K) before their dot product, as timm's
            ``qk_norm=True``. A shared projection's value stays the unnormalised projection.
        norm_layer: the norm of ``qk_norm``, called as ``norm_layer(width, device=, dtype=)``.
        qkv_bias: bias on Q/K/V projections.
        heads_in_groups: each head lies inside one group (``num_heads % groups == 0``, the LW
            papers' G-MHA). False groups the projections by channels only (LW-Swin): a head may
            then span groups, and only the widths need to divide by ``groups``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        groups: int = 1,
        merge_groups: int = 1,
        weight_sharing: bool = False,
        qk_multiplier: int = 1,
        sharing: Literal["none", "kv", "qk", "qv"] = "none",
        qk_norm: bool = False,
        norm_layer: Callable[..., nn.Module] = nn.LayerNorm,
        qkv_bias: bool = True,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        heads_in_groups: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        rules = ["dim % num_heads == 0"] + (["num_heads % groups == 0"] if heads_in_groups
                                            else ["dim % groups == 0"])
        if dim % num_heads or (num_heads if heads_in_groups else dim) % groups:
            raise ValueError(
                f"{' and '.join(f'`{r}`' for r in rules)} must hold, but got "
                f"{dim=}, {num_heads=}, {groups=}."
            )
        if sharing in ("kv", "qv") and qk_multiplier != 1:
            raise ValueError(f"sharing={sharing!r} needs qk_multiplier=1, got {qk_multiplier}.")
        self.dim, self.num_heads, self.sharing = dim, num_heads, sharing
        self.qk_dim = qk_multiplier * dim
        self.scale = 1.0 / math.sqrt(self.qk_dim / num_heads)
        dd = {"device": device, "dtype": dtype}
        kw = {"shared": weight_sharing, "bias": qkv_bias, **dd}
        self.q = GroupLinear(dim, self.qk_dim, groups, **kw)  # type: ignore[arg-type]
        self.k = (
            None if sharing == "qk" else GroupLinear(dim, self.qk_dim, groups, **kw)  # type: ignore[arg-type]
        )
        self.v = (
            None if sharing in ("kv", "qv") else GroupLinear(dim, dim, groups, **kw)  # type: ignore[arg-type]
        )
        width = self.qk_dim // num_heads
        self.q_norm = norm_layer(width, **dd) if qk_norm else nn.Identity()  # (.., n*d/h)
        self.k_norm = norm_layer(width, **dd) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = GroupLinear(
            dim, dim, merge_groups, shared=weight_sharing, bias=proj_bias, device=device,
            dtype=dtype,
        )
        self.proj_drop = nn.Dropout(proj_drop)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        return x.view(b, n, self.num_heads, c // self.num_heads).transpose(1, 2)  # (B, h, N, c/h)

    def _key_value(self, memory: torch.Tensor, q: torch.Tensor | None) -> tuple[
        torch.Tensor, torch.Tensor
    ]:
        """Project the key/value stream: returns (K, V), each (B, h, L_k, .).

        ``q`` is the projected query in self-attention, before ``q_norm`` (None in
        cross-attention): with ``qk`` sharing K is projected as it, with ``qv`` sharing V is it.
        K is normalised by ``k_norm``; V never is (with ``kv`` sharing it is the projected key).
        """
        if self.k is None:  # qk: W_K = W_Q
            k = q if q is not None else self._heads(self.q(memory))
        else:
            k = self._heads(self.k(memory))
        if self.sharing == "kv":
            return self.k_norm(k), k  # the value IS the projected key (the same tensor unnormed)
        if self.sharing == "qv":
            assert q is not None  # self-attention only: V is the projected query
            return self.k_norm(k), q
        assert self.v is not None
        return self.k_norm(k), self._heads(self.v(memory))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        cache: Cache | None = None,
        static_kv: bool = False,
    ) -> torch.Tensor:
        """Attend from ``x`` (B, L_q, d) to ``memory`` (B, L_k, d), or to ``x`` itself.

        Args:
            attn_mask: bool, broadcastable to (B, h, L_q, L_k); True = may attend.
            attn_bias: float added to the logits, broadcastable to (B, h, L_q, L_k).
            cache: this executed depth's cache for incremental decoding. Self-attention appends
                the new keys/values to it; with ``static_kv`` (cross-attention) the projected
                memory is computed on the first step and reused.
        """
        if memory is not None and self.sharing == "qv":
            raise ValueError("sharing='qv' is self-attention only: V must come from Q's input.")
        projected = self._heads(self.q(x))  # (B, h, L_q, n*d/h)
        q = self.q_norm(projected)
        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            source = x if memory is None else memory
            k, v = self._key_value(source, projected if memory is None else None)
            if cache is not None:
                if not static_kv and "k" in cache:
                    same = v is k  # kv sharing without qk_norm: one tensor, one concatenation
                    k = torch.cat([cache["k"], k], dim=2)
                    v = k if same else torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        logits = (q @ k.transpose(-2, -1)) * self.scale  # (B, h, L_q, L_k)
        if attn_bias is not None:
            logits = logits + attn_bias
        if attn_mask is not None:
            logits = logits.masked_fill(~attn_mask, torch.finfo(logits.dtype).min)
        attn = self.attn_drop(logits.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], self.dim)  # (B, L_q, d)
        return self.proj_drop(self.proj(out))
