"""The node's prepared data: a task's parsed files as versioned, memory-mapped arrays.

Parsing a real dataset's JSON (VQA v2: 395 MB of questions and annotations) takes minutes and
gigabytes; what a trial needs once parsed (token ids, answer scores, image indices, file lists,
vocabularies) is tens of megabytes of arrays. :func:`open_or_build` parses once per node and
writes those arrays to a folder of ``.npy`` files; every later process maps them (``np.load``
with ``mmap_mode="r"``: milliseconds, and the pages are the page cache's, shared by every
process on the node).

Where: ``$NAS_DATA_CACHE``, else ``$XDG_CACHE_HOME/nas/data``, else ``~/.cache/nas/data`` (as
torch and timm keep theirs under ``~/.cache``). One folder per task and options,
``<task>-<hash of the options>``, holding the arrays and ``manifest.json``, written last.

Never trusted blindly: before use the manifest must name this store's and the task's version
and the same options; every source (the files and folders the parse read) must have the size,
modification time and inode it had when the build read it (taken once the source was 50 ms
unmodified: file times tick every few milliseconds, and a change in the same tick would look
the same); every array file must exist and be as long as it was written, and hold the dtype and
shape written. Otherwise (an older version, a changed source, a truncated file) the folder is
built again. Concurrent first users build it once: an exclusive ``flock`` on
``<folder>.lock``, a second look (another process may have built it meanwhile), then the build
into a temporary folder, renamed into place when complete. A process killed while building
leaves only a temporary folder, which the next builder removes; the kernel releases its lock.
Where the cache folder cannot be written, the arrays are kept in memory, with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from trainers.tasks._files import settled_stat, source_stat

__all__ = ["CACHE_ENV", "STORE_VERSION", "Built", "Chunks", "Prepared", "StringArray", "cache_root",
           "check_prepared", "encode_strings", "open_or_build", "settled_stat", "source_stat",
           "string_arrays"]

CACHE_ENV = "NAS_DATA_CACHE"
#: The layout of a prepared folder (the manifest's keys, how arrays are written). A task's own
#: ``version`` (what its arrays mean) is checked beside it.
STORE_VERSION = 1
_MANIFEST = "manifest.json"
_LOG = logging.getLogger(__name__)
_ARRAY_NAME = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")


def cache_root() -> Path:
    """The folder of prepared data: ``$NAS_DATA_CACHE``, ``$XDG_CACHE_HOME/nas/data`` or
    ``~/.cache/nas/data``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "nas" / "data"


class StringArray(Sequence[str]):
    """Strings stored as one UTF-8 byte blob and offsets (``encode_strings``): item ``i`` is
    ``blob[offsets[i]:offsets[i + 1]]``, decoded on access, so a memory-mapped list of a million
    file names costs no Python objects until read."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self._blob, self._offsets = blob, offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if not -len(self) <= index < len(self):
            raise IndexError(f"string index {index} out of range for {len(self)} strings")
        index %= len(self)
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        return bytes(self._blob[start:end]).decode("utf-8", "surrogatepass")

    def tolist(self) -> list[str]:
        """Every string (decodes them all)."""
        return [self[i] for i in range(len(self))]


def encode_strings(name: str, strings: Iterable[str]) -> dict[str, np.ndarray]:
    """Arrays ``<name>.blob`` and ``<name>.offsets`` of a :class:`StringArray` of ``strings``
    (any Python string round-trips, file names undecodable as UTF-8 included)."""
    strings = list(strings)
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in strings], out=offsets[1:])
    text = "".join(strings)
    if text.isascii():  # one byte a character: the offsets are the characters'
        blob = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:
        encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return {f"{name}.blob": blob, f"{name}.offsets": offsets}


@dataclass(frozen=True)
class Chunks:
    """A one-dimensional ``uint8`` array given as its bytes in consecutive ``parts``: written to
    the cache one part after another and never joined in memory (an ImageNet listing's 55 MB of
    names, listed by several processes); the file is :func:`numpy.save`'s of the joined array."""

    parts: tuple[bytes | memoryview, ...]

    @property
    def nbytes(self) -> int:
        return sum(memoryview(part).nbytes for part in self.parts)

    def joined(self) -> np.ndarray:
        return np.frombuffer(b"".join(self.parts), dtype=np.uint8)


def string_arrays(name: str, text: Sequence[bytes | memoryview],
                  lengths: Sequence[bytes | memoryview]) -> dict[str, np.ndarray | Chunks]:
    """:func:`encode_strings`'s arrays of strings given as their UTF-8 bytes (``surrogatepass``)
    one after the other, in consecutive chunks (``text``), and each one's length in bytes
    (``lengths``: chunks of an int64 array's bytes). The blob stays in its chunks
    (:class:`Chunks`)."""
    sizes = [np.frombuffer(chunk, dtype=np.int64) for chunk in lengths]
    offsets = np.zeros(sum(len(chunk) for chunk in sizes) + 1, dtype=np.int64)
    end = 0
    for chunk in sizes:
        done = offsets[end]
        np.cumsum(chunk, out=offsets[end + 1:end + 1 + len(chunk)])
        offsets[end + 1:end + 1 + len(chunk)] += done
        end += len(chunk)
    return {f"{name}.blob": Chunks(tuple(text)), f"{name}.offsets": offsets}


