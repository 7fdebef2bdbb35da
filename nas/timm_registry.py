"""The ``vit`` and ``swin`` families as timm models: ``timm.create_model("nas_vit", **keys)``.

``nas_vit`` and ``nas_swin`` take the architecture keys of their family (every key of
``ArchConfig`` but ``family``; keys left out come from the family's base preset, DeiT-Ti and
Swin-T) plus every keyword timm's ``train.py`` and ``validate.py`` pass to ``create_model``:

- applied: ``num_classes`` (1000), ``img_size`` (224, square), ``in_chans`` (3),
  ``drop_rate`` (classifier dropout), ``drop_path_rate`` (stochastic depth), ``device``,
  ``dtype``; ``checkpoint_path``, ``scriptable``, ``exportable`` and ``no_jit`` are
  ``create_model``'s own and never reach us;
- accepted as they are: ``global_pool`` equal to the family's pooling (``token`` for vit,
  ``avg`` for swin), ``pretrained=False``, ``pretrained_cfg``, ``pretrained_cfg_overlay``,
  ``cache_dir`` (there are no pretrained weights to fetch);
- ignored with a warning: ``drop_block_rate``, ``bn_momentum``, ``bn_eps`` (no DropBlock and no
  batch norm in these networks: nothing they could change);
- refused (``ValueError``, one line): ``pretrained=True`` and any other ``global_pool``, which
  would silently be another network than the exported architecture.

They return timm's own ``VisionTransformer`` / ``SwinTransformer`` built with our blocks: the
network ``nas.models.create_model`` builds, without our wrapper (so its state-dict names are ours
without the ``net.`` prefix, as ``nas export --format timm`` writes its checkpoints)::

    import nas, timm
    model = timm.create_model("nas_vit", d_model=64, d_ff=128, heads=4, encoder_layers=4,
                              patch_size=4, groups=2, group_attention=True,
                              num_classes=10, img_size=32, in_chans=1)

``timm_model_args(config, geometry)`` gives the name and keyword arguments for a config (what
``nas export --format timm`` writes).

Registration happens on ``import nas`` without importing timm, whose import takes seconds (the
``nas`` command must start fast): if timm is already imported the models are registered at once,
otherwise a one-shot import hook registers them as soon as timm has finished importing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from nas.config import ArchConfig
    from nas.tasks import TaskGeometry

__all__ = ["TIMM_NAMES", "nas_swin", "nas_vit", "register", "timm_model_args"]

#: family -> the timm model name that builds it
TIMM_NAMES: dict[str, str] = {"vit": "nas_vit", "swin": "nas_swin"}
# timm's keyword arguments besides the architecture keys, with timm's ImageNet defaults
_IMAGE_DEFAULTS: dict[str, int] = {"num_classes": 1000, "img_size": 224, "in_chans": 3}
# what timm.create_model passes to every entry point and we have no use for
_TIMM_PLUMBING = ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")
# what timm's train.py passes for convolutional networks: nothing here it could change
_NO_MEANING = {"drop_block_rate": "there is no DropBlock", "bn_momentum": "there is no batch norm",
               "bn_eps": "there is no batch norm"}
# the pooling of each family's head: another one would be another network
_GLOBAL_POOL = {"vit": "token", "swin": "avg"}


def timm_model_args(config: ArchConfig, geometry: TaskGeometry) -> tuple[str, dict[str, Any]]:
    """The timm model name and keyword arguments that build ``config`` for ``geometry``."""
    if config.family not in TIMM_NAMES:
        raise ValueError(f"Only families {sorted(TIMM_NAMES)} are timm models, "
                         f"but got family={config.family!r}.")
    keys = {k: v for k, v in config.to_dict().items() if k != "family" and v is not None}
    return TIMM_NAMES[config.family], {
        **keys, "num_classes": geometry.num_outputs, "img_size": geometry.image_size,
        "in_chans": geometry.in_chans,
    }


def _image_size(value: int | Sequence[int]) -> int:
    if isinstance(value, int):
        return value
    sizes = set(value)
    if len(sizes) != 1:
        raise ValueError(f"`img_size` must be square, but got img_size={tuple(value)}.")
    return int(sizes.pop())


def _create(family: str, pretrained: bool, kwargs: dict[str, Any]) -> nn.Module:
    """Build ``family`` from timm-style keyword arguments (see the module docstring)."""
    from torch.nn import Dropout

    from nas.config import ArchConfig
    from nas.tasks import TaskGeometry

    if pretrained:
        raise ValueError(f"{TIMM_NAMES[family]} has no pretrained weights; use pretrained=False "
                         "(or load a checkpoint with checkpoint_path=).")
    for key in _TIMM_PLUMBING:
        kwargs.pop(key, None)
    name = TIMM_NAMES[family]
    for key, why in _NO_MEANING.items():
        if key in kwargs and kwargs.pop(key) is not None:
            warnings.warn(f"{name} ignores {key}: {why} in it.", stacklevel=3)
    pool = kwargs.pop("global_pool", None)
    if pool is not None and pool != _GLOBAL_POOL[family]:
        raise ValueError(f"{name} pools with global_pool={_GLOBAL_POOL[family]!r} (the exported "
                         f"architecture), but got global_pool={pool!r}; leave it out.")
    drop_rate = float(kwargs.pop("drop_rate", 0.0) or 0.0)
    image = {key: kwargs.pop(key, default) for key, default in _IMAGE_DEFAULTS.items()}
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    drop_path_rate = float(kwargs.pop("drop_path_rate", 0.0) or 0.0)
    if kwargs.setdefault("family", family) != family:
        raise ValueError(f"{TIMM_NAMES[family]} builds family {family!r}, "
                         f"but got family={kwargs['family']!r}.")
    config = ArchConfig.from_dict(kwargs)
    size = _image_size(image["img_size"])
    geometry = TaskGeometry(f"timm-{size}px-{image['num_classes']}", "image",
                            int(image["num_classes"]), image_size=size,
                            in_chans=int(image["in_chans"]))
    module = importlib.import_module(f"nas.models.{family}")
    model = module.build(config, geometry, device=device, dtype=dtype,
                         drop_path_rate=drop_path_rate)
    net: Any = model.net  # timm's VisionTransformer / SwinTransformer
    if drop_rate:  # the classifier's dropout, as timm's drop_rate (no parameters)
        net.drop_rate = drop_rate
        if family == "vit":
            net.head_drop = Dropout(drop_rate)
        else:
            net.head.drop = Dropout(drop_rate)
    cfg: dict[str, Any] = {
        "architecture": TIMM_NAMES[family], "num_classes": geometry.num_outputs,
        "input_size": (geometry.in_chans, size, size), "interpolation": "bicubic",
        "crop_pct": 0.9, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
        "first_conv": "patch_embed.proj", "classifier": "head",
    }
    net.pretrained_cfg = net.default_cfg = cfg  # what timm.data.resolve_data_config reads
    return net


def nas_vit(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """Our ``vit`` family (DeiT/ViT with the group-wise and sharing knobs), as timm builds it."""
    return _create("vit", pretrained, kwargs)


def nas_swin(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """Our ``swin`` family (Swin Transformer with the group-wise knobs), as timm builds it."""
    return _create("swin", pretrained, kwargs)


def register() -> None:
    """Register ``nas_vit`` and ``nas_swin`` with timm (imports timm; idempotent)."""
    from timm.models import is_model, register_model

    for fn in (nas_vit, nas_swin):
        if not is_model(fn.__name__):
            register_model(fn)


# ----------------------------------------------------------------------------- the import hook
class _RunAfterLoader(importlib.abc.Loader):
    """A module's own loader, followed by ``callback()`` once the module has executed."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], None]) -> None:
        self.loader, self.callback = loader, callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Hand the module back to its real loader first: resource readers go through it.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        try:
            self.callback()
        except Exception as exc:  # never let our registration break the user's import
            warnings.warn(f"nas could not register its timm models: {exc!r}", stacklevel=2)


class _AfterImportHook(importlib.abc.MetaPathFinder):
    """Runs ``callback`` right after the first import of top-level module ``name``.

    Finds nothing itself: on that import it steps out of ``sys.meta_path`` (it is one-shot), asks
    the other finders for the real spec and wraps its loader.
    """

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RunAfterLoader(spec.loader, self.callback)
        return spec

    @classmethod
    def install(cls, name: str, callback: Callable[[], None]) -> None:
        """``callback()`` now if ``name`` is imported already, else right after its import."""
        if name in sys.modules:
            callback()
        elif not any(isinstance(f, cls) and f.name == name for f in sys.meta_path):
            sys.meta_path.insert(0, cls(name, callback))


_AfterImportHook.install("timm", register)
