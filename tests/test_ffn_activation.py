"""``ffn_activation``, the knob added to prove the table drives everything a knob touches
(issue 25): each family trains with its paper's activation by default, a config or a search
space can change it, and the identity of everything stored before it existed is unchanged."""

from __future__ import annotations

from typing import Any, get_args

import pytest
import torch
from optuna.trial import FixedTrial

import nas.config as config_module
from nas.config import ArchConfig
from nas.cost import estimate_cost
from nas.errors import ConfigError
from nas.knobs import FAMILY_NAMES, by_name
from nas.layers import FeedForward
from nas.layers.ffn import ACTIVATIONS
from nas.models import create_model
from nas.presets import family_defaults, get_preset
from nas.tasks import TaskGeometry, get_geometry
from search_spaces import SearchSpace, load_space
from studies.export._formats import hf_config, openvqa_config
from studies.export._record import TrialRecord

#: What each family's paper trains its FFN with: MCAN / LW-Transformer and ORT / ACORT use the
#: Transformer's ReLU, LXMERT BERT's GELU, DeiT and Swin timm's GELU.
PAPERS = {"mcan": "relu", "ort": "relu", "lxmert": "gelu", "vit": "gelu", "swin": "gelu"}
SMALL = {
    "mcan": ({"d_model": 16, "d_ff": 32, "heads": 4, "encoder_layers": 1, "decoder_layers": 1},
             TaskGeometry("t", "vqa", 7, question_vocab=50, question_tokens=5, regions=6,
                          region_dim=16)),
    "ort": ({"d_model": 16, "d_ff": 32, "heads": 4, "encoder_layers": 1, "decoder_layers": 1},
            TaskGeometry("t", "caption", 40, regions=6, region_dim=16, caption_words=5)),
    "lxmert": ({"d_model": 16, "d_ff": 32, "heads": 4, "language_layers": 1,
                "vision_layers": 1, "cross_layers": 1},
               TaskGeometry("t", "vqa", 7, question_vocab=50, question_tokens=5, regions=6,
                            region_dim=16)),
    "vit": ({"d_model": 16, "d_ff": 32, "heads": 4, "encoder_layers": 2, "patch_size": 8},
            TaskGeometry("t", "image", 10, image_size=32, in_chans=3)),
    "swin": ({"d_model": 24, "d_ff": 48, "heads": 3, "depths": [2, 2], "patch_size": 4,
              "window_size": 7}, TaskGeometry("t", "image", 10, image_size=56, in_chans=3)),
}


def _small(family: str, **keys: Any) -> tuple[ArchConfig, TaskGeometry]:
    sizes, geometry = SMALL[family]
    return ArchConfig.from_dict({**family_defaults(family), "family": family, **sizes,
                                 **keys}), geometry


def test_the_row_and_the_field_agree() -> None:
    knob = by_name("ffn_activation")
    assert knob.choices == get_args(config_module.FfnActivation) == tuple(ACTIVATIONS)
    assert dict(knob.defaults) == PAPERS and set(PAPERS) == set(FAMILY_NAMES)
    assert not knob.pinned  # a later knob: its default stays out of every identity


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_each_family_builds_its_papers_activation(family: str) -> None:
    config, geometry = _small(family)
    assert config.ffn_activation == PAPERS[family]
    assert "ffn_activation" not in config.to_dict()  # the default: as before the knob existed
    model = create_model(config, geometry, device="meta")
    ffns = [m for m in model.modules() if isinstance(m, FeedForward)]
    assert ffns and all(type(m.act) is ACTIVATIONS[PAPERS[family]] for m in ffns)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_another_activation_is_another_network_of_the_same_cost(family: str) -> None:
    default, geometry = _small(family)
    explicit, _ = _small(family, ffn_activation=PAPERS[family])
    silu, _ = _small(family, ffn_activation="silu")
    assert explicit == default and explicit.arch_id == default.arch_id
    assert silu.arch_id != default.arch_id and silu.to_dict()["ffn_activation"] == "silu"
    assert ArchConfig.from_dict(silu.to_dict()) == silu
    a, b = estimate_cost(default, geometry), estimate_cost(silu, geometry)
    assert (a.params, a.params_matrix, a.madds) == (b.params, b.params_matrix, b.madds)
    outputs = []
    for config in (default, silu):
        torch.manual_seed(0)
        model = create_model(config, geometry).eval()
        torch.manual_seed(1)
        with torch.no_grad():
            out = model(**model.example_inputs(2))
        outputs.append(out[0] if isinstance(out, tuple) else out)
    assert not torch.allclose(outputs[0], outputs[1])


def test_an_unknown_activation_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"`ffn_activation` must be one of \['relu', 'gelu', "
                                          r"'silu'\], but got 'swish'"):
        get_preset("mcan-small").replace(ffn_activation="swish")


def test_a_space_searches_it_and_enqueues_it_back() -> None:
    shipped = load_space("lw_transformer")
    data = shipped.to_dict()
    data["arch"]["ffn_activation"] = {"choices": ["relu", "gelu"]}
    space = SearchSpace.from_dict(data)
    assert space.hash != shipped.hash  # a space that searches it is another space
    params = {**shipped._corner(0), "ffn_activation": "gelu"}
    config, _ = space.suggest(FixedTrial(params))
    assert config.ffn_activation == "gelu"
    assert space.params_for(config)["ffn_activation"] == "gelu"
    assert space.suggest(FixedTrial(space.params_for(config)))[0] == config
    assert "ffn_activation" not in shipped.params_for(get_preset("lw-1x"))
    with pytest.raises(ConfigError, match="is outside search space"):
        shipped.params_for(get_preset("lw-1x").replace(ffn_activation="gelu"))
    data["arch"]["ffn_activation"] = {"choices": ["relu", "swish"]}
    with pytest.raises(ConfigError, match=r"arch.ffn_activation choices must be in"):
        SearchSpace.from_dict(data)


def _record(preset: str, task: str, **keys: Any) -> TrialRecord:
    arch = get_preset(preset).replace(**keys)
    return TrialRecord(study="s", number=0, state="complete", status=None, objectives=None,
                       directions={}, arch=arch, cost=None, train={}, task=task,
                       task_options={}, geometry=get_geometry(task), space_hash=None, seed=None,
                       fidelity=None, epochs_reached=None, checkpoint=None, checkpoint_dir=None,
                       version="0.1.0", git_commit=None)


@pytest.mark.parametrize(("preset", "task", "key"), [
    ("deit-tiny", "imagenet", "hidden_act"), ("swin-tiny", "imagenet", "hidden_act"),
    ("lxmert", "vqa2", "hidden_act"), ("mcan-small", "vqa2", "activation_function"),
    ("ort-base", "coco-captions", "activation_function")])
def test_hugging_face_reads_the_activation(preset: str, task: str, key: str) -> None:
    family = get_preset(preset).family
    assert hf_config(_record(preset, task))[key] == PAPERS[family]
    changed = hf_config(_record(preset, task, ffn_activation="silu"))
    assert changed[key] == "silu" and "ffn_activation" not in changed["nas_note"]


def test_openvqa_notes_an_activation_its_mcan_cannot_build() -> None:
    assert not any("ffn_activation" in n
                   for n in openvqa_config(_record("mcan-small", "vqa2"))["NAS_NOT_EXPRESSED"])
    notes = openvqa_config(_record("mcan-small", "vqa2", ffn_activation="gelu"))
    assert "OpenVQA's mcan does not read ffn_activation=gelu" in notes["NAS_NOT_EXPRESSED"]
