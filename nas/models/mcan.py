"""MCAN encoder-decoder ("MCAN-ED") for visual question answering, with every knob.

The backbone is MCAN's stack of ``encoder_layers`` x SA over the question tokens followed by
``decoder_layers`` x SGA over the image regions, whose guided attention takes its keys and values
from the FINAL encoder output. Residuals are post-LayerNorm, ``LN(x + dropout(sublayer(x)))``.
Around it sit MCAN's question encoder (300-d word embedding + LSTM), the region projection, one
attention-flattening pooling per stream, and the answer classifier.

Padding: question tokens with id 0 are masked in attention and pooling; regions whose features are
all zero are padding (as in MCAN) and are masked the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import torch
from torch import nn

from nas.config import ArchConfig
from nas.layers import Attention, FeedForward, SharedStack
from nas.models.base import FamilyModel, attention_knobs, ffn_knobs
from nas.tasks import TaskGeometry

__all__ = [
    "MCAN",
    "AttentionPool",
    "Decoder",
    "Encoder",
    "GuidedSelfAttentionLayer",
    "SelfAttentionLayer",
    "build",
]

WORD_DIM = 300  # MCAN's GloVe word-embedding width
_LN_EPS = 1e-6  # MCAN's LayerNorm epsilon

Factory = Callable[[], nn.Module]


class SelfAttentionLayer(nn.Module):
    """MCAN's SA unit: self-attention and FFN, each as ``LN(x + dropout(sublayer(x)))``.

    Args:
        dim: width d.
        attention: builds the attention module (called once).
        ffn: builds the feed-forward module (called once).
        dropout: residual dropout.
    """

    def __init__(
        self,
        dim: int,
        *,
        attention: Factory,
        ffn: Factory,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.attn = attention()
        self.drop1 = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(dim, eps=_LN_EPS, device=device, dtype=dtype)
        self.ffn = ffn()
        self.drop2 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim, eps=_LN_EPS, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` (B, L, d); ``mask`` bool (B, 1, 1, L), True = may attend."""
        x = self.norm1(x + self.drop1(self.attn(x, attn_mask=mask)))
        return self.norm2(x + self.drop2(self.ffn(x)))  # (B, L, d)


