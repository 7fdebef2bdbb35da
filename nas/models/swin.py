"""The ``swin`` family: Swin Transformer classifiers built by timm around our attention and FFN.

timm's ``SwinTransformer`` supplies the patch embedding, the stages (window partition, cyclic shift,
shifted-window masks, patch merging), the norms and the head. Every block's ``attn`` becomes a
``WindowAttention`` (our ``Attention`` plus timm's relative position bias) and its ``mlp`` our
``FeedForward``. Stage i has width d * 2**i, heads h * 2**i and FFN width d_ff * 2**i, so the
knobs apply per stage with the same k. With every knob off the network is timm's ``swin_*`` model
parameter for parameter (see ``convert_timm_state_dict``). Layer sharing does not apply (the
config rejects it: consecutive blocks alternate window shifts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from timm.layers import trunc_normal_
from timm.models.swin_transformer import (
    SwinTransformer,
    SwinTransformerBlock,
    get_relative_position_index,
)
from torch import nn

from nas.config import ArchConfig, groups_split_heads
from nas.layers import Attention, FeedForward
from nas.layers.attention import Cache
from nas.models.base import attention_knobs, ffn_knobs
from nas.models.vit import (
    ImageClassifier,
    check_patch_grid,
    init_like_timm,
    split_fused_qkv,
    timm_weight_init,
)
from nas.tasks import TaskGeometry

__all__ = ["Swin", "WindowAttention", "build", "convert_timm_state_dict"]


class WindowAttention(Attention):
    """``nas.layers.Attention`` over the tokens of one window, with timm's relative position bias.

    Takes the place of timm's ``WindowAttention`` in a ``SwinTransformerBlock``: the parameter
    ``relative_position_bias_table`` ((2*Wh-1)*(2*Ww-1), h) and the buffer
    ``relative_position_index`` are timm's (same names, same index function), and the call
    ``attn(x, mask=...)`` takes timm's shifted-window mask.

    Args:
        dim: width of the stage.
        num_heads: heads of the stage.
        window_size: (Wh, Ww), the window after timm clamped it to the stage resolution.
        device, dtype: of its parameters and of ``Attention``'s.
        **kwargs: ``Attention``'s keywords as they are: the knobs the table binds
            (``nas.models.base.attention_knobs``; a new attention knob is an argument there, not
            here) and the dropouts. The projections are grouped by channels (LW-Swin), so
            ``groups`` need not divide the heads.
    """

    relative_position_index: torch.Tensor

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: tuple[int, int],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dim, num_heads, heads_in_groups=groups_split_heads("swin"),
                         device=device, dtype=dtype, **kwargs)
        win_h, win_w = window_size
        self.window_size, self.window_area = (win_h, win_w), win_h * win_w
        self.relative_position_bias_table = nn.Parameter(
            torch.empty((2 * win_h - 1) * (2 * win_w - 1), num_heads, device=device, dtype=dtype)
        )
        if not self.relative_position_bias_table.is_meta:
            trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer(
            "relative_position_index",
            get_relative_position_index(win_h, win_w, device=device),
            persistent=False,
        )

    def relative_position_bias(self) -> torch.Tensor:
        """The bias added to every window's logits: (h, N, N) with N = Wh * Ww."""
        n = self.window_area
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        return bias.view(n, n, -1).permute(2, 0, 1)  # (h, N, N)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        cache: Cache | None = None,
        static_kv: bool = False,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention within each window of ``x`` (B * nW, N, d), batch-major as timm partitions.

        ``mask`` is timm's shifted-window mask (nW, N, N) with 0 / -100 entries, added to the
        logits together with the relative position bias.
        """
        bw, n, _ = x.shape
        bias = self.relative_position_bias().unsqueeze(0)  # (1, h, N, N)
        if mask is not None:
            nw = mask.shape[0]
            bias = bias + mask.unsqueeze(1)  # (nW, h, N, N)
            bias = bias.unsqueeze(0).expand(bw // nw, -1, -1, -1, -1)  # (B, nW, h, N, N)
            bias = bias.reshape(bw, self.num_heads, n, n)  # (B * nW, h, N, N)
        if attn_bias is not None:
            bias = bias + attn_bias
        return super().forward(
            x, memory, attn_mask=attn_mask, attn_bias=bias, cache=cache, static_kv=static_kv
        )


def convert_timm_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A timm ``SwinTransformer`` state dict in ``Swin``'s names (dense config): every name gains
    ``net.`` and each fused ``qkv`` is split into ``q``, ``k`` and ``v``."""
    return split_fused_qkv({"net." + name: tensor for name, tensor in state.items()})


class Swin(ImageClassifier):
    """A timm ``SwinTransformer`` classifying images into the task's classes.

    The embedding part is the patch embedding (conv + norm); the backbone is the stages, their
    patch-merging layers included; the head is the final norm and the classifier.
    """

    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "embedding": ("net.patch_embed",),
        "backbone": ("net.layers",),
        "head": ("net.norm", "net.head"),
    }
    net: SwinTransformer


def build(
    config: ArchConfig,
    task: TaskGeometry,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    drop_path_rate: float = 0.0,
    dropout: float = 0.0,
) -> Swin:
    """The Swin Transformer ``config`` describes, for ``task``'s images and classes.

    Windows larger than a stage's resolution are clamped to it by timm (and that stage's blocks
    then do not shift); resolutions that windows do not divide are padded, as timm does.
    ``drop_path_rate`` is timm's stochastic depth; ``dropout`` is every dropout (timm's
    ``drop_rate``, ``proj_drop_rate`` and ``attn_drop_rate``), 0 as in Swin.
    """
    assert config.depths is not None and config.window_size is not None
    check_patch_grid(config, task)
    d, h, ff = config.d_model, config.heads, config.d_ff
    net = SwinTransformer(
        img_size=task.image_size,
        patch_size=config.patch_size,  # type: ignore[arg-type]
        in_chans=task.in_chans,
        num_classes=task.num_outputs,
        embed_dim=d,
        depths=config.depths,
        num_heads=tuple(h * 2**i for i in range(len(config.depths))),
        window_size=config.window_size,
        mlp_ratio=ff / d,
        qkv_bias=True,
        drop_rate=dropout,
        proj_drop_rate=dropout,
        attn_drop_rate=dropout,
        drop_path_rate=drop_path_rate,
        weight_init=timm_weight_init(device),
        device=device,
        dtype=dtype,
    )
    knobs = attention_knobs(config)
    for block in [m for m in net.modules() if isinstance(m, SwinTransformerBlock)]:
        scale = block.dim // d  # 2**i in stage i
        # timm built its own attention and MLP; ours take their places under the same names.
        block.add_module("attn", WindowAttention(
            block.dim, h * scale, block.window_size, **knobs, attn_drop=dropout,
            proj_drop=dropout, device=device, dtype=dtype
        ))
        block.add_module("mlp", FeedForward(
            block.dim, ff * scale, **ffn_knobs(config), drop=dropout,
            device=device, dtype=dtype,
        ))
    init_like_timm(net.layers)
    return Swin(net, image_size=task.image_size, in_chans=task.in_chans)
