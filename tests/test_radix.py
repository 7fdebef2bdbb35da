"""Behaviour of the radix (ACORT) and plain word tokenizers in nas.radix."""

from __future__ import annotations

import json

import pytest
import torch

from nas.radix import (
    UNK,
    CaptionTokenizer,
    RadixTokenizer,
    WordTokenizer,
    digits_per_word,
    num_digits,
    tokenizer_from_dict,
)

# 10,000 words in total, `<unk>` included (it is always part of the word vocabulary).
WORDS_10K = [f"w{i}" for i in range(9_999)] + [UNK]


@pytest.mark.parametrize(("base", "digits"), [(100, 2), (768, 2), (9_999, 2), (10_000, 1)])
def test_round_trip_every_word_of_10k_vocabulary(base: int, digits: int) -> None:
    tok = RadixTokenizer(WORDS_10K, base)
    assert tok.num_words == 10_000
    assert tok.digits == digits
    assert tok.vocab_size == base + 3
    ids = tok.encode(WORDS_10K)
    assert len(ids) == digits * len(WORDS_10K) + 2
    assert max(ids) < tok.vocab_size
    assert tok.decode(ids) == WORDS_10K
    # every index gets a distinct digit tuple
    assert len({tuple(tok.word_to_digits(w)) for w in WORDS_10K}) == len(WORDS_10K)


def boundary_cases() -> list[tuple[int, int]]:
    """(base, words) pairs where a power of the base falls exactly at, just below or just above
    the word count (``<unk>`` included) or the word-level vocabulary size (words + PAD, BOS,
    EOS), up to 20,000 words; and coco-captions' 9,998 words (10,001 with the specials) under
    every base whose power lies in 9,997 .. 10,002, and the bases beside them."""
    cases = set()
    for base in (2, 3, 7, 10, 16, 100, 768):
        power = base
        while power <= 20_000:
            # words + 3 at power - 1, power, power + 1; words at power - 1, power, power + 1
            cases.update((base, w) for w in range(power - 4, power + 2) if w >= 1)
            power *= base
    coco_words = 10_001 - 3
    cases.update((base, coco_words) for base in (10, 21, 22, 99, 100, 101, *range(9_996, 10_003)))
    return sorted(cases)


def _words(n: int) -> list[str]:
    return [f"w{i}" for i in range(n - 1)] + [UNK]


@pytest.mark.parametrize("base", sorted({b for b, _ in boundary_cases()}))
def test_digits_at_vocabulary_boundaries_are_the_tokenizers(base: int) -> None:
    """The digits the tokenizer writes per word are ``digits_per_word`` of the word-level
    vocabulary size (what a caption task's ``num_outputs`` is), never of the size with specials
    counted as words."""
    for b, n in boundary_cases():
        if b != base:
            continue
        words = _words(n)
        radix, word = RadixTokenizer(words, base), WordTokenizer(words)
        expected = next(d for d in range(1, 64) if base**d >= n)  # smallest D with v^D >= words
        written = len(radix.encode([words[0], words[-1]], add_special=False)) // 2
        assert radix.digits == written == expected, (base, n)
        assert digits_per_word(word.vocab_size, base) == expected, (base, n)
        assert radix.decode(radix.encode([words[-1]])) == [words[-1]]
    assert digits_per_word(10_001, None) == 1


def test_coco_captions_digits_count_words_not_specials() -> None:
    # 10,001 outputs = 9,998 words + PAD, BOS, EOS: base 100 needs 2 digits (100^2 = 10,000), not 3
    assert digits_per_word(10_001, 100) == 2 and num_digits(10_001, 100) == 3
    assert digits_per_word(10_001, 10_000) == 1 and num_digits(10_001, 10_000) == 2
    assert digits_per_word(10_001, 768) == 2


def test_num_digits() -> None:
    assert num_digits(10_000, 100) == 2
    assert num_digits(10_001, 100) == 3
    assert num_digits(10_000, 10_000) == 1
    assert num_digits(1, 2) == 1
    assert num_digits(9, 2) == 4


@pytest.mark.parametrize(
    ("index", "expected"),
    [(0, [0, 0, 0]), (1, [0, 0, 1]), (9, [0, 0, 9]), (10, [0, 1, 0]), (123, [1, 2, 3])],
)
def test_digits_most_significant_first(index: int, expected: list[int]) -> None:
    tok = RadixTokenizer([f"w{i}" for i in range(500)], base=10)
    assert tok.digits == 3
    assert tok.word_to_digits(f"w{index}") == expected
    assert tok.encode([f"w{index}"], add_special=False) == expected


def test_digits_base_768_hand_computed() -> None:
    tok = RadixTokenizer(WORDS_10K, base=768)
    # 5000 = 6 * 768 + 392
    assert tok.word_to_digits("w5000") == [6, 392]
    assert tok.word_to_digits("w767") == [0, 767]
    assert tok.word_to_digits("w768") == [1, 0]


def test_from_counts_orders_by_descending_frequency() -> None:
    counts = {"a": 3, "dog": 10, "cat": 5, "bird": 5, "rare": 1}
    tok = RadixTokenizer.from_counts(counts, base=4)
    assert tok.words == ["dog", "bird", "cat", "a", "rare", UNK]  # ties alphabetical
    assert tok.word_to_digits("dog") == [0, 0]
    assert tok.word_to_digits("bird") == [0, 1]
    assert tok.word_to_digits(UNK) == [1, 1]

    filtered = RadixTokenizer.from_counts(counts, base=4, min_count=3)
    assert filtered.words == ["dog", "bird", "cat", "a", UNK]
    assert filtered.word_to_digits("rare") == filtered.word_to_digits(UNK)


