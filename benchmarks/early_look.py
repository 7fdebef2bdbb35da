"""The driver's time per suggestion over a paper-scale study's first trials, with the default
sampler's wider look of a small study and without it (``early_trials: 0``), side by side in one
run (issue 34: the wider look's cost where each candidate needs a traced pass).

    .venv/bin/python benchmarks/early_look.py [--study studies/lw_transformer_vqa.yaml]
                                              [--geometry vqa2] [--trials 30]

The study file is the one a team would run (``lw-transformer-vqa2``: the ``lw_transformer``
space on VQA v2, accuracy, params and MAdds, params <= 50 M), created in a temporary SQLite
database on the named cost geometry (no data needed: nothing trains). Each suggestion is the
engine's own (``studies.searcher.StudySearcher``: Optuna's ask with the default sampler, which
costs every new candidate architecture with one traced pass on the meta device since MAdds is
an objective, then the chosen trial's own cost); each trial is then told a made-up accuracy,
stable per configuration, so both arms see the same answers for the same choices. Printed per
arm: median, max and total seconds per suggestion over ``--trials`` trials and the
architectures traced; then the ratio of the medians and totals.

Measured 2026-11-28 on an otherwise idle two-core machine (``--trials 30``, 2 minutes): with
the wider look median 1.89 s a suggestion (max 7.90 s, 73 s in all, 233 architectures traced),
without it 1.41 s (max 3.76 s, 49 s, 149): 1.34x the median and 1.49x the total over the first
30 trials (a scratch run of the same: 2.08 against 1.36 s). A traced pass of one of these
architectures on VQA v2's geometry takes about 0.27 s; the trials beside them train for hours.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

from nas.tasks import get_geometry
from studies.engine import create_study
from studies.searcher import StudySearcher
from studies.spec import StudySpec, load_study_spec
from studies.store.keys import Status
from studies.tune_report import FinalResult

ROOT = Path(__file__).resolve().parent.parent


def suggestion_seconds(study: Path, geometry_name: str, trials: int, *, early: bool
                       ) -> tuple[list[float], int]:
    """Seconds of each of ``trials`` suggestions of ``study`` (the wider look on or off), and
    the architectures traced."""
    data = load_study_spec(study).to_dict()
    sampler = dict(data.get("sampler") or {"name": "costaware"})
    if not early:
        sampler["early_trials"] = 0
    data.update(sampler=sampler, name=f"{data['name']}-{'early' if early else 'plain'}")
    geometry = get_geometry(geometry_name)
    with tempfile.TemporaryDirectory() as folder:  # the study's folders in it too
        data.update(checkpoints=f"{folder}/checkpoints",
                    tune={**(data.get("tune") or {}), "storage_path": f"{folder}/tune"})
        run = create_study(StudySpec.from_dict(data), f"sqlite:///{folder}/study.db",
                           geometry=geometry)
        searcher = StudySearcher(run, geometry)
        seconds = []
        for i in range(trials):
            began = time.perf_counter()
            candidate = searcher._ask()
            seconds.append(time.perf_counter() - began)
            if candidate is None:  # refused or reused: nothing to tell
                continue
            searcher._launch(f"t{i}", candidate)
            accuracy = 0.5 + 0.2 * hashlib.sha1(candidate.key.encode()).digest()[0] / 256
            searcher._finish(candidate, FinalResult(Status.COMPLETED, value=accuracy,
                                                    epochs_reached=run.spec.fidelity.epochs))
        return seconds, len(searcher.costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--study", type=Path, default=ROOT / "studies/lw_transformer_vqa.yaml")
    parser.add_argument("--geometry", default="vqa2", help="the cost geometry (nas.tasks)")
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args()
    rows = {}
    for early in (True, False):
        seconds, traced = suggestion_seconds(args.study, args.geometry, args.trials,
                                             early=early)
        rows[early] = seconds
        print(f"{'with' if early else 'without'} the wider look: median "
              f"{statistics.median(seconds):.2f} s a suggestion, max {max(seconds):.2f} s, "
              f"{sum(seconds):.1f} s over {args.trials} trials; {traced} architectures traced",
              flush=True)
    median = statistics.median(rows[True]) / statistics.median(rows[False])
    print(f"with / without: median {median:.2f}x, total {sum(rows[True]) / sum(rows[False]):.2f}x")


if __name__ == "__main__":
    main()