@dataclass(frozen=True)
class Built:
    """What a task's parse produced: its arrays, small JSON-able facts (``meta``: the item
    counts ``train`` and ``val``, which every task writes, the chance level, sizes),
    and the sources it discovered while parsing (``source_stat`` rows taken before reading
    them, e.g. the folders of an image listing), checked on later opens beside those given."""

    arrays: Mapping[str, np.ndarray | Chunks]
    meta: dict[str, Any]
    sources: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Prepared:
    """A task's prepared arrays, memory-mapped read-only (or in memory where ``path`` is None).

    ``built`` says whether this call parsed the sources (False: it opened what was there)."""

    path: Path | None
    arrays: Mapping[str, np.ndarray]
    meta: Mapping[str, Any]
    built: bool

    def strings(self, name: str) -> StringArray:
        """The :class:`StringArray` written by ``encode_strings(name, ...)``."""
        return StringArray(self.arrays[f"{name}.blob"], self.arrays[f"{name}.offsets"])

    def items(self, split: str) -> int:
        """The number of items of ``split`` (``train`` or ``val``)."""
        return int(self.meta[split])

    @property
    def nbytes(self) -> int:
        """Bytes of every array."""
        return sum(int(a.nbytes) for a in self.arrays.values())


def _folder_name(task: str, key: Mapping[str, Any]) -> str:
    text = json.dumps({"task": task, **key}, sort_keys=True, default=str)
    return f"{task}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _array_file(name: str) -> str:
    return f"{name}.npy"


def check_prepared(path: Path, version: int, key: Mapping[str, Any]) -> str | None:
    """Why the prepared folder ``path`` cannot be used (one phrase), or None when it can."""
    try:
        manifest = json.loads((path / _MANIFEST).read_text())
    except FileNotFoundError:
        return "not prepared"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "its manifest is unreadable"
    if not isinstance(manifest, dict):
        return "its manifest is unreadable"
    if manifest.get("store_version") != STORE_VERSION or manifest.get("version") != version:
        return (f"it was written by version {manifest.get('store_version')}."
                f"{manifest.get('version')}, this is {STORE_VERSION}.{version}")
    if manifest.get("key") != json.loads(json.dumps(dict(key), default=str)):
        return "it was prepared with other options"
    sources = manifest.get("sources")
    if not isinstance(sources, list) or not all(isinstance(s, list) and s for s in sources):
        return "its manifest is unreadable"
    for row in sources:
        if source_stat(Path(str(row[0]))) != row:
            return f"its source '{row[0]}' changed"
    arrays = manifest.get("arrays")
    meta = manifest.get("meta")
    if not isinstance(arrays, dict) or not isinstance(meta, dict) or not all(
            isinstance(meta.get(s), int) and meta[s] >= 0 for s in ("train", "val")):
        return "its manifest is unreadable"
    for name, spec in arrays.items():
        if not _ARRAY_NAME.fullmatch(str(name)):  # a file of this folder, nothing else
            return "its manifest is unreadable"
        try:
            expected = int(spec["bytes"])
            size = (path / _array_file(str(name))).stat().st_size
        except FileNotFoundError:
            return f"its array file {name!r} is missing"
        except (OSError, TypeError, KeyError, ValueError):
            return "its manifest is unreadable"
        if size != expected:
            return f"its array file {name!r} is {size} bytes, not {expected}"
    return None


def _load(path: Path) -> Prepared:
    """Map a folder ``check_prepared`` accepted."""
    manifest = json.loads((path / _MANIFEST).read_text())
    arrays: dict[str, np.ndarray] = {}
    for name, spec in manifest["arrays"].items():
        shape = tuple(spec["shape"])
        file = path / _array_file(name)
        # an empty array cannot be mapped (mmap of zero bytes); it is read instead
        array = np.load(file, mmap_mode="r" if 0 not in shape else None, allow_pickle=False)
        if array.dtype != np.dtype(spec["dtype"]) or array.shape != shape:
            raise OSError(f"array {name!r} of '{path}' is not what its manifest says")
        arrays[name] = array
    return Prepared(path, arrays, manifest["meta"], built=False)


