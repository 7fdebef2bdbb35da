"""A source's stat and ImageFolder's listing, in the standard library alone.

Kept free of the package's imports (numpy, torch) so that it also runs as a script: an
ImageNet-size split (1.28 million files in 1,000 class folders) is listed by several processes
at once, each a ``python -I -S`` of this file listing a contiguous run of class folders
(:func:`list_classes`), reading its job (split folders, their runs of class folders, the
extensions) as JSON on stdin and writing :func:`_encode`'s record to stdout (an unlinked
temporary file).
"""

from __future__ import annotations

import array
import itertools
import json
import mmap
import operator
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["SETTLE_NS", "Listed", "list_classes", "settled_stat", "source_stat"]

#: A build records a source's time only once it is this old: file times come from a clock that
#: ticks every few milliseconds, so a change in the tick of the recorded time would look the
#: same (git's "racily clean" entries).
SETTLE_NS = 50_000_000
#: Class folders a process lists at least: below that, starting one costs more than it saves.
_CLASSES_PER_PROCESS = 64
_HEADER = struct.Struct("<Q")
_NAME = operator.attrgetter("name")


def source_stat(path: Path) -> list[Any]:
    """What says a source is unchanged: ``[path, size, mtime_ns, inode]`` (a folder's size and
    time change when an entry is added, removed or renamed); ``[path, None, None, None]`` when
    it is missing."""
    try:
        st = path.stat()
    except OSError:
        return [str(path), None, None, None]
    return [str(path), st.st_size, st.st_mtime_ns, st.st_ino]


def settled_stat(path: Path) -> list[Any]:
    """``source_stat(path)``, taken once the path is 50 ms unmodified (a build takes its
    sources' stats so, before reading them): any later change gets a later time."""
    while True:
        now = time.time_ns()
        row = source_stat(path)
        age = now - row[2] if row[2] is not None else SETTLE_NS
        if not 0 <= age < SETTLE_NS:  # old enough (or dated in the future: nothing to wait)
            return row
        time.sleep((SETTLE_NS - age) / 1e9)


def _walk(folder: str, sources: list[list[Any]]) -> list[tuple[str, list[str]]]:
    """``os.walk(folder, followlinks=True)``'s folders and their file names, each folder's
    ``settled_stat`` taken before it is listed."""
    found = []
    pending = [folder]
    while pending:
        top = pending.pop()
        sources.append(settled_stat(Path(top)))
        try:
            with os.scandir(top) as listing:
                entries = list(listing)
        except OSError:  # os.walk skips a folder it cannot list
            continue
        files = list(map(_NAME, itertools.filterfalse(os.DirEntry.is_dir, entries)))
        found.append((top, files))
        if len(files) < len(entries):
            pending += [entry.path for entry in entries if entry.is_dir()]
    return found


@dataclass(frozen=True)
class Listed:
    """The images of class folders, in ImageFolder's order: ``text`` holds their paths relative
    to the split, one after the other, in UTF-8 (``surrogatepass``: a name's bytes undecodable
    as UTF-8 round-trip), ``lengths`` each path's length in those bytes (an int64 array's), each
    in consecutive chunks (one a process that listed them, never joined); ``counts`` the images
    of each class folder; ``sources`` every walked folder's ``settled_stat``."""

    text: tuple[bytes | memoryview, ...]
    lengths: tuple[bytes | memoryview, ...]
    counts: list[int]
    sources: list[list[Any]]


_Group = tuple[str, list[str]]  # a split's folder and a run of its class folders
_Helper = tuple[subprocess.Popen[bytes], IO[bytes]]  # a helper and the file it answers in


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _images(files: list[str], extensions: tuple[str, ...], both: tuple[str, ...]) -> list[str]:
    """The names whose lower-cased form ends with one of ``extensions`` (ImageFolder's test),
    lower-cased only where needed: a folder's images mostly share one extension, tried first,
    then ``both`` (the extensions in lower and upper case)."""
    if files:
        common = files[0][files[0].rfind("."):]
        # Every name ends with it when the names joined by NUL (which no file name holds) hold
        # it followed by NUL once a name but the last: counted in C, not a test a name.
        if (common.lower() in extensions and files[-1].endswith(common)
                and "\0".join(files).count(common + "\0") == len(files) - 1):
            return files
    return [f for f in files if f.endswith(both) or f.lower().endswith(extensions)]


def _list_group(split: str, classes: Sequence[str], extensions: tuple[str, ...]) -> Listed:
    both = extensions + tuple(e.upper() for e in extensions)
    sources: list[list[Any]] = []
    chunks: list[bytes] = []
    lengths = array.array("q")
    counts: list[int] = []
    for cls in classes:
        count = 0
        for top, files in sorted(_walk(os.path.join(split, cls), sources)):
            images = _images(files, extensions, both)
            if images:
                images.sort()
                prefix = os.path.relpath(top, split) + os.sep
                text = prefix + prefix.join(images)
                # the lengths in C loops: a character a byte where the text is ASCII
                names = images if text.isascii() else map(_utf8, images)
                lengths.extend(map(operator.add, itertools.repeat(len(_utf8(prefix))),
                                   map(len, names)))
                chunks.append(_utf8(text))
                count += len(images)
        counts.append(count)
    return Listed((b"".join(chunks),), (lengths.tobytes(),), counts, sources)


def _list_run(groups: Sequence[_Group], extensions: tuple[str, ...]) -> list[Listed]:
    return [_list_group(split, classes, extensions) for split, classes in groups]


def _encode(parts: Sequence[Listed]) -> list[bytes | memoryview]:
    """A helper's record of ``parts`` (each listed by :func:`_list_group`: one chunk each)."""
    meta = json.dumps([{"counts": p.counts, "sources": p.sources, "text": len(p.text[0]),
                        "lengths": len(p.lengths[0])} for p in parts]).encode("ascii")
    return [_HEADER.pack(len(meta)), meta, *(b for p in parts for b in (*p.text, *p.lengths))]


