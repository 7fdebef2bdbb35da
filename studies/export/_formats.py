"""The export formats: each a pure function from a ``TrialRecord`` to the text of one file.

``yaml`` / ``json`` hold the whole record (``nas cost`` and a study's ``enqueue:`` read them
back); ``hf-config``, ``openvqa``, ``acort`` and ``timm`` translate the architecture into another
code base's configuration keys; ``torch`` is a short script that builds the network with this
package. Study names and paths are data: they reach the generated files only through a
serialiser (YAML, JSON, ``ascii()``, ``shlex.quote``), never as raw text.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from nas.errors import NasError
from nas.timm_registry import timm_model_args
from studies.export._record import TrialRecord

__all__ = ["FORMATS", "Format"]

_ALL = ("mcan", "ort", "lxmert", "vit", "swin")


@dataclass(frozen=True)
class Format:
    """An export format: the file it writes per trial and which families it can express."""

    name: str
    filename: str  # relative path, ``{n}`` is the trial number
    render: Callable[[TrialRecord], str]
    families: tuple[str, ...] = _ALL
    needs_geometry: bool = False

    def path(self, number: int) -> str:
        return self.filename.format(n=number)

    def check(self, record: TrialRecord) -> None:
        """``NasError`` when this format cannot express ``record``."""
        family = record.arch.family
        if family not in self.families:
            raise NasError(
                f"Format {self.name!r} applies to family {' / '.join(self.families)}, but "
                f"{record.label} is a {family}; formats for it: {formats_for(family)}."
            )
        if self.needs_geometry and record.geometry is None:
            raise NasError(
                f"Format {self.name!r} needs the task geometry of {record.label}, but task "
                f"{record.task!r} cannot be built here (its data is elsewhere?); export as yaml "
                "or json instead."
            )


def _header(record: TrialRecord, prefix: str = "# ") -> str:
    return (f"{prefix}Trial {record.number} of study {record.study!a}, arch_id "
            f"{record.arch.arch_id}; exported by lightweight-nas {record.version}.\n")


# ----------------------------------------------------------------------------- yaml / json
def trial_document(record: TrialRecord) -> dict[str, Any]:
    """The ``yaml`` / ``json`` export: ``arch`` (flat, loadable by ``nas.loading.load_arch``),
    ``train``, ``task`` and ``provenance``."""
    return {"arch": record.arch.to_dict(), "train": dict(record.train),
            "task": record.task_section(), "provenance": record.provenance()}


def _yaml(record: TrialRecord) -> str:
    body = yaml.safe_dump(trial_document(record), sort_keys=False, default_flow_style=False)
    return (_header(record) + "# `nas cost FILE` rebuilds it; list FILE under `enqueue:` in a "
            "study file to evaluate it first.\n" + body)


def _json(record: TrialRecord) -> str:
    return json.dumps(trial_document(record), indent=2) + "\n"


# ----------------------------------------------------------------------------- hf-config
def _knobs(record: TrialRecord) -> dict[str, Any]:
    a = record.arch
    return {"num_groups": a.groups, "group_attention": a.group_attention,
            "group_ffn": a.group_ffn, "weight_sharing": a.weight_sharing,
            "group_merge": a.group_merge, "group_intermediate": a.group_intermediate,
            "qk_multiplier": a.qk_multiplier, "attention_sharing": a.attention_sharing,
            "layer_sharing": a.to_dict()["layer_sharing"]}


def hf_config(record: TrialRecord) -> dict[str, Any]:
    """A Hugging Face style ``config.json``: the closest transformers config's keys for the
    family, our knobs as extra keys, and the flat config under ``nas_arch``."""
    a, g = record.arch, record.geometry
    d, ff, h = a.d_model, a.d_ff, a.heads
    keys: dict[str, Any]
    if a.family == "vit":  # transformers' ViTConfig
        keys = {"hidden_size": d, "num_hidden_layers": a.encoder_layers,
                "num_attention_heads": h, "intermediate_size": ff, "hidden_act": "gelu",
                "layer_norm_eps": 1e-6, "patch_size": a.patch_size, "qkv_bias": True}
    elif a.family == "swin":  # transformers' SwinConfig
        depths = list(a.depths or ())
        keys = {"embed_dim": d, "depths": depths, "num_heads": [h * 2**i for i in
                                                                range(len(depths))],
                "window_size": a.window_size, "mlp_ratio": ff / d, "patch_size": a.patch_size,
                "hidden_size": d * 2 ** (len(depths) - 1), "hidden_act": "gelu",
                "layer_norm_eps": 1e-5, "qkv_bias": True}
    elif a.family == "lxmert":  # transformers' LxmertConfig
        keys = {"hidden_size": d, "num_attention_heads": h, "intermediate_size": ff,
                "l_layers": a.language_layers, "r_layers": a.vision_layers,
                "x_layers": a.cross_layers, "hidden_act": "gelu", "layer_norm_eps": 1e-12}
    elif a.family == "ort":  # a BART-like encoder-decoder
        keys = {"d_model": d, "encoder_layers": a.encoder_layers,
                "decoder_layers": a.decoder_layers, "encoder_attention_heads": h,
                "decoder_attention_heads": h, "encoder_ffn_dim": ff, "decoder_ffn_dim": ff,
                "activation_function": "relu", "is_encoder_decoder": True,
                "radix_base": a.radix_base}
    else:  # mcan: an encoder-decoder over question tokens and image regions
        keys = {"hidden_size": d, "intermediate_size": ff, "num_attention_heads": h,
                "encoder_layers": a.encoder_layers, "decoder_layers": a.decoder_layers,
                "hidden_act": "relu", "layer_norm_eps": 1e-6, "word_embed_size": 300}
    if g is not None:
        keys.update(_hf_task_keys(record, g))
    return {"model_type": f"nas_{a.family}", **keys, **_knobs(record),
            "torch_dtype": "float32", "nas_arch": a.to_dict(), "nas_arch_id": a.arch_id,
            "nas_provenance": {k: v for k, v in record.provenance().items()
                               if k in ("study", "trial", "objectives", "version",
                                        "git_commit")}}


def _hf_task_keys(record: TrialRecord, g: Any) -> dict[str, Any]:
    a = record.arch
    if a.family in ("vit", "swin"):
        return {"image_size": g.image_size, "num_channels": g.in_chans, "num_labels": g.num_outputs}
    if a.family == "ort":
        v = a.radix_base
        pad, bos, eos = (0, 1, 2) if v is None else (v, v + 1, v + 2)
        return {"vocab_size": g.num_outputs if v is None else v + 3,
                "word_vocab_size": g.num_outputs, "visual_feat_dim": g.region_dim,
                "num_regions": g.regions, "max_caption_words": g.caption_words,
                "pad_token_id": pad, "bos_token_id": bos, "eos_token_id": eos,
                "decoder_start_token_id": bos}
    keys = {"vocab_size": g.question_vocab, "visual_feat_dim": g.region_dim,
            "num_regions": g.regions, "max_question_length": g.question_tokens}
    keys["num_qa_labels" if a.family == "lxmert" else "num_labels"] = g.num_outputs
    return keys


def _hf(record: TrialRecord) -> str:
    return json.dumps(hf_config(record), indent=2) + "\n"


# ----------------------------------------------------------------------------- openvqa
def openvqa_config(record: TrialRecord) -> dict[str, Any]:
    """MCAN / OpenVQA network keys, LW-Transformer's group keys, then ours (see the README)."""
    a = record.arch
    grouped = a.groups > 1 and (a.group_attention or a.group_ffn)
    enc, dec = a.encoder_layers, a.decoder_layers
    keys: dict[str, Any] = {"MODEL_USE": "lwtransformer" if grouped else "mcan"}
    if enc == dec:  # OpenVQA has one depth for both stacks; left out rather than wrong
        keys["LAYER"] = enc
    keys.update({
        "HIDDEN_SIZE": a.d_model, "FF_SIZE": a.d_ff, "MULTI_HEAD": a.heads,
        "DROPOUT_R": float(record.train.get("dropout", 0.1)),
        "FLAT_MLP_SIZE": a.d_model, "FLAT_GLIMPSES": 1, "FLAT_OUT_SIZE": 2 * a.d_model,
        "WORD_EMBED_SIZE": 300, "USE_BBOX_FEAT": False, "USE_AUX_FEAT": False,
    })
    if record.geometry is not None:
        keys["IMG_FEAT_SIZE"] = record.geometry.region_dim
    keys.update({  # LW-Transformer's openvqa fork
        "GROUP": a.groups, "SA_GROUP": grouped, "SGA_GROUP": grouped, "EXPAND": a.qk_multiplier,
    })
    keys.update({  # ours: what neither OpenVQA nor LW-Transformer can express
        "ENC_LAYER": enc, "DEC_LAYER": dec, "G_MHA": a.group_attention, "G_FFN": a.group_ffn,
        "WEIGHT_SHARING": a.weight_sharing, "G_LML": a.group_merge,
        "G_IL": a.group_intermediate, "ATT_SHARING": a.attention_sharing,
        "LAYER_SHARING": {"ENC": _pattern_text(record, "encoder"),
                          "DEC": _pattern_text(record, "decoder")},
        "NAS_ARCH_ID": a.arch_id,
    })
    return keys


