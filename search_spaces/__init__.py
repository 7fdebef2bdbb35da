"""Search spaces as data: YAML files mapping each searched knob to a distribution.

``load_space("lw_transformer")`` reads a shipped space (``list_spaces()`` names them), a path
reads a user's file, and ``SearchSpace.from_dict`` takes an inline mapping. A space's
``suggest(trial)`` is the one place trial parameters become an ``ArchConfig`` plus training
overrides; ``params_for(config)`` is its inverse, for enqueueing known baselines.

The YAML schema::

    name: lw_transformer            # optional for files (defaults to the stem)
    description: ...                # optional, for people
    base: mcan-small                # a preset name or an inline config mapping: the fixed keys
    arch:                           # knob -> distribution (ArchConfig keys or derived widths)
      groups: {choices: [1, 2, 4, 8]}
      heads_per_group: {choices: [2, 4]}      # derived: heads = groups x heads_per_group
      layer_sharing: {encoder: {choices: [none, halves]}, decoder: {choices: [none, full]}}
    train:                          # TrainConfig key -> distribution
      lr: {low: 1.0e-4, high: 3.0e-3, log: true}
"""

from search_spaces._distributions import Choice, Distribution, FloatRange, IntRange
from search_spaces._knobs import DERIVED
from search_spaces._loading import list_spaces, load_space
from search_spaces._schemes import SCHEMES
from search_spaces._space import SearchSpace

__all__ = [
    "DERIVED",
    "SCHEMES",
    "Choice",
    "Distribution",
    "FloatRange",
    "IntRange",
    "SearchSpace",
    "list_spaces",
    "load_space",
]
