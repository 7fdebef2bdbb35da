"""The export formats: each a function from a ``TrialRecord`` to the text of one file (and,
for ``timm`` and ``torch``, the trial's weights beside it).

``yaml`` / ``json`` hold the whole record (``nas cost`` and a study's ``enqueue:`` read them
back); ``hf-config``, ``openvqa``, ``acort`` and ``timm`` translate the architecture into another
code base's configuration keys; ``torch`` is a short script that builds the network with this
package. Study names and paths are data: they reach the generated files only through a
serialiser (YAML, JSON, ``ascii()``, ``shlex.quote``), never as raw text.
"""

from __future__ import annotations

import io
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import yaml

from nas.config import drop_rate
from nas.errors import NasError
from nas.knobs import FAMILY_NAMES, KNOBS
from nas.tasks import decoder_positions
from nas.timm_registry import timm_model_args
from studies.export._checkpoint import Checkpoint, read_checkpoint
from studies.export._record import TrialRecord
from studies.export.clients import OPENVQA_FEAT_SIZE, acort_max_seq_length

__all__ = ["FORMATS", "Format", "acort_options", "hf_config", "openvqa_config", "timm_state_dict",
           "trial_document"]


@dataclass(frozen=True)
class Format:
    """An export format: the file it writes per trial and which families it can express.

    ``extras`` gives more files beside it (relative name -> bytes, e.g. weights); ``refusal``
    says why a record cannot be written so that its client builds the same network (``None``
    when it can); ``limits`` lists what the client cannot express, written in the file and on
    stderr.
    """

    name: str
    filename: str  # relative path, ``{n}`` is the trial number
    render: Callable[[TrialRecord], str]
    families: tuple[str, ...] | None = None  # None: every family, plugins' included
    needs_geometry: bool = False
    extras: Callable[[TrialRecord], dict[str, bytes]] | None = None
    refusal: Callable[[TrialRecord], str | None] | None = None
    limits: Callable[[TrialRecord], list[str]] | None = None

    def path(self, number: int) -> str:
        return self.filename.format(n=number)

    def check(self, record: TrialRecord) -> None:
        """``NasError`` when this format cannot express ``record``."""
        family = record.arch.family
        if self.families is not None and family not in self.families:
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
        why = self.refusal(record) if self.refusal is not None else None
        if why is not None:
            raise NasError(f"Format {self.name!r} cannot express {record.label}: {why}; export "
                           "as yaml, json or torch instead.")

    def files(self, record: TrialRecord) -> dict[str, bytes]:
        """Every file of ``record``: relative name -> content."""
        files = {self.path(record.number): self.render(record).encode("utf-8")}
        if self.extras is not None:
            files.update(self.extras(record))
        return files

    def notes(self, record: TrialRecord) -> list[str]:
        """What the client cannot express about ``record`` (also written in the file)."""
        return self.limits(record) if self.limits is not None else []


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
#: family -> (model_type, the class AutoModel* builds for our network, or None)
_HF_CLASSES: dict[str, tuple[str, str | None]] = {
    "vit": ("vit", "ViTForImageClassification"),
    "swin": ("swin", "SwinForImageClassification"),
    "lxmert": ("lxmert", "LxmertForQuestionAnswering"),
    "ort": ("bart", None),
    "mcan": ("bart", None),
}


#: our knobs the Hugging Face configs express (``hidden_act`` / ``activation_function``)
_HF_EXPRESSES = ("ffn_activation",)


def _knobs_set(record: TrialRecord, *, expressed: tuple[str, ...] = ()) -> dict[str, Any]:
    """Our knobs that differ from the dense Transformer of the family (the knob table's dense
    value, or its family default for a knob added since): what other code bases ignore, but
    for those in ``expressed``."""
    flat = record.arch.to_dict()  # a later knob is in it only off its family default
    return {k.name: flat[k.name] for k in KNOBS if k.name in flat and k.name not in expressed
            and (not k.pinned or (k.is_design_knob and flat[k.name] != k.dense))}


