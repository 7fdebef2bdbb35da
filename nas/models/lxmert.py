"""LXMERT (Tan & Bansal 2019) for visual question answering, with every knob.

The backbone is LXMERT's three encoders: ``language_layers`` BERT layers over the question,
``vision_layers`` object-relationship layers over the regions, then ``cross_layers`` cross-modality
layers. Every block is BERT's post-LayerNorm kind: an attention block is Q, K, V + output dense,
then ``LN(x + dropout(attn))``; an FFN block is intermediate dense (GELU) + output dense, then
``LN(x + dropout(ffn))``. A cross layer owns ONE cross-attention block (attention and its LN),
called in both directions (language attends to vision, vision attends to language) on the
layer's inputs, then a self-attention block and an FFN block per stream.

Around the backbone: BERT embeddings (word, position, token type, LN), LXMERT's visual feature
encoder ``(LN(W_f f) + LN(W_b box)) / 2``, the pooler (first language token, dense + tanh) and the
VQA head. Padding: question tokens with id 0 and regions whose features are all zero are masked
as attention keys.
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
    "LXMERT",
    "AttentionBlock",
    "BertEmbeddings",
    "CrossLayer",
    "CrossStack",
    "FeedForwardBlock",
    "SingleStreamLayer",
    "SingleStreamStack",
    "VisualFeatureEncoder",
    "build",
]

_LN_EPS = 1e-12  # BERT's LayerNorm epsilon
MAX_POSITIONS = 512
TOKEN_TYPES = 2
BOX_DIM = 4

Factory = Callable[[], nn.Module]
Mask = torch.Tensor | None


class AttentionBlock(nn.Module):
    """BERT's attention layer: ``LN(x + dropout(attention(x, memory)))``.

    ``memory=None`` is self-attention; otherwise the keys and values come from ``memory``.
    """

    def __init__(
        self,
        dim: int,
        *,
        attention: Factory,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.attn = attention()
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim, eps=_LN_EPS, device=device, dtype=dtype)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor | None = None, mask: Mask = None
    ) -> torch.Tensor:
        """``x`` (B, L, d) attends to ``memory`` (B, M, d) or itself; ``mask`` (B, 1, 1, M)."""
        return self.norm(x + self.drop(self.attn(x, memory, attn_mask=mask)))  # (B, L, d)


class FeedForwardBlock(nn.Module):
    """BERT's intermediate + output: ``LN(x + dropout(W2 gelu(W1 x)))``."""

    def __init__(
        self,
        dim: int,
        *,
        ffn: Factory,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.ffn = ffn()
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim, eps=_LN_EPS, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.drop(self.ffn(x)))  # (B, L, d)


class SingleStreamLayer(nn.Module):
    """A BERT layer (language encoder) or object-relationship layer: self-attention, FFN."""

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
        kw: dict[str, Any] = {"dropout": dropout, "device": device, "dtype": dtype}
        self.attention = AttentionBlock(dim, attention=attention, **kw)
        self.output = FeedForwardBlock(dim, ffn=ffn, **kw)

    def forward(self, x: torch.Tensor, mask: Mask = None) -> torch.Tensor:
        return self.output(self.attention(x, mask=mask))  # (B, L, d)


class CrossLayer(nn.Module):
    """LXMERT's cross-modality layer.

    ``cross`` (one attention block, weights and LN) runs twice on the layer's inputs: language
    attends to vision and vision attends to language. Then each stream has its own
    self-attention block and FFN block.
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
        kw: dict[str, Any] = {"dropout": dropout, "device": device, "dtype": dtype}
        self.cross = AttentionBlock(dim, attention=attention, **kw)
        self.lang_self = AttentionBlock(dim, attention=attention, **kw)
        self.visn_self = AttentionBlock(dim, attention=attention, **kw)
        self.lang_output = FeedForwardBlock(dim, ffn=ffn, **kw)
        self.visn_output = FeedForwardBlock(dim, ffn=ffn, **kw)

    def forward(
        self, lang: torch.Tensor, visn: torch.Tensor, lang_mask: Mask = None,
        visn_mask: Mask = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``lang`` (B, L, d) and ``visn`` (B, R, d) -> both updated."""
        lang_att = self.cross(lang, visn, visn_mask)  # (B, L, d)
        visn_att = self.cross(visn, lang, lang_mask)  # (B, R, d)
        lang_att = self.lang_self(lang_att, mask=lang_mask)
        visn_att = self.visn_self(visn_att, mask=visn_mask)
        return self.lang_output(lang_att), self.visn_output(visn_att)