def test_from_corpus_lowercases_and_splits() -> None:
    tok = RadixTokenizer.from_corpus(["A dog runs", "a Cat", ["a", "dog"]], base=3)
    assert tok.words == ["a", "dog", "cat", "runs", UNK]
    assert tok.decode(tok.encode("A  DOG runs")) == ["a", "dog", "runs"]


def test_unknown_word_encodes_to_unk_digits() -> None:
    tok = RadixTokenizer(["x", "y", "z"], base=2)
    assert tok.encode(["nope"], add_special=False) == tok.word_to_digits(UNK)
    assert tok.decode(tok.encode("x nope z")) == ["x", UNK, "z"]


def test_unk_already_in_words_keeps_its_index() -> None:
    tok = RadixTokenizer([UNK, "x"], base=2)
    assert tok.words == [UNK, "x"]
    assert tok.word_to_digits("missing") == [0]


def test_decode_special_tokens_and_malformed_input() -> None:
    tok = RadixTokenizer([f"w{i}" for i in range(20)], base=5)  # 21 words -> D = 2
    a, b = tok.word_to_digits("w7"), tok.word_to_digits("w3")
    assert tok.decode([tok.BOS, *a, tok.EOS, *b, tok.EOS]) == ["w7"]  # cut at first EOS
    assert tok.decode([tok.BOS, *a, *b[:1]]) == ["w7"]  # partial trailing tuple dropped
    assert tok.decode([tok.BOS, *b[:1]]) == []
    assert tok.decode([tok.BOS, 4, 4, tok.EOS]) == [UNK]  # index 24 >= 21 words
    assert tok.decode([tok.BOS, a[0], tok.PAD, a[1], *b, tok.PAD, tok.PAD]) == ["w7", "w3"]
    assert tok.decode([*a, tok.BOS, *b]) == ["w7", "w3"]  # stray BOS skipped
    assert tok.decode([tok.EOS, *a]) == []
    assert tok.decode(torch.tensor([tok.BOS, *a, *b, tok.EOS, tok.PAD])) == ["w7", "w3"]


def test_decode_batch() -> None:
    tok = RadixTokenizer.from_counts({"a": 2, "b": 1}, base=2)
    rows = [tok.encode("a b"), tok.encode("b")]
    width = max(map(len, rows))
    batch = torch.tensor([r + [tok.PAD] * (width - len(r)) for r in rows])
    assert tok.decode_batch(batch) == [["a", "b"], ["b"]]
    with pytest.raises(ValueError, match="shape"):
        tok.decode_batch(batch[0])


@pytest.mark.parametrize(
    "tok",
    [RadixTokenizer(WORDS_10K[:50], base=7), WordTokenizer(WORDS_10K[:50])],
    ids=["radix", "word"],
)
def test_to_dict_round_trip(tok: RadixTokenizer | WordTokenizer) -> None:
    state = json.loads(json.dumps(tok.to_dict()))
    clone = type(tok).from_dict(state)
    generic = tokenizer_from_dict(state)
    sentence = ["w3", "w49", "nope", "w0"]
    for other in (clone, generic):
        assert type(other) is type(tok)
        assert other.to_dict() == tok.to_dict()
        assert other.vocab_size == tok.vocab_size
        assert other.encode(sentence) == tok.encode(sentence)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: RadixTokenizer(["a", "b"], base=1), "base=1"),
        (lambda: RadixTokenizer(["a", "b", "a"], base=2), "'a'"),
        (lambda: RadixTokenizer([], base=2), "words=[]"),
        (lambda: WordTokenizer(["a", "a"]), "'a'"),
        (lambda: RadixTokenizer.from_counts({"a": 1}, base=2, min_count=5), "min_count=5"),
        (lambda: num_digits(0, 10), "num_words=0"),
        (lambda: digits_per_word(3, 10), "vocab_size=3"),
        (lambda: tokenizer_from_dict({"type": "bpe"}), "'bpe'"),
        (lambda: RadixTokenizer.from_dict({"type": "word", "words": ["a"]}), "'word'"),
    ],
)
def test_invalid_inputs_raise_value_error_naming_value(make, needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_word_tokenizer_round_trip() -> None:
    tok = WordTokenizer.from_corpus(["the cat sat", "the dog"])
    assert (tok.PAD, tok.BOS, tok.EOS) == (0, 1, 2)
    assert tok.vocab_size == tok.num_words + 3
    ids = tok.encode("the dog sat")
    assert ids[0] == tok.BOS and ids[-1] == tok.EOS
    assert ids[1] == 3  # most frequent word ("the") is id 3
    assert tok.decode(ids) == ["the", "dog", "sat"]
    assert tok.decode(torch.tensor([*ids[:-1], tok.PAD, tok.EOS, 5])) == ["the", "dog", "sat"]
    assert tok.decode([tok.BOS, 999]) == [UNK]
    assert tok.decode(tok.encode("the zebra")) == ["the", UNK]


def test_both_satisfy_caption_tokenizer_protocol() -> None:
    for tok in (RadixTokenizer(["a"], base=2), WordTokenizer(["a"])):
        assert isinstance(tok, CaptionTokenizer)