def _pattern_text(record: TrialRecord, stack: str) -> str | None:
    pattern = record.arch.sharing_pattern(stack)
    if pattern == tuple(range(len(pattern))):
        return None
    return "(" + ", ".join(str(i) for i in pattern) + ")"


def _openvqa(record: TrialRecord) -> str:
    body = yaml.safe_dump(openvqa_config(record), sort_keys=False, default_flow_style=False)
    return _header(record) + "# Network keys for OpenVQA / LW-Transformer configs.\n" + body


# ----------------------------------------------------------------------------- acort
def acort_options(record: TrialRecord) -> tuple[list[str], list[str]]:
    """Options of ACORT's ``train_transformer.py`` for ``record``, and notes on what they
    cannot express."""
    a, notes = record.arch, []
    opts = ["--caption_model", "relation_transformer"]
    if a.radix_base is not None:
        opts += ["--tokenizer", "radix", "--radix_base", str(a.radix_base)]
    else:
        opts += ["--tokenizer", "word"]
    if a.encoder_layers != a.decoder_layers:
        notes.append(f"the decoder has {a.decoder_layers} layers, but the scripts take one "
                     f"--num_layers (set to the encoder's {a.encoder_layers})")
    opts += ["--d_model", str(a.d_model), "--dim_feedforward", str(a.d_ff),
             "--num_heads", str(a.heads), "--num_layers", str(a.encoder_layers)]
    if a.attention_sharing != "none":
        opts += ["--share_att_encoder", a.attention_sharing,
                 "--share_att_decoder", a.attention_sharing]
    for stack in ("encoder", "decoder"):
        text = _pattern_text(record, stack)
        if text is not None:
            opts += [f"--share_layer_{stack}", text]
    if record.geometry is not None:
        opts += ["--att_feat_size", str(record.geometry.region_dim)]
    dropped = [k for k in ("group_attention", "group_ffn", "group_merge", "group_intermediate")
               if getattr(a, k) and a.groups > 1]
    if dropped or a.qk_multiplier != 1:
        notes.append(f"group-wise knobs (groups={a.groups}, {', '.join(dropped) or 'none'}) "
                     f"and qk_multiplier={a.qk_multiplier} have no ACORT option")
    return opts, notes