class SingleStreamStack(nn.Module):
    """The language or the object-relationship encoder, run in ``stack``'s sharing pattern."""

    def __init__(self, stack: SharedStack) -> None:
        super().__init__()
        self.stack = stack

    def forward(self, x: torch.Tensor, mask: Mask = None) -> torch.Tensor:
        for _, layer in self.stack.executed():
            x = layer(x, mask)
        return x


class CrossStack(nn.Module):
    """The cross-modality encoder, run in ``stack``'s sharing pattern."""

    def __init__(self, stack: SharedStack) -> None:
        super().__init__()
        self.stack = stack

    def forward(
        self, lang: torch.Tensor, visn: torch.Tensor, lang_mask: Mask = None,
        visn_mask: Mask = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for _, layer in self.stack.executed():
            lang, visn = layer(lang, visn, lang_mask, visn_mask)
        return lang, visn


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, LN, dropout (token type 0 throughout)."""

    def __init__(
        self,
        vocab: int,
        dim: int,
        *,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.word = nn.Embedding(vocab, dim, padding_idx=0, **kw)
        self.position = nn.Embedding(MAX_POSITIONS, dim, **kw)
        self.token_type = nn.Embedding(TOKEN_TYPES, dim, **kw)
        self.norm = nn.LayerNorm(dim, eps=_LN_EPS, **kw)
        self.drop = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` (B, L) -> (B, L, d)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)  # (L,)
        types = torch.zeros_like(positions)
        x = self.word(tokens) + self.position(positions) + self.token_type(types)
        return self.drop(self.norm(x))


class VisualFeatureEncoder(nn.Module):
    """LXMERT's region encoder: ``(LN(W_f features) + LN(W_b boxes)) / 2``, dropout."""

    def __init__(
        self,
        region_dim: int,
        dim: int,
        *,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.feat_fc = nn.Linear(region_dim, dim, **kw)
        self.feat_norm = nn.LayerNorm(dim, eps=_LN_EPS, **kw)
        self.box_fc = nn.Linear(BOX_DIM, dim, **kw)
        self.box_norm = nn.LayerNorm(dim, eps=_LN_EPS, **kw)
        self.drop = nn.Dropout(dropout)

    def forward(self, regions: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """``regions`` (B, R, region_dim), ``boxes`` (B, R, 4) -> (B, R, d)."""
        f = self.feat_norm(self.feat_fc(regions))
        b = self.box_norm(self.box_fc(boxes))
        return self.drop((f + b) / 2)


class LXMERT(FamilyModel):
    """LXMERT VQA network: question ids, region features and boxes -> answer logits."""

    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "backbone": ("language", "vision", "cross"),
        "embedding": ("embeddings", "visual_encoder"),
        "head": ("pooler", "classifier"),
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
        language: SingleStreamStack,
        vision: SingleStreamStack,
        cross: CrossStack,
        dropout: float = 0.1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if question_tokens > MAX_POSITIONS:
            raise ValueError(
                f"`question_tokens <= {MAX_POSITIONS}` must hold (BERT positions), but got "
                f"{question_tokens=}."
            )
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.vocab, self.question_tokens = vocab, question_tokens
        self.regions, self.region_dim = regions, region_dim
        self.embeddings = BertEmbeddings(vocab, dim, dropout=dropout, **kw)
        self.visual_encoder = VisualFeatureEncoder(region_dim, dim, dropout=dropout, **kw)
        self.language, self.vision, self.cross = language, vision, cross
        self.pooler = nn.Sequential(nn.Linear(dim, dim, **kw), nn.Tanh())
        self.classifier = nn.Sequential(
            nn.Linear(dim, 2 * dim, **kw),
            nn.GELU(),
            nn.LayerNorm(2 * dim, eps=_LN_EPS, **kw),
            nn.Linear(2 * dim, num_outputs, **kw),
        )

    def forward(
        self, question: torch.Tensor, regions: torch.Tensor, boxes: torch.Tensor
    ) -> torch.Tensor:
        """``question`` (B, Lq) long (0 = padding), ``regions`` (B, R, region_dim), ``boxes``
        (B, R, 4) normalised corners -> logits (B, A)."""
        lang_mask = (question != 0)[:, None, None, :]  # (B, 1, 1, Lq)
        visn_mask = (regions.abs().sum(dim=-1) != 0)[:, None, None, :]  # (B, 1, 1, R)
        lang = self.embeddings(question)  # (B, Lq, d)
        visn = self.visual_encoder(regions, boxes)  # (B, R, d)
        lang = self.language(lang, lang_mask)
        visn = self.vision(visn, visn_mask)
        lang, visn = self.cross(lang, visn, lang_mask, visn_mask)
        return self.classifier(self.pooler(lang[:, 0]))  # (B, A)

    def unused_parameter_names(self) -> list[str]:
        """Parameters that cannot influence the logits (they get no gradient).

        As in LXMERT, the VQA head reads only the language stream, so the vision self-attention
        and FFN of the last executed cross layer are dead for this task (LXMERT keeps them for its
        pre-training heads). With cross-layer sharing they are live when that module also runs
        at an earlier depth.
        """
        pattern = self.cross.stack.pattern
        if pattern.count(pattern[-1]) > 1:
            return []
        prefix = f"cross.stack.layers.{pattern[-1]}."
        return [
            n for n, _ in self.named_parameters()
            if n.startswith((prefix + "visn_self.", prefix + "visn_output."))
        ]

    def example_inputs(self, batch: int = 1) -> dict[str, torch.Tensor]:
        device, dtype = self.device, self.visual_encoder.feat_fc.weight.dtype
        return {
            "question": torch.randint(
                1, max(self.vocab, 2), (batch, self.question_tokens), device=device
            ),
            "regions": torch.randn(batch, self.regions, self.region_dim, device=device,
                                   dtype=dtype),
            "boxes": torch.rand(batch, self.regions, BOX_DIM, device=device, dtype=dtype),
        }


def build(
    config: ArchConfig,
    task: TaskGeometry,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    dropout: float = 0.1,
) -> LXMERT:
    """The LXMERT network that ``config`` describes, for the VQA geometry ``task``."""
    if config.family != "lxmert":
        raise ValueError(f"`config.family` must be 'lxmert', but got {config.family!r}.")
    d = config.d_model
    attention = partial(Attention, d, config.heads, **attention_knobs(config), attn_drop=dropout,
                        device=device, dtype=dtype)
    ffn = partial(FeedForward, d, config.d_ff, **ffn_knobs(config), drop=0.0,
                  device=device, dtype=dtype)

    def stack(name: str, layer: type[nn.Module]) -> SharedStack:
        return SharedStack.build(
            partial(layer, d, attention=attention, ffn=ffn, dropout=dropout, device=device,
                    dtype=dtype),
            config.sharing_pattern(name),
        )

    return LXMERT(
        vocab=task.question_vocab,
        region_dim=task.region_dim,
        num_outputs=task.num_outputs,
        question_tokens=task.question_tokens,
        regions=task.regions,
        dim=d,
        language=SingleStreamStack(stack("language", SingleStreamLayer)),
        vision=SingleStreamStack(stack("vision", SingleStreamLayer)),
        cross=CrossStack(stack("cross", CrossLayer)),
        dropout=dropout,
        device=device,
        dtype=dtype,
    )
