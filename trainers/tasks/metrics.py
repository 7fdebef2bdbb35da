"""The tasks' metrics: accuracy, VQA accuracy, and the captioning metrics BLEU-4 and CIDEr-D.

The captioning metrics follow coco-caption (the code every captioning paper reports with), on
captions that are already tokenised: a caption is a list of words, or a string split on
whitespace. No Java tokenizer runs, so lowercase and strip punctuation before scoring when
comparing with published numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from itertools import chain

import numpy as np
import torch

__all__ = ["Sentence", "accuracy", "bleu4", "cider_d", "cider_d_constant", "cider_d_scores",
           "vqa_accuracy"]

Sentence = str | Sequence[str]
NGram = tuple[str, ...]


def _predicted(predictions: torch.Tensor) -> torch.Tensor:
    """Class ids (N,) from ids or from logits/scores (N, C)."""
    return predictions.argmax(dim=-1) if predictions.dim() == 2 else predictions


def accuracy(predictions: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of ``predictions`` (class ids (N,) or logits (N, C)) equal to ``labels`` (N,)."""
    pred = _predicted(predictions)
    if pred.shape != labels.shape:
        raise ValueError(f"Predictions {tuple(pred.shape)} and labels {tuple(labels.shape)} "
                         "differ in shape.")
    return float((pred == labels).float().mean()) if labels.numel() else 0.0


def vqa_accuracy(predictions: torch.Tensor, answer_scores: torch.Tensor) -> float:
    """Mean soft score of the predicted answers: VQA accuracy, ``min(1, #humans / 3)``.

    ``predictions`` are answer ids (N,) or logits (N, A); ``answer_scores`` (N, A) are the soft
    targets of the VQA items.
    """
    pred = _predicted(predictions)
    if answer_scores.dim() != 2 or pred.shape != answer_scores.shape[:1]:
        raise ValueError(
            f"Predictions {tuple(pred.shape)} do not match answer scores "
            f"{tuple(answer_scores.shape)}; expected (N,) and (N, A)."
        )
    if not len(pred):
        return 0.0
    return float(answer_scores.gather(1, pred[:, None].long()).mean())


def _words(sentence: Sentence) -> list[str]:
    return sentence.split() if isinstance(sentence, str) else list(sentence)


def _ngrams(words: Sequence[str], n: int = 4) -> Counter[NGram]:
    """Counts of every 1..n-gram of ``words``."""
    counts: Counter[NGram] = Counter()
    for k in range(1, n + 1):
        counts.update(tuple(words[i : i + k]) for i in range(len(words) - k + 1))
    return counts


def _check(candidates: Sequence[Sentence], references: Sequence[Sequence[Sentence]]) -> None:
    if len(candidates) != len(references):
        raise ValueError(
            f"One list of references per candidate is needed, but got {len(candidates)} "
            f"candidates and {len(references)} reference lists."
        )
    if any(len(refs) == 0 for refs in references):
        raise ValueError("Every candidate needs at least one reference caption.")


def bleu4(candidates: Sequence[Sentence], references: Sequence[Sequence[Sentence]]) -> float:
    """Corpus BLEU-4 in [0, 1], as coco-caption's ``Bleu(4)`` computes it.

    Clipped 1..4-gram precisions over the whole corpus, their geometric mean, and the brevity
    penalty against the closest reference length of each candidate (ties: the shorter). Unlike
    coco-caption no 1e-9 smoothing is added, so a corpus without a matching 4-gram scores 0.
    """
    _check(candidates, references)
    matched, guessed = [0] * 4, [0] * 4
    cand_len = ref_len = 0
    for cand, refs in zip(candidates, references, strict=True):
        words, ref_words = _words(cand), [_words(r) for r in refs]
        cand_len += len(words)
        ref_len += min((abs(len(r) - len(words)), len(r)) for r in ref_words)[1]
        most: Counter[NGram] = Counter()
        for r in ref_words:
            most |= _ngrams(r)  # per n-gram, its largest count in any one reference
        for gram, count in _ngrams(words).items():
            guessed[len(gram) - 1] += count
            matched[len(gram) - 1] += min(count, most[gram])
    if cand_len == 0 or min(matched) == 0:
        return 0.0
    log_precision = sum(math.log(m / g) for m, g in zip(matched, guessed, strict=True)) / 4
    brevity = min(0.0, 1.0 - ref_len / cand_len)
    return math.exp(log_precision + brevity)


def _tfidf(
    counts: Counter[NGram], df: Counter[NGram], log_images: float
) -> tuple[list[dict[NGram, float]], list[float], int]:
    """CIDEr's tf-idf vectors per n-gram order, their norms, and the caption's "length".

    The length is its number of bigrams, as in the reference code (one less than its words).
    """
    vec: list[dict[NGram, float]] = [{} for _ in range(4)]
    norm = [0.0] * 4
    length = 0
    for gram, tf in counts.items():
        n = len(gram) - 1
        vec[n][gram] = tf * (log_images - math.log(max(1.0, df[gram])))
        norm[n] += vec[n][gram] ** 2
        if n == 1:
            length += tf
    return vec, [math.sqrt(x) for x in norm], length


