"""Exports loaded by the programs they are for, as a new user would load them.

timm and Hugging Face transformers are packages: their own ``create_model`` / ``AutoConfig`` /
``AutoModel*`` load the files. OpenVQA and ACORT are not: their files are checked against the
keys and flags their code reads, listed with their sources in ``studies.export.clients``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
import timm
import torch
import yaml
from test_export import OBJECTIVES, STUDIES, _write_trials
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForImageClassification,
    AutoModelForQuestionAnswering,
)

from nas.config import ArchConfig
from nas.cost import estimate_cost
from nas.errors import NasError
from nas.presets import get_preset
from nas.tasks import TaskGeometry, decoder_positions, get_geometry
from studies import StudySpec
from studies.export import FORMATS, export_trials
from studies.export._formats import acort_options, hf_config, openvqa_config
from studies.export._record import TrialRecord
from studies.export.clients import (
    ACORT_FLAGS,
    ACORT_RADIX_WORDS,
    OPENVQA_KEYS,
    acort_max_seq_length,
    openvqa_problems,
)
from studies.store import TrialKey
from trainers import get_task


def _record(preset: str, task: str, **overrides: Any) -> TrialRecord:
    arch = ArchConfig.from_dict({**get_preset(preset).to_dict(), **overrides})
    return TrialRecord(study="s", number=0, state="complete", status=None, objectives=None,
                       directions={}, arch=arch, cost=None, train={}, task=task,
                       task_options={}, geometry=get_geometry(task), space_hash=None, seed=None,
                       fidelity=None, epochs_reached=None, checkpoint=None, checkpoint_dir=None,
                       version="0.1.0",
                       git_commit=None)


# ----------------------------------------------------------------------------- timm
def _train_py_kwargs(kwargs: dict[str, Any], checkpoint: str | None) -> dict[str, Any]:
    """What timm's train.py passes to ``create_model`` (its argparse defaults, a drop rate and a
    drop-path rate set, ``--initial-checkpoint`` given), the model's own keys as
    ``--model-kwargs``."""
    return {**kwargs, "pretrained": False, "in_chans": kwargs["in_chans"],
            "num_classes": kwargs["num_classes"], "drop_rate": 0.1, "drop_path_rate": 0.1,
            "drop_block_rate": None, "global_pool": None, "bn_momentum": None, "bn_eps": None,
            "scriptable": False, "checkpoint_path": checkpoint}


def _validate_py_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What timm's validate.py passes to ``create_model``."""
    return {**kwargs, "pretrained": False, "num_classes": kwargs["num_classes"],
            "in_chans": kwargs["in_chans"], "global_pool": None, "scriptable": False}


