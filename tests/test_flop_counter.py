"""The cost model against an independent counter: PyTorch's own, on the real networks.

Every preset (``nas.presets``) and a seeded set of random architectures of every family are
built on the CPU with real weights, run once under ``torch.utils.flop_counter.FlopCounterMode``
(no custom formulas), and the count, FLOPs / 2, must equal ``nas cost``'s ``madds`` EXACTLY.
Neither counts LayerNorms (``madds_norms`` reports those apart), biases or activations.

Independent of the cost model's own tracing (``nas.cost.trace_madds``, the models'
``example_inputs``): the inputs are built here from the task geometry alone, and batched as
training batches them (``trainers.tasks.collate``). A caption is ``caption_words`` random words
(a full-length caption), written by a real ``RadixTokenizer`` / ``WordTokenizer`` over the task's
words; the decoder is fed what training feeds, BOS + the whole caption
(``nas.tasks.decoder_positions`` positions). ``nn.LSTM`` runs with oneDNN off, so the counter
sees its GEMMs instead of an opaque ``mkldnn_rnn_layer``.

The random architectures are drawn by the shipped search spaces (``search_spaces/*.yaml``, every
knob they search, plus the group-wise knobs and radix bases for ORT, window sizes that pad for
Swin and ``qk_norm`` for every family) over CPU-sized widths, depths and task geometries. Their
seed rotates with a pytest option, so new cases can be tried over time while CI stays
deterministic (default 0)::

    pytest tests/test_flop_counter.py --flop-seed 7

A failure names the architecture (``config.to_dict()``) to reproduce it with ``nas cost``.
"""

from __future__ import annotations

import functools
import random
import warnings
from typing import Any

import optuna
import pytest
import torch
from tiny_models import one_sample
from torch.utils.flop_counter import FlopCounterMode

from nas.config import ArchConfig
from nas.cost import cost_and_memory, estimate_cost, estimate_params
from nas.memory import memory_profile
from nas.models import create_model, resolve_task
from nas.presets import PRESETS, get_preset
from nas.tasks import TaskGeometry
from search_spaces import SearchSpace, load_space

CASES_PER_FAMILY = 8

# CPU-sized geometries of each task kind. The caption task has 98 words (101 outputs with PAD,
# BOS, EOS): powers of 10, 99 and 100 fall between the two sizes, where counting the specials as
# words would add a digit per word.
_VQA = TaskGeometry("flop-vqa", "vqa", 11, question_tokens=5, question_vocab=40, regions=6,
                    region_dim=16)
_CAPTION = TaskGeometry("flop-captions", "caption", 101, regions=5, region_dim=16,
                        caption_words=4)
_IMAGE = TaskGeometry("flop-images", "image", 10, image_size=32)

# qk_norm is drawn last (a knob added since): the draws of the other knobs stay what they were.
_WIDTHS = {"heads_per_group": {"choices": [1, 2]}, "head_dim": {"choices": [4, 8]},
           "ffn_ratio": {"choices": [2, 4]}, "qk_norm": {"choices": [False, True]}}
_LW = ("groups", "group_attention", "group_ffn", "group_merge", "group_intermediate",
       "weight_sharing", "qk_multiplier")

# family -> (shipped space, CPU-sized base, distributions replacing or adding to its own, task)
_SPACES: dict[str, tuple[str, dict[str, Any], dict[str, Any], TaskGeometry]] = {
    "mcan": ("full", {"family": "mcan", "d_model": 16, "d_ff": 32, "heads": 2,
                      "encoder_layers": 2, "decoder_layers": 2},
             {**_WIDTHS, "encoder_layers": {"choices": [1, 2, 3, 4]},
              "decoder_layers": {"choices": [1, 2, 3, 4]}}, _VQA),
    "ort": ("acort", {"family": "ort", "d_model": 16, "d_ff": 32, "heads": 2,
                      "encoder_layers": 2, "decoder_layers": 2},
            {**_WIDTHS, "encoder_layers": {"choices": [1, 2, 3, 4]},
             "decoder_layers": {"choices": [1, 2, 3, 4]},
             "radix_base": {"choices": [None, 2, 7, 10, 99, 100, 101]}}, _CAPTION),
    "lxmert": ("lw_lxmert", {"family": "lxmert", "d_model": 16, "d_ff": 32, "heads": 2,
                             "language_layers": 2, "vision_layers": 2, "cross_layers": 2},
               {**_WIDTHS, "qk_multiplier": {"choices": [1, 2, 3]},
                "language_layers": {"choices": [1, 2, 3]},
                "vision_layers": {"choices": [1, 2]}, "cross_layers": {"choices": [1, 2]}},
               _VQA),
    "vit": ("armour_vit", {"family": "vit", "d_model": 24, "d_ff": 48, "heads": 3,
                           "encoder_layers": 2, "patch_size": 8},
            {**_WIDTHS, "groups": {"choices": [1, 2, 3]},
             "qk_multiplier": {"choices": [1, 2, 3]},
             "encoder_layers": {"choices": [1, 2, 3, 4]}}, _IMAGE),
    # 32 px in patches of 2: stages of 16, 8, 4 and 2 tokens a side; windows of 3 pad the first
    # three, windows of 4 fit, and timm shrinks any window to a 2-wide last stage.
    "swin": ("lw_swin", {"family": "swin", "d_model": 24, "d_ff": 48, "heads": 3,
                         "depths": [1, 1, 2, 1], "patch_size": 2, "window_size": 3},
             {"window_size": {"choices": [2, 3, 4]}, "qk_norm": {"choices": [False, True]},
              "depths": {"choices": [[1, 1, 2, 1], [2, 2, 2, 2], [1, 1, 1, 1]]}}, _IMAGE),
}

