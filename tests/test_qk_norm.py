"""``qk_norm``, the knob added to prove that an attention knob is a table row, a config field and
one argument of ``nas.layers.Attention`` (issue 36): LayerNorm on each head's queries and keys
(timm's ``qk_norm=True``) in every family, costed, searchable and exported.

The independent counters are PyTorch's: the parameters of the real CPU network and
``FlopCounterMode`` on its forward pass (``tests/test_flop_counter.py`` also draws qk_norm in its
random architectures); the numerical reference is timm's own ``VisionTransformer(qk_norm=True)``.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
import timm
import torch
import torch.nn.functional as F
from modelcheck import check_against_materialised
from optuna.trial import FixedTrial
from timm.models.vision_transformer import VisionTransformer
from tiny_models import one_sample
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nas.config import ArchConfig
from nas.cost import estimate_cost
from nas.errors import ConfigError
from nas.knobs import FAMILY_NAMES, by_name
from nas.layers import Attention
from nas.models import create_model, vit
from nas.presets import PRESETS, family_defaults, get_preset
from nas.tasks import TaskGeometry, get_geometry
from nas.timm_registry import timm_model_args
from search_spaces import SearchSpace, load_space
from studies.export._formats import FORMATS, acort_options, hf_config, openvqa_config
from studies.export._record import TrialRecord

_VQA = TaskGeometry("t", "vqa", 7, question_vocab=50, question_tokens=5, regions=6,
                    region_dim=16)
_IMAGE = TaskGeometry("t", "image", 10, image_size=32, in_chans=3)
SMALL: dict[str, tuple[dict[str, Any], TaskGeometry]] = {
    "mcan": ({"d_model": 16, "d_ff": 32, "heads": 4, "encoder_layers": 2, "decoder_layers": 2},
             _VQA),
    "ort": ({"d_model": 16, "d_ff": 32, "heads": 4, "encoder_layers": 2, "decoder_layers": 2},
            TaskGeometry("t", "caption", 40, regions=6, region_dim=16, caption_words=5)),
    "lxmert": ({"d_model": 16, "d_ff": 32, "heads": 4, "language_layers": 1,
                "vision_layers": 1, "cross_layers": 2}, _VQA),
    "vit": ({"d_model": 24, "d_ff": 48, "heads": 3, "encoder_layers": 2, "patch_size": 8},
            _IMAGE),
    "swin": ({"d_model": 24, "d_ff": 48, "heads": 3, "depths": [2, 2], "patch_size": 4,
              "window_size": 4}, _IMAGE),
}
# Knobs that change what Q, K and V are, per family (qv: self-attention only, vit and swin).
KNOBS: dict[str, dict[str, Any]] = {
    "mcan": {"attention_sharing": "kv", "groups": 2, "group_attention": True,
             "weight_sharing": True},
    "ort": {"attention_sharing": "qk", "qk_multiplier": 2, "layer_sharing": {"decoder": "0,0"}},
    "lxmert": {"qk_multiplier": 3},
    "vit": {"attention_sharing": "qv", "layer_sharing": "0,0"},
    "swin": {"groups": 2, "group_attention": True, "qk_multiplier": 2},
}


def _small(family: str, **keys: Any) -> tuple[ArchConfig, TaskGeometry]:
    sizes, geometry = SMALL[family]
    return ArchConfig.from_dict({**family_defaults(family), "family": family, **sizes,
                                 **keys}), geometry


def _attentions(model: nn.Module) -> list[Attention]:
    """Every attention module once (a shared layer's counts once)."""
    return list({id(m): m for m in model.modules() if isinstance(m, Attention)}.values())


# ----------------------------------------------------------------------------- the knob
def test_the_row_and_the_field_agree_and_every_identity_stays() -> None:
    knob = by_name("qk_norm")
    assert (knob.kind, knob.dense, knob.families, knob.acts_on, knob.block_arg) == (
        "bool", False, FAMILY_NAMES, ("attention",), "qk_norm")
    assert not knob.pinned  # a later knob: off stays out of every arch_id and space hash
    for name in PRESETS:
        preset = get_preset(name)
        assert preset.qk_norm is False and "qk_norm" not in preset.to_dict()
        on = preset.replace(qk_norm=True)
        assert on.arch_id != preset.arch_id and on.to_dict()["qk_norm"] is True
        assert ArchConfig.from_dict(on.to_dict()) == on
    with pytest.raises(ConfigError, match=r"`qk_norm` must be true or false, but got "
                                          r"qk_norm='yes'"):
        get_preset("deit-tiny").replace(qk_norm="yes")


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_family_normalises_queries_and_keys_per_head(family: str) -> None:
    config, geometry = _small(family, qk_norm=True, **KNOBS[family])
    model = create_model(config, geometry, device="meta")
    attentions = _attentions(model)
    assert attentions
    for attn in attentions:
        for norm in (attn.q_norm, attn.k_norm):
            assert isinstance(norm, nn.LayerNorm)
            assert norm.normalized_shape == (attn.qk_dim // attn.num_heads,)
    off = create_model(config.replace(qk_norm=False), geometry, device="meta")
    assert not any(isinstance(m, nn.LayerNorm) for a in _attentions(off) for m in a.modules())


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_its_cost_is_the_norms_parameters_and_no_madds(family: str) -> None:
    """The cost model against the real CPU network (parameters, gradients, MAdds trace) and
    against PyTorch's FlopCounterMode; the norms add 4 x (n*d/h) parameters per attention
    module (weight and bias of two norms) and no MAdds (norms are not counted, knobs.md)."""
    on, geometry = _small(family, qk_norm=True, **KNOBS[family])
    off = on.replace(qk_norm=False)
    check_against_materialised(on, geometry)
    a, b = estimate_cost(off, geometry), estimate_cost(on, geometry)
    widths = [m.qk_dim // m.num_heads for m in _attentions(create_model(on, geometry,
                                                                         device="meta"))]
    assert b.params - a.params == 4 * sum(widths)
    assert (b.params_matrix, b.madds) == (a.params_matrix, a.madds)
    assert b.madds_norms > a.madds_norms  # reported apart, as every LayerNorm's elements
    torch.manual_seed(0)
    model = create_model(on, geometry).eval()
    inputs = one_sample(on, geometry, torch.Generator().manual_seed(0))  # as training feeds
    counter = FlopCounterMode(display=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # oneDNN's TF32 note when toggling it
        # oneDNN off: the counter sees the LSTM's GEMMs (mcan), not an opaque oneDNN op
        with torch.backends.mkldnn.flags(enabled=False), torch.no_grad(), counter:
            model(**inputs)
    assert counter.get_total_flops() == 2 * b.madds


# ----------------------------------------------------------------------------- its meaning
def _written_out(attn: Attention, x: torch.Tensor, memory: torch.Tensor | None) -> torch.Tensor:
    """softmax(norm(Q) norm(K)^T / sqrt(n*d/h)) V through ``attn``'s own projections and norms,
    with V the unnormalised projection that the sharing scheme names."""
    def heads(t: torch.Tensor) -> torch.Tensor:
        b, n, c = t.shape
        return t.view(b, n, attn.num_heads, c // attn.num_heads).transpose(1, 2)

    def norm(t: torch.Tensor, ln: nn.Module) -> torch.Tensor:
        assert isinstance(ln, nn.LayerNorm)
        return F.layer_norm(t, ln.normalized_shape, ln.weight, ln.bias, ln.eps)

    source = x if memory is None else memory
    q = heads(attn.q(x))
    k = heads((attn.q if attn.k is None else attn.k)(source))
    v = {"kv": k, "qv": q}[attn.sharing] if attn.v is None else heads(attn.v(source))
    weights = (norm(q, attn.q_norm) @ norm(k, attn.k_norm).transpose(-2, -1)
               / (attn.qk_dim / attn.num_heads) ** 0.5).softmax(-1)
    return attn.proj((weights @ v).transpose(1, 2).flatten(2))


@pytest.mark.parametrize(("sharing", "n", "cross"), [
    ("none", 1, False), ("none", 2, True), ("kv", 1, False), ("kv", 1, True), ("qk", 3, False),
    ("qk", 2, True), ("qv", 1, False)])
def test_attention_normalises_q_and_k_and_never_the_value(sharing: str, n: int,
                                                          cross: bool) -> None:
    torch.manual_seed(0)
    attn = Attention(16, 4, groups=2, qk_multiplier=n, sharing=sharing,  # type: ignore[arg-type]
                     qk_norm=True).eval()
    for norm in (attn.q_norm, attn.k_norm):  # not the identity they start as
        assert isinstance(norm, nn.LayerNorm)
        nn.init.normal_(norm.weight)
        nn.init.normal_(norm.bias)
    x, memory = torch.randn(2, 5, 16), (torch.randn(2, 7, 16) if cross else None)
    with torch.no_grad():
        got = attn(x, memory)
        torch.testing.assert_close(got, _written_out(attn, x, memory))
        plain = Attention(16, 4, groups=2, qk_multiplier=n, sharing=sharing)  # type: ignore[arg-type]
        plain.load_state_dict({k: v for k, v in attn.state_dict().items() if "_norm." not in k})
        assert not torch.allclose(plain.eval()(x, memory), got)


def test_a_vit_with_qk_norm_computes_timms() -> None:
    """timm's VisionTransformer(qk_norm=True) weights load into ours (q_norm / k_norm by timm's
    names, timm's LayerNorm with eps 1e-6) and give its outputs."""
    torch.manual_seed(0)
    reference = VisionTransformer(img_size=32, patch_size=8, num_classes=10, embed_dim=24,
                                  depth=2, num_heads=3, mlp_ratio=2.0, qk_norm=True).eval()
    for name, p in reference.named_parameters():
        if "_norm." in name:  # away from ones and zeros, so a missing norm would show
            nn.init.normal_(p)
    config, geometry = _small("vit", qk_norm=True)
    ours = create_model(config, geometry).eval()
    ours.load_state_dict(vit.convert_timm_state_dict(reference.state_dict()), strict=True)
    assert {m.q_norm.eps for m in _attentions(ours)} == {1e-6}  # type: ignore[union-attr]
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), reference(x), rtol=1e-4, atol=1e-5)


