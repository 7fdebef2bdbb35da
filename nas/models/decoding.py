"""Autoregressive search over an incrementally decoding captioner: greedy and beam search.

The searches only need the small protocol ``IncrementalDecoder``: special token ids, a
``decode_step`` that turns the previous token of every row into next-token logits while updating a
state, and ``reorder_state`` to follow beams. The state (``DecodeState``) keeps ONE key/value
cache per executed decoder depth, so a decoder layer that runs at several depths (layer sharing)
never mixes its depths' keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from nas.layers import Cache

__all__ = ["DecodeState", "IncrementalDecoder", "LayerCache", "beam_search", "greedy_search"]

LayerCache = dict[str, Cache]
"""One executed decoder depth's caches: ``{"self": {...}, "cross": {...}}``."""


@dataclass
class DecodeState:
    """What incremental decoding carries from one step to the next.

    Attributes:
        memory: encoder output (B, R, d).
        memory_mask: (B, R) bool, True for real (non-padding) regions.
        caches: one ``LayerCache`` per EXECUTED decoder depth, in execution order.
        token_mask: (B, t) bool, True for the non-PAD tokens fed so far (the keys' mask).
        step: number of tokens fed so far (the position of the next one).
    """

    memory: torch.Tensor
    memory_mask: torch.Tensor
    caches: list[LayerCache]
    token_mask: torch.Tensor
    step: int = 0

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (B',) of every batched tensor, in that order (beam bookkeeping)."""
        self.memory = self.memory.index_select(0, index)
        self.memory_mask = self.memory_mask.index_select(0, index)
        self.token_mask = self.token_mask.index_select(0, index)
        for layer in self.caches:
            for cache in layer.values():
                for key, value in cache.items():
                    cache[key] = value.index_select(0, index)


class IncrementalDecoder(Protocol):
    """What the searches need from a model."""

    pad_id: int
    bos_id: int
    eos_id: int

    def decode_step(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Logits (B, V) of the next token given the previous ones (B,)."""
        ...


def _block_specials(logits: torch.Tensor, model: IncrementalDecoder) -> torch.Tensor:
    """Log-probabilities with PAD and BOS made impossible (they are never generated)."""
    logp = logits.float().log_softmax(dim=-1)
    logp[:, [model.pad_id, model.bos_id]] = -torch.inf
    return logp


@torch.no_grad()
def greedy_search(model: IncrementalDecoder, state: DecodeState, max_len: int) -> torch.Tensor:
    """Greedy decoding: (B, <= max_len) token ids after BOS, EOS kept, PAD after EOS.

    Stops early once every row has produced EOS.
    """
    batch = state.memory.shape[0]
    device = state.memory.device
    last = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    out: list[torch.Tensor] = []
    for _ in range(max_len):
        logp = _block_specials(model.decode_step(last, state), model)  # (B, V)
        nxt = logp.argmax(dim=-1)
        nxt = nxt.masked_fill(finished, model.pad_id)
        out.append(nxt)
        finished = finished | (nxt == model.eos_id)
        last = nxt
        if bool(finished.all()):
            break
    return torch.stack(out, dim=1) if out else last.new_empty((batch, 0))


@torch.no_grad()
def beam_search(
    model: IncrementalDecoder,
    state: DecodeState,
    max_len: int,
    beam_size: int,
    *,
    length_penalty: float = 0.0,
) -> torch.Tensor:
    """Beam search: the best hypothesis per row, (B, <= max_len) ids after BOS, PAD after EOS.

    A hypothesis' score is its summed log-probability divided by ``length ** length_penalty``
    (length = generated tokens including EOS); the penalty is applied when the final hypotheses
    are ranked. Finished hypotheses stay in the beam, extended by PAD at no cost.
    """
    if beam_size < 1:
        raise ValueError(f"`beam_size >= 1` must hold, but got {beam_size=}.")
    batch = state.memory.shape[0]
    device = state.memory.device
    k = beam_size
    state.reorder(torch.arange(batch, device=device).repeat_interleave(k))  # (B*K) rows
    scores = torch.full((batch, k), -torch.inf, device=device)
    scores[:, 0] = 0.0  # all beams start identical: keep only one alive
    last = torch.full((batch * k,), model.bos_id, dtype=torch.long, device=device)
    finished = torch.zeros(batch * k, dtype=torch.bool, device=device)
    seqs = last.new_empty((batch * k, 0))
    offsets = (torch.arange(batch, device=device) * k).unsqueeze(1)  # (B, 1)
    for _ in range(max_len):
        logp = _block_specials(model.decode_step(last, state), model)  # (B*K, V)
        vocab = logp.shape[-1]
        logp[finished] = -torch.inf
        logp[finished, model.pad_id] = 0.0
        cand = (scores.view(-1, 1) + logp).view(batch, k * vocab)  # (B, K*V)
        scores, flat = cand.topk(k, dim=-1)  # (B, K)
        rows = (offsets + torch.div(flat, vocab, rounding_mode="floor")).view(-1)  # (B*K,)
        tokens = (flat % vocab).view(-1)
        seqs = torch.cat([seqs.index_select(0, rows), tokens.unsqueeze(1)], dim=1)
        finished = finished.index_select(0, rows) | (tokens == model.eos_id)
        state.reorder(rows)
        last = tokens
        if bool((finished | scores.view(-1).isneginf()).all()):  # dead beams need no more steps
            break
    lengths = (seqs != model.pad_id).sum(dim=1).clamp(min=1).view(batch, k)
    ranked = scores / lengths.to(scores.dtype).pow(length_penalty)
    best = offsets.squeeze(1) + ranked.argmax(dim=-1)  # (B,)
    return seqs.index_select(0, best)
