"""The ``vit`` and ``swin`` families: published figures, timm equivalence, knobs, geometry."""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest
import timm
import torch
from modelcheck import check_against_materialised, random_knobs, random_pattern
from timm.layers import DropPath
from timm.models.swin_transformer import SwinTransformer, SwinTransformerBlock
from torch import nn

from nas.config import ArchConfig
from nas.cost import estimate_cost
from nas.errors import ConfigError
from nas.layers import SharedStack
from nas.models import create_model, swin, vit
from nas.presets import PRESETS, get_preset
from nas.tasks import TaskGeometry, get_geometry

TINY = TaskGeometry("tiny-images", "image", 10, image_size=32)
ALL_SHARINGS = ("none", "kv", "qk", "qv")


def _config(**values: Any) -> ArchConfig:
    return ArchConfig.from_dict(values)


def _outputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(x)


# ---------------------------------------------------------------- published figures


@pytest.mark.parametrize(
    ("preset", "timm_name", "params"),
    [
        ("deit-tiny", "vit_tiny_patch16_224", 5_717_416),
        ("deit-small", "vit_small_patch16_224", 22_050_664),
        ("deit-base", "vit_base_patch16_224", 86_567_656),
        ("swin-tiny", "swin_tiny_patch4_window7_224", 28_288_354),
    ],
)
def test_dense_params_equal_published_and_timm(preset: str, timm_name: str, params: int) -> None:
    cost = estimate_cost(get_preset(preset))
    reference = timm.create_model(timm_name, pretrained=False, device="meta", weight_init="skip")
    assert cost.params == params == sum(p.numel() for p in reference.parameters())


def test_armour_tiny_params() -> None:
    # W_V (weight + bias) leaves each of the 12 blocks: 12 * (192 * 192 + 192).
    assert estimate_cost(get_preset("armour-tiny")).params == 5_272_744 == 5_717_416 - 444_672


@pytest.mark.parametrize("preset", ["deit-tiny", "deit-small", "deit-base", "armour-tiny"])
def test_vit_madds_follow_knobs_md(preset: str) -> None:
    config = get_preset(preset)
    d, ff, layers = config.d_model, config.d_ff, config.encoder_layers
    assert layers is not None
    n = 197  # 14 x 14 patches + the class token
    projections = 3 if config.attention_sharing == "qv" else 4  # Q, K, (V), W_O
    block = projections * n * d * d + 2 * n * n * d + 2 * n * d * ff
    cost = estimate_cost(config)
    assert cost.parts["backbone"].madds == layers * block
    assert cost.parts["embedding"].madds == 196 * (3 * 16 * 16) * d
    assert cost.parts["head"].madds == d * 1000
    assert cost.madds == sum(p.madds for p in cost.parts.values())


def test_swin_tiny_madds() -> None:
    assert abs(estimate_cost(get_preset("swin-tiny")).madds - 4.49e9) <= 0.01 * 4.49e9


@pytest.mark.parametrize(("k", "params", "madds"), [(2, 20_740_450, 3_276_708_864),
                                                     (4, 16_966_498, 2_669_779_968)])
def test_lw_swin_groups_qkv_and_fc2_by_channels(k: int, params: int, madds: int) -> None:
    """LW-Swin (knobs.md): qkv becomes k blocks c/k -> 3c/k and fc2 k blocks 4c/k -> c/k, no WS,
    biases kept; W_O and fc1 stay dense. k = 4 works although Swin-T has 3 heads."""
    dense = estimate_cost(get_preset("swin-tiny"))
    lw = estimate_cost(get_preset("swin-tiny").replace(groups=k, group_attention=True,
                                                        group_ffn=True))
    saved_params = saved_madds = 0
    for i, depth in enumerate((2, 2, 6, 2)):
        c, tokens = 96 * 2**i, (56 // 2**i) ** 2  # 224 / 4 = 56 divides into 7 x 7 windows
        ff = 4 * c
        saved = 3 * c * c - 3 * c * c // k + ff * c - ff * c // k
        saved_params += depth * saved
        saved_madds += depth * tokens * saved
    assert lw.params == dense.params - saved_params == params
    assert lw.madds == dense.madds - saved_madds == madds


def test_lw_swin_projections_are_block_diagonal_over_channels() -> None:
    """Channel chunk g of q, k and v depends on input chunk g only; heads span groups (k = 4,
    3 heads of width 8)."""
    config = _reduced("swin-tiny").replace(groups=4, group_attention=True, group_ffn=True)
    model = create_model(config, TINY)
    attn = model.net.layers[0].blocks[0].attn
    x = torch.randn(2, 5, 24)
    poked = x.clone()
    poked[..., :6] += 1.0  # input chunk 0 of 4
    for proj in (attn.q, attn.k, attn.v):
        changed = (proj(poked) - proj(x)).abs().amax(dim=(0, 1)) > 0
        assert changed[:6].all() and not changed[6:].any()
    assert model(**model.example_inputs(2)).shape == (2, TINY.num_outputs)


# ---------------------------------------------------------------- numerical equivalence with timm


def test_dense_deit_tiny_computes_timm_vit_tiny() -> None:
    torch.manual_seed(0)
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False)
    ours = create_model(get_preset("deit-tiny"))
    ours.load_state_dict(vit.convert_timm_state_dict(reference.state_dict()), strict=True)
    x = torch.randn(2, 3, 224, 224)
    expected = _outputs(reference, x)
    assert expected.shape == (2, 1000)
    torch.testing.assert_close(_outputs(ours, x), expected, rtol=1e-4, atol=1e-5)


