"""The ``vit`` family: DeiT/ViT image classifiers built by timm around our attention and FFN.

timm's ``VisionTransformer`` supplies the patch embedding, class token, position embedding, norms,
pooling and head. Its ``attn_layer`` and ``mlp_layer`` hooks receive our ``Attention`` and
``FeedForward`` with the config's knobs bound, and its block sequence becomes a ``SharedStack`` for
cross-layer sharing. With every knob off the network is timm's ``vit_*`` model parameter for
parameter: only timm's fused ``qkv`` projection is held as three separate ``q``/``k``/``v``
projections (the same weights, see ``convert_timm_state_dict``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
from timm.layers import trunc_normal_
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from nas.config import ArchConfig
from nas.errors import ConfigError
from nas.layers import Attention, FeedForward, GroupLinear, SharedStack
from nas.layers.attention import Cache
from nas.models.base import FamilyModel, attention_knobs, ffn_knobs
from nas.tasks import TaskGeometry

__all__ = [
    "ImageClassifier",
    "TimmAttention",
    "TimmFeedForward",
    "ViT",
    "build",
    "check_patch_grid",
    "convert_timm_state_dict",
    "init_like_timm",
    "split_fused_qkv",
    "timm_weight_init",
]


class TimmAttention(Attention):
    """``nas.layers.Attention`` under timm's attention-layer conventions.

    Takes the keyword arguments timm's ``Block`` passes to ``attn_layer`` and accepts its call
    ``attn(x, attn_mask=..., is_causal=...)``, where a float ``attn_mask`` is additive (as in
    ``F.scaled_dot_product_attention``) and a bool one is True where attention is allowed.

    Its own arguments are timm's that ``Attention`` does not share: ``qkv_bias`` (timm's default,
    False), ``scale_norm`` (refused) and ``norm_layer``, timm's norm (ViT's: LayerNorm with eps
    1e-6), which becomes the norm of ``qk_norm`` as in timm's own attention. Every other
    keyword, timm's (``proj_bias``, ``attn_drop``, ``proj_drop``, ``device``, ``dtype``) and the
    knobs the table binds (``nas.models.base.attention_knobs``), goes to ``Attention`` as it is:
    a new attention knob is an argument there, not here.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        qkv_bias: bool = False,
        scale_norm: bool = False,
        norm_layer: type[nn.Module] | None = None,
        **kwargs: Any,
    ) -> None:
        if scale_norm:
            raise ValueError(f"scale_norm is not supported, but got {scale_norm=}.")
        if norm_layer is not None:
            kwargs["norm_layer"] = norm_layer
        super().__init__(dim, num_heads, qkv_bias=qkv_bias, **kwargs)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
        cache: Cache | None = None,
        static_kv: bool = False,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Self-attention over ``x`` (B, N, d); the other arguments as ``Attention.forward``."""
        if attn_mask is not None and attn_mask.dtype != torch.bool:  # timm's additive float mask
            attn_bias = attn_mask if attn_bias is None else attn_bias + attn_mask
            attn_mask = None
        if is_causal:
            n = x.shape[1]
            causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()  # (N, N)
            attn_mask = causal if attn_mask is None else attn_mask & causal
        return super().forward(
            x, memory, attn_mask=attn_mask, attn_bias=attn_bias, cache=cache, static_kv=static_kv
        )


class TimmFeedForward(FeedForward):
    """``nas.layers.FeedForward`` under timm's ``Mlp`` constructor.

    Its own arguments are timm's widths (``in_features``, ``hidden_features``, ``out_features``),
    ``act_layer`` (timm's default, GELU), timm's ``norm_layer`` (refused: no hidden norm) and
    ``hidden``, which overrides timm's ``hidden_features`` (timm derives that as
    ``int(dim * mlp_ratio)``, a float product that can round d_ff down by one). Every other
    keyword, timm's (``bias``, ``drop``, ``device``, ``dtype``) and the knobs the table binds
    (``nas.models.base.ffn_knobs``), goes to ``FeedForward`` as it is: a new FFN knob is an
    argument there, not here.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        out_features: int | None = None,
        act_layer: type[nn.Module] | str = nn.GELU,
        *,
        norm_layer: type[nn.Module] | None = None,
        hidden: int | None = None,
        **kwargs: Any,
    ) -> None:
        if norm_layer is not None or out_features not in (None, in_features):
            raise ValueError("FeedForward has no hidden norm and maps d -> d.")
        width = hidden if hidden is not None else hidden_features or in_features
        super().__init__(in_features, width, act_layer=act_layer, **kwargs)


def _bind(layer: type[nn.Module], **knobs: Any) -> type[nn.Module]:
    """``layer`` with ``knobs`` bound, as a class (timm calls ``issubclass`` on ``attn_layer``).

    The bound subclass only carries the knobs into ``layer.__init__``, over what timm passes
    (the config's FFN activation replaces timm's ``act_layer``): each instance then takes
    ``layer`` as its class, so built models hold no local classes and pickle like any module.
    """

    class Bound(layer):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, **knobs})
            self.__class__ = layer  # type: ignore[assignment]

    return Bound