def cider_d_scores(
    candidates: Sequence[Sentence],
    references: Sequence[Sequence[Sentence]],
    *,
    sigma: float = 6.0,
) -> list[float]:
    """Per-image CIDEr-D, as coco-caption's ``CiderD`` computes it.

    For n = 1..4: tf-idf n-gram vectors (document frequency over the images' reference sets of
    this corpus), the cosine between the candidate and each reference with the candidate's
    counts clipped at the reference's, times ``exp(-(len_c - len_r)**2 / (2 sigma**2))``;
    averaged over n and over references, times 10.
    """
    _check(candidates, references)
    refs_counts = [[_ngrams(_words(r)) for r in refs] for refs in references]
    df: Counter[NGram] = Counter()
    for refs in refs_counts:
        df.update(set().union(*refs))
    log_images = math.log(len(candidates)) if candidates else 0.0
    scores = []
    seen: dict[tuple[str, ...], tuple[list[dict[NGram, float]], list[float], int]] = {}
    for cand, refs in zip(candidates, refs_counts, strict=True):
        words = tuple(_words(cand))
        if words not in seen:  # a caption given for many images is weighed once
            seen[words] = _tfidf(_ngrams(words), df, log_images)
        vec, norm, length = seen[words]
        total = 0.0
        for ref in refs:
            vec_r, norm_r, length_r = _tfidf(ref, df, log_images)
            penalty = math.exp(-((length - length_r) ** 2) / (2 * sigma**2))
            for n in range(4):
                dot = sum(min(v, vec_r[n].get(g, 0.0)) * vec_r[n].get(g, 0.0)
                          for g, v in vec[n].items())
                if norm[n] and norm_r[n]:
                    dot /= norm[n] * norm_r[n]
                total += dot * penalty
        scores.append(total / 4 / len(refs) * 10.0)
    return scores


def cider_d(
    candidates: Sequence[Sentence],
    references: Sequence[Sequence[Sentence]],
    *,
    sigma: float = 6.0,
) -> float:
    """Corpus CIDEr-D: the mean of :func:`cider_d_scores` (0 for an empty corpus).

    Like coco-caption's, it is 0 on a corpus of one image (every n-gram's idf is then 0).
    """
    scores = cider_d_scores(candidates, references, sigma=sigma)
    return sum(scores) / len(scores) if scores else 0.0



def _dense(keys: np.ndarray) -> np.ndarray:
    """Each key's rank among the distinct keys."""
    return np.unique(keys, return_inverse=True)[1].reshape(-1)


def _distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (by sorting: numpy's hashed ``unique`` is slower on these)."""
    keys = np.sort(keys)
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys


def cider_d_constant(
    candidate: Sentence,
    references: Sequence[Sequence[Sentence]],
    *,
    sigma: float = 6.0,
) -> float:
    """Corpus CIDEr-D of one caption given for every image: :func:`cider_d` of
    ``[candidate] * len(references)``, computed with arrays (a captioning task's chance level
    over thousands of images, in a fraction of the time).

    Every n-gram is an integer: a word's id, then the id of the (n-1)-gram before a word and of
    the word, ranked among the distinct pairs. Counts per reference and document frequencies
    per image come from sorting those integers; only the candidate's n-grams enter a dot
    product.
    """
    _check([candidate] * len(references), references)
    if not references:
        return 0.0
    refs = [_words(r) for rs in references for r in rs]
    sentences = [*refs, _words(candidate)]  # the candidate last: its n-grams share the ids
    lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    flat = list(chain.from_iterable(sentences))
    vocab = {w: i for i, w in enumerate(dict.fromkeys(flat))}
    words = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
    owner = np.repeat(np.arange(len(sentences)), lengths)  # each word's sentence
    place = np.arange(len(words)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    image = np.repeat(np.arange(len(references)),
                      np.fromiter(map(len, references), dtype=np.int64))  # each ref's image
    n_refs, log_images = len(refs), math.log(len(references))
    total = np.zeros(n_refs)
    # the "length" of a caption is its number of bigrams (see ``_tfidf``)
    bigrams = np.maximum(lengths - 1, 0)
    penalty = np.exp(-((bigrams[-1] - bigrams[:-1]) ** 2) / (2 * sigma**2))
    gram = words  # the id of the n-gram ending at each word (order 1: the word)
    for n in range(1, 5):
        if n > 1:
            at = np.flatnonzero(place >= n - 1)
            ids = np.full(len(words), -1, dtype=np.int64)
            ids[at] = _dense(gram[at - 1] * len(vocab) + words[at])
            gram = ids
        at = np.flatnonzero(place >= n - 1)
        count = int(gram.max(initial=-1)) + 1
        mine = owner[at] == n_refs
        ref_at = at[~mine]
        # term frequency per (reference, n-gram), document frequency per n-gram (images)
        pairs, tf = np.unique(owner[ref_at] * count + gram[ref_at], return_counts=True)
        ref, g = pairs // count, pairs % count
        df = np.bincount(_distinct(image[ref] * count + g) % count, minlength=count)
        idf = log_images - np.log(np.maximum(df, 1))
        vec_r = tf * idf[g]
        norm_r = np.sqrt(np.bincount(ref, vec_r**2, minlength=n_refs))
        own, own_tf = np.unique(gram[at[mine]], return_counts=True)
        vec_c = np.zeros(count)
        vec_c[own] = own_tf * idf[own]
        norm_c = math.sqrt(float((vec_c**2).sum()))
        shared = np.isin(g, own)
        dot = np.bincount(ref[shared], np.minimum(vec_c[g[shared]], vec_r[shared])
                          * vec_r[shared], minlength=n_refs)
        scale = norm_c * norm_r  # where a norm is 0, so is every product of the dot
        total += np.divide(dot, scale, out=np.zeros(n_refs), where=scale > 0) * penalty
    per_image = np.bincount(image, total, minlength=len(references))
    sizes = np.fromiter(map(len, references), dtype=np.float64)
    return float((per_image / 4 / sizes * 10.0).mean())
