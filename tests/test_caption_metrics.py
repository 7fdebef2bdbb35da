"""The captioning metrics against the reference implementation: pycocoevalcap's ``Bleu(4)`` and
``Cider`` (coco-caption's code, whose ``Cider`` is CIDEr-D) on generated corpora."""

from __future__ import annotations

import random

import pytest

from trainers.tasks.metrics import bleu4, cider_d, cider_d_constant, cider_d_scores

pytest.importorskip("pycocoevalcap", reason="pycocoevalcap is a test dependency (.[test])")
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider

Corpus = tuple[list[str], list[list[str]]]


def corpus(seed: int, images: int = 60, vocabulary: int = 25) -> Corpus:
    """Candidates that are noisy copies of one of their image's references (so n-grams of every
    order match), five references per image over an overlapping vocabulary."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocabulary)]
    candidates, references = [], []
    for _ in range(images):
        refs = [" ".join(rng.choices(words, k=rng.randint(5, 14))) for _ in range(5)]
        base = rng.choice(refs).split()
        cand = [w if rng.random() < 0.7 else rng.choice(words) for w in base]
        cand = cand[: rng.randint(3, len(cand))] + rng.choices(words, k=rng.randint(0, 3))
        candidates.append(" ".join(cand))
        references.append(refs)
    return candidates, references


def reference_scores(candidates: list[str], references: list[list[str]]) -> tuple[
        float, float, list[float]]:
    """(BLEU-4, CIDEr-D, per-image CIDEr-D) as pycocoevalcap computes them."""
    gts = {i: refs for i, refs in enumerate(references)}
    res = {i: [cand] for i, cand in enumerate(candidates)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    cider, per_image = Cider().compute_score(gts, res)
    return float(bleu[3]), float(cider), [float(x) for x in per_image]


@pytest.mark.parametrize("seed", range(5))
def test_bleu4_and_cider_d_equal_coco_caption(seed: int) -> None:
    candidates, references = corpus(seed)
    bleu, cider, per_image = reference_scores(candidates, references)
    assert 0.05 < bleu < 0.9 and cider > 0.1  # a corpus where both metrics have work to do
    # coco-caption adds 1e-9 to each n-gram precision's denominator (1e-15 to its numerator)
    assert bleu4(candidates, references) == pytest.approx(bleu, rel=1e-7)
    assert cider_d(candidates, references) == pytest.approx(cider, abs=1e-12)
    assert cider_d_scores(candidates, references) == pytest.approx(per_image, abs=1e-12)


def test_a_corpus_without_a_matching_4_gram() -> None:
    """Ours is 0; coco-caption's smoothing leaves a number below 1e-4 instead."""
    candidates = ["a b c", "d e f"]
    references = [["a x b y c", "c b a"], ["f e d", "d y e x f"]]
    bleu, cider, _ = reference_scores(candidates, references)
    assert bleu4(candidates, references) == 0.0 and 0.0 < bleu < 1e-4
    assert cider_d(candidates, references) == pytest.approx(cider, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_one_caption_for_every_image_is_scored_as_coco_caption_does(seed: int) -> None:
    """``cider_d_constant`` (the chance level: arrays) equals coco-caption's CIDEr-D of that
    caption given for every image, for a reference's copy, a noisy one and one of unseen words."""
    _, references = corpus(seed)
    rng = random.Random(seed)
    copied = rng.choice(rng.choice(references))
    noisy = " ".join([*rng.sample(copied.split(), k=3), "w3", "w3", "unseen"])
    for candidate in (copied, noisy, "unseen words only", "w1"):
        _, cider, _ = reference_scores([candidate] * len(references), references)
        assert cider_d_constant(candidate, references) == pytest.approx(cider, abs=1e-12)
        assert cider_d_constant(candidate.split(), references) == pytest.approx(
            cider_d([candidate] * len(references), references), abs=1e-12)


def test_one_caption_for_every_image_at_the_edges() -> None:
    # unequal reference counts, an empty reference, an empty candidate, one image, none
    references = [["a b c d e", "a b", ""], ["b c d"], ["e d c b a", "a b c d e f g"]]
    for candidate in ("a b c d e", "", "b", "z z z z"):
        assert cider_d_constant(candidate, references) == pytest.approx(
            cider_d([candidate] * 3, references), abs=1e-12)
    assert cider_d_constant("a b", [["a b", "b a"]]) == cider_d(["a b"], [["a b", "b a"]]) == 0
    assert cider_d_constant("a b", []) == 0.0
    with pytest.raises(ValueError, match="at least one reference"):
        cider_d_constant("a", [["a"], []])