def test_timms_scale_norm_is_still_refused() -> None:
    with pytest.raises(ValueError, match="scale_norm is not supported"):
        vit.TimmAttention(16, num_heads=2, scale_norm=True, norm_layer=nn.LayerNorm)


# ----------------------------------------------------------------------------- searchable
def test_a_space_searches_it_and_enqueues_it_back() -> None:
    shipped = load_space("armour_vit")
    data = shipped.to_dict()
    data["arch"]["qk_norm"] = {"choices": [False, True]}
    space = SearchSpace.from_dict(data)
    assert space.hash != shipped.hash  # a space that searches it is another space
    config, _ = space.suggest(FixedTrial({**shipped._corner(0), "qk_norm": True}))
    assert config.qk_norm is True
    assert space.params_for(config)["qk_norm"] is True
    assert space.suggest(FixedTrial(space.params_for(config)))[0] == config
    assert "qk_norm" not in shipped.params_for(get_preset("armour-tiny"))
    with pytest.raises(ConfigError, match="is outside search space"):
        shipped.params_for(get_preset("armour-tiny").replace(qk_norm=True))


# ----------------------------------------------------------------------------- exported
def _record(preset: str, task: str, **keys: Any) -> TrialRecord:
    return TrialRecord(study="s", number=0, state="complete", status=None, objectives=None,
                       directions={}, arch=get_preset(preset).replace(**keys), cost=None,
                       train={}, task=task, task_options={}, geometry=get_geometry(task),
                       space_hash=None, seed=None, fidelity=None, epochs_reached=None,
                       checkpoint=None, checkpoint_dir=None, version="0.1.0", git_commit=None)


