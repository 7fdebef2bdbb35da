"""Lightweight-Transformer model space: configs, blocks, families, cost model, radix encoding."""

from nas import timm_registry as _timm_registry  # noqa: F401  nas_vit/nas_swin; imports no timm
from nas.config import FAMILIES, ArchConfig
from nas.errors import ConfigError, NasError
from nas.registry import register_family, register_knob

__version__ = "0.1.0"

__all__ = ["FAMILIES", "ArchConfig", "ConfigError", "NasError", "__version__", "register_family",
           "register_knob"]
