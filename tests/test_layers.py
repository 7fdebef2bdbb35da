"""Block-level equivalences: the group-wise layers against straightforward reference code."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nas.layers import Attention, FeedForward, GroupLinear

Params = tuple[torch.Tensor, torch.Tensor | None]


def _mha(x: torch.Tensor, memory: torch.Tensor, q: Params, k: Params, v: Params,
         heads: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Textbook multi-head attention without output projection: softmax(QK^T / sqrt(d_qk)) V.

    ``mask`` is bool (B, 1, 1, L_k), True = may attend.
    """
    qx, kx, vx = F.linear(x, *q), F.linear(memory, *k), F.linear(memory, *v)
    b, lq, lk = x.shape[0], x.shape[1], memory.shape[1]
    dq, dv = qx.shape[-1] // heads, vx.shape[-1] // heads
    outs = []
    for head in range(heads):
        qh = qx[..., head * dq:(head + 1) * dq]  # (B, L_q, dq)
        kh = kx[..., head * dq:(head + 1) * dq]
        vh = vx[..., head * dv:(head + 1) * dv]
        scores = qh @ kh.transpose(1, 2) / math.sqrt(dq)  # (B, L_q, L_k)
        if mask is not None:
            scores = scores.masked_fill(~mask[:, 0], float("-inf"))
        outs.append(scores.softmax(-1) @ vh)
    out = torch.cat(outs, dim=-1)
    assert out.shape == (b, lq, vx.shape[-1]) and lk == kx.shape[1]
    return out


def _group_params(layer: GroupLinear, g: int) -> Params:
    """Weight and bias that ``layer`` applies to chunk ``g``."""
    if layer.shared or layer.groups == 1:
        return layer.weight, layer.bias
    go = layer.out_features // layer.groups
    bias = None if layer.bias is None else layer.bias[g * go:(g + 1) * go]
    return layer.weight[g], bias