def _acort(record: TrialRecord) -> str:
    opts, notes = acort_options(record)
    lines = [f"    {shlex.quote(opts[i])} {shlex.quote(opts[i + 1])} \\"
             for i in range(0, len(opts), 2)]
    # ACORT names a folder after --id: keep it to safe characters
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", record.study).strip("._") or "study"
    run_id = shlex.quote(f"{safe}__trial{record.number}")
    return "".join([
        "#!/bin/sh\n", _header(record),
        "# ACORT / ORT training options (github.com/jiahuei/sparse-image-captioning). Set\n",
        "# DATASET_DIR and LOG_DIR; extra arguments are passed on.\n",
        *(f"# NOTE: {n}.\n" for n in notes),
        'python "${ACORT_TRAIN:-train_transformer.py}" \\\n',
        '    --dataset_dir "${DATASET_DIR:?set DATASET_DIR}" \\\n',
        '    --log_dir "${LOG_DIR:?set LOG_DIR}" \\\n',
        f"    --id {run_id} \\\n",
        *(line + "\n" for line in lines),
        '    "$@"\n',
    ])


# ----------------------------------------------------------------------------- timm
def _timm(record: TrialRecord) -> str:
    assert record.geometry is not None  # Format.check
    name, kwargs = timm_model_args(record.arch, record.geometry)
    doc = {"model_name": name, "kwargs": kwargs,
           "usage": "import nas, timm; timm.create_model(model_name, **kwargs)",
           "provenance": {"study": record.study, "trial": record.number,
                          "arch_id": record.arch.arch_id, "version": record.version}}
    return json.dumps(doc, indent=2) + "\n"


