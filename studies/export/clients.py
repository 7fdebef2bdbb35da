"""What the clients that are not Python packages read: OpenVQA's config keys and ACORT's flags.

``nas export --format openvqa`` and ``--format acort`` write for code bases that cannot be
installed and imported in a test. What their code reads is listed here, once, with the file of
their repository it comes from, so the exports and the tests are held to the same list:

- OpenVQA (github.com/MILVLG/openvqa): ``run.py`` loads ``configs/<DATASET>/<MODEL>.yml`` and sets
  every key on the config object (``BaseCfgs.add_args``), then ``BaseCfgs.proc`` asserts the
  loss, reduction and optimizer (``openvqa_problems`` repeats those checks).
- ACORT (github.com/jiahuei/sparse-image-captioning): ``train_transformer.py`` parses the flags
  of ``opts.py``, ``tokenizer.py`` and the model's ``add_argparse_args``
  (``models/transformer.py``); ``--share_layer_*`` are parsed by ``str_to_sequence`` from text
  such as ``"(0, 0, 0, 1, 1, 1)"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ACORT_FLAGS",
    "ACORT_RADIX_WORDS",
    "OPENVQA_FEAT_SIZE",
    "OPENVQA_KEYS",
    "OPENVQA_LOSSES",
    "OPENVQA_OPTIMIZERS",
    "OPENVQA_REDUCTIONS",
    "acort_max_seq_length",
    "openvqa_problems",
]

# ----------------------------------------------------------------------------- OpenVQA
_BASE = "openvqa/core/base_cfgs.py"
_MCAN_CFGS = "openvqa/models/mcan/model_cfgs.py"

#: key -> where OpenVQA reads (or defines) it
OPENVQA_KEYS: dict[str, str] = {
    "MODEL_USE": "run.py (CfgLoader), openvqa/models/model_loader.py: openvqa.models.<MODEL_USE>",
    "LAYER": f"{_MCAN_CFGS}; openvqa/models/mcan/mca.py builds LAYER SA and LAYER SGA layers",
    "HIDDEN_SIZE": f"{_MCAN_CFGS}; openvqa/models/mcan/mca.py, net.py",
    "FF_SIZE": f"{_MCAN_CFGS}; openvqa/models/mcan/mca.py (FFN)",
    "MULTI_HEAD": f"{_MCAN_CFGS}; openvqa/models/mcan/mca.py (MHAtt)",
    "DROPOUT_R": f"{_MCAN_CFGS}; openvqa/models/mcan/mca.py",
    "FLAT_MLP_SIZE": f"{_MCAN_CFGS}; openvqa/models/mcan/net.py (AttFlat)",
    "FLAT_GLIMPSES": f"{_MCAN_CFGS}; openvqa/models/mcan/net.py (AttFlat)",
    "FLAT_OUT_SIZE": f"{_MCAN_CFGS}; openvqa/models/mcan/net.py (AttFlat, classifier)",
    "WORD_EMBED_SIZE": f"{_BASE}; openvqa/models/mcan/net.py (embedding, LSTM)",
    "USE_BBOX_FEAT": f"{_MCAN_CFGS}; openvqa/models/mcan/adapter.py",
    "BBOXFEAT_EMB_SIZE": f"{_MCAN_CFGS}; openvqa/models/mcan/adapter.py",
    "USE_AUX_FEAT": f"{_MCAN_CFGS}; openvqa/models/mcan/adapter.py (gqa grid features)",
    "FEAT_SIZE": f"{_BASE}; openvqa/models/mcan/adapter.py reads "
                 "FEAT_SIZE[dataset]['FRCN_FEAT_SIZE'][1], the loaders [0]",
    "LOSS_FUNC": f"{_BASE} proc(): asserted in ['ce', 'bce', 'kld', 'mse'] and TASK_LOSS_CHECK",
    "LOSS_REDUCTION": f"{_BASE} proc(): asserted in ['none', 'elementwise_mean', 'sum']",
    "OPT": f"{_BASE} proc(): asserted to be a torch.optim name",
    "OPT_PARAMS": f"{_BASE} proc(): keys of the optimizer, values strings it eval()s",
}

#: dataset -> feature -> (count, width): the layout of ``BaseCfgs.FEAT_SIZE``
OPENVQA_FEAT_SIZE: dict[str, dict[str, tuple[int, int]]] = {
    "vqa": {"FRCN_FEAT_SIZE": (100, 2048), "BBOX_FEAT_SIZE": (100, 5)},
    "gqa": {"FRCN_FEAT_SIZE": (100, 2048), "GRID_FEAT_SIZE": (49, 2048),
            "BBOX_FEAT_SIZE": (100, 5)},
    "clevr": {"GRID_FEAT_SIZE": (196, 1024)},
}
#: dataset -> the losses ``proc()`` accepts for it (``TASK_LOSS_CHECK``)
OPENVQA_LOSSES: dict[str, tuple[str, ...]] = {"vqa": ("bce", "kld"), "gqa": ("ce",),
                                              "clevr": ("ce",)}
OPENVQA_REDUCTIONS = ("none", "elementwise_mean", "sum")
OPENVQA_OPTIMIZERS = ("Adam", "Adamax", "RMSprop", "SGD", "Adadelta", "Adagrad")


def openvqa_problems(config: Mapping[str, Any], dataset: str) -> list[str]:
    """What OpenVQA would reject or misread in ``config`` for ``dataset`` (``vqa``, ``gqa``,
    ``clevr``): ``proc()``'s assertions and the feature layout the MCAN adapter indexes.
    Empty when the file passes."""
    problems = [f"{key} missing" for key in OPENVQA_KEYS if key not in config]
    loss = config.get("LOSS_FUNC")
    if loss not in OPENVQA_LOSSES.get(dataset, ()):
        problems.append(f"LOSS_FUNC={loss!r} is not one of {OPENVQA_LOSSES.get(dataset)}")
    if config.get("LOSS_REDUCTION") not in OPENVQA_REDUCTIONS:
        problems.append(f"LOSS_REDUCTION={config.get('LOSS_REDUCTION')!r}")
    if config.get("OPT") not in OPENVQA_OPTIMIZERS:
        problems.append(f"OPT={config.get('OPT')!r}")
    params = config.get("OPT_PARAMS") or {}
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        problems.append("OPT_PARAMS values must be strings")
    feat = config.get("FEAT_SIZE")
    if not isinstance(feat, dict):
        return [*problems, "FEAT_SIZE is not a mapping per dataset"]
    for name, features in OPENVQA_FEAT_SIZE.items():
        given = feat.get(name)
        if not isinstance(given, dict) or set(given) != set(features):
            problems.append(f"FEAT_SIZE[{name!r}] must have {sorted(features)}")
            continue
        for key, value in given.items():
            if not (isinstance(value, list | tuple) and len(value) == 2
                    and all(isinstance(v, int) and v > 0 for v in value)):
                problems.append(f"FEAT_SIZE[{name!r}][{key!r}] must be (count, width)")
    return problems


# ----------------------------------------------------------------------------- ACORT
_TRANSFORMER = "sparse_caption/models/transformer.py (add_argparse_args)"

#: flag -> where ACORT defines it
ACORT_FLAGS: dict[str, str] = {
    "--caption_model": "sparse_caption/opts.py (relation_transformer: ORT / ACORT)",
    "--dataset_dir": "sparse_caption/opts.py",
    "--log_dir": "sparse_caption/opts.py",
    "--id": "sparse_caption/opts.py (names the run's folder)",
    "--tokenizer": "sparse_caption/tokenizer.py (word, radix, ...)",
    "--radix_base": "sparse_caption/tokenizer.py",
    "--max_seq_length": "sparse_caption/data/collate.py: including <BOS> and <EOS>, default 18; "
                        "the ACORT scripts pass 26 with --tokenizer radix",
    "--d_model": _TRANSFORMER,
    "--dim_feedforward": _TRANSFORMER,
    "--num_layers": f"{_TRANSFORMER}: one depth for the encoder and the decoder",
    "--num_heads": _TRANSFORMER,
    "--att_feat_size": _TRANSFORMER,
    "--share_att_encoder": f"{_TRANSFORMER}: kv or qk, default none",
    "--share_att_decoder": f"{_TRANSFORMER}: kv or qk, default none",
    "--share_layer_encoder": f"{_TRANSFORMER}: str_to_sequence, e.g. \"(0, 0, 0, 1, 1, 1)\"",
    "--share_layer_decoder": f"{_TRANSFORMER}: str_to_sequence, e.g. \"(0, 0, 0, 1, 1, 1)\"",
}


#: Words a caption keeps in ACORT's published radix setup: its scripts pass --max_seq_length 26
#: with two tokens per word (base 768 over MS-COCO's vocabulary), and its RadixTokenizer.encode
#: keeps (max_seq_length - 2) // tokens_per_word + 2 word tokens (sparse_caption/tokenizer.py),
#: i.e. 12 words between <bos> and <eos>: ``acort_max_seq_length(1 + 12 * 2) == 26``. The
#: export writes the trial's own caption length instead (``acort_max_seq_length``).
ACORT_RADIX_WORDS = 12


def acort_max_seq_length(decoder_positions: int) -> int:
    """``--max_seq_length`` under which ACORT's decoder runs on ``decoder_positions`` positions
    (``nas.tasks.decoder_positions``: BOS + the caption's tokens): one more, for the EOS.

    ACORT reads it as the "maximum sequence length including <BOS> and <EOS>"
    (sparse_caption/data/collate.py), feeds ``seqs[:, :-1]`` to the decoder
    (models/transformer.py) and, with radix, keeps (max_seq_length - 2) // tokens_per_word words
    between BOS and EOS (tokenizer.py): the same words, tokens and positions as the trial's
    training. 18 for 16 words a token each (ACORT's default), 34 at two radix digits a word.
    """
    if decoder_positions < 1:
        raise ValueError(f"`decoder_positions >= 1` must hold (the decoder is fed BOS), but got "
                         f"{decoder_positions=}.")
    return decoder_positions + 1