def init_like_timm(module: nn.Module) -> None:
    """Initialise our group-wise projections as timm initialises its ``nn.Linear`` layers.

    timm's ViT/Swin init draws linear weights from a truncated normal (std 0.02) with zero biases;
    it does not recognise ``GroupLinear``, so we apply the same rule to it. Tensors on the meta
    device hold no values and are left alone (a meta ``trunc_normal_`` costs milliseconds each).
    """
    for m in module.modules():
        if isinstance(m, GroupLinear) and not m.weight.is_meta:
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def timm_weight_init(device: torch.device | str | None) -> Literal["skip", ""]:
    """timm's ``weight_init`` argument: ``"skip"`` on the meta device, where there is nothing to
    initialise, else timm's default scheme."""
    return "skip" if device is not None and torch.device(device).type == "meta" else ""


def check_patch_grid(config: ArchConfig, task: TaskGeometry) -> int:
    """Patches per image side; ``ConfigError`` when the image does not split into patches."""
    size, patch = task.image_size, config.patch_size
    assert patch is not None  # required for vit and swin by ArchConfig
    if size < 1:
        raise ConfigError(f"Task {task.name!r} has no image size; family {config.family!r} "
                          "needs an image task.")
    if size % patch:
        raise ConfigError(
            f"`image_size % patch_size == 0` must hold, but got image_size={size} "
            f"(task {task.name!r}), patch_size={patch}; choose a patch_size dividing {size}."
        )
    return size // patch


def split_fused_qkv(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with each fused ``attn.qkv`` (3d x d, and its bias) split into our ``attn.q``,
    ``attn.k`` and ``attn.v``; other names unchanged."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if ".qkv." in name:
            head, tail = name.split(".qkv.")
            for proj, chunk in zip("qkv", tensor.chunk(3, dim=0), strict=True):
                out[f"{head}.{proj}.{tail}"] = chunk
        else:
            out[name] = tensor
    return out


def convert_timm_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A timm ``VisionTransformer`` state dict in ``ViT``'s names (dense, unshared config):
    ``blocks.i`` becomes ``net.blocks.layers.i`` and the fused ``qkv`` is split."""
    renamed = {
        "net." + re.sub(r"^blocks\.(\d+)\.", r"blocks.layers.\1.", name): tensor
        for name, tensor in state.items()
    }
    return split_fused_qkv(renamed)


class ImageClassifier(FamilyModel):
    """A timm image classifier held as ``net``: images (B, C, H, W) -> class logits."""

    def __init__(self, net: nn.Module, *, image_size: int, in_chans: int) -> None:
        super().__init__()
        self.net = net
        self.image_size, self.in_chans = image_size, in_chans

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class logits (B, num_classes) of ``images`` (B, C, H, W)."""
        return self.net(images)

    def example_inputs(self, batch: int = 1) -> dict[str, torch.Tensor]:
        p = next(self.parameters())
        shape = (batch, self.in_chans, self.image_size, self.image_size)
        return {"images": torch.randn(shape, device=p.device, dtype=p.dtype)}


class ViT(ImageClassifier):
    """A timm ``VisionTransformer`` classifying images into the task's classes.

    The embedding part is the patch embedding with the class token and position embedding; the
    backbone is the block stack; the head is the final norm and the classifier.
    """

    PARTS: ClassVar[dict[str, tuple[str, ...]]] = {
        "embedding": ("net.patch_embed", "net.cls_token", "net.pos_embed"),
        "backbone": ("net.blocks",),
        "head": ("net.norm", "net.head"),
    }
    net: VisionTransformer


def build(
    config: ArchConfig,
    task: TaskGeometry,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    drop_path_rate: float = 0.0,
    dropout: float = 0.0,
) -> ViT:
    """The DeiT/ViT ``config`` describes, for ``task``'s images and classes.

    ``drop_path_rate`` is timm's stochastic depth (its linear schedule runs over the unique
    layers); ``dropout`` is every dropout timm places (its ``drop_rate``, ``pos_drop_rate``,
    ``proj_drop_rate`` and ``attn_drop_rate``), 0 as in DeiT.
    """
    check_patch_grid(config, task)
    d, pattern = config.d_model, config.sharing_pattern("encoder")
    attn_layer = _bind(TimmAttention, **attention_knobs(config))
    mlp_layer = _bind(
        TimmFeedForward, hidden=config.d_ff, **ffn_knobs(config),
    )
    net = VisionTransformer(
        img_size=task.image_size,
        patch_size=config.patch_size,  # type: ignore[arg-type]
        in_chans=task.in_chans,
        num_classes=task.num_outputs,
        embed_dim=d,
        depth=max(pattern) + 1,  # one block per parameter set; SharedStack repeats them
        num_heads=config.heads,
        mlp_ratio=config.d_ff / d,
        qkv_bias=True,
        drop_rate=dropout,
        pos_drop_rate=dropout,
        proj_drop_rate=dropout,
        attn_drop_rate=dropout,
        drop_path_rate=drop_path_rate,
        weight_init=timm_weight_init(device),
        attn_layer=attn_layer,
        mlp_layer=mlp_layer,
        device=device,
        dtype=dtype,
    )
    init_like_timm(net.blocks)
    net.blocks = SharedStack(list(net.blocks), pattern)  # type: ignore[assignment]
    return ViT(net, image_size=task.image_size, in_chans=task.in_chans)
