"""Which folders outside the database a study may write: claimed by its author, on disk.

A study file names folders its runs write into: ``checkpoints`` (each trial's weights) and
``tune.storage_path`` (Ray Tune's experiment folder). ``nas run`` takes them from the file its
author wrote. ``nas resume`` takes them from the database, where anyone who can write to it could
have put any path: a teammate's tool, or a crafted value, must not make a resume write weights or
logs into ``~/.ssh`` or ``/etc``.

So a run claims each such folder it is given by its author: it makes the folder and writes a
marker file, ``.nas-study``, naming the study. A resume (and ``nas promote``, whose study file
comes from the database too) writes only into folders that hold a marker: anything else is
refused in one line before the first write. Writing a marker needs write access to the folder
itself, which a database writer does not have. Inside a claimed folder each study writes under
its own name (``<checkpoints>/<study>/trial-<N>``, ``<storage_path>/<study>``), so a copy of a
study (``optuna.copy_study``) resumes beside its source without touching its files. Tune's
default folder (``nas_runs/<study>`` under the current folder) is the study's own by its name
and needs no marker.
"""

from __future__ import annotations

import os
from pathlib import Path

from nas.errors import ConfigError
from studies.spec import StudySpec
from studies.store.stored import inert

__all__ = ["MARKER", "check_claims", "claim", "claimed_folders"]

#: The marker file in each claimed folder: the names of the studies that may write there.
MARKER = ".nas-study"
_MAX_MARKER = 1 << 20


def claimed_folders(spec: StudySpec) -> list[tuple[str, Path]]:
    """The folders ``spec`` names that a run writes into, with the study key naming each."""
    out = []
    if spec.checkpoints:
        out.append(("checkpoints", Path(spec.checkpoints)))
    if spec.tune.storage_path:
        out.append(("tune.storage_path", Path(spec.tune.storage_path)))
    return out


def _names(folder: Path) -> set[str] | None:
    """The study names the folder's marker lists; None when it has none (or not a file)."""
    marker = folder / MARKER
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > _MAX_MARKER:
            return None
        return {line.strip() for line in marker.read_text(errors="replace").splitlines()
                if line.strip()}
    except OSError:
        return None


def claim(spec: StudySpec) -> None:
    """Make each folder ``spec`` names and list the study in its marker (``nas run``: the
    folders come from the study file's author)."""
    for _key, folder in claimed_folders(spec):
        folder.mkdir(parents=True, exist_ok=True)
        names = _names(folder) or set()
        if spec.name not in names:
            with (folder / MARKER).open("a") as f:
                f.write(spec.name + "\n")


def check_claims(spec: StudySpec) -> None:
    """Refuse, before anything is written, a run whose study file (read from the database)
    names a folder no nas run claimed (``ConfigError``, one line naming the key and the
    folder)."""
    for key, folder in claimed_folders(spec):
        if folder.is_dir() and not folder.is_symlink() and _names(folder) is not None:
            continue
        raise ConfigError(
            f"Study {inert(spec.name)!r}: its stored study key `{key}` names "
            f"{inert(os.fspath(folder))!r}, which no `nas run` made (it holds no {MARKER} "
            "marker); a folder read from the database is written only once a run claimed it "
            f"(to allow it, create {inert(os.fspath(folder / MARKER))!r}).")
