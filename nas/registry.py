"""The family and knob registry: the five built-in families and whatever a plugin adds.

A family is a builder (``build(config, task, *, device, dtype, dropout) -> FamilyModel``) with a
few facts about it (:class:`FamilySpec`): its default task, its base preset, its stacks. The
built-in five are rows below; a package of your own adds one with :func:`register_family` (a
decorator, as timm's ``register_model``) and a config key with :func:`register_knob`, either at
import or through the entry point groups ``nas.families`` and ``nas.knobs``, which are loaded
lazily, once, the first time a name is not found here (``load_plugins``). An entry point that
fails to load is skipped with one warning line naming it; asking for its family afterwards says
why it is missing.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import MappingProxyType, ModuleType
from typing import Any, TypeVar

from nas.errors import ConfigError, first_line
from nas.knobs import FAMILY_NAMES, KNOBS, Knob
from nas.tasks import GEOMETRIES, TaskGeometry, TaskKind, get_geometry

__all__ = [
    "FAMILY_GROUP",
    "KNOB_GROUP",
    "FamilySpec",
    "check_task_fits",
    "family_names",
    "get_family",
    "load_plugins",
    "plugin_knobs",
    "register_family",
    "register_knob",
]

FAMILY_GROUP = "nas.families"
KNOB_GROUP = "nas.knobs"

#: A family's ``build``; ``nas.models.create_model`` checks that it returns a ``FamilyModel``
#: (the registry stays free of torch, which the model classes import).
Builder = Callable[..., Any]
B = TypeVar("B", bound=Callable[..., Any])

#: The config keys that may hold a stack's depth, by stack name.
STACK_KEYS = {"encoder": "encoder_layers", "decoder": "decoder_layers",
              "language": "language_layers", "vision": "vision_layers", "cross": "cross_layers"}
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class FamilySpec:
    """One family: how to build it and what the rest of the system needs to know about it.

    Attributes:
        name: the value of the config key ``family``.
        kind: the task kind its forward pass takes (``vqa``, ``caption``, ``image``).
        task: its default task (a cost geometry of ``nas.tasks``, e.g. ``imagenet``).
        build: the builder, or the module defining ``build`` (imported on first use).
        base: the keys of its base preset, filling what a config leaves out.
        stacks: stack name -> config key of its depth (``encoder``: ``encoder_layers``); each
            stack may be shared by ``layer_sharing``.
        keys: the family-specific keys it also needs (``patch_size``, ``window_size``, ...).
        optional: the family-specific keys it may leave unset (``radix_base``).
        defaults: its value of knobs that have one per family (``ffn_activation``).
        drop_rate: its dropout where a training run names none.
        cross_attention: whether it has cross-attention (``attention_sharing: qv`` cannot apply).
        heads_in_groups: whether G-MHA puts whole heads in each group (``heads % groups == 0``).
        presets: more named presets (name -> keys; ``family`` is added).
        note: one line for ``nas presets``.
    """

    name: str
    kind: TaskKind
    task: str
    build: Builder | str
    base: Mapping[str, Any]
    stacks: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    keys: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    drop_rate: float = 0.0
    cross_attention: bool = False
    heads_in_groups: bool = True
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: _EMPTY)
    note: str = ""
    builtin: bool = field(default=False, repr=False)

    @property
    def required(self) -> tuple[str, ...]:
        """The keys a config of this family must set."""
        return (*self.stacks.values(), *self.keys)

    def builder(self) -> Builder:
        if isinstance(self.build, str):
            build: Builder = importlib.import_module(self.build).build
            return build
        return self.build

    def uses(self, key: str) -> bool:
        """Whether this family may set the family-specific key ``key``."""
        return key in self.required or key in self.optional


_ENC_DEC = MappingProxyType({"encoder": "encoder_layers", "decoder": "decoder_layers"})
_BUILTIN: tuple[FamilySpec, ...] = (
    FamilySpec("mcan", "vqa", "vqa2", "nas.models.mcan", _EMPTY, _ENC_DEC, drop_rate=0.1,
               cross_attention=True, builtin=True),
    FamilySpec("ort", "caption", "coco-captions", "nas.models.ort", _EMPTY, _ENC_DEC,
               optional=("radix_base",), drop_rate=0.1, cross_attention=True, builtin=True),
    FamilySpec("lxmert", "vqa", "vqa2", "nas.models.lxmert", _EMPTY,
               MappingProxyType({"language": "language_layers", "vision": "vision_layers",
                                 "cross": "cross_layers"}),
               drop_rate=0.1, cross_attention=True, builtin=True),
    FamilySpec("vit", "image", "imagenet", "nas.models.vit", _EMPTY,
               MappingProxyType({"encoder": "encoder_layers"}), keys=("patch_size",),
               builtin=True),
    FamilySpec("swin", "image", "imagenet", "nas.models.swin", _EMPTY,
               keys=("depths", "patch_size", "window_size"), heads_in_groups=False,
               builtin=True),
)
assert tuple(f.name for f in _BUILTIN) == FAMILY_NAMES

_FAMILIES: dict[str, FamilySpec] = {f.name: f for f in _BUILTIN}
_KNOBS: dict[str, Knob] = {}  # registered by plugins: name -> row
_FAILED: dict[str, str] = {}  # entry point name -> why it did not load
_loaded = False


# ----------------------------------------------------------------------------- families
def register_family(
    name: str,
    *,
    task: str,
    base: Mapping[str, Any],
    stacks: Mapping[str, str] | None = None,
    keys: Iterable[str] = (),
    optional: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
    drop_rate: float = 0.0,
    cross_attention: bool = False,
    heads_in_groups: bool = True,
    presets: Mapping[str, Mapping[str, Any]] | None = None,
    note: str = "",
) -> Callable[[B], B]:
    """Register the decorated builder as family ``name`` (see :class:`FamilySpec`).

    The builder is called as ``build(config, task, *, device=None, dtype=None, dropout=0.0)``
    and returns a ``nas.models.FamilyModel`` whose forward takes the inputs of ``task``'s kind
    (``image``: ``images``; ``vqa``: ``question``, ``regions``, ``boxes``; ``caption``: as ORT).
    ``base`` becomes the preset ``name``; ``presets`` adds variants over it.
    """
    def decorate(build: B) -> B:
        spec = FamilySpec(
            name=name, kind=get_geometry(task).kind, task=task, build=build,
            base=MappingProxyType({**base, "family": name}),
            stacks=MappingProxyType(dict(stacks or {})), keys=tuple(keys),
            optional=tuple(optional),
            defaults=MappingProxyType(dict(defaults or {})), drop_rate=float(drop_rate),
            cross_attention=cross_attention, heads_in_groups=heads_in_groups,
            presets=MappingProxyType({k: MappingProxyType({**base, **v, "family": name})
                                      for k, v in (presets or {}).items()}),
            note=note)
        _add_family(spec)
        return build
    return decorate


def _add_family(spec: FamilySpec) -> None:
    if not isinstance(spec.name, str) or not spec.name.isidentifier():
        raise ConfigError(f"A family name must be an identifier, but got {spec.name!r}.")
    old = _FAMILIES.get(spec.name)
    if old is not None and (old.builtin or old.build is not spec.build):
        raise ConfigError(f"Family {spec.name!r} is already registered; choose another name.")
    for stack, key in spec.stacks.items():
        if STACK_KEYS.get(stack) != key:
            raise ConfigError(f"Family {spec.name!r}: stack {stack!r} must be one of "
                              f"{STACK_KEYS} with its key, but got {stack!r}: {key!r}.")
    _FAMILIES[spec.name] = spec


def get_family(name: str) -> FamilySpec:
    """The family ``name``, loading plugins on a miss; ``ConfigError`` naming the valid ones."""
    if name not in _FAMILIES:
        load_plugins()
    if not isinstance(name, str) or name not in _FAMILIES:
        why = f" (plugin entry point {name!r} failed: {_FAILED[name]})" if name in _FAILED else ""
        raise ConfigError(f"`family` must be one of {list(_FAMILIES)}, but got {name!r}{why}.")
    return _FAMILIES[name]


def family_names() -> tuple[str, ...]:
    """Every family: the built-in five, then those plugins registered."""
    load_plugins()
    return tuple(_FAMILIES)


def is_family(name: Any) -> bool:
    """Whether ``name`` is a registered family (loading plugins on a miss)."""
    if not isinstance(name, str):
        return False
    if name not in _FAMILIES:
        load_plugins()
    return name in _FAMILIES


# ----------------------------------------------------------------------------- knobs
def register_knob(row: Knob) -> Knob:
    """Add the config key ``row`` (a ``nas.knobs.Knob`` of kind ``int``, ``bool`` or ``choice``)
    for the plugin families ``row.families`` names (a built-in family's blocks read only the
    table's knobs, so a registered knob may not name one).

    A plugin's family builder reads it with ``config.knob(name)``. Where a config leaves it out
    it takes ``row.default_for(family)``, else ``row.dense``; at that default it stays out of
    ``arch_id``, so registering a knob changes no stored identity. Returns ``row``.
    """
    if row.kind not in ("int", "bool", "choice"):
        raise ConfigError(f"A registered knob must be of kind int, bool or choice, but "
                          f"{row.name!r} is {row.kind!r}.")
    if row.pinned:
        raise ConfigError(f"A registered knob cannot be pinned into arch_id: {row.name!r}.")
    if not row.name.isidentifier() or row.name.startswith("_"):
        raise ConfigError(f"A knob name must be an identifier, but got {row.name!r}.")
    old = _KNOBS.get(row.name)
    if any(k.name == row.name for k in KNOBS) or (old is not None and old != row):
        raise ConfigError(f"Knob {row.name!r} already exists; choose another name.")
    if row.kind == "int" and row.high is None:
        raise ConfigError(f"Knob {row.name!r} of kind int needs `high`, its largest value.")
    built_in = [f for f in row.families if f in FAMILY_NAMES]
    if built_in:  # their builders would accept it and never read it: a dead knob in arch_id
        raise ConfigError(
            f"Knob {row.name!r} names built-in families {built_in}, whose blocks do not read "
            "registered knobs; register it for your own families (`families=(...)`), or add it "
            "as a row of nas/knobs.py and a block argument, as ffn_activation is.")
    _KNOBS[row.name] = row
    return row


def plugin_knobs() -> tuple[Knob, ...]:
    """The knobs plugins registered, in order (loading plugins first)."""
    load_plugins()
    return tuple(_KNOBS.values())


def knob_default(row: Knob, family: str) -> Any:
    """``row``'s value in ``family`` where a config leaves it out."""
    value = row.default_for(family)
    if value is not None or not row.defaults:
        return row.dense if value is None else value
    spec = _FAMILIES.get(family)
    if spec is not None and row.name in spec.defaults:
        return spec.defaults[row.name]
    values = [v for _, v in row.defaults]  # a plugin family that names none: the most common
    return max(values, key=values.count)


# ----------------------------------------------------------------------------- entry points
def load_plugins() -> None:
    """Load the ``nas.families`` and ``nas.knobs`` entry points, once."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for group in (KNOB_GROUP, FAMILY_GROUP):
        for point in entry_points(group=group):
            try:
                _use(point.load(), group)
            except Exception as exc:  # a broken plugin must not break `nas`: say which, go on
                why = first_line(exc, typed=True)
                _FAILED[point.name] = why
                warnings.warn(f"nas: skipped plugin entry point {point.name!r} = "
                              f"{point.value!r} in group {group!r}: {why}", stacklevel=2)


def _use(value: Any, group: str) -> None:
    """A loaded entry point: a module or a builder that registered itself on import, a
    ``FamilySpec`` or a ``Knob`` (or a list of them)."""
    if isinstance(value, ModuleType) or (callable(value) and not isinstance(value, Knob)):
        return
    values = value if isinstance(value, (list, tuple)) else [value]
    for item in values:
        if isinstance(item, Knob):
            register_knob(item)
        elif isinstance(item, FamilySpec):
            _add_family(item)
        else:
            raise TypeError(f"expected a module, a family builder, a FamilySpec or a Knob for "
                            f"{group}, but got {type(item).__name__}")


def _state() -> tuple[dict[str, FamilySpec], dict[str, Knob], dict[str, str], bool]:
    """The registry's contents (tests restore them with :func:`_restore`)."""
    return dict(_FAMILIES), dict(_KNOBS), dict(_FAILED), _loaded


def _restore(state: tuple[dict[str, FamilySpec], dict[str, Knob], dict[str, str], bool]) -> None:
    global _loaded
    _FAMILIES.clear()
    _FAMILIES.update(state[0])
    _KNOBS.clear()
    _KNOBS.update(state[1])
    _FAILED.clear()
    _FAILED.update(state[2])
    _loaded = state[3]


# ----------------------------------------------------------------------------- tasks
def check_task_fits(family: str, task: TaskGeometry) -> None:
    """Raise ``ConfigError`` when ``family`` cannot run on ``task``."""
    need = get_family(family).kind
    if need != task.kind:
        fitting = sorted(n for n, g in GEOMETRIES.items() if g.kind == need)
        raise ConfigError(
            f"Task {task.name!r} is {_article(task.kind)} {task.kind} task, but family {family!r} "
            f"needs {_article(need)} {need} task such as {fitting}."
        )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
