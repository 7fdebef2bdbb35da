"""The word lists of ``synthetic-captions``: a few function words and many synonyms per concept.

Every concept a caption can express (each colour, shape, size, material, relation, count, and
the "picture shows" phrasing) has a ranked list of synonyms: real words first, then invented
ones (pronounceable syllable strings) up to the concept's list length, 2,390 words in all. The
captions draw the rarer synonyms with Zipf probabilities (``zipf_weights``), so a few words are
very common and most are rare, as in real captions, and the vocabulary is large enough that
encoding it (radix digits against one class per word) changes a model's size and cost. The
lexicon is the same for every seed.
"""

from __future__ import annotations

from functools import cache

import numpy as np

__all__ = ["CONCEPTS", "FUNCTION_WORDS", "concept_words", "zipf_weights"]

FUNCTION_WORDS = ("a", "and", "of", "the", "with")

# concept -> (real synonyms, most common first; total list length)
CONCEPTS: dict[str, tuple[tuple[str, ...], int]] = {
    "gray": (("gray", "grey", "silver", "ashen", "slate", "smoky"), 80),
    "red": (("red", "crimson", "scarlet", "ruby", "cherry", "vermilion"), 80),
    "blue": (("blue", "navy", "azure", "cobalt", "sapphire", "indigo"), 80),
    "green": (("green", "emerald", "lime", "olive", "jade", "verdant"), 80),
    "brown": (("brown", "tan", "chocolate", "bronze", "umber", "russet"), 80),
    "purple": (("purple", "violet", "lilac", "mauve", "plum", "lavender"), 80),
    "cyan": (("cyan", "teal", "turquoise", "aqua", "aquamarine", "cerulean"), 80),
    "yellow": (("yellow", "golden", "lemon", "amber", "mustard", "canary"), 80),
    "cube": (("cube", "block", "box", "cuboid", "brick", "dice"), 150),
    "sphere": (("sphere", "ball", "orb", "globe", "bead", "marble"), 150),
    "cylinder": (("cylinder", "can", "tube", "drum", "pillar", "barrel"), 150),
    "small": (("small", "little", "tiny", "miniature", "petite", "compact"), 120),
    "large": (("large", "big", "huge", "giant", "massive", "enormous"), 120),
    "rubber": (("rubber", "matte", "rubbery", "dull", "soft", "elastic"), 120),
    "metal": (("metal", "metallic", "shiny", "steel", "chrome", "glossy"), 120),
    "left": (("left", "leftward", "westward", "port"), 60),
    "right": (("right", "rightward", "eastward", "starboard"), 60),
    "front": (("front", "ahead", "forward", "fore"), 60),
    "behind": (("behind", "back", "rear", "aft"), 60),
    "object": (("object", "thing", "item", "shape", "piece", "solid"), 100),
    "objects": (("objects", "things", "items", "shapes", "pieces", "solids"), 100),
    "picture": (("picture", "image", "scene", "photo", "render", "snapshot"), 100),
    "shows": (("shows", "depicts", "contains", "features", "displays", "has"), 100),
    **{
        number: ((number,), 30)
        for number in ("three", "four", "five", "six", "seven", "eight")
    },
}

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@cache
def _lexicon() -> dict[str, tuple[str, ...]]:
    rng = np.random.default_rng(20_240_917)  # fixed: the lexicon never depends on the task seed
    taken = set(FUNCTION_WORDS) | {w for real, _ in CONCEPTS.values() for w in real}
    out = {}
    for concept, (real, length) in CONCEPTS.items():
        words = list(real)
        while len(words) < length:
            syllables = int(rng.integers(2, 4))
            word = "".join(
                _CONSONANTS[int(rng.integers(len(_CONSONANTS)))] + _VOWELS[int(rng.integers(5))]
                for _ in range(syllables)
            )
            if word not in taken:
                taken.add(word)
                words.append(word)
        out[concept] = tuple(words)
    return out


def concept_words(concept: str) -> tuple[str, ...]:
    """The ranked synonyms of ``concept`` (a key of :data:`CONCEPTS`)."""
    return _lexicon()[concept]


@cache
def zipf_weights(length: int, exponent: float) -> np.ndarray:
    """Cumulative Zipf probabilities of ranks ``1..length``: ``P(rank r) ~ 1 / r**exponent``."""
    p = 1.0 / np.arange(1, length + 1) ** exponent
    return np.cumsum(p / p.sum())
