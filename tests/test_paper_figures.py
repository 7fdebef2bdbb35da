"""Every parameter and MAdds figure of the papers' tables that the system can build, through the
code path of ``nas cost --json``, with the accounting named per row.

Accountings: ``params`` (every unique trainable tensor), ``params_matrix`` (weight matrices
only), ``madds`` (knobs.md: matrix products and convolutions), ``madds+norms`` (``madds`` plus
one per LayerNorm element, as Swin's own ``flops()`` counts), each of the whole model or of one
part (``backbone``: the papers' "#Params" that leave out the language and vision encoders).

A figure is ``exact`` (knobs.md gives every digit) or ``printed`` to a precision: the paper's
number is our value rounded or truncated to its digits (ours lies in [P - q/2, P + q)).

Figures no accounting of the structure the papers describe reproduces (kept here so the gap is
known; the MAdds of each are reproduced below):

- LW-Transformer Table II, G-MHA + G-FFN without WS (k = 2): printed 32.4M, ours 30.77M (the
  G-MHA and G-FFN rows, which we reproduce, remove 7.1M and 6.3M of 44.1M: 30.7M together).
- Table II, LW 3x with k = 4 and k = 8: printed 21.9M and 19.8M, ours 20.23M and 18.09M.
- Table III, LW-Transformer mini (G-IL): MAdds printed 1.50G, ours 1.4947G (its 14.5M matches).
- Table IX, LW-Swin-T k = 2: printed 20.0M, ours 20.74M (knobs.md: no structure gives 20.0M).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from nas_cli.main import main as nas_main

PAPERS = {
    "knobs": "knobs.md, published figures",
    "acort": "ACORT (Tan et al. 2022) Table 1 and Section 4",
    "lw2": "LW-Transformer (Luo et al. 2022)",
    "armour": "Armour, Tables 1 and 3",
}
LW = "lw2"

# (row id, source, preset, --set overrides, task, part or None, accounting, figure, precision)
# precision None: exact.
Row = tuple[str, str, str, dict[str, Any], str | None, str | None, str, float, float | None]
ROWS: list[Row] = [
    # knobs.md: every digit
    ("mcan-small backbone", "knobs", "mcan-small", {}, "vqa2", "backbone", "params",
     44_138_496, None),
    ("mcan-small backbone madds", "knobs", "mcan-small", {}, "vqa2", "backbone", "madds",
     2_581_536_768, None),
    ("lw-1x backbone", "knobs", "lw-1x", {}, "vqa2", "backbone", "params", 24_067_584, None),
    ("ort-base", "knobs", "ort-base", {}, "coco-captions", None, "params", 55_443_777, None),
    ("acort-base", "knobs", "acort-base", {}, "coco-captions", None, "params", 14_979_347, None),
    ("deit-tiny", "knobs", "deit-tiny", {}, "imagenet", None, "params", 5_717_416, None),
    ("armour-tiny", "knobs", "armour-tiny", {}, "imagenet", None, "params", 5_272_744, None),
    ("swin-tiny", "knobs", "swin-tiny", {}, "imagenet", None, "params", 28_288_354, None),
    ("swin-tiny madds", "knobs", "swin-tiny", {}, "imagenet", None, "madds", 4.49e9, 0.01e9),
    ("lw-swin-tiny k=2", "knobs", "lw-swin-tiny", {}, "imagenet", None, "params", 20_740_450,
     None),
    ("lw-swin-tiny k=4", "knobs", "lw-swin-tiny-k4", {}, "imagenet", None, "params", 16.97e6,
     0.01e6),
    ("lw-swin-tiny k=4 madds", "knobs", "lw-swin-tiny-k4", {}, "imagenet", None, "madds+norms",
     2.674e9, 0.001e9),
    # ACORT Table 1 (all parameters of the captioner but the image CNN)
    ("ORT-base", "acort", "ort-base", {}, "coco-captions", None, "params", 55.4e6, 0.1e6),
    ("ORT-small", "acort", "ort-small", {}, "coco-captions", None, "params", 16.7e6, 0.1e6),
    ("ORT-xsmall", "acort", "ort-xsmall", {}, "coco-captions", None, "params", 4.1e6, 0.1e6),
    ("ORT-base-4", "acort", "ort-base-4", {}, "coco-captions", None, "params", 40.7e6, 0.1e6),
    ("ORT-base-2", "acort", "ort-base-2", {}, "coco-captions", None, "params", 26.0e6, 0.1e6),
    ("ACORT-base", "acort", "acort-base", {}, "coco-captions", None, "params", 15.0e6, 0.1e6),
    ("ACORT-base-AL", "acort", "acort-base-al", {}, "coco-captions", None, "params", 8.4e6,
     0.1e6),
    ("ACORT-small", "acort", "acort-small", {}, "coco-captions", None, "params", 4.2e6, 0.1e6),
    ("ACORT-xsmall", "acort", "acort-xsmall", {}, "coco-captions", None, "params", 2.57e6,
     0.01e6),
    # LW-Transformer Tables II and III (MCAN-small backbone on VQA), XI (LXMERT), IX (Swin-T)
    ("II Transformer", LW, "mcan-small", {}, "vqa2", "backbone", "params", 44.1e6, 0.1e6),
    ("II Transformer madds", LW, "mcan-small", {}, "vqa2", "backbone", "madds", 2.58e9, 0.01e9),
    ("II G-MHA", LW, "mcan-small", {"groups": 2, "group_attention": True}, "vqa2", "backbone",
     "params", 37.0e6, 0.1e6),
    ("II G-MHA madds", LW, "mcan-small", {"groups": 2, "group_attention": True}, "vqa2",
     "backbone", "madds", 2.21e9, 0.01e9),
    ("II G-FFN", LW, "mcan-small", {"groups": 2, "group_ffn": True}, "vqa2", "backbone",
     "params_matrix", 37.7e6, 0.1e6),
    ("II G-FFN madds", LW, "mcan-small", {"groups": 2, "group_ffn": True}, "vqa2", "backbone",
     "madds", 2.22e9, 0.01e9),
    ("II G-MHA+G-FFN madds", LW, "mcan-small",
     {"groups": 2, "group_attention": True, "group_ffn": True}, "vqa2", "backbone", "madds",
     1.85e9, 0.01e9),
    ("II LW 1x", LW, "lw-1x", {}, "vqa2", "backbone", "params", 24.0e6, 0.1e6),
    ("II LW 1x madds", LW, "lw-1x", {}, "vqa2", "backbone", "madds", 1.85e9, 0.01e9),
    ("II LW 2x", LW, "lw-2x", {}, "vqa2", "backbone", "params_matrix", 26.3e6, 0.1e6),
    ("II LW 2x madds", LW, "lw-2x", {}, "vqa2", "backbone", "madds", 2.16e9, 0.01e9),
    ("II LW 3x", LW, "lw-3x", {}, "vqa2", "backbone", "params_matrix", 28.7e6, 0.1e6),
    ("II LW 3x madds", LW, "lw-3x", {}, "vqa2", "backbone", "madds", 2.46e9, 0.01e9),
    ("II LW 3x k=4 madds", LW, "lw-3x", {"groups": 4}, "vqa2", "backbone", "madds", 1.83e9,
     0.01e9),
    ("II LW 3x k=8 madds", LW, "lw-3x", {"groups": 8}, "vqa2", "backbone", "madds", 1.51e9,
     0.01e9),
    ("III G-LML", LW, "lw-1x", {"group_merge": True}, "vqa2", "backbone", "params_matrix",
     20.4e6, 0.1e6),
    ("III G-LML madds", LW, "lw-1x", {"group_merge": True}, "vqa2", "backbone", "madds",
     1.69e9, 0.01e9),
    ("III LW mini (G-IL)", LW, "lw-mini", {}, "vqa2", "backbone", "params_matrix", 14.5e6,
     0.1e6),
    ("III G-LML+G-IL", LW, "lw-mini", {"group_merge": True}, "vqa2", "backbone", "params",
     11.0e6, 0.1e6),
    ("III G-LML+G-IL madds", LW, "lw-mini", {"group_merge": True}, "vqa2", "backbone", "madds",
     1.33e9, 0.01e9),
    ("XI LXMERT", LW, "lxmert", {}, "vqa2", "backbone", "params", 181e6, 1e6),
    ("XI LW-LXMERT 1x", LW, "lw-lxmert-1x", {}, "vqa2", "backbone", "params", 100e6, 1e6),
    ("IX Swin-T", LW, "swin-tiny", {}, "imagenet", None, "params", 28.3e6, 0.1e6),
    ("IX Swin-T madds", LW, "swin-tiny", {}, "imagenet", None, "madds+norms", 4.5e9, 0.1e9),
    ("IX LW-Swin-T k=2 madds", LW, "lw-swin-tiny", {}, "imagenet", None, "madds+norms", 3.3e9,
     0.1e9),
    ("IX LW-Swin-T k=4", LW, "lw-swin-tiny-k4", {}, "imagenet", None, "params", 16.9e6, 0.1e6),
    ("IX LW-Swin-T k=4 madds", LW, "lw-swin-tiny-k4", {}, "imagenet", None, "madds+norms",
     2.6e9, 0.1e9),
    # Armour Tables 1 and 3 (DeiT on ImageNet, all parameters)
    ("DeiT-Ti", "armour", "deit-tiny", {}, "imagenet", None, "params", 5.7e6, 0.1e6),
    ("Armour-Ti", "armour", "armour-tiny", {}, "imagenet", None, "params", 5.3e6, 0.1e6),
    ("W_K = W_V", "armour", "deit-tiny", {"attention_sharing": "kv"}, "imagenet", None,
     "params", 5.3e6, 0.1e6),
    ("W_Q = W_K", "armour", "deit-tiny", {"attention_sharing": "qk"}, "imagenet", None,
     "params", 5.3e6, 0.1e6),
    ("DeiT-S", "armour", "deit-small", {}, "imagenet", None, "params", 22.1e6, 0.1e6),
    ("Armour-S", "armour", "armour-small", {}, "imagenet", None, "params", 20.3e6, 0.1e6),
    ("DeiT-B", "armour", "deit-base", {}, "imagenet", None, "params", 86.6e6, 0.1e6),
    ("Armour-B", "armour", "armour-base", {}, "imagenet", None, "params", 79.5e6, 0.1e6),
]


def nas_cost(preset: str, overrides: dict[str, Any], task: str | None,
             capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """What ``nas cost PRESET --set K=V ... --task TASK --json`` prints."""
    args = ["cost", preset, "--json"]
    for key, value in overrides.items():
        args += ["--set", f"{key}={json.dumps(value)}"]
    if task is not None:
        args += ["--task", task]
    assert nas_main(args) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def figure(cost: dict[str, Any], part: str | None, accounting: str) -> int:
    scope = cost["parts"][part] if part else cost
    if accounting == "madds+norms":
        assert part is None  # the norms are counted over the whole model
        return int(cost["madds"] + cost["madds_norms"])
    return int(scope[accounting])


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_published_figure(row: Row, capsys: pytest.CaptureFixture[str]) -> None:
    _, source, preset, overrides, task, part, accounting, printed, precision = row
    assert source in PAPERS
    ours = figure(nas_cost(preset, overrides, task, capsys), part, accounting)
    if precision is None:
        assert ours == printed
    else:
        assert printed - precision / 2 <= ours < printed + precision, (ours, printed)


def test_the_swin_code_counts_its_last_norm_over_four_times_its_tokens(
        capsys: pytest.CaptureFixture[str]) -> None:
    """knobs.md's 3.281 G for LW-Swin-T k = 2 is Swin's own flops(): madds + LayerNorm elements,
    whose final-norm term counts 768 x 3136 / 16 = 150,528 elements where the norm runs over the
    49 x 768 = 37,632 of the last stage. With that term both published figures come out."""
    quirk = 768 * (56 * 56 // 16 - 7 * 7)
    for preset, published in (("lw-swin-tiny", 3.281e9), ("lw-swin-tiny-k4", 2.674e9)):
        value = figure(nas_cost(preset, {}, "imagenet", capsys), None, "madds+norms") + quirk
        assert round(value / 1e6) / 1e3 == published / 1e9