@pytest.mark.parametrize("family", ["vit", "swin"])
def test_the_timm_export_builds_it(family: str) -> None:
    config, geometry = _small(family, qk_norm=True)
    name, kwargs = timm_model_args(config, geometry)
    assert kwargs["qk_norm"] is True
    net = timm.create_model(name, **kwargs)
    ours = create_model(config, geometry)
    assert sum(p.numel() for p in net.parameters()) == estimate_cost(config, geometry).params
    assert net.state_dict().keys() == {k.removeprefix("net.") for k in ours.state_dict()}
    assert any(k.endswith("attn.q_norm.weight") for k in net.state_dict())
    preset = "deit-tiny" if family == "vit" else "swin-tiny"
    written = json.loads(FORMATS["timm"].render(_record(preset, "imagenet", qk_norm=True)))
    assert written["kwargs"]["qk_norm"] is True


@pytest.mark.parametrize(("preset", "task"), [
    ("deit-tiny", "imagenet"), ("swin-tiny", "imagenet"), ("lxmert", "vqa2"),
    ("mcan-small", "vqa2"), ("ort-base", "coco-captions")])
def test_the_formats_that_cannot_express_it_say_so(preset: str, task: str) -> None:
    """Hugging Face's ViT, Swin, LXMERT and BART configs have no QK-norm, OpenVQA's MCAN and
    ACORT no option for it: each names it as not expressed; the config itself carries it."""
    off, on = _record(preset, task), _record(preset, task, qk_norm=True)
    assert "qk_norm" not in json.dumps(hf_config(off))
    hf = hf_config(on)
    assert hf["nas_arch"]["qk_norm"] is True
    if hf.get("architectures"):  # a Hugging Face model of the family exists: it is dense
        assert "qk_norm=True" in hf["nas_note"]
        assert FORMATS["hf-config"].notes(off) == []
        assert FORMATS["hf-config"].notes(on) == [
            "Hugging Face's model ignores qk_norm (config.json says so in nas_note)"]
    if preset == "mcan-small":
        notes = openvqa_config(on)["NAS_NOT_EXPRESSED"]
        assert "OpenVQA's mcan does not read qk_norm=True" in notes
    if preset == "ort-base":
        assert "ACORT has no option for qk_norm=True: it builds the dense layers" in (
            acort_options(on)[1])
