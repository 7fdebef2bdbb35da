"""The object relation transformer captioner (ORT) and its compact form (ACORT).

Region features are embedded (Linear + ReLU), encoded by self-attention layers whose logits carry
a box-geometry term, and an autoregressive decoder (masked self-attention, cross-attention to the
encoded regions, FFN) predicts the caption tokens: words, or radix digits when ``radix_base`` is
set (see ``nas.radix``). Residuals are pre-LayerNorm, ``x + dropout(sublayer(LN(x)))``, with a final
LayerNorm on the encoder and on the decoder output. Incremental decoding keeps one key/value cache
per executed decoder depth (``nas.models.decoding``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from nas.config import ArchConfig
from nas.layers import Attention, FeedForward, SharedStack
from nas.models.base import FamilyModel, attention_knobs, ffn_knobs
from nas.models.decoding import DecodeState, LayerCache, beam_search, greedy_search
from nas.radix import digits_per_word
from nas.tasks import TaskGeometry

__all__ = [
    "BoxGeometry",
    "DecoderLayer",
    "EncoderLayer",
    "ORTCaptioner",
    "build",
    "caption_tokens",
]

_Device = torch.device | str | None


def caption_tokens(task: TaskGeometry, radix_base: int | None) -> int:
    """Tokens of one full caption of ``task``: words, times the digits per word with radix (the
    decoder runs on BOS + these: ``nas.tasks.decoder_positions``).

    ``task.num_outputs`` is the word-level vocabulary with PAD, BOS and EOS; the digits index its
    words only, as the tokenizer writes them (``nas.radix.digits_per_word``).
    """
    return task.caption_words * digits_per_word(task.num_outputs, radix_base)


def _sinusoid_table(
    length: int, dim: int, device: _Device, dtype: torch.dtype | None
) -> torch.Tensor:
    """Transformer positions: (length, dim), sin on even channels and cos on odd ones."""
    half = (dim + 1) // 2
    pos = torch.arange(length, device=device, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    freq = torch.exp(
        torch.arange(half, device=device, dtype=torch.float32) * (-2.0 * math.log(10000.0) / dim)
    )  # (half,)
    angles = pos * freq  # (L, half)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :dim]  # (L, dim)
    return table.to(dtype or torch.get_default_dtype())


class BoxGeometry(nn.Module):
    """Pairwise box geometry as a sinusoidal embedding (ORT's ``BoxRelationalEmbedding``).

    For boxes ``(x0, y0, x1, y1)`` and every pair (m, n): ``(log(|cx_m - cx_n| / w_m),
    log(|cy_m - cy_n| / h_m), log(w_n / w_m), log(h_n / h_m))``, the displacement ratios clamped
    at 1e-3 before the log (no log(0) for coincident centres), each scaled by 100 and embedded
    with ``dim / 8`` wave lengths ``wave_len ** (-i / (dim / 8))`` into sin and cos. No
    parameters: each encoder layer maps the embedding to its own per-head logit bias.
    """

    def __init__(self, dim: int = 64, wave_len: float = 1000.0, scale: float = 100.0) -> None:
        super().__init__()
        if dim % 8:
            raise ValueError(f"`dim % 8 == 0` must hold, but got {dim=}.")
        self.dim, self.wave_len, self.scale = dim, wave_len, scale

    def forward(self, boxes: torch.Tensor) -> torch.Tensor:
        """(B, R, 4) boxes -> (B, R, R, dim) embedding of every ordered pair (m, n)."""
        # at least float32: the x100 scale before sin/cos amplifies rounding errors
        x0, y0, x1, y1 = boxes.to(torch.promote_types(boxes.dtype, torch.float32)).unbind(-1)
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        w = (x1 - x0).clamp(min=1e-3)  # degenerate boxes must not divide by zero
        h = (y1 - y0).clamp(min=1e-3)
        dx = ((cx.unsqueeze(2) - cx.unsqueeze(1)).abs() / w.unsqueeze(2)).clamp(min=1e-3).log()
        dy = ((cy.unsqueeze(2) - cy.unsqueeze(1)).abs() / h.unsqueeze(2)).clamp(min=1e-3).log()
        dw = (w.unsqueeze(1) / w.unsqueeze(2)).log()  # [m, n] = log(w_n / w_m)
        dh = (h.unsqueeze(1) / h.unsqueeze(2)).log()
        position = torch.stack([dx, dy, dw, dh], dim=-1)  # (B, R, R, 4)
        steps = self.dim // 8
        freq = self.wave_len ** -(
            torch.arange(steps, device=boxes.device, dtype=x0.dtype) / steps
        )  # (dim/8,)
        angles = (self.scale * position).unsqueeze(-1) * freq  # (B, R, R, 4, dim/8)
        angles = angles.flatten(-2)  # (B, R, R, dim/2)
        return torch.cat([angles.sin(), angles.cos()], dim=-1).to(boxes.dtype)  # (B, R, R, dim)


class EncoderLayer(nn.Module):
    """Pre-LN self-attention with a box-geometry logit bias, then a pre-LN FFN.

    The geometry bias of head j is ``log(max(relu(w_j . g_mn + b_j), 1e-6))`` with one
    ``Linear(geometry_dim -> num_heads)`` per layer (= one ``Linear(geometry_dim -> 1)`` per head).
    """

    def __init__(
        self, dim: int, attn: Attention, ffn: FeedForward, num_heads: int, *,
        geometry_dim: int = 64, dropout: float = 0.1, device: _Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.norm1 = nn.LayerNorm(dim, **kw)
        self.attn = attn
        self.geometry = nn.Linear(geometry_dim, num_heads, **kw)
        self.norm2 = nn.LayerNorm(dim, **kw)
        self.ffn = ffn
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, geometry: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """x (B, R, d), geometry (B, R, R, g), mask (B, 1, 1, R) bool -> (B, R, d)."""
        bias = self.geometry(geometry).relu().clamp(min=1e-6).log()  # (B, R, R, h)
        bias = bias.permute(0, 3, 1, 2)  # (B, h, R, R)
        x = x + self.drop(self.attn(self.norm1(x), attn_mask=mask, attn_bias=bias))
        return x + self.drop(self.ffn(self.norm2(x)))


class DecoderLayer(nn.Module):
    """Pre-LN masked self-attention, cross-attention to the regions, and FFN."""

    def __init__(
        self, dim: int, self_attn: Attention, cross_attn: Attention, ffn: FeedForward, *,
        dropout: float = 0.1, device: _Device = None, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.norm1 = nn.LayerNorm(dim, **kw)
        self.self_attn = self_attn
        self.norm2 = nn.LayerNorm(dim, **kw)
        self.cross_attn = cross_attn
        self.norm3 = nn.LayerNorm(dim, **kw)
        self.ffn = ffn
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor,
        memory_mask: torch.Tensor, cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). ``cache`` is THIS executed depth's cache (or None)."""
        self_cache = None if cache is None else cache["self"]
        cross_cache = None if cache is None else cache["cross"]
        h = self.self_attn(self.norm1(x), attn_mask=self_mask, cache=self_cache)
        x = x + self.drop(h)
        h = self.cross_attn(
            self.norm2(x), memory, attn_mask=memory_mask, cache=cross_cache, static_kv=True
        )
        x = x + self.drop(h)
        return x + self.drop(self.ffn(self.norm3(x)))


class _Encoder(nn.Module):
    """Encoder layers in their sharing pattern, sharing one geometry embedding; final LayerNorm."""

    def __init__(self, layers: SharedStack, norm: nn.LayerNorm, geometry: BoxGeometry) -> None:
        super().__init__()
        self.geometry = geometry
        self.layers = layers
        self.norm = norm

    def forward(self, x: torch.Tensor, boxes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        geometry = self.geometry(boxes).to(x.dtype)  # (B, R, R, g): once per forward pass
        for _, layer in self.layers.executed():
            x = layer(x, geometry, mask)
        return self.norm(x)


class _Decoder(nn.Module):
    """Decoder layers in their sharing pattern; ``caches[depth]`` serves executed ``depth``."""

    def __init__(self, layers: SharedStack, norm: nn.LayerNorm) -> None:
        super().__init__()
        self.layers = layers
        self.norm = norm

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor,
        memory_mask: torch.Tensor, caches: list[LayerCache] | None = None,
    ) -> torch.Tensor:
        for depth, layer in self.layers.executed():
            cache = None if caches is None else caches[depth]
            x = layer(x, memory, self_mask, memory_mask, cache)
        return self.norm(x)


class _TokenEmbedding(nn.Module):
    """Token embedding scaled by sqrt(d) plus sinusoidal positions (a buffer), then dropout."""

    positions: torch.Tensor

    def __init__(
        self, vocab: int, dim: int, max_positions: int, *, dropout: float, device: _Device,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, device=device, dtype=dtype)
        nn.init.normal_(self.embed.weight, std=dim**-0.5)  # unit scale after the sqrt(d) factor
        self.scale = math.sqrt(dim)
        self.register_buffer(
            "positions", _sinusoid_table(max_positions, dim, device, dtype), persistent=False
        )
        self.drop = nn.Dropout(dropout)

    def ensure_positions(self, length: int) -> None:
        """Grow the table to at least ``length`` positions (sinusoids extend to any length)."""
        if length > self.positions.shape[0]:
            self.positions = _sinusoid_table(
                length, self.positions.shape[1], self.positions.device, self.positions.dtype
            )

    def forward(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """(B, T) ids at positions start..start+T-1 -> (B, T, d)."""
        end = start + tokens.shape[1]
        if end > self.positions.shape[0]:
            raise ValueError(
                f"Decoder positions up to {end} requested, but the model has "
                f"max_positions={self.positions.shape[0]}."
            )
        return self.drop(self.embed(tokens) * self.scale + self.positions[start:end])


class ORTCaptioner(FamilyModel):
    """Object relation transformer captioner.

    ``forward(regions, boxes, tokens)`` is teacher forcing: ``tokens`` (B, T) is the decoder input
    (BOS + caption, whose targets are caption + EOS) and the result is next-token logits
    (B, T, V). ``caption_len`` is the tokens of a full caption (``caption_tokens``); the decoder
    runs on ``decoder_len`` = BOS + those positions (``nas.tasks.decoder_positions``) in
    training, in generation and in the cost geometry (``example_inputs``). Regions whose
    features are all zero are padding unless ``region_mask`` says otherwise; PAD tokens are
    masked as keys. ``generate`` runs greedy or beam search with the cached ``decode_step``.
    """

    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "backbone": ("encoder", "decoder"),
        "embedding": ("region_embed", "token_embed"),
        "head": ("head",),
    }

    def __init__(
        self, config: ArchConfig, *, region_dim: int, vocab_size: int, num_regions: int,
        caption_len: int, pad_id: int, bos_id: int, eos_id: int, max_positions: int | None = None,
        dropout: float = 0.1, device: _Device = None, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        d, h = config.d_model, config.heads
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        self.vocab_size, self.num_regions, self.region_dim = vocab_size, num_regions, region_dim
        self.caption_len = caption_len
        self.decoder_len = caption_len + 1  # BOS + the caption: nas.tasks.decoder_positions
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id

        def attention() -> Attention:
            return Attention(d, h, **attention_knobs(config), attn_drop=dropout, **kw)

        def ffn() -> FeedForward:
            return FeedForward(d, config.d_ff, **ffn_knobs(config), drop=dropout, **kw)

        geometry = BoxGeometry()
        encoder = SharedStack.build(
            lambda: EncoderLayer(d, attention(), ffn(), h, geometry_dim=geometry.dim,
                                 dropout=dropout, **kw),
            config.sharing_pattern("encoder"),
        )
        decoder = SharedStack.build(
            lambda: DecoderLayer(d, attention(), attention(), ffn(), dropout=dropout, **kw),
            config.sharing_pattern("decoder"),
        )
        self.region_embed = nn.Sequential(
            nn.Linear(region_dim, d, **kw), nn.ReLU(), nn.Dropout(dropout)
        )
        self.encoder = _Encoder(encoder, nn.LayerNorm(d, **kw), geometry)
        positions = max_positions if max_positions is not None else 2 * (caption_len + 2)
        self.token_embed = _TokenEmbedding(vocab_size, d, positions, dropout=dropout, **kw)
        self.decoder = _Decoder(decoder, nn.LayerNorm(d, **kw))
        self.head = nn.Linear(d, vocab_size, **kw)

    # ------------------------------------------------------------------ teacher forcing
    def encode(
        self, regions: torch.Tensor, boxes: torch.Tensor, region_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoded regions (B, R, d) and the region mask (B, R) (True = real region)."""
        if region_mask is None:
            region_mask = regions.ne(0).any(dim=-1)  # all-zero feature rows are padding
        x = self.region_embed(regions)  # (B, R, d)
        memory = self.encoder(x, boxes, region_mask[:, None, None, :])
        return memory, region_mask

    def forward(
        self, regions: torch.Tensor, boxes: torch.Tensor, tokens: torch.Tensor,
        region_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """regions (B, R, region_dim), boxes (B, R, 4), tokens (B, T) -> logits (B, T, V)."""
        memory, region_mask = self.encode(regions, boxes, region_mask)
        t = tokens.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()  # (T, T)
        self_mask = causal & tokens.ne(self.pad_id)[:, None, None, :]  # (B, 1, T, T)
        x = self.token_embed(tokens)  # (B, T, d)
        x = self.decoder(x, memory, self_mask, region_mask[:, None, None, :])
        return self.head(x)  # (B, T, V)

    # ------------------------------------------------------------------ incremental decoding
    def start_decoding(
        self, regions: torch.Tensor, boxes: torch.Tensor, region_mask: torch.Tensor | None = None
    ) -> DecodeState:
        """Encode the regions and open empty caches, one per executed decoder depth."""
        memory, region_mask = self.encode(regions, boxes, region_mask)
        caches: list[LayerCache] = [
            {"self": {}, "cross": {}} for _ in range(len(self.decoder.layers))
        ]
        token_mask = region_mask.new_zeros((memory.shape[0], 0))
        return DecodeState(memory, region_mask, caches, token_mask)

    def decode_step(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Feed one token per row (B,) at position ``state.step``; next-token logits (B, V)."""
        state.token_mask = torch.cat([state.token_mask, tokens.ne(self.pad_id)[:, None]], dim=1)
        x = self.token_embed(tokens[:, None], start=state.step)  # (B, 1, d)
        x = self.decoder(
            x, state.memory, state.token_mask[:, None, None, :],
            state.memory_mask[:, None, None, :], state.caches,
        )
        state.step += 1
        return self.head(x[:, 0])  # (B, V)

    @torch.no_grad()
    def generate(
        self, regions: torch.Tensor, boxes: torch.Tensor, region_mask: torch.Tensor | None = None,
        *, beam_size: int = 1, max_len: int | None = None, length_penalty: float = 0.0,
    ) -> torch.Tensor:
        """Caption token ids (B, <= max_len) after BOS: EOS kept, PAD after it.

        ``beam_size=1`` is greedy decoding; ``max_len`` defaults to a caption of the task plus
        EOS, whose decoding steps feed ``decoder_len`` tokens (BOS + the caption), as training
        does. Decode the result with the tokenizer (``RadixTokenizer.decode`` for radix models).
        """
        max_len = self.decoder_len if max_len is None else max_len  # caption + EOS
        self.token_embed.ensure_positions(max_len)  # a caption of max_len tokens after BOS
        state = self.start_decoding(regions, boxes, region_mask)
        if beam_size == 1:
            return greedy_search(self, state, max_len)
        return beam_search(self, state, max_len, beam_size, length_penalty=length_penalty)

    # ------------------------------------------------------------------ cost geometry
    def example_inputs(self, batch: int = 1) -> dict[str, torch.Tensor]:
        """Random regions, valid boxes and the decoder input of a full-length caption: BOS and
        ``caption_len`` ordinary tokens, ``decoder_len`` positions (what training feeds)."""
        device, dtype = self.device, self.head.weight.dtype
        b, r = batch, self.num_regions
        corners = torch.rand(b, r, 2, 2, device=device, dtype=dtype)  # (B, R, xy, 2 samples)
        low, high = corners.min(dim=-1).values, corners.max(dim=-1).values  # (B, R, 2)
        boxes = torch.cat([low, high + 1e-2], dim=-1)  # (B, R, 4): x0, y0, x1, y1
        first = min(self.pad_id, self.bos_id, self.eos_id)
        # ordinary tokens: [3, V) after the word tokenizer's specials, [0, v) before radix ones
        low_id, high_id = (3, self.vocab_size) if first == 0 else (0, first)
        tokens = torch.randint(low_id, high_id, (b, self.decoder_len), device=device)
        tokens[:, 0] = self.bos_id
        return {
            "regions": torch.randn(b, r, self.region_dim, device=device, dtype=dtype),
            "boxes": boxes,
            "tokens": tokens,
        }


def build(
    config: ArchConfig, task: TaskGeometry, *, device: _Device = None,
    dtype: torch.dtype | None = None, dropout: float = 0.1,
) -> ORTCaptioner:
    """The ORT/ACORT captioner for ``task``: word vocabulary, or radix digits with ``radix_base``.

    Special ids follow the tokenizers of ``nas.radix``: ``RadixTokenizer`` (PAD, BOS, EOS =
    v, v+1, v+2) with radix, ``WordTokenizer`` (0, 1, 2) without.
    """
    v = config.radix_base
    vocab, pad = (task.num_outputs, 0) if v is None else (v + 3, v)
    return ORTCaptioner(
        config, region_dim=task.region_dim, vocab_size=vocab, num_regions=task.regions,
        caption_len=caption_tokens(task, v), pad_id=pad, bos_id=pad + 1, eos_id=pad + 2,
        dropout=dropout, device=device, dtype=dtype,
    )
