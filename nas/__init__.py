"""Lightweight-Transformer model space: configs, blocks, families, cost model, radix encoding."""

from nas.config import FAMILIES, ArchConfig
from nas.errors import ConfigError, NasError

__version__ = "0.1.0"

__all__ = ["FAMILIES", "ArchConfig", "ConfigError", "NasError", "__version__"]
