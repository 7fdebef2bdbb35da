"""Radix encoding of an output vocabulary (ACORT captioning).

A word index ``i`` (0 = most frequent training word) is written as ``D`` base-``v`` digits,
most-significant first, so the model's output layer has only ``v + 3`` classes (digits plus
PAD/BOS/EOS) instead of one per word, at the price of captions about ``D`` times longer.
``WordTokenizer`` is the plain one-token-per-word baseline with the same surface.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "NUM_SPECIAL",
    "UNK",
    "CaptionTokenizer",
    "RadixTokenizer",
    "WordTokenizer",
    "digits_per_word",
    "num_digits",
    "tokenizer_from_dict",
]

UNK = "<unk>"
"""The unknown word; always part of a tokenizer's word vocabulary."""

NUM_SPECIAL = 3
"""Special tokens of either tokenizer besides the words or digits: PAD, BOS and EOS."""


def num_digits(num_words: int, base: int) -> int:
    """Return the number of base-``base`` digits needed to index ``num_words`` words (>= 1)."""
    if base < 2:
        raise ValueError(f"`base >= 2` must hold, but got base={base}.")
    if num_words < 1:
        raise ValueError(f"`num_words >= 1` must hold, but got num_words={num_words}.")
    digits, capacity = 1, base
    while capacity < num_words:
        capacity *= base
        digits += 1
    return digits


def digits_per_word(vocab_size: int, base: int | None) -> int:
    """Radix digits per word over a word-level vocabulary of ``vocab_size`` tokens; 1 without
    radix (``base=None``).

    ``vocab_size`` counts the special tokens, as ``WordTokenizer.vocab_size`` and a caption
    task's ``num_outputs`` do; the digits index only its ``vocab_size - 3`` words (``<unk>``
    included), exactly as ``RadixTokenizer`` over the same words writes them. The cost model,
    the ORT builder and the ACORT export all size captions with this function.
    """
    if base is None:
        return 1
    if vocab_size <= NUM_SPECIAL:
        raise ValueError(f"`vocab_size > {NUM_SPECIAL}` must hold (PAD, BOS, EOS and at least one "
                         f"word), but got vocab_size={vocab_size}.")
    return num_digits(vocab_size - NUM_SPECIAL, base)


def _order_counts(counts: Mapping[str, int], min_count: int) -> list[str]:
    """Words with ``count >= min_count`` by descending count, ties broken alphabetically."""
    if min_count < 1:
        raise ValueError(f"`min_count >= 1` must hold, but got min_count={min_count}.")
    kept = [(-c, w) for w, c in counts.items() if c >= min_count]
    if not kept:
        raise ValueError(f"No word has count >= min_count, but got min_count={min_count}.")
    return [w for _, w in sorted(kept)]


def _split(sentence: str | Sequence[str]) -> list[str]:
    """Lowercase and whitespace-split a string; pass a token sequence through unchanged."""
    return sentence.lower().split() if isinstance(sentence, str) else list(sentence)


