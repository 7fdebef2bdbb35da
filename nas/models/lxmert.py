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

The last cross layer's vision stream is not run. LXMERT (Sec. 2.3) has three outputs: the
language and vision feature sequences of the cross-modality encoder, and the cross-modality
output, the language stream's first position ([CLS]). Its answer classifiers read the
cross-modality output (the image-QA pre-training task, Fig. 2; NLVR2's classifier, Sec. 4.2),
and its released VQA model (``VQAModel``, as Hugging Face's ``LxmertForQuestionAnswering``)
feeds only that pooled output to the answer head. So the last executed cross layer's vision half
(cross-attention vision -> language, vision self-attention, vision FFN) reaches nothing the
answer depends on; the vision outputs serve LXMERT's pre-training heads (masked object
prediction), which this network does not have. The released encoder still computes it, because
one encoder serves pre-training and fine-tuning. Here the network is trained for the answer
only, so the forward pass skips that half: the logits are exactly those of the full computation
(``tests/test_models_lxmert.py``), training and inference save its compute (8.5% of the full
computation's MAdds for the ``lxmert`` preset on ``vqa2``), and the cost model, which counts
what runs, counts it out. Its parameters stay, as in LXMERT (the published 181M counts them, and
a released checkpoint has them): ``unused_parameter_names`` lists them.
``build(..., vision_output=True)`` runs the released encoder's full computation instead (the
MAdds of LXMERT's own forward pass; the logits do not change).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, Literal, overload

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

    @overload
    def forward(self, lang: torch.Tensor, visn: torch.Tensor, lang_mask: Mask = ...,
                visn_mask: Mask = ..., *, vision: Literal[True] = ...,
                ) -> tuple[torch.Tensor, torch.Tensor]: ...

    @overload
    def forward(self, lang: torch.Tensor, visn: torch.Tensor, lang_mask: Mask = ...,
                visn_mask: Mask = ..., *, vision: bool,
                ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def forward(
        self, lang: torch.Tensor, visn: torch.Tensor, lang_mask: Mask = None,
        visn_mask: Mask = None, *, vision: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``lang`` (B, L, d) and ``visn`` (B, R, d) -> both updated; with ``vision=False``
        only the language stream is computed and the vision result is None."""
        lang_att = self.cross(lang, visn, visn_mask)  # (B, L, d)
        if not vision:
            return self.lang_output(self.lang_self(lang_att, mask=lang_mask)), None
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
        visn_mask: Mask = None, *, vision_output: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Both streams through every executed layer; ``vision_output=False`` skips the last
        executed layer's vision half (its result is then None)."""
        layers = [layer for _, layer in self.stack.executed()]
        for depth, layer in enumerate(layers):
            last = depth == len(layers) - 1
            lang, out = layer(lang, visn, lang_mask, visn_mask, vision=vision_output or not last)
            if out is None:
                return lang, None
            visn = out
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
        vision_output: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.vision_output = vision_output
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
        (B, R, 4) normalised corners -> logits (B, A).

        The last cross layer's vision half runs only with ``vision_output`` (module docstring):
        the head reads the language stream's first position alone."""
        lang_mask = (question != 0)[:, None, None, :]  # (B, 1, 1, Lq)
        visn_mask = (regions.abs().sum(dim=-1) != 0)[:, None, None, :]  # (B, 1, 1, R)
        lang = self.embeddings(question)  # (B, Lq, d)
        visn = self.visual_encoder(regions, boxes)  # (B, R, d)
        lang = self.language(lang, lang_mask)
        visn = self.vision(visn, visn_mask)
        lang, _ = self.cross(lang, visn, lang_mask, visn_mask, vision_output=self.vision_output)
        return self.classifier(self.pooler(lang[:, 0]))  # (B, A)

    def unused_parameter_names(self) -> list[str]:
        """Parameters that cannot influence the logits (they get no gradient).

        As in LXMERT, the VQA head reads only the language stream, so the vision self-attention
        and FFN of the last executed cross layer are dead for this task (LXMERT keeps them for its
        pre-training heads); the forward pass does not run them unless ``vision_output``. With
        cross-layer sharing they are live when that module also runs at an earlier depth (its
        computation at the last depth is skipped all the same).
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
    vision_output: bool = False,
) -> LXMERT:
    """The LXMERT network that ``config`` describes, for the VQA geometry ``task``.

    ``vision_output=True`` also runs the last cross layer's vision half, as LXMERT's released
    encoder does (same logits; that half is 8.5% of this computation's MAdds for the
    ``lxmert`` preset on ``vqa2``)."""
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
        vision_output=vision_output,
        device=device,
        dtype=dtype,
    )
