"""Exporting trials for use elsewhere: ``nas export NAME (--trial N | --pareto) --format FMT``.

Formats (``FORMATS``): ``yaml`` and ``json`` (architecture, training settings, task and
provenance; ``nas cost`` and a study's ``enqueue:`` read them back), ``hf-config`` (a Hugging
Face style ``config.json``), ``openvqa`` (MCAN/OpenVQA network keys with LW-Transformer's group
keys), ``acort`` (ACORT's training options as a shell snippet), ``timm`` (model name and keyword
arguments for ``timm.create_model``) and ``torch`` (a script that builds the network with this
package). Reading goes through the engine and report helpers; nothing here writes the database.
``build_record`` makes a ``TrialRecord`` from a trial however it was read (the dashboard reads
its own way and renders the same files).
"""

from studies.export._formats import FORMATS, Format, formats_for, hf_config, trial_document
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
    "build_record",
    "export_trials",
    "formats_for",
    "git_commit",
    "hf_config",
    "known_geometry",
    "pareto_index",
    "pareto_records",
    "trial_document",
    "trial_record",
]
