"""Writing exports: every file rendered and checked before the first one is written.

Files are named by trial number only (``trial-<n>.<ext>``, ``trial-<n>/config.json``,
``trial-<n>.pt``, ``pareto.csv``), so study names never reach a path; each target is still
checked to resolve inside ``out``. Existing files are refused unless ``force``; on any error
nothing is written.

Nothing outside ``out`` is ever written, chmodded or replaced, whatever is planted inside it:
staging files (``.<name>.partial``) are created with an exclusive, no-follow open relative to the
opened ``out`` folder, folders below it are opened without following links, and a symbolic link
at a target is refused, even with ``force``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import errno
import io
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from nas.errors import ConfigError, NasError
from nas.loading import unwritable_ancestor
from studies.export._formats import FORMATS, Format
from studies.export._record import TrialRecord, pareto_records, trial_record

__all__ = ["INDEX", "export_trials", "pareto_index"]

INDEX = "pareto.csv"


def _format(name: str) -> Format:
    if name not in FORMATS:
        raise ConfigError(f"Unknown export format {name!r}; formats are {list(FORMATS)}.")
    return FORMATS[name]


def pareto_index(records: list[TrialRecord], fmt: Format) -> str:
    """``pareto.csv``: number, each objective's value, arch_id and the file written."""
    names = list(records[0].directions) if records else []
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["number", *names, "arch_id", "file"])
    for r in records:
        values = r.objectives or {}
        writer.writerow([r.number, *(values.get(n) for n in names), r.arch.arch_id,
                         fmt.path(r.number)])
    return buffer.getvalue()


# Staging files are created exclusively and never through a link; folders below ``out`` are
# opened without following links (``O_NOFOLLOW`` on the last component, every component opened
# relative to its parent's descriptor).
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts(out: Path, relative: str) -> tuple[str, ...]:
    """The components of a format's relative file name (``trial-3/config.json``)."""
    pure = PurePosixPath(relative)
    parts = pure.parts
    if pure.is_absolute() or not parts or any(p in (".", "..") for p in parts):
        raise NasError(f"Refusing to write {relative!r}: an export file name must be a path "
                       f"inside --out {str(out)!r}.")  # cannot happen with the formats' names
    return parts