@pytest.fixture(scope="module")
def vit_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vit study whose trial 0 kept its weights, exported as timm."""
    root = tmp_path_factory.mktemp("timm")
    url = f"sqlite:///{root / 'vit.db'}"
    spec = StudySpec.from_dict({"name": "vit-ckpt", "objectives": OBJECTIVES, "seed": 3,
                                "budget": {"trials": 1}, "sampler": {"name": "random"},
                                **STUDIES["vit-digits"]})
    _write_trials(spec, url, get_task("digits").geometry, n=1,
                  checkpoint_dir=root / "checkpoints")
    out = root / "export"
    export_trials("vit-ckpt", fmt="timm", out=out, trial=0, storage_url=url)
    saved = optuna.load_study(study_name="vit-ckpt", storage=url).trials[0].user_attrs[
        TrialKey.CHECKPOINT]
    (out / "saved").write_text(saved)
    return out


def test_timm_train_py_builds_the_model_and_loads_the_exported_checkpoint(vit_export) -> None:
    spec = json.loads((vit_export / "trial-0.timm.json").read_text())
    assert spec["checkpoint"] == "trial-0.timm.pth"  # relative to the export folder
    checkpoint = str(vit_export / spec["checkpoint"])
    model = timm.create_model(spec["model_name"],
                              **_train_py_kwargs(spec["kwargs"], checkpoint))
    saved = torch.load((vit_export / "saved").read_text(), weights_only=True)["state_dict"]
    state = model.state_dict()
    assert {f"net.{k}" for k in state} == set(saved)
    assert all(torch.equal(state[k], saved[f"net.{k}"]) for k in state)
    assert model.head_drop.p == 0.1  # drop_rate is the classifier's dropout, as in timm

    plain = timm.create_model(spec["model_name"], **_validate_py_kwargs(spec["kwargs"]))
    plain.load_state_dict(torch.load(checkpoint, weights_only=True))  # directly, strict


def test_timm_keywords_without_meaning_warn_and_other_pooling_is_refused(vit_export) -> None:
    spec = json.loads((vit_export / "trial-0.timm.json").read_text())
    name, kwargs = spec["model_name"], spec["kwargs"]
    with pytest.warns(UserWarning) as caught:
        timm.create_model(name, **kwargs, bn_momentum=0.1, bn_eps=1e-5, drop_block_rate=0.1,
                          cache_dir="/nowhere", pretrained_cfg_overlay={"file": "x"})
    assert sorted(str(w.message) for w in caught) == [
        "nas_vit ignores bn_eps: there is no batch norm in it.",
        "nas_vit ignores bn_momentum: there is no batch norm in it.",
        "nas_vit ignores drop_block_rate: there is no DropBlock in it."]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        timm.create_model(name, **kwargs, global_pool="token")  # the family's own pooling
    with pytest.raises(ValueError, match=r"^nas_vit pools with global_pool='token'.*leave it "):
        timm.create_model(name, **kwargs, global_pool="avg")
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm.create_model(name, **kwargs, pretrained=True)


@pytest.mark.parametrize("preset", ["swin-tiny", "lw-swin-tiny"])
def test_timm_train_py_keywords_build_swin(preset) -> None:
    config = get_preset(preset)
    record = _record(preset, "imagenet")
    spec = json.loads(FORMATS["timm"].render(record))
    model = timm.create_model(spec["model_name"], device="meta",
                              **_train_py_kwargs(spec["kwargs"], None))
    assert model.head.drop.p == 0.1
    assert sum(p.numel() for p in model.parameters()) == estimate_cost(config).params


# ----------------------------------------------------------------------------- Hugging Face
HF_CASES = [("deit-tiny", "imagenet"), ("armour-tiny", "imagenet"), ("swin-tiny", "imagenet"),
            ("lw-swin-tiny", "imagenet"), ("lxmert", "vqa2"), ("lw-lxmert-1x", "vqa2"),
            ("mcan-small", "vqa2"), ("lw-1x", "vqa2"), ("ort-base", "coco-captions"),
            ("acort-base", "coco-captions")]
_AUTO = {"vit": AutoModelForImageClassification, "swin": AutoModelForImageClassification,
         "lxmert": AutoModelForQuestionAnswering}


@pytest.mark.parametrize(("preset", "task"), HF_CASES)
def test_autoconfig_loads_every_hf_export_and_automodel_counts_the_dense_baseline(
        tmp_path, preset, task) -> None:
    record = _record(preset, task)
    (tmp_path / "config.json").write_text(FORMATS["hf-config"].render(record))
    config = AutoConfig.from_pretrained(tmp_path)
    doc = hf_config(record)
    assert config.model_type == doc["model_type"]
    assert ArchConfig.from_dict(config.nas_arch).arch_id == record.arch.arch_id
    family = record.arch.family
    if family not in _AUTO:  # mcan, ort: Hugging Face has no such model
        assert config.model_type == "bart" and "AutoModel would build" in config.nas_note
        return
    with torch.device("meta"):
        model = _AUTO[family].from_config(config)
        AutoModel.from_config(config)  # the backbone builds too
    assert type(model).__name__ == config.architectures[0]
    params = sum(p.numel() for p in model.parameters())
    dense = ArchConfig.from_dict({**record.arch.to_dict(), "groups": 1,
                                  "group_attention": False, "group_ffn": False,
                                  "weight_sharing": False, "group_merge": False,
                                  "group_intermediate": False, "qk_multiplier": 1,
                                  "attention_sharing": "none", "layer_sharing": None})
    assert params == estimate_cost(dense, record.geometry).params
    if dense.arch_id != record.arch.arch_id:
        assert "ignores our knobs" in config.nas_note
        assert FORMATS["hf-config"].notes(record)
    else:
        assert "ignores" not in config.nas_note and not FORMATS["hf-config"].notes(record)


# ----------------------------------------------------------------------------- OpenVQA
@pytest.mark.parametrize(("preset", "task", "dataset"), [
    ("mcan-small", "vqa2", "vqa"), ("lw-1x", "gqa", "gqa"), ("lw-mini", "clevr", "clevr")])
def test_openvqa_file_has_every_key_its_code_reads_and_passes_its_checks(
        preset, task, dataset) -> None:
    record = _record(preset, task)
    text = FORMATS["openvqa"].render(record)
    config = yaml.load(text, Loader=yaml.FullLoader)  # as OpenVQA's run.py loads it
    assert openvqa_problems(config, dataset) == []
    assert set(OPENVQA_KEYS) <= set(config) and "IMG_FEAT_SIZE" not in config
    g, a = record.geometry, record.arch
    key = "GRID_FEAT_SIZE" if dataset == "clevr" else "FRCN_FEAT_SIZE"
    assert config["FEAT_SIZE"][dataset][key] == [g.regions, g.region_dim]
    assert config["LAYER"] == a.encoder_layers == a.decoder_layers
    notes = FORMATS["openvqa"].notes(record)
    assert config["NAS_NOT_EXPRESSED"] == notes
    assert bool(notes) == (preset != "mcan-small")
    assert all(f"# NOTE: {n}." in text for n in notes)


def test_openvqa_refuses_unequal_depths_in_one_line() -> None:
    record = _record("mcan-small", "vqa2", decoder_layers=4)
    with pytest.raises(NasError) as caught:
        FORMATS["openvqa"].check(record)
    assert "\n" not in str(caught.value) and "one depth for both" in str(caught.value)
    assert openvqa_config(_record("mcan-small", "vqa2"))["LAYER"] == 6


# ----------------------------------------------------------------------------- ACORT
def _str_to_sequence(text: str) -> tuple[int, ...]:
    """ACORT's ``str_to_sequence`` for ``--share_layer_*``."""
    return tuple(int(v) for v in re.findall(r"-?\d+", text))