def _write(folder: Path, version: int, key: Mapping[str, Any], sources: Sequence[list[Any]],
           built: Built) -> None:
    """Write ``built`` into the new ``folder``: arrays first, each synced, the manifest last."""
    specs = {}
    for name, value in built.arrays.items():
        with open(folder / _array_file(name), "wb") as f:
            if isinstance(value, Chunks):
                dtype, shape = np.dtype(np.uint8), (value.nbytes,)
                np.lib.format.write_array_header_1_0(f, {
                    "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                    "shape": shape})
                for part in value.parts:
                    f.write(part)
            else:
                array = np.ascontiguousarray(value)
                dtype, shape = array.dtype, array.shape
                np.save(f, array, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        specs[name] = {"dtype": dtype.str, "shape": list(shape), "bytes": size}
    manifest = {"store_version": STORE_VERSION, "version": version,
                "key": json.loads(json.dumps(dict(key), default=str)),
                "sources": [*sources, *built.sources], "arrays": specs, "meta": built.meta}
    with open(folder / _MANIFEST, "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _in_memory(built: Built) -> Prepared:
    return Prepared(None, {k: v.joined() if isinstance(v, Chunks) else np.ascontiguousarray(v)
                           for k, v in built.arrays.items()}, built.meta, built=True)


def _publish(root: Path, folder: Path, version: int, key: Mapping[str, Any],
             stats: Sequence[list[Any]], built: Built, task: str) -> Prepared:
    """Write ``built`` beside ``folder`` and rename it into place (the caller holds the lock).
    Where the disk refuses (it is full, say), the arrays stay in this process's memory."""
    work: Path | None = None
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=root))
        os.chmod(work, 0o755)  # readable as a folder made by mkdir is (mkdtemp's is private)
        _write(work, version, key, stats, built)
        if folder.exists():  # an invalid one: move it aside (readers may still map it)
            aside = root / f".{folder.name}.old-{os.getpid()}"
            folder.rename(aside)
            _remove(aside)
        work.rename(folder)
        work = None
        prepared = _load(folder)
    except OSError as exc:
        _LOG.warning("Cannot write the data cache '%s' (%s: %s); keeping %s in memory.",
                     root, type(exc).__name__, exc, task)
        return _in_memory(built)
    finally:
        if work is not None:
            _remove(work)
    return Prepared(prepared.path, prepared.arrays, prepared.meta, built=True)


def _run(build: Callable[[], Built]) -> Built:
    """``build()`` with the cyclic garbage collector paused: a parse makes millions of
    containers and no cycles, and the collections their allocation triggers cost it a third of
    its time (VQA v2)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return build()
    finally:
        if paused:
            gc.enable()


class _Unwritable(Exception):
    """The cache folder cannot be made, or a lock file in it opened."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[Callable[[], None]]:
    """Hold an exclusive ``flock`` on the file ``path`` (made, with its folder, if missing);
    yields a function that removes the file before the lock is released (a failed first build
    leaves nothing behind). A file removed while this waited is opened again, so two processes
    never hold locks on two files of the same name. Raises ``_Unwritable`` where the file
    cannot be opened."""
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            f = open(path, "a")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise _Unwritable(f"{type(exc).__name__}: {exc}") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # released on close, or by the kernel
            if os.path.exists(path) and os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                break
        except BaseException:
            f.close()
            raise
        f.close()  # removed (or replaced) by the process that held it: lock the new one
    removed: list[bool] = []
    try:
        yield lambda: removed.append(True)
    finally:
        if removed:
            with contextlib.suppress(OSError):
                path.unlink()
        f.close()


def _under_lock(folder: Path, version: int, key: Mapping[str, Any], sources: Sequence[Path],
                build: Callable[[], Built], task: str, forget: Callable[[], None]) -> Prepared:
    """The second look, then the build and its publication (the caller holds the lock)."""
    reason = check_prepared(folder, version, key)  # built by another process meanwhile?
    if reason is None:
        with contextlib.suppress(OSError, ValueError):
            return _load(folder)
        reason = "it could not be mapped"
    _LOG.info("Preparing %s in '%s' (%s).", task, folder, reason)
    for stale in folder.parent.glob(f".{folder.name}.*"):  # left by killed builders
        _remove(stale)
    stats = [settled_stat(p) for p in sources]
    try:
        built = _run(build)
    except BaseException:
        if not folder.exists():
            forget()  # a first build that failed leaves no lock file either
        raise
    return _publish(folder.parent, folder, version, key, stats, built, task)


def open_or_build(task: str, key: Mapping[str, Any], sources: Sequence[Path],
                  build: Callable[[], Built], *, version: int) -> Prepared:
    """The prepared arrays of ``task`` for ``key`` (its options, the source paths resolved),
    built by ``build`` when the cache holds none that :func:`check_prepared` accepts.

    ``sources`` are the files and folders ``build`` reads; their :func:`settled_stat` is taken
    before it runs (and ``build`` takes those of what it discovers, ``Built.sources``, before
    reading them). Errors of ``build`` (a malformed file) propagate and leave nothing behind;
    where a source is missing, ``build`` runs without touching the cache (it names the file).
    """
    root = cache_root()
    folder = root / _folder_name(task, key)
    if check_prepared(folder, version, key) is None:
        with contextlib.suppress(OSError, ValueError):  # replaced meanwhile: look again below
            return _load(folder)
    if any(source_stat(p)[1] is None for p in sources):
        return _in_memory(_run(build))
    try:
        with _locked(folder.with_name(folder.name + ".lock")) as forget:
            return _under_lock(folder, version, key, sources, build, task, forget)
    except _Unwritable as exc:
        _LOG.warning("Cannot write the data cache '%s' (%s); building %s in memory. Set %s to "
                     "a writable folder.", root, exc, task, CACHE_ENV)
        return _in_memory(_run(build))
