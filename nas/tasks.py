"""Task geometries: the input shapes and output sizes that fix a model's cost.

A geometry needs no data. The trainable tasks (proxy tasks, the user's datasets) live in
``trainers`` and each carries a geometry of this kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nas.errors import ConfigError

__all__ = [
    "GEOMETRIES",
    "GEOMETRY_LIMITS",
    "TaskGeometry",
    "TaskKind",
    "decoder_positions",
    "get_geometry",
]

TaskKind = Literal["vqa", "caption", "image"]
_KINDS = ("vqa", "caption", "image")

#: Upper limits of the sizes a geometry (and so a task's options) may have, checked before a
#: model or data is built. Generous: ImageNet-21k has 21,841 classes, VQA v2 a 20,572-word
#: question vocabulary, CLEVR 43-token questions, bottom-up features 100 regions x 2048-d (grid
#: features 32 x 32 = 1024 regions), ViTs are trained at 224 to 518 pixels.
GEOMETRY_LIMITS: dict[str, int] = {
    "num_outputs": 1_000_000,
    "question_tokens": 512,
    "question_vocab": 1_000_000,
    "regions": 1024,
    "region_dim": 8192,
    "caption_words": 512,
    "image_size": 1024,
    "in_chans": 16,
}


@dataclass(frozen=True)
class TaskGeometry:
    """Input geometry and output size of a task.

    Attributes:
        kind: ``vqa`` (question tokens + region features -> answer class), ``caption`` (region
            features + boxes -> word sequence) or ``image`` (pixels -> class).
        num_outputs: answers (vqa), words of the caption vocabulary including its special tokens
            (caption), or classes (image).
        question_tokens / question_vocab: question length and its word vocabulary (vqa).
        regions / region_dim: number of region features and their width (vqa, caption).
        caption_words: caption length in words (caption); radix encoding multiplies the number
            of decoder tokens by its digit count. The decoder runs on BOS and every token of
            such a caption: ``decoder_positions``.
        image_size / in_chans: square image side in pixels and channels (image).
    """

    name: str
    kind: TaskKind
    num_outputs: int
    question_tokens: int = 0
    question_vocab: int = 0
    regions: int = 0
    region_dim: int = 0
    caption_words: int = 0
    image_size: int = 0
    in_chans: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigError(f"A task geometry's `name` must be a string, but got {self.name!r}.")
        if self.kind not in _KINDS:
            raise ConfigError(f"A task geometry's `kind` must be one of {list(_KINDS)}, but got "
                              f"{self.kind!r}.")
        for key, limit in GEOMETRY_LIMITS.items():
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"Task geometry `{key}` must be an integer, but got "
                                  f"{key}={value!r}.")
            if not 0 <= value <= limit:
                raise ConfigError(f"`0 <= {key} <= {limit}` must hold for task {self.name!r}, "
                                  f"but got {key}={value}.")


GEOMETRIES: dict[str, TaskGeometry] = {
    g.name: g
    for g in (
        TaskGeometry("vqa2", "vqa", 3129, question_tokens=14, question_vocab=20572, regions=100,
                     region_dim=2048),
        TaskGeometry("gqa", "vqa", 1843, question_tokens=29, question_vocab=2933, regions=100,
                     region_dim=2048),
        TaskGeometry("clevr", "vqa", 28, question_tokens=43, question_vocab=82, regions=196,
                     region_dim=1024),
        TaskGeometry("coco-captions", "caption", 10001, regions=36, region_dim=2048,
                     caption_words=16),
        TaskGeometry("imagenet", "image", 1000, image_size=224),
        TaskGeometry("cifar100", "image", 100, image_size=32),
    )
}

def decoder_positions(task: TaskGeometry, tokens_per_word: int = 1) -> int:
    """Positions the caption decoder runs on for one caption of ``task``: THE sequence-length
    convention of the cost model, the latency measure and the exports.

    ``1 + caption_words * tokens_per_word``: BOS, then every token of a caption of
    ``caption_words`` words written as ``tokens_per_word`` tokens each (radix digits,
    ``nas.radix.digits_per_word``; 1 without radix). It is what training feeds for a full-length
    caption (decoder input BOS + caption, target caption + EOS: ``trainers.tasks.collate``) and
    what generating one runs (a decoding step per token fed, BOS first, the last step
    predicting EOS: ``ORTCaptioner.generate``). Not BOS + caption[:-1]: that leaves out the
    position whose target is EOS, which training and generation both run.
    """
    if task.kind != "caption":
        raise ValueError(f"Task {task.name!r} is a {task.kind} task; only caption tasks have a "
                         "decoder.")
    if tokens_per_word < 1:
        raise ValueError(f"`tokens_per_word >= 1` must hold, but got {tokens_per_word=}.")
    return 1 + task.caption_words * tokens_per_word


def get_geometry(name: str) -> TaskGeometry:
    """The cost-only geometry called ``name``."""
    if name not in GEOMETRIES:
        raise ConfigError(f"Unknown task {name!r}; cost geometries are {sorted(GEOMETRIES)}.")
    return GEOMETRIES[name]