def _acort_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    for flag in ACORT_FLAGS:
        parser.add_argument(flag, type=_str_to_sequence if "share_layer" in flag else str)
    return parser


# --max_seq_length keeps the trial's 16-word captions: BOS + 16 x tokens per word + EOS
@pytest.mark.parametrize(("preset", "overrides", "length"), [
    ("acort-base", {}, "34"),  # 2 tokens per word over 10,001 words in base 768
    ("ort-base", {}, "18"),  # ACORT's default
    ("ort-base", {"layer_sharing": {"decoder": "0,0,1,1,2,2"}}, "18"),
    ("acort-small", {"radix_base": 16}, "66"),  # 4 tokens per word
    ("ort-small", {"groups": 2, "group_ffn": True, "attention_sharing": "qk"}, "18"),
])
def test_acort_flags_parse_as_its_script_reads_them(preset, overrides, length) -> None:
    record = _record(preset, "coco-captions", **overrides)
    FORMATS["acort"].check(record)
    text = FORMATS["acort"].render(record)
    command = text[text.index('\npython "${ACORT_TRAIN'):].replace("\\\n", " ")
    words = [w for w in shlex.split(command, comments=True)[2:] if w != "$@"]
    args = _acort_parser().parse_args(words)
    a = record.arch
    assert args.share_layer_encoder == a.sharing_pattern("encoder")
    assert args.share_layer_decoder == a.sharing_pattern("decoder")
    assert args.max_seq_length == length
    assert args.num_layers == str(a.encoder_layers) and args.d_model == str(a.d_model)
    notes = FORMATS["acort"].notes(record)
    assert bool(notes) == ("groups" in overrides)
    assert all(f"# NOTE: {n}." in text for n in notes)


def test_acort_max_seq_length_by_radix_digits() -> None:
    """BOS + the caption's tokens + EOS. ACORT's published radix setup (12 words) is the same
    function at its own caption length: 26 for two digits a word, 38 for three, 50 for four."""
    assert [acort_max_seq_length(1 + ACORT_RADIX_WORDS * d) for d in (1, 2, 3, 4)] == [
        14, 26, 38, 50]
    opts, _ = acort_options(_record("acort-base", "coco-captions"))
    positions = decoder_positions(get_geometry("coco-captions"), 2)  # 10,001 words, base 768
    assert opts[opts.index("--max_seq_length") + 1] == str(positions + 1) == "34"
    assert acort_max_seq_length(1) == 2  # a geometry of empty captions: BOS, then EOS
    with pytest.raises(ValueError, match="decoder_positions >= 1"):
        acort_max_seq_length(0)


@pytest.mark.parametrize("geometry", [
    None, TaskGeometry("no-words", "caption", 3, regions=2, region_dim=8, caption_words=4)])
def test_acort_without_a_caption_length_says_why_none_is_written(
        geometry: TaskGeometry | None) -> None:
    record = dataclasses.replace(_record("acort-base", "coco-captions"), geometry=geometry)
    opts, notes = acort_options(record)
    assert "--max_seq_length" not in opts
    assert any("--max_seq_length is not written" in n for n in notes)
    if geometry is not None:
        assert hf_config(record)["nas_task"]["decoder_positions"] is None


def test_acort_refuses_unequal_depths_in_one_line() -> None:
    with pytest.raises(NasError, match=r"^Format 'acort' cannot express .*one depth for both"):
        FORMATS["acort"].check(_record("ort-base", "coco-captions", decoder_layers=3,
                                       layer_sharing=None))


# ----------------------------------------------------------------------------- notes, paths
def test_notes_reach_stderr_and_paths_are_relative(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'n.db'}"
    spec = StudySpec.from_dict({"name": "lw", "objectives": OBJECTIVES, "seed": 3, "task": "vqa2",
                                "evaluator": "study_helpers:instant_with_weights",
                                "budget": {"trials": 2}, "sampler": {"name": "random"},
                                "space": {**STUDIES["mcan-vqa"]["space"], "arch": {
                                    "groups": {"choices": [2]},
                                    "group_attention": {"choices": [True]}}}})
    geometry: TaskGeometry = get_geometry("vqa2")
    _write_trials(spec, url, geometry, n=1, checkpoint_dir=tmp_path / "ckpt")
    out = tmp_path / "out"
    export_trials("lw", fmt="openvqa", out=out, trial=0, storage_url=url)
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("nas export: note: trial 0 of study 'lw': ")
                       for line in err)
    assert any("groups=2" in line for line in err)
    export_trials("lw", fmt="yaml", out=out, trial=0, storage_url=url)
    doc = yaml.safe_load((out / "trial-0.yaml").read_text())
    checkpoint = doc["provenance"]["checkpoint"]
    assert not Path(checkpoint).is_absolute() and (out / checkpoint).is_file()