def _decode(data: memoryview) -> list[Listed]:
    """The parts of a helper's record; their chunks are views of ``data``, never copied."""
    (size,) = _HEADER.unpack_from(data)
    start = _HEADER.size + size
    parts = []
    for meta in json.loads(bytes(data[_HEADER.size:start])):
        middle, end = start + meta["text"], start + meta["text"] + meta["lengths"]
        if end > len(data):
            raise ValueError("a helper's record is shorter than its header says")
        parts.append(Listed((data[start:middle],), (data[middle:end],), meta["counts"],
                            meta["sources"]))
        start = end
    return parts


def _processes() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _size(folder: str) -> int:
    try:
        return max(1, os.stat(folder).st_size)
    except OSError:
        return 1


def _runs(splits: Sequence[tuple[Path, Sequence[str]]], n: int
          ) -> list[list[tuple[int, _Group]]]:
    """The (split, class) folders cut into ``n`` contiguous runs, each a list of (the split's
    index, the split's folder and a run of its classes). The helpers' runs hold about equal
    sums of the folders' sizes (a folder's size grows with its entries on the common file
    systems: a validation split's class folder holds a twentieth of a training one's); the
    first, this process's, a tenth more."""
    units = [(i, str(split), cls) for i, (split, classes) in enumerate(splits)
             for cls in classes]
    weights = [_size(os.path.join(split, cls)) for _, split, cls in units] if n > 1 else []
    total, seen, k = sum(weights), 0, 0
    mine = total * 11 // (10 * n)  # this process's run: a helper also starts and sends its own
    runs: list[list[tuple[int, _Group]]] = [[] for _ in range(n)]
    for unit, (i, split, cls) in enumerate(units):
        if n > 1:
            k = 0 if seen < mine else min(n - 1, 1 + (seen - mine) * (n - 1) // (total - mine))
            seen += weights[unit]
        groups = runs[k]
        if groups and groups[-1][0] == i:
            groups[-1][1][1].append(cls)
        else:
            groups.append((i, (split, [cls])))
    return runs


def _start(groups: list[_Group], extensions: tuple[str, ...]) -> _Helper | None:
    """A helper listing ``groups``, and the unlinked file it writes its record to: a file, not
    a pipe, so that it never waits for this process to read (this process lists its own run
    meanwhile)."""
    try:
        out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by _finish)
    except OSError:  # no temporary folder to write: listed here
        return None
    try:
        child = subprocess.Popen([sys.executable, "-I", "-S", __file__], stdin=subprocess.PIPE,
                                 stdout=out, stderr=subprocess.DEVNULL)
    except OSError:
        out.close()
        return None
    job = json.dumps({"groups": groups, "extensions": extensions})
    try:  # JSON escapes a name's lone surrogates (bytes undecodable as UTF-8)
        assert child.stdin is not None
        child.stdin.write(job.encode("ascii"))
        child.stdin.close()
    except OSError:
        pass  # it ended already: its exit status says so
    return child, out


def _finish(helper: _Helper | None, groups: list[_Group], extensions: tuple[str, ...]
            ) -> list[Listed]:
    """A helper's listing, or the same listed here when it failed or answered what does not
    decode as one record per group."""
    if helper is not None:
        child, out = helper
        with out:
            if child.wait() == 0:
                try:  # mapped: its pages are read once, by the write of the cache
                    parts = _decode(memoryview(mmap.mmap(out.fileno(), 0,
                                                         access=mmap.ACCESS_READ)))
                except (OSError, ValueError, KeyError, TypeError, struct.error):
                    parts = []  # an empty file cannot be mapped (ValueError)
                if len(parts) == len(groups):
                    return parts
    return _list_run(groups, extensions)


def list_classes(splits: Sequence[tuple[Path, Sequence[str]]], extensions: Sequence[str], *,
                 processes: int | None = None) -> list[Listed]:
    """ImageFolder's images of each split's ``classes`` (sub-folders of the split): every file
    below each (sub-folders walked, symbolic links followed) whose lower-cased name ends with
    one of ``extensions``, folders and names in sorted order. One :class:`Listed` per split.

    Listed by up to ``processes`` processes at once (default: the CPUs this process may use),
    each given at least 64 class folders: this one lists the first run while ``python -I -S``
    processes of this file list the others. A process that fails is listed again here."""
    exts = tuple(e.lower() for e in extensions)
    total = sum(len(classes) for _, classes in splits)
    wanted = processes if processes is not None else _processes()
    runs = _runs(splits, max(1, min(wanted, total // _CLASSES_PER_PROCESS)))
    jobs = [[group for _, group in run] for run in runs]
    helpers = [_start(groups, exts) for groups in jobs[1:]]
    parts = _list_run(jobs[0], exts)
    for groups, helper in zip(jobs[1:], helpers, strict=True):
        parts += _finish(helper, groups, exts)
    owners = [i for run in runs for i, _ in run]
    listed = []
    for i in range(len(splits)):
        mine = [p for owner, p in zip(owners, parts, strict=True) if owner == i]
        listed.append(Listed(tuple(c for p in mine for c in p.text),
                             tuple(c for p in mine for c in p.lengths),
                             [c for p in mine for c in p.counts],
                             [s for p in mine for s in p.sources]))
    return listed


def _main() -> None:
    job = json.loads(sys.stdin.buffer.read().decode("ascii"))
    groups = [(split, classes) for split, classes in job["groups"]]
    sys.stdout.buffer.writelines(_encode(_list_run(groups, tuple(job["extensions"]))))


if __name__ == "__main__":
    _main()