def _count_corpus(sentences: Iterable[str | Sequence[str]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for sentence in sentences:
        counts.update(_split(sentence))
    return counts


def _content(ids: Sequence[int] | torch.Tensor, pad: int, bos: int, eos: int) -> list[int]:
    """Drop a leading BOS, cut at the first EOS, skip any other PAD/BOS."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"`ids.dim() == 1` must hold, but got shape={tuple(ids.shape)}.")
        ids = ids.tolist()
    seq = [int(i) for i in ids]
    if seq and seq[0] == bos:
        seq = seq[1:]
    if eos in seq:
        seq = seq[: seq.index(eos)]
    return [i for i in seq if i not in (pad, bos)]


def _check_type(d: Mapping[str, Any], kind: str) -> None:
    if d.get("type", kind) != kind:
        raise ValueError(f"`type == {kind!r}` must hold, but got type={d['type']!r}.")


@runtime_checkable
class CaptionTokenizer(Protocol):
    """What a captioning model needs from a tokenizer (radix or plain word-level)."""

    @property
    def PAD(self) -> int: ...
    @property
    def BOS(self) -> int: ...
    @property
    def EOS(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    def encode(self, sentence: str | Sequence[str], *, add_special: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int] | torch.Tensor) -> list[str]: ...
    def decode_batch(self, ids: torch.Tensor | Sequence[Sequence[int]]) -> list[list[str]]: ...
    def to_dict(self) -> dict[str, Any]: ...


class _WordVocab:
    """Shared word-list handling: validation, ``<unk>`` and the special-token decode loop."""

    _TYPE = ""

    def __init__(self, words: Sequence[str], first_special: int) -> None:
        words = list(words)
        if not words:
            raise ValueError(f"`words` must be non-empty, but got words={words!r}.")
        dups = sorted(w for w, c in Counter(words).items() if c > 1)
        if dups:
            raise ValueError(f"`words` must be unique, but got duplicates {dups!r}.")
        if UNK not in words:
            words.append(UNK)
        self._words = words
        self._index = {w: i for i, w in enumerate(words)}
        self._unk = self._index[UNK]
        self._pad = first_special

    @property
    def PAD(self) -> int:
        """Padding token id."""
        return self._pad

    @property
    def BOS(self) -> int:
        """Begin-of-sentence token id (``PAD + 1``)."""
        return self._pad + 1

    @property
    def EOS(self) -> int:
        """End-of-sentence token id (``PAD + 2``)."""
        return self._pad + 2

    @property
    def words(self) -> list[str]:
        """The word vocabulary in index order (a copy)."""
        return list(self._words)

    @property
    def num_words(self) -> int:
        """Number of words, ``<unk>`` included."""
        return len(self._words)

    def word_index(self, word: str) -> int:
        """Index of ``word``, or of ``<unk>`` when it is not in the vocabulary."""
        return self._index.get(word, self._unk)

    def _word(self, index: int) -> str:
        return self._words[index] if 0 <= index < len(self._words) else UNK

    def _tokens(self, word: str) -> list[int]:  # pragma: no cover
        raise NotImplementedError

    def decode(self, ids: Sequence[int] | torch.Tensor) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def encode(self, sentence: str | Sequence[str], *, add_special: bool = True) -> list[int]:
        """Token ids of a sentence (a string is lowercased and split): ``[BOS, ..., EOS]``.

        With ``add_special=False`` only the word tokens are returned.
        """
        ids = [t for word in _split(sentence) for t in self._tokens(word)]
        return [self.BOS, *ids, self.EOS] if add_special else ids

    def decode_batch(self, ids: torch.Tensor | Sequence[Sequence[int]]) -> list[list[str]]:
        """Decode each row of a 2-D batch of token ids."""
        if isinstance(ids, torch.Tensor) and ids.dim() != 2:
            raise ValueError(f"`ids.dim() == 2` must hold, but got shape={tuple(ids.shape)}.")
        return [self.decode(row) for row in ids]


class RadixTokenizer(_WordVocab):
    """Encode each word as ``digits`` base-``base`` tokens; PAD/BOS/EOS are ``base..base+2``.

    ``words`` must already be in descending frequency order; ``<unk>`` is appended last
    unless it is present. Unknown words encode to ``<unk>``'s digits.
    """

    _TYPE = "radix"

    def __init__(self, words: Sequence[str], base: int) -> None:
        if base < 2:
            raise ValueError(f"`base >= 2` must hold, but got base={base}.")
        super().__init__(words, first_special=base)
        self._base = base
        self._digits = num_digits(self.num_words, base)

    @classmethod
    def from_counts(
        cls, counts: Mapping[str, int], base: int, *, min_count: int = 1
    ) -> RadixTokenizer:
        """Build from word counts: descending count, ties alphabetical, ``count >= min_count``."""
        return cls(_order_counts(counts, min_count), base)

    @classmethod
    def from_corpus(
        cls, sentences: Iterable[str | Sequence[str]], base: int, *, min_count: int = 1
    ) -> RadixTokenizer:
        """Build from training captions (strings are lowercased and whitespace-split)."""
        return cls.from_counts(_count_corpus(sentences), base, min_count=min_count)

    @property
    def base(self) -> int:
        """The radix ``v``."""
        return self._base

    @property
    def digits(self) -> int:
        """Digits per word ``D``."""
        return self._digits

    @property
    def vocab_size(self) -> int:
        """Model output vocabulary: ``base + 3``."""
        return self._base + NUM_SPECIAL

    def word_to_digits(self, word: str) -> list[int]:
        """The ``D`` digits of ``word``'s index, most-significant first."""
        index = self.word_index(word)
        return [(index // self._base**j) % self._base for j in reversed(range(self._digits))]

    _tokens = word_to_digits

    def decode(self, ids: Sequence[int] | torch.Tensor) -> list[str]:
        """Words of a token sequence (BOS dropped, cut at EOS, PAD and stray ids skipped).

        A digit tuple whose index is out of range decodes to ``<unk>``; a partial trailing
        tuple (fewer than ``digits`` digits) is dropped.
        """
        digits = [i for i in _content(ids, self.PAD, self.BOS, self.EOS) if 0 <= i < self._base]
        words = []
        for start in range(0, len(digits) - self._digits + 1, self._digits):
            index = 0
            for d in digits[start : start + self._digits]:
                index = index * self._base + d
            words.append(self._word(index))
        return words

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (for checkpoints)."""
        return {"type": self._TYPE, "base": self._base, "words": list(self._words)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RadixTokenizer:
        """Inverse of :meth:`to_dict`."""
        _check_type(d, cls._TYPE)
        return cls(d["words"], int(d["base"]))


class WordTokenizer(_WordVocab):
    """One token per word: PAD=0, BOS=1, EOS=2, then words in frequency order from 3."""

    _TYPE = "word"

    def __init__(self, words: Sequence[str]) -> None:
        super().__init__(words, first_special=0)

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], *, min_count: int = 1) -> WordTokenizer:
        """Build from word counts: descending count, ties alphabetical, ``count >= min_count``."""
        return cls(_order_counts(counts, min_count))

    @classmethod
    def from_corpus(
        cls, sentences: Iterable[str | Sequence[str]], *, min_count: int = 1
    ) -> WordTokenizer:
        """Build from training captions (strings are lowercased and whitespace-split)."""
        return cls.from_counts(_count_corpus(sentences), min_count=min_count)

    @property
    def vocab_size(self) -> int:
        """Model output vocabulary: ``num_words + 3``."""
        return self.num_words + NUM_SPECIAL

    def _tokens(self, word: str) -> list[int]:
        return [self.word_index(word) + 3]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> list[str]:
        """Words of a token sequence (BOS dropped, cut at EOS, PAD skipped); bad id -> ``<unk>``."""
        return [self._word(i - 3) for i in _content(ids, self.PAD, self.BOS, self.EOS)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (for checkpoints)."""
        return {"type": self._TYPE, "words": list(self._words)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WordTokenizer:
        """Inverse of :meth:`to_dict`."""
        _check_type(d, cls._TYPE)
        return cls(d["words"])


def tokenizer_from_dict(d: Mapping[str, Any]) -> RadixTokenizer | WordTokenizer:
    """Rebuild either tokenizer from its :meth:`to_dict` output (dispatch on ``d['type']``)."""
    kinds: dict[str, type[RadixTokenizer | WordTokenizer]] = {
        "radix": RadixTokenizer,
        "word": WordTokenizer,
    }
    if d.get("type") not in kinds:
        raise ValueError(f"`type in {sorted(kinds)}` must hold, but got type={d.get('type')!r}.")
    return kinds[d["type"]].from_dict(d)
