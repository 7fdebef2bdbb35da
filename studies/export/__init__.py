"""Exporting trials for use elsewhere: ``nas export NAME (--trial N | --pareto) --format FMT``.

Formats (``FORMATS``): ``yaml`` and ``json`` (architecture, training settings, task and
provenance; ``nas cost`` and a study's ``enqueue:`` read them back), ``hf-config`` (a
``config.json`` that transformers' ``AutoConfig`` loads), ``openvqa`` (an OpenVQA MCAN config
with LW-Transformer's group keys), ``acort`` (ACORT's training options as a shell snippet),
``timm`` (model name and keyword arguments for ``timm.create_model``, and the weights under the
timm model's own names) and ``torch`` (a script that builds the network with this package, the
checkpoint copied beside it). Each is written so that its client loads it with no edit; what a
client cannot express is written in the file and reported on stderr, and what it would
silently build differently is refused. ``clients`` lists the keys and flags of the clients that
are not packages (OpenVQA, ACORT), with where their code reads them. Paths in exported files
are relative to the export folder. Reading goes through the engine and report helpers; nothing
here writes the database. ``build_record`` makes a ``TrialRecord`` from a trial however it was
read (the dashboard reads its own way and renders the same files).
"""

from studies.export._formats import (
    FORMATS,
    Format,
    acort_options,
    formats_for,
    hf_config,
    openvqa_config,
    timm_state_dict,
    trial_document,
)
from studies.export._record import (
    TrialRecord,
    build_record,
    git_commit,
    known_geometry,
    pareto_records,
    trial_record,
)
from studies.export._writer import INDEX, export_trials, pareto_index

__all__ = [
    "FORMATS",
    "INDEX",
    "Format",
    "TrialRecord",
    "acort_options",
    "build_record",
    "export_trials",
    "formats_for",
    "git_commit",
    "hf_config",
    "known_geometry",
    "openvqa_config",
    "pareto_index",
    "pareto_records",
    "timm_state_dict",
    "trial_document",
    "trial_record",
]