class GuidedSelfAttentionLayer(nn.Module):
    """MCAN's SGA unit: self-attention, guided attention (keys/values from ``memory``), FFN."""

    def __init__(
        self,
        dim: int,
        *,
        attention: Factory,
        ffn: Factory,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        norm = partial(nn.LayerNorm, dim, eps=_LN_EPS, device=device, dtype=dtype)
        self.self_attn = attention()
        self.drop1, self.norm1 = nn.Dropout(dropout), norm()
        self.guided_attn = attention()
        self.drop2, self.norm2 = nn.Dropout(dropout), norm()
        self.ffn = ffn()
        self.drop3, self.norm3 = nn.Dropout(dropout), norm()

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        y_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y`` (B, R, d) attends to itself, then to ``memory`` (B, L, d)."""
        y = self.norm1(y + self.drop1(self.self_attn(y, attn_mask=y_mask)))
        y = self.norm2(y + self.drop2(self.guided_attn(y, memory, attn_mask=memory_mask)))
        return self.norm3(y + self.drop3(self.ffn(y)))  # (B, R, d)


class Encoder(nn.Module):
    """The question encoder: SA layers run in ``stack``'s sharing pattern."""

    def __init__(self, stack: SharedStack) -> None:
        super().__init__()
        self.stack = stack

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for _, layer in self.stack.executed():
            x = layer(x, mask)
        return x  # (B, Lq, d)


class Decoder(nn.Module):
    """The region decoder: SGA layers, each guided by the final encoder output ``memory``."""

    def __init__(self, stack: SharedStack) -> None:
        super().__init__()
        self.stack = stack

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        y_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        for _, layer in self.stack.executed():
            y = layer(y, memory, y_mask, memory_mask)
        return y  # (B, R, d)


class AttentionPool(nn.Module):
    """MCAN's attention flattening (one glimpse): softmax-weighted sum of tokens, then a merge.

    ``mlp`` scores each token (Linear(d, d), ReLU, dropout, Linear(d, 1)); padding tokens get no
    weight; the weighted sum (d) is merged by ``Linear(d, out_dim)``.
    """

    def __init__(
        self,
        dim: int,
        out_dim: int,
        *,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.mlp = nn.Sequential(
            nn.Linear(dim, dim, **kw),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(dim, 1, **kw),
        )
        self.merge = nn.Linear(dim, out_dim, **kw)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` (B, L, d), ``keep`` bool (B, L) (False = padding) -> (B, out_dim)."""
        logits = self.mlp(x).squeeze(-1)  # (B, L)
        if keep is not None:
            logits = logits.masked_fill(~keep, torch.finfo(logits.dtype).min)
        weights = logits.softmax(dim=-1)
        pooled = (weights.unsqueeze(1) @ x).squeeze(1)  # (B, d)
        return self.merge(pooled)  # (B, out_dim)


class MCAN(FamilyModel):
    """MCAN-ED VQA network: question (B, Lq) token ids + regions (B, R, region_dim) -> logits."""

    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "backbone": ("encoder", "decoder"),
        "embedding": ("word_embed", "lstm", "region_proj"),
        "head": ("question_pool", "region_pool", "norm", "classifier"),
    }

    def __init__(
        self,
        *,
        vocab: int,
        region_dim: int,
        num_outputs: int,
        question_tokens: int,
        regions: int,
        dim: int,
        encoder: Encoder,
        decoder: Decoder,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.question_tokens, self.regions, self.region_dim = question_tokens, regions, region_dim
        self.vocab = vocab
        self.word_embed = nn.Embedding(vocab, WORD_DIM, **kw)
        self.lstm = nn.LSTM(WORD_DIM, dim, batch_first=True, **kw)
        self.region_proj = nn.Linear(region_dim, dim, **kw)
        self.encoder = encoder
        self.decoder = decoder
        self.question_pool = AttentionPool(dim, 2 * dim, dropout=dropout, **kw)
        self.region_pool = AttentionPool(dim, 2 * dim, dropout=dropout, **kw)
        self.norm = nn.LayerNorm(2 * dim, eps=_LN_EPS, **kw)
        self.classifier = nn.Linear(2 * dim, num_outputs, **kw)

    def forward(self, question: torch.Tensor, regions: torch.Tensor) -> torch.Tensor:
        """``question`` (B, Lq) long (0 = padding), ``regions`` (B, R, region_dim) -> (B, A)."""
        q_keep = question != 0  # (B, Lq)
        r_keep = regions.abs().sum(dim=-1) != 0  # (B, R): all-zero features are padding
        q_mask, r_mask = q_keep[:, None, None, :], r_keep[:, None, None, :]  # (B, 1, 1, L)

        x, _ = self.lstm(self.word_embed(question))  # (B, Lq, d)
        y = self.region_proj(regions)  # (B, R, d)
        x = self.encoder(x, q_mask)
        y = self.decoder(y, x, r_mask, q_mask)

        fused = self.question_pool(x, q_keep) + self.region_pool(y, r_keep)  # (B, 2d)
        return self.classifier(self.norm(fused))  # (B, A)

    def example_inputs(self, batch: int = 1) -> dict[str, torch.Tensor]:
        device = self.device
        return {
            "question": torch.randint(
                1, max(self.vocab, 2), (batch, self.question_tokens), device=device
            ),
            "regions": torch.randn(
                batch, self.regions, self.region_dim, device=device,
                dtype=self.region_proj.weight.dtype,
            ),
        }


def build(
    config: ArchConfig,
    task: TaskGeometry,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    dropout: float = 0.1,
) -> MCAN:
    """The MCAN-ED network that ``config`` describes, for the VQA geometry ``task``."""
    if config.family != "mcan":
        raise ValueError(f"`config.family` must be 'mcan', but got {config.family!r}.")
    d = config.d_model
    attention = partial(Attention, d, config.heads, **attention_knobs(config), attn_drop=dropout,
                        device=device, dtype=dtype)
    ffn = partial(FeedForward, d, config.d_ff, **ffn_knobs(config), drop=dropout,
                  device=device, dtype=dtype)

    def stack(name: str, layer: type[nn.Module]) -> SharedStack:
        return SharedStack.build(
            partial(layer, d, attention=attention, ffn=ffn, dropout=dropout, device=device,
                    dtype=dtype),
            config.sharing_pattern(name),
        )

    return MCAN(
        vocab=task.question_vocab,
        region_dim=task.region_dim,
        num_outputs=task.num_outputs,
        question_tokens=task.question_tokens,
        regions=task.regions,
        dim=d,
        encoder=Encoder(stack("encoder", SelfAttentionLayer)),
        decoder=Decoder(stack("decoder", GuidedSelfAttentionLayer)),
        dropout=dropout,
        device=device,
        dtype=dtype,
    )