def _staging(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _link_refusal(path: Path, out: Path) -> NasError:
    return NasError(f"{str(path)!r} is a symbolic link; nas export never writes through or "
                    f"replaces a link, even with --force: remove it, or choose another --out "
                    f"than {str(out)!r}.")


def _in_the_way(path: Path) -> NasError:
    return NasError(f"{str(path)!r} is in the way: nas export stages its files there (one may "
                    "be left by an interrupted export, or planted); remove it and export again.")


def _not_a_folder(path: Path, out: Path) -> NasError:
    return NasError(f"{str(path)!r} is a file where nas export needs a folder; remove it, or "
                    f"choose another --out than {str(out)!r}.")


def _check_target(out: Path, parts: tuple[str, ...]) -> bool:
    """Refuse a link (or a file where a folder belongs) on the way to ``out/parts``, a link or
    a folder at the target and anything at its staging path; whether the target exists."""
    folder = out
    for name in parts[:-1]:
        folder = folder / name
        st = _lstat(folder)
        if st is None:
            return False  # made later: nothing below it exists yet
        if stat.S_ISLNK(st.st_mode):
            raise _link_refusal(folder, out)
        if not stat.S_ISDIR(st.st_mode):
            raise _not_a_folder(folder, out)
    path = folder / parts[-1]
    if _lstat(_staging(path)) is not None:
        raise _in_the_way(_staging(path))
    st = _lstat(path)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise _link_refusal(path, out)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise NasError(f"{str(path)!r} is a folder where nas export writes a file; remove it, "
                       f"or choose another --out than {str(out)!r}.")
    # With no link below --out, this holds; checked still, as the rule the above serves.
    root = os.path.realpath(out)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise NasError(f"Refusing to write {str(path)!r}: it resolves outside --out "
                       f"{str(out)!r}.")
    return st is not None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Stage:
    """The folders below ``out`` (opened as descriptors) and the staging files made so far."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.folders: dict[tuple[str, ...], int] = {(): os.open(out, os.O_RDONLY | os.O_DIRECTORY
                                                                 | os.O_CLOEXEC)}
        self.staged: list[tuple[int, str, str, Path]] = []  # folder fd, staging, name, target
        self.current = out  # what a failure is about

    def folder(self, parts: tuple[str, ...]) -> int:
        """The descriptor of ``out/parts``, made when missing; never through a link."""
        for i in range(1, len(parts) + 1):
            if parts[:i] in self.folders:
                continue
            parent, name = self.folders[parts[: i - 1]], parts[i - 1]
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o777, dir_fd=parent)
            try:
                self.folders[parts[:i]] = os.open(name, _FOLDER, dir_fd=parent)
            except OSError as exc:  # made (or planted) since the checks
                if exc.errno == errno.ELOOP:
                    raise _link_refusal(self.out.joinpath(*parts[:i]), self.out) from None
                if exc.errno == errno.ENOTDIR:
                    raise _not_a_folder(self.out.joinpath(*parts[:i]), self.out) from None
                raise
        return self.folders[parts]

    def write(self, parts: tuple[str, ...], data: bytes, mode: int) -> None:
        self.current = self.out.joinpath(*parts)
        parent, name = self.folder(parts[:-1]), parts[-1]
        staging = f".{name}.partial"
        try:
            fd = os.open(staging, _NEW_FILE, 0o644, dir_fd=parent)
        except FileExistsError:
            raise _in_the_way(_staging(self.current)) from None
        self.staged.append((parent, staging, name, self.current))
        try:
            _write_all(fd, data)
            if mode != 0o644:
                os.fchmod(fd, mode)  # the descriptor: never a path that could be swapped
        finally:
            os.close(fd)

    def commit(self) -> None:
        # rename(2) replaces whatever is at the target, a link included, without following it
        for parent, staging, name, target in self.staged:
            self.current = target
            os.replace(staging, name, src_dir_fd=parent, dst_dir_fd=parent)

    def abandon(self) -> None:
        for parent, staging, _, _ in self.staged:  # only files this export made
            with contextlib.suppress(OSError):
                os.unlink(staging, dir_fd=parent)

    def close(self) -> None:
        for fd in self.folders.values():
            os.close(fd)


def export_trials(
    name: str,
    *,
    fmt: str,
    out: str | os.PathLike[str],
    trial: int | None = None,
    pareto: bool = False,
    storage_url: str | None = None,
    force: bool = False,
    note: Callable[[str], None] | None = None,
) -> list[Path]:
    """Export trial ``trial`` (or, with ``pareto``, every Pareto-optimal trial plus
    ``pareto.csv``) of study ``name`` as ``fmt`` into folder ``out``; the paths written (a
    format may write more than one file per trial, e.g. weights beside a script).

    What the format's client cannot express about a trial is written in its file and passed to
    ``note`` once the files are written (default: one line each on stderr)."""
    if (trial is None) == (not pareto):
        raise ConfigError("Export either one trial (trial=N) or the Pareto front (pareto=True).")
    form = _format(fmt)
    out_dir = Path(out)
    blocked = unwritable_ancestor(out_dir)
    if blocked == out_dir.absolute():
        raise NasError(f"--out {str(out_dir)!r} is a file, not a folder.")
    if blocked is not None:
        raise NasError(f"--out {str(out_dir)!r} cannot be made: {str(blocked)!r} is not a "
                       f"writable folder.")
    records = (pareto_records(name, storage_url) if trial is None
               else [trial_record(name, trial, storage_url)])
    # paths written into files are relative to the export folder, so it can move
    export_dir = os.path.abspath(out_dir)
    records = [dataclasses.replace(r, export_dir=export_dir) for r in records]
    for record in records:
        form.check(record)
    files: dict[str, bytes] = {}
    for record in records:
        files.update(form.files(record))
    if pareto:
        files[INDEX] = pareto_index(records, form).encode("utf-8")
    targets = {_parts(out_dir, rel): data for rel, data in files.items()}
    existing = [out_dir.joinpath(*parts) for parts in targets if _check_target(out_dir, parts)]
    if existing and not force:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise NasError(f"{str(existing[0])!r}{more} already exists; pass --force to overwrite.")
    # Each file goes to a staging sibling first and replaces its target only once every file is
    # written: a failure (a full disk, a read-only mount) leaves no file changed or half written
    # (folders it made stay). --out itself is the user's to choose (a link to a folder is fine);
    # below it, nothing is created, written or replaced through a link.
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        stage = _Stage(out_dir)
    except OSError as exc:
        raise NasError(f"Cannot write {str(out_dir)!r}: {exc.strerror}.") from None
    try:
        for parts, data in targets.items():
            stage.write(parts, data, 0o755 if parts[-1].endswith(".sh") else 0o644)
        stage.commit()
    except NasError:
        stage.abandon()
        raise
    except OSError as exc:
        stage.abandon()
        raise NasError(f"Cannot write {str(stage.current)!r}: {exc.strerror}.") from None
    finally:
        stage.close()
    say = note if note is not None else _to_stderr
    for record in records:
        for text in form.notes(record):
            say(f"{record.label}: {text}")
    return [out_dir.joinpath(*parts) for parts in targets]


def _to_stderr(text: str) -> None:
    print(f"nas export: note: {text}", file=sys.stderr)