def _swin_matches_timm(config: ArchConfig, task: TaskGeometry, reference: nn.Module) -> None:
    ours = create_model(config, task)
    ours.load_state_dict(swin.convert_timm_state_dict(reference.state_dict()), strict=True)
    x = torch.randn(2, task.in_chans, task.image_size, task.image_size)
    expected = _outputs(reference, x)
    assert expected.shape == (2, task.num_outputs)
    torch.testing.assert_close(_outputs(ours, x), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("window", [3, 4, 16])
def test_dense_small_swin_computes_timm(window: int) -> None:
    """Shifted windows with masks (4), padded windows (3), windows clamped to the grid (16)."""
    torch.manual_seed(0)
    reference = SwinTransformer(
        img_size=32, patch_size=2, num_classes=10, embed_dim=24, depths=(2, 2), num_heads=(2, 4),
        window_size=window, mlp_ratio=2.0, drop_path_rate=0.0,
    )
    config = _config(family="swin", d_model=24, d_ff=48, heads=2, depths=[2, 2], patch_size=2,
                     window_size=window)
    _swin_matches_timm(config, TINY, reference)


@pytest.mark.slow
def test_dense_swin_tiny_computes_timm_swin_tiny() -> None:
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False)
    _swin_matches_timm(get_preset("swin-tiny"), TaskGeometry("imagenet", "image", 1000,
                                                             image_size=224), reference)


# ---------------------------------------------------------------- knobs


def _small_vit(**knobs: Any) -> ArchConfig:
    return _config(family="vit", d_model=48, d_ff=96, heads=4, encoder_layers=3, patch_size=8,
                   **knobs)


def test_qv_sharing_is_dense_attention_with_v_tied_to_q() -> None:
    """Armour: softmax(Q K^T / sqrt(d_h)) Q equals a dense ViT whose W_V is a copy of W_Q."""
    torch.manual_seed(0)
    armour = create_model(_small_vit(attention_sharing="qv"), TINY)
    dense = create_model(_small_vit(), TINY)
    state = armour.state_dict()
    for name in list(state):
        if name.endswith((".attn.q.weight", ".attn.q.bias")):
            state[name.replace(".attn.q.", ".attn.v.")] = state[name]
    dense.load_state_dict(state, strict=True)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(_outputs(armour, x), _outputs(dense, x))
    assert not any(".attn.v." in n for n, _ in armour.named_parameters())


def test_layer_sharing_runs_one_block_at_several_depths() -> None:
    torch.manual_seed(0)
    shared = vit.build(_small_vit(layer_sharing="(0x2,1)"), TINY)
    dense = create_model(_small_vit(), TINY)
    stack = shared.net.blocks
    assert isinstance(stack, SharedStack) and stack.pattern == (0, 0, 1)
    unique = stack.layers
    assert len(unique) == 2
    state = {k: v for k, v in shared.state_dict().items() if not k.startswith("net.blocks.")}
    for depth, index in enumerate((0, 0, 1)):
        for name, tensor in unique[index].state_dict().items():
            state[f"net.blocks.layers.{depth}.{name}"] = tensor
    dense.load_state_dict(state, strict=True)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(_outputs(shared, x), _outputs(dense, x))
    per_block = sum(p.numel() for p in unique[0].parameters())
    assert estimate_cost(_small_vit(), TINY).params - estimate_cost(
        _small_vit(layer_sharing="(0x2,1)"), TINY
    ).params == per_block


def test_timm_attention_masks() -> None:
    """timm's calling conventions: ``is_causal``, bool masks and additive float masks agree."""
    torch.manual_seed(0)
    attn = vit.TimmAttention(16, num_heads=2, qkv_bias=True).eval()
    x = torch.randn(2, 5, 16)
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    additive = torch.zeros(5, 5).masked_fill(~allowed, float("-inf"))
    causal = attn(x, is_causal=True)
    torch.testing.assert_close(attn(x, attn_mask=allowed), causal)
    torch.testing.assert_close(attn(x, attn_mask=additive), causal)
    # the first token sees only itself, so it must not depend on later tokens
    torch.testing.assert_close(causal[:, 0], attn(x[:, :1])[:, 0])
    assert not torch.allclose(attn(x)[:, 0], causal[:, 0])


def test_swin_rejects_layer_sharing() -> None:
    with pytest.raises(ConfigError, match="layer_sharing"):
        get_preset("swin-tiny").replace(layer_sharing="(0x2)")