_FAMILIES = list(_SPACES)


@functools.cache
def _space(family: str) -> SearchSpace:
    """The family's shipped space (every knob it searches) over a CPU-sized base and widths."""
    name, base, changes, _ = _SPACES[family]
    data = load_space(name).to_dict()
    arch = dict(data["arch"])
    if family == "ort":  # the acort space searches no group-wise knob: take LW-Transformer's
        arch.update({k: v for k, v in load_space("lw_transformer").to_dict()["arch"].items()
                     if k in _LW})
    arch.update(changes)
    return SearchSpace.from_dict({**data, "name": f"flop-{family}", "base": base, "arch": arch})


def _draw(family: str, seed: int) -> ArchConfig:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    config, _ = _space(family).suggest(study.ask())
    return config


# ----------------------------------------------------------------------------- inputs
def _counted_madds(config: ArchConfig, task: TaskGeometry) -> int:
    """FLOPs / 2 of one forward pass of the real CPU network, as PyTorch's counter sees it."""
    torch.manual_seed(0)
    model = create_model(config, task).eval()
    inputs = one_sample(config, task, torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # oneDNN's TF32 note when toggling it
        with torch.backends.mkldnn.flags(enabled=False), torch.no_grad(), counter:
            model(**inputs)
    flops = int(counter.get_total_flops())
    assert flops % 2 == 0, flops
    return flops // 2


def _check(config: ArchConfig, task: TaskGeometry | None = None) -> None:
    geometry = resolve_task(config, task)
    cost = estimate_cost(config, geometry)
    counted = _counted_madds(config, geometry)
    assert counted == cost.madds, (
        f"FlopCounterMode counts {counted:,} MAdds, nas cost {cost.madds:,} "
        f"({counted - cost.madds:+,}) for {config.to_dict()} on {geometry.name}")


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_madds_equal_pytorchs_count(name: str) -> None:
    """Each preset at its own width and depth on its family's task."""
    _check(get_preset(name))


@pytest.mark.parametrize("index", range(CASES_PER_FAMILY))
@pytest.mark.parametrize("family", _FAMILIES)
def test_random_architecture_madds_equal_pytorchs_count(
    family: str, index: int, flop_seed: int
) -> None:
    """A random draw of the family's search space at CPU size (rotate with --flop-seed N)."""
    seed = random.Random(f"{flop_seed}/{family}/{index}").randrange(2**31)
    _check(_draw(family, seed), _SPACES[family][3])


def test_counter_sees_the_radix_digits_of_the_word_vocabulary() -> None:
    """On coco-captions' 9,998 words base 100 writes 2 digits a word and base 10,000 one: the
    counter and the cost model agree on the geometry the tokenizer gives (issue 24)."""
    task = resolve_task(get_preset("acort-small"), None)
    for base in (100, 10_000):
        config = get_preset("acort-small").replace(radix_base=base, encoder_layers=1,
                                                   decoder_layers=1, layer_sharing=None)
        _check(config, task)


# ----------------------------------------------------------------------------- one pass
def _one_pass_equals_two(config: ArchConfig, task: TaskGeometry | None = None) -> None:
    """``cost_and_memory``'s training-mode pass gives the cost of the eval-mode pass
    (``estimate_cost``) and the memory profile of its own pass (``memory_profile``); the build
    alone gives the parameters (``estimate_params``)."""
    cost, profile = cost_and_memory(config, task)
    assert cost == estimate_cost(config, task), config.to_dict()
    assert profile == memory_profile(config, task), config.to_dict()
    assert estimate_params(config, task) == cost.params, config.to_dict()


@pytest.mark.parametrize("name", list(PRESETS))
def test_one_pass_gives_the_cost_and_the_memory_profile_of_every_preset(name: str) -> None:
    _one_pass_equals_two(get_preset(name))


@pytest.mark.parametrize("family", _FAMILIES)
def test_one_pass_gives_the_cost_and_the_memory_profile_of_random_architectures(
        family: str, flop_seed: int) -> None:
    for index in range(CASES_PER_FAMILY):
        seed = random.Random(f"{flop_seed}/{family}/{index}").randrange(2**31)
        _one_pass_equals_two(_draw(family, seed), _SPACES[family][3])


def test_the_random_architectures_draw_qk_norm_both_ways(flop_seed: int) -> None:
    drawn = {_draw(family, random.Random(f"{flop_seed}/{family}/{index}").randrange(2**31))
             .qk_norm for family in _FAMILIES for index in range(CASES_PER_FAMILY)}
    assert drawn == {False, True}


def test_small_models_take_the_cpu_pass_and_leave_the_random_state(flop_seed: int) -> None:
    """The one-pass tests above compare ``cost_and_memory``'s pass on zeroed CPU tensors with
    the separate passes on meta: the small random architectures take the CPU pass (every family
    but MCAN, whose LSTM stays on meta), the presets (paper-size) stay on meta, and the CPU pass
    (dropout draws included: ORT and LXMERT train with 0.1) leaves torch's random state as it
    was, so a process that costs a model and then trains draws what it drew before."""
    from nas.cost import _real_pass

    for family in _FAMILIES:
        config = _draw(family, random.Random(f"{flop_seed}/{family}/0").randrange(2**31))
        task = _SPACES[family][3]
        assert _real_pass(create_model(config, task, device="meta")) == (family != "mcan")
        torch.manual_seed(123)
        before = torch.get_rng_state()
        cost_and_memory(config, task)
        assert torch.equal(torch.get_rng_state(), before), family
    for name in ("deit-tiny", "ort-xsmall", "lw-swin-tiny"):
        config = get_preset(name)
        assert not _real_pass(create_model(config, resolve_task(config, None), device="meta"))