def _hf_note(record: TrialRecord) -> str:
    a = record.arch
    model_type, cls = _HF_CLASSES[a.family]
    if cls is None:
        note = (f"Hugging Face has no {a.family.upper()} model: model_type {model_type!r} (BART, "
                "the closest encoder-decoder config) lets AutoConfig read the widths and "
                "depths, but AutoModel would build a text-to-text BART, not this network; "
                "build it from nas_arch with lightweight-nas.")
    elif a.family == "lxmert":
        note = (f"AutoModelForQuestionAnswering builds {cls}, the dense network of these widths "
                "and depths (AutoModel builds LxmertModel, without the answer head).")
    else:
        note = (f"AutoModelForImageClassification builds {cls}, the dense network of these "
                "widths and depths (AutoModel builds its backbone, with a pooler and no "
                "classifier).")
    knobs = _knobs_set(record, expressed=_HF_EXPRESSES)
    if knobs and cls is not None:
        note += (" Hugging Face's model ignores our knobs "
                 + ", ".join(f"{k}={v}" for k, v in knobs.items())
                 + ": it is the dense baseline; the network itself is nas_arch.")
    return note


def hf_config(record: TrialRecord) -> dict[str, Any]:
    """A Hugging Face ``config.json`` that ``AutoConfig.from_pretrained`` loads: the real
    ``model_type`` of the family (``vit``, ``swin``, ``lxmert``; ``bart`` for ``mcan``/``ort``,
    which Hugging Face lacks) with that config's keys; the flat config (every knob) under
    ``nas_arch``, geometry Hugging Face has no key for under ``nas_task`` and, in ``nas_note``,
    what Hugging Face's model is of it."""
    a, g = record.arch, record.geometry
    d, ff, h = a.d_model, a.d_ff, a.heads
    model_type, cls = _HF_CLASSES[a.family]
    act = a.ffn_activation  # transformers' ACT2FN names: relu, gelu (exact), silu
    keys: dict[str, Any]
    if a.family == "vit":  # transformers' ViTConfig
        keys = {"hidden_size": d, "num_hidden_layers": a.encoder_layers,
                "num_attention_heads": h, "intermediate_size": ff, "hidden_act": act,
                "layer_norm_eps": 1e-6, "patch_size": a.patch_size, "qkv_bias": True}
    elif a.family == "swin":  # transformers' SwinConfig
        depths = list(a.depths or ())
        keys = {"embed_dim": d, "depths": depths, "num_heads": [h * 2**i for i in
                                                                range(len(depths))],
                "window_size": a.window_size, "mlp_ratio": ff / d, "patch_size": a.patch_size,
                "hidden_act": act, "layer_norm_eps": 1e-5, "qkv_bias": True}
    elif a.family == "lxmert":  # transformers' LxmertConfig
        keys = {"hidden_size": d, "num_attention_heads": h, "intermediate_size": ff,
                "l_layers": a.language_layers, "r_layers": a.vision_layers,
                "x_layers": a.cross_layers, "hidden_act": act, "layer_norm_eps": 1e-12}
    else:  # ort, mcan: transformers' BartConfig, the closest encoder-decoder
        keys = {"d_model": d, "encoder_layers": a.encoder_layers,
                "decoder_layers": a.decoder_layers, "encoder_attention_heads": h,
                "decoder_attention_heads": h, "encoder_ffn_dim": ff, "decoder_ffn_dim": ff,
                "activation_function": act, "is_encoder_decoder": True}
    task: dict[str, Any] = {}
    if g is not None:
        extra, task = _hf_task_keys(record, g)
        keys.update(extra)
    return {"model_type": model_type, **({"architectures": [cls]} if cls else {}), **keys,
            "torch_dtype": "float32", "nas_arch": a.to_dict(), "nas_arch_id": a.arch_id,
            "nas_task": {"name": record.task, **task}, "nas_note": _hf_note(record),
            "nas_provenance": {k: v for k, v in record.provenance().items()
                               if k in ("study", "trial", "objectives", "version",
                                        "git_commit")}}