def _vit_cases(n: int, seed: int) -> list[ArchConfig]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        depth = rng.randint(2, 4)
        out.append(_config(
            family="vit", d_model=48, heads=4, d_ff=rng.choice((96, 192)), encoder_layers=depth,
            patch_size=rng.choice((8, 16)),
            layer_sharing=random_pattern(rng, depth) if rng.random() < 0.6 else None,
            **random_knobs(rng, groups=(1, 2, 4), sharings=ALL_SHARINGS),
        ))
    return out


def _swin_cases(n: int, seed: int) -> list[ArchConfig]:
    rng = random.Random(seed)
    return [
        _config(
            family="swin", d_model=24, heads=2, d_ff=rng.choice((48, 96)),
            depths=list(rng.choice(((1, 1), (2, 2)))), patch_size=rng.choice((2, 4)),
            window_size=rng.choice((2, 4)),
            **random_knobs(rng, groups=(1, 2), sharings=ALL_SHARINGS),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("config", _vit_cases(50, seed=0), ids=lambda c: c.arch_id)
def test_random_vit_knobs(config: ArchConfig) -> None:
    check_against_materialised(config, TINY)


@pytest.mark.parametrize("config", _swin_cases(50, seed=0), ids=lambda c: c.arch_id)
def test_random_swin_knobs(config: ArchConfig) -> None:
    check_against_materialised(config, TINY)


def test_random_cases_cover_the_knobs() -> None:
    vits, swins = _vit_cases(50, seed=0), _swin_cases(50, seed=0)
    for cases in (vits, swins):
        assert {c.attention_sharing for c in cases} == set(ALL_SHARINGS)
        assert any(c.shares_group_weights for c in cases)
        assert any(c.qk_multiplier > 1 for c in cases)
    assert any(len(set(c.sharing_pattern("encoder"))) < len(c.sharing_pattern("encoder"))
               for c in vits)


# ---------------------------------------------------------------- presets and geometry

_FAMILY_PRESETS = [n for n, p in PRESETS.items() if p["family"] in ("vit", "swin")]


def _reduced(name: str) -> ArchConfig:
    config = get_preset(name)
    if config.family == "vit":
        return config.replace(d_model=48, d_ff=96, heads=3)
    return config.replace(d_model=24, d_ff=96, heads=3)


@pytest.mark.parametrize("name", _FAMILY_PRESETS)
def test_presets_on_cifar100(name: str) -> None:
    """Every preset at reduced width on 32 px images (vit: a 2 x 2 patch grid; swin: windows
    clamped to the 8, 4, 2, 1 stage resolutions)."""
    check_against_materialised(_reduced(name), "cifar100")


def test_small_images_clamp_swin_windows() -> None:
    model = swin.build(_reduced("swin-tiny"), get_geometry("cifar100"))
    sizes: list[tuple[int, int]] = []
    for block in model.modules():
        if isinstance(block, SwinTransformerBlock):
            assert isinstance(block.attn, swin.WindowAttention)
            assert block.attn.window_size == block.window_size
            sizes.append(block.window_size)
    assert sizes == [(7, 7)] * 2 + [(4, 4)] * 2 + [(2, 2)] * 6 + [(1, 1)] * 2
    grid = vit.build(_reduced("deit-tiny"), get_geometry("cifar100")).net.patch_embed.grid_size
    assert grid == (2, 2)


@pytest.mark.parametrize("name", ["deit-tiny", "swin-tiny"])
def test_patch_size_must_divide_image(name: str) -> None:
    odd = TaskGeometry("odd-images", "image", 10, image_size=30)
    with pytest.raises(ConfigError, match="image_size % patch_size == 0"):
        create_model(get_preset(name), odd, device="meta")


@pytest.mark.parametrize("name", ["deit-tiny", "swin-tiny"])
def test_no_dropout_unless_asked(name: str) -> None:
    config, build = _reduced(name), vit.build if name == "deit-tiny" else swin.build
    model = build(config, TINY, device="meta")
    assert not any(isinstance(m, DropPath) for m in model.modules())
    assert all(m.p == 0 for m in model.modules() if isinstance(m, nn.Dropout))
    model = build(config, TINY, device="meta", drop_path_rate=0.1)
    assert any(isinstance(m, DropPath) for m in model.modules())


@pytest.mark.parametrize("name", ["armour-tiny", "lw-swin-tiny"])
def test_dtype_and_device_reach_every_tensor(name: str) -> None:
    model = create_model(_reduced(name), TINY, dtype=torch.float64)
    floats = [t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    assert floats and all(t.dtype == torch.float64 for t in floats)
    assert model(**model.example_inputs(2)).dtype == torch.float64
    meta = create_model(_reduced(name), TINY, device="meta")
    assert all(t.is_meta for t in [*meta.parameters(), *meta.buffers()])


@pytest.mark.parametrize("name", ["armour-tiny", "lw-swin-tiny"])
def test_models_pickle(name: str) -> None:
    model = create_model(_reduced(name).replace(groups=3, group_attention=True), TINY)
    copy = pickle.loads(pickle.dumps(model))
    x = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(_outputs(copy, x), _outputs(model, x))