# ----------------------------------------------------------------------------- torch
_TORCH = '''\
{header}# `python {script} [CHECKPOINT]` builds the network, loads the checkpoint (CHECKPOINT by
# default) and runs it once on example inputs; other code can import it and call `build()`.
from __future__ import annotations

import sys

import torch

from nas.config import ArchConfig
from nas.models import FamilyModel, create_model
from nas.tasks import TaskGeometry

ARCH = {arch}
GEOMETRY = TaskGeometry(**{geometry})
{checkpoint_note}CHECKPOINT: str | None = {checkpoint}


def build(checkpoint: str | None = CHECKPOINT, device: str = "cpu") -> FamilyModel:
    """The trial's network on ``device``, with the weights of ``checkpoint`` when given."""
    model = create_model(ArchConfig.from_dict(ARCH), GEOMETRY, device=device)
    if checkpoint is not None:  # a checkpoint as `nas train --out` writes it
        blob = torch.load(checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(blob["state_dict"])
    return model


if __name__ == "__main__":
    model = build(sys.argv[1] if len(sys.argv) > 1 else CHECKPOINT).eval()
    with torch.no_grad():
        out = model(**model.example_inputs(2))
    params = sum(p.numel() for p in model.parameters())
    print(f"{{params:,}} parameters; output {{tuple(out.shape)}}")
'''


def _literal(mapping: dict[str, Any]) -> str:
    """A dict as Python source, one key per line (``repr`` keeps every value a literal)."""
    return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in mapping.items()) + "}"


def _torch(record: TrialRecord) -> str:
    assert record.geometry is not None  # Format.check
    checkpoint, note = record.checkpoint, ""
    if checkpoint is None:
        note = "# No checkpoint was stored with this trial: the network is randomly initialised.\n"
    elif not Path(checkpoint).is_file():
        note = (f"# The trial's checkpoint {checkpoint!a} was not found when exporting: "
                "pass its path.\n")
        checkpoint = None
    return _TORCH.format(
        header=_header(record), script=f"trial-{record.number}.py",
        arch=_literal(record.arch.to_dict()), geometry=_literal(asdict(record.geometry)),
        checkpoint_note=note, checkpoint=ascii(checkpoint) if checkpoint else "None",
    )


# ----------------------------------------------------------------------------- the table
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("yaml", "trial-{n}.yaml", _yaml),
    Format("json", "trial-{n}.json", _json),
    Format("hf-config", "trial-{n}/config.json", _hf),
    Format("openvqa", "trial-{n}.openvqa.yml", _openvqa, families=("mcan",)),
    Format("acort", "trial-{n}.acort.sh", _acort, families=("ort",)),
    Format("timm", "trial-{n}.timm.json", _timm, families=("vit", "swin"), needs_geometry=True),
    Format("torch", "trial-{n}.py", _torch, needs_geometry=True),
)}


def formats_for(family: str) -> list[str]:
    return [name for name, f in FORMATS.items() if family in f.families]