def _grouped_reference(attn: Attention, x: torch.Tensor, memory: torch.Tensor, groups: int,
                       heads: int) -> torch.Tensor:
    """G-MHA by hand: one ordinary MHA with h/k heads per channel chunk, concat, then W_O."""
    c = x.shape[-1] // groups
    key = attn.q if attn.k is None else attn.k
    outs = []
    for g in range(groups):
        xg, mg = x[..., g * c:(g + 1) * c], memory[..., g * c:(g + 1) * c]
        q = _group_params(attn.q, g)
        k = _group_params(key, g)
        v = k if attn.v is None else _group_params(attn.v, g)
        outs.append(_mha(xg, mg, q, k, v, heads // groups))
    return attn.proj(torch.cat(outs, dim=-1))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def test_weight_shared_group_attention_is_one_mha_per_chunk() -> None:
    attn = Attention(dim=64, num_heads=8, groups=2, weight_sharing=True).eval()
    assert attn.q.weight.shape == (32, 32)  # one weight for both groups
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        wq, bq = attn.q.weight, attn.q.bias
        wk, bk = attn.k.weight, attn.k.bias  # type: ignore[union-attr]
        wv, bv = attn.v.weight, attn.v.bias  # type: ignore[union-attr]
        assert bq is not None and bk is not None and bv is not None
        chunks = []
        for g in range(2):
            xg = x[..., 32 * g:32 * (g + 1)]  # (B, L, 32)
            q, k, v = xg @ wq.T + bq, xg @ wk.T + bk, xg @ wv.T + bv
            heads = []
            for h in range(4):  # 8 heads / 2 groups, each 8 wide
                s = slice(8 * h, 8 * (h + 1))
                a = torch.softmax(q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(8), dim=-1)
                heads.append(a @ v[..., s])
            chunks.append(torch.cat(heads, dim=-1))
        expected = attn.proj(torch.cat(chunks, dim=-1))
        assert torch.allclose(attn(x), expected, atol=1e-5)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("sharing", ["none", "kv", "qk"])
def test_group_cross_attention_matches_per_chunk_reference(shared: bool, sharing: str) -> None:
    attn = Attention(64, 8, groups=4, weight_sharing=shared, sharing=sharing).eval()  # type: ignore[arg-type]
    x, memory = torch.randn(2, 5, 64), torch.randn(2, 7, 64)
    with torch.no_grad():
        expected = _grouped_reference(attn, x, memory, 4, 8)
        assert torch.allclose(attn(x, memory), expected, atol=1e-5)


def test_group_linear_groups_1_is_nn_linear() -> None:
    layer = GroupLinear(24, 40)
    dense = nn.Linear(24, 40)
    assert {n: p.shape for n, p in layer.named_parameters()} == {
        n: p.shape for n, p in dense.named_parameters()
    }
    dense.load_state_dict(layer.state_dict())
    x = torch.randn(3, 6, 24)
    assert torch.allclose(layer(x), dense(x), atol=1e-6)


def test_unshared_group_linear_is_block_diagonal_linear() -> None:
    layer = GroupLinear(24, 36, groups=3)
    assert layer.weight.shape == (3, 12, 8)
    dense = nn.Linear(24, 36)
    with torch.no_grad():
        dense.weight.copy_(torch.block_diag(*layer.weight))
        dense.bias.copy_(layer.bias)  # type: ignore[arg-type]
    x = torch.randn(4, 5, 24)
    assert torch.allclose(layer(x), dense(x), atol=1e-6)


def test_shared_group_linear_is_block_diagonal_of_one_block() -> None:
    layer = GroupLinear(24, 36, groups=3, shared=True)
    assert layer.weight.shape == (12, 8) and layer.bias is not None and layer.bias.shape == (12,)
    dense = nn.Linear(24, 36)
    with torch.no_grad():
        dense.weight.copy_(torch.block_diag(*[layer.weight] * 3))
        dense.bias.copy_(layer.bias.repeat(3))
    x = torch.randn(4, 5, 24)
    assert torch.allclose(layer(x), dense(x), atol=1e-6)


@pytest.mark.parametrize("qk_multiplier", [1, 3])
def test_dense_attention_is_textbook_mha(qk_multiplier: int) -> None:
    attn = Attention(48, 6, qk_multiplier=qk_multiplier).eval()
    assert attn.q.weight.shape == (48 * qk_multiplier, 48)
    x, memory = torch.randn(2, 5, 48), torch.randn(2, 9, 48)
    mask = torch.rand(2, 1, 1, 9) > 0.3
    mask[..., 0] = True  # every query keeps at least one key
    assert attn.k is not None and attn.v is not None
    with torch.no_grad():
        for mem, m in ((x, None), (memory, mask)):
            heads = _mha(x, mem, (attn.q.weight, attn.q.bias), (attn.k.weight, attn.k.bias),
                         (attn.v.weight, attn.v.bias), 6, m)
            expected = F.linear(heads, attn.proj.weight, attn.proj.bias)
            got = attn(x, None if mem is x else mem, attn_mask=m)
            assert torch.allclose(got, expected, atol=1e-5)


def test_dense_feedforward_is_two_linears() -> None:
    ffn = FeedForward(16, 40, act_layer=nn.GELU)
    fc1, fc2 = nn.Linear(16, 40), nn.Linear(40, 16)
    fc1.load_state_dict(ffn.fc1.state_dict())
    fc2.load_state_dict(ffn.fc2.state_dict())
    x = torch.randn(3, 7, 16)
    assert torch.allclose(ffn(x), fc2(F.gelu(fc1(x))), atol=1e-6)


def test_group_ffn_maps_hidden_chunk_g_to_output_chunk_g() -> None:
    ffn = FeedForward(16, 32, groups=4, intermediate_groups=1, weight_sharing=False).eval()
    x = torch.randn(2, 3, 16)
    with torch.no_grad():
        hidden = torch.relu(ffn.fc1(x))  # (B, L, 32): W1 stays dense
        expected = torch.cat(
            [F.linear(hidden[..., 8 * g:8 * (g + 1)], *_group_params(ffn.fc2, g))
             for g in range(4)], dim=-1,
        )
        assert torch.allclose(ffn(x), expected, atol=1e-6)
        # G-IL on top: the whole FFN is k independent small FFNs.
        both = FeedForward(16, 32, groups=4, intermediate_groups=4, weight_sharing=True)
        expected = torch.cat(
            [F.linear(torch.relu(F.linear(x[..., 4 * g:4 * (g + 1)], *_group_params(both.fc1, g))),
                      *_group_params(both.fc2, g)) for g in range(4)], dim=-1,
        )
        assert torch.allclose(both(x), expected, atol=1e-6)


def test_shared_and_unshared_groups_differ_only_in_parameters() -> None:
    shared = Attention(64, 8, groups=4, weight_sharing=True)
    unshared = Attention(64, 8, groups=4, weight_sharing=False)
    n_shared = sum(p.numel() for p in shared.parameters())
    n_unshared = sum(p.numel() for p in unshared.parameters())
    qkv_shared = 3 * (16 * 16 + 16)
    assert n_unshared - n_shared == 3 * qkv_shared  # k times the Q/K/V weights, W_O unchanged