def _hf_task_keys(record: TrialRecord, g: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The geometry as the config's own keys, and what it has no key for."""
    a = record.arch
    if a.family in ("vit", "swin"):
        return {"image_size": g.image_size, "num_channels": g.in_chans,
                "num_labels": g.num_outputs}, {}
    if a.family == "lxmert":
        return {"vocab_size": g.question_vocab, "visual_feat_dim": g.region_dim,
                "num_qa_labels": g.num_outputs}, {"num_regions": g.regions,
                                                  "max_question_length": g.question_tokens}
    if a.family == "ort":
        v = a.radix_base
        pad, bos, eos = (0, 1, 2) if v is None else (v, v + 1, v + 2)
        return ({"vocab_size": g.num_outputs if v is None else v + 3, "pad_token_id": pad,
                 "bos_token_id": bos, "eos_token_id": eos, "decoder_start_token_id": bos},
                {"radix_base": v, "word_vocab_size": g.num_outputs,
                 "visual_feat_dim": g.region_dim, "num_regions": g.regions,
                 "max_caption_words": g.caption_words,
                 "decoder_positions": _decoder_positions(record)})
    return {"vocab_size": g.question_vocab, "num_labels": g.num_outputs}, {
        "visual_feat_dim": g.region_dim, "num_regions": g.regions,
        "max_question_length": g.question_tokens}


def _hf(record: TrialRecord) -> str:
    return json.dumps(hf_config(record), indent=2) + "\n"


def _hf_limits(record: TrialRecord) -> list[str]:
    if _HF_CLASSES[record.arch.family][1] is None:
        return [f"Hugging Face has no {record.arch.family} model: config.json uses BART's "
                "config for the widths and depths; the network is nas_arch"]
    knobs = _knobs_set(record, expressed=_HF_EXPRESSES)
    return [f"Hugging Face's model ignores {', '.join(knobs)} (config.json says so in "
            "nas_note)"] if knobs else []


# ----------------------------------------------------------------------------- openvqa
#: our task -> OpenVQA's dataset (others are written as region features under ``vqa``)
_OPENVQA_DATASET = {"vqa2": "vqa", "gqa": "gqa", "clevr": "clevr"}


def _unequal_depths(record: TrialRecord) -> str | None:
    a = record.arch
    if a.encoder_layers == a.decoder_layers:
        return None
    return (f"its encoder has {a.encoder_layers} layers and its decoder {a.decoder_layers}, but "
            "the client builds one depth for both (it would silently be another network)")


def _openvqa_limits(record: TrialRecord) -> list[str]:
    notes = [f"OpenVQA's mcan does not read {k}={v}" + (
        " (LW-Transformer's fork reads it as GROUP / SA_GROUP / SGA_GROUP / EXPAND)"
        if k in ("groups", "group_attention", "qk_multiplier") else "")
        for k, v in _knobs_set(record).items()]
    if record.task not in _OPENVQA_DATASET:
        notes.append(f"task {record.task!r} is no OpenVQA dataset: its region features are "
                     "written as FEAT_SIZE['vqa']")
    return notes


def openvqa_config(record: TrialRecord) -> dict[str, Any]:
    """MCAN / OpenVQA config keys as OpenVQA's code reads them (``clients.OPENVQA_KEYS``),
    LW-Transformer's group keys, then ours (docs/guide/export.md lists them)."""
    a, g = record.arch, record.geometry
    grouped = a.groups > 1 and (a.group_attention or a.group_ffn)
    dataset = _OPENVQA_DATASET.get(record.task, "vqa")
    feat: dict[str, dict[str, list[int]]] = {
        name: {k: list(v) for k, v in sizes.items()} for name, sizes in OPENVQA_FEAT_SIZE.items()}
    if g is not None and g.regions and g.region_dim:
        feat[dataset]["GRID_FEAT_SIZE" if dataset == "clevr" else "FRCN_FEAT_SIZE"] = [
            g.regions, g.region_dim]
    keys: dict[str, Any] = {
        "MODEL_USE": "lwtransformer" if grouped else "mcan",
        "LAYER": a.encoder_layers,  # MCAN builds LAYER SA and LAYER SGA layers (checked equal)
        "HIDDEN_SIZE": a.d_model, "FF_SIZE": a.d_ff, "MULTI_HEAD": a.heads,
        "DROPOUT_R": drop_rate("mcan", record.train.get("dropout")),
        "FLAT_MLP_SIZE": a.d_model, "FLAT_GLIMPSES": 1, "FLAT_OUT_SIZE": 2 * a.d_model,
        "WORD_EMBED_SIZE": 300, "USE_BBOX_FEAT": False, "BBOXFEAT_EMB_SIZE": 2048,
        "USE_AUX_FEAT": False, "FEAT_SIZE": feat,
        # proc() asserts these; the values of configs/<dataset>/mcan_small.yml
        "LOSS_FUNC": "bce" if dataset == "vqa" else "ce", "LOSS_REDUCTION": "sum",
        "OPT": "Adam", "OPT_PARAMS": {"betas": "(0.9, 0.98)", "eps": "1e-9"},
        # LW-Transformer's openvqa fork (GROUP and EXPAND, with the knobs below)
        "SA_GROUP": grouped, "SGA_GROUP": grouped,
        # the design knobs under their names in the knob table (nas.knobs), GROUP and EXPAND
        # as LW-Transformer's fork reads them, the others ours: what neither code base expresses
        **{k.openvqa: getattr(a, k.name) for k in KNOBS if k.openvqa},
        "ENC_LAYER": a.encoder_layers, "DEC_LAYER": a.decoder_layers,
        "LAYER_SHARING": {"ENC": _pattern_text(record, "encoder"),
                          "DEC": _pattern_text(record, "decoder")},
        "NAS_ARCH_ID": a.arch_id,
        "NAS_NOT_EXPRESSED": _openvqa_limits(record),
    }
    return keys


def _pattern_text(record: TrialRecord, stack: str, *, always: bool = False) -> str | None:
    """A stack's sharing pattern as ``(0, 0, 1, 1)``; ``None`` when unshared unless
    ``always``."""
    pattern = record.arch.sharing_pattern(stack)
    if pattern == tuple(range(len(pattern))) and not always:
        return None
    return "(" + ", ".join(str(i) for i in pattern) + ")"


def _openvqa(record: TrialRecord) -> str:
    body = yaml.safe_dump(openvqa_config(record), sort_keys=False, default_flow_style=False)
    notes = "".join(f"# NOTE: {n}.\n" for n in _openvqa_limits(record))
    return (_header(record) + "# An OpenVQA config (configs/<DATASET>/<MODEL>.yml): network keys, "
            "the loss and optimizer its checks need,\n# LW-Transformer's group keys, then ours.\n"
            + notes + body)


# ----------------------------------------------------------------------------- acort
def _decoder_positions(record: TrialRecord) -> int | None:
    """Positions the trial's decoder ran on (``nas.tasks.decoder_positions``), if known."""
    g = record.geometry
    if g is None or g.kind != "caption":
        return None
    from nas.radix import NUM_SPECIAL, digits_per_word  # torch: only when an ort trial is exported

    base = record.arch.radix_base
    if base is not None and g.num_outputs <= NUM_SPECIAL:  # no word to write in digits
        return None
    return decoder_positions(g, digits_per_word(g.num_outputs, base))


def _acort_limits(record: TrialRecord) -> list[str]:
    notes = [f"ACORT has no option for {k}={v}: it builds the dense layers"
             for k, v in _knobs_set(record).items()
             if k not in ("attention_sharing", "layer_sharing")]
    if _decoder_positions(record) is None:
        notes.append("the stored task geometry gives no caption length, so --max_seq_length is "
                     "not written (the trial's caption words x tokens per word + 2 keeps its "
                     "caption length; ACORT's default is 18)")
    return notes


def acort_options(record: TrialRecord) -> tuple[list[str], list[str]]:
    """Options of ACORT's ``train_transformer.py`` for ``record`` (``clients.ACORT_FLAGS``), and
    notes on what they cannot express."""
    a = record.arch
    opts = ["--caption_model", "relation_transformer"]
    if a.radix_base is not None:
        opts += ["--tokenizer", "radix", "--radix_base", str(a.radix_base)]
    else:
        opts += ["--tokenizer", "word"]
    positions = _decoder_positions(record)
    if positions is not None:  # the caption length the trial trained on, BOS + caption + EOS
        opts += ["--max_seq_length", str(acort_max_seq_length(positions))]
    opts += ["--d_model", str(a.d_model), "--dim_feedforward", str(a.d_ff),
             "--num_heads", str(a.heads), "--num_layers", str(a.encoder_layers)]
    if a.attention_sharing != "none":
        opts += ["--share_att_encoder", a.attention_sharing,
                 "--share_att_decoder", a.attention_sharing]
    for stack in ("encoder", "decoder"):  # both always: every pattern, unshared included
        opts += [f"--share_layer_{stack}", str(_pattern_text(record, stack, always=True))]
    if record.geometry is not None:
        opts += ["--att_feat_size", str(record.geometry.region_dim)]
    return opts, _acort_limits(record)


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
def _stored_checkpoint(record: TrialRecord) -> Checkpoint | None:
    """The trial's checkpoint when it is on this machine, read and checked to be the trial's
    own inside the study's checkpoint folder (``studies.export._checkpoint``), else ``None``."""
    return read_checkpoint(record.checkpoint, record.checkpoint_dir, study=record.study,
                           number=record.number, arch_id=record.arch.arch_id)


def _timm_file(record: TrialRecord) -> str:
    return f"trial-{record.number}.timm.pth"


def timm_state_dict(record: TrialRecord) -> dict[str, Any] | None:
    """The trial's weights under the timm model's own names (our checkpoints hold the timm
    network as ``net``), or ``None`` when the trial kept no checkpoint."""

    found = _stored_checkpoint(record)
    if found is None:
        return None
    state = found.blob["state_dict"]
    if not all(key.startswith("net.") for key in state):
        raise NasError(f"The checkpoint {found.path!a} of {record.label} holds weights outside "
                       "the timm network (keys not under `net.`); export it as torch instead.")
    return {key.removeprefix("net."): value for key, value in state.items()}


def _timm_weights(record: TrialRecord) -> dict[str, bytes]:
    import torch

    state = timm_state_dict(record)
    if state is None:
        return {}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return {_timm_file(record): buffer.getvalue()}


def _timm(record: TrialRecord) -> str:
    assert record.geometry is not None  # Format.check
    name, kwargs = timm_model_args(record.arch, record.geometry)
    weights = _timm_file(record) if _stored_checkpoint(record) is not None else None
    doc = {"model_name": name, "kwargs": kwargs, "checkpoint": weights,
           "usage": ("import nas, timm; timm.create_model(model_name, **kwargs, "
                     "checkpoint_path=checkpoint)  # checkpoint: relative to this file; "
                     "or model.load_state_dict(torch.load(checkpoint))"),
           "provenance": {"study": record.study, "trial": record.number,
                          "arch_id": record.arch.arch_id, "version": record.version}}
    return json.dumps(doc, indent=2) + "\n"


def _timm_limits(record: TrialRecord) -> list[str]:
    if record.checkpoint is not None and _stored_checkpoint(record) is None:
        return [f"the trial's checkpoint {record.relative(record.checkpoint)!a} was not found, "
                "so no weights are written"]
    return []


# ----------------------------------------------------------------------------- torch
_TORCH = '''\
{header}# `python {script} [CHECKPOINT]` builds the network, loads the checkpoint (CHECKPOINT by
# default) and runs it once on example inputs; other code can import it and call `build()`.
from __future__ import annotations

import sys
from pathlib import Path

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


def _torch_file(record: TrialRecord) -> str:
    return f"trial-{record.number}.pt"


def _torch_weights(record: TrialRecord) -> dict[str, bytes]:
    found = _stored_checkpoint(record)
    return {} if found is None else {_torch_file(record): found.data}


def _torch(record: TrialRecord) -> str:
    assert record.geometry is not None  # Format.check
    note, checkpoint = "", "None"
    if record.checkpoint is None:
        note = "# No checkpoint was stored with this trial: the network is randomly initialised.\n"
    elif _stored_checkpoint(record) is None:
        note = (f"# The trial's checkpoint {record.relative(record.checkpoint)!a} was not found "
                "when exporting: pass its path.\n")
    else:  # copied beside this script: the folder can move
        note = f"# The trial's checkpoint, copied beside this script as {_torch_file(record)}.\n"
        checkpoint = f"str(Path(__file__).resolve().with_name({_torch_file(record)!a}))"
    return _TORCH.format(
        header=_header(record), script=f"trial-{record.number}.py",
        arch=_literal(record.arch.to_dict()), geometry=_literal(asdict(record.geometry)),
        checkpoint_note=note, checkpoint=checkpoint,
    )


# ----------------------------------------------------------------------------- the table
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("yaml", "trial-{n}.yaml", _yaml),
    Format("json", "trial-{n}.json", _json),
    Format("hf-config", "trial-{n}/config.json", _hf, families=FAMILY_NAMES, limits=_hf_limits),
    Format("openvqa", "trial-{n}.openvqa.yml", _openvqa, families=("mcan",),
           refusal=_unequal_depths, limits=_openvqa_limits),
    Format("acort", "trial-{n}.acort.sh", _acort, families=("ort",), refusal=_unequal_depths,
           limits=_acort_limits),
    Format("timm", "trial-{n}.timm.json", _timm, families=("vit", "swin"), needs_geometry=True,
           extras=_timm_weights, limits=_timm_limits),
    Format("torch", "trial-{n}.py", _torch, needs_geometry=True, extras=_torch_weights),
)}


def formats_for(family: str) -> list[str]:
    return [name for name, f in FORMATS.items() if f.families is None or family in f.families]
