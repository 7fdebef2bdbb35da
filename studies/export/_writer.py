"""Writing exports: every file rendered and checked before the first one is written.

Files are named by trial number only (``trial-<n>.<ext>``, ``pareto.csv``), so study names never
reach a path; each target is still checked to resolve inside ``out``. Existing files are refused
unless ``force``; on any error nothing is written.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

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


def _target(out: Path, relative: str) -> Path:
    target = out / relative
    root = out.resolve()
    if not target.resolve().is_relative_to(root):  # cannot happen with numbered names
        raise NasError(f"Refusing to write {str(target)!r}: it lies outside --out {str(out)!r}.")
    return target


def export_trials(
    name: str,
    *,
    fmt: str,
    out: str | os.PathLike[str],
    trial: int | None = None,
    pareto: bool = False,
    storage_url: str | None = None,
    force: bool = False,
) -> list[Path]:
    """Export trial ``trial`` (or, with ``pareto``, every Pareto-optimal trial plus
    ``pareto.csv``) of study ``name`` as ``fmt`` into folder ``out``; the paths written."""
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
    for record in records:
        form.check(record)
    files = {form.path(r.number): form.render(r) for r in records}
    if pareto:
        files[INDEX] = pareto_index(records, form)
    targets = {_target(out_dir, rel): text for rel, text in files.items()}
    existing = [p for p in targets if p.exists()]
    if existing and not force:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise NasError(f"{str(existing[0])!r}{more} already exists; pass --force to overwrite.")
    # Each file goes to a temporary sibling first and replaces its target only once every file
    # is written: a failure (a full disk, a read-only mount) leaves no file changed or half
    # written (folders it made stay).
    staged: dict[Path, Path] = {}
    try:
        for path, text in targets.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            staged[path] = path.with_name(f".{path.name}.partial")
            staged[path].write_text(text, encoding="utf-8")
            if path.suffix == ".sh":
                staged[path].chmod(0o755)
    except OSError as exc:
        for temporary in staged.values():
            temporary.unlink(missing_ok=True)
        raise NasError(f"Cannot write {str(exc.filename or out_dir)!r}: {exc.strerror}.") from None
    for path, temporary in staged.items():
        os.replace(temporary, path)
    return list(targets)
