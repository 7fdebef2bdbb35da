"""``benchmarks/_driver_phases.py``: the clocks ``benchmarks/cluster.py --phases`` puts on each
driver's calls, and the line it prints from what the drivers wrote."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

_path = list(sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
try:
    import _driver_phases as phases
finally:
    sys.path[:] = _path


def test_a_wrapped_call_is_timed_and_still_returns_or_raises(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(phases, "_seconds", {"slow": []})

    class Searcher:
        def suggest(self, trial_id: str) -> str:
            time.sleep(0.02)
            if trial_id == "bad":
                raise ValueError(trial_id)
            return trial_id + "!"

    phases._wrap(Searcher, "suggest", "slow")
    assert Searcher().suggest("a") == "a!"
    with pytest.raises(ValueError, match="bad"):
        Searcher().suggest("bad")
    assert len(phases._seconds["slow"]) == 2
    assert all(s >= 0.02 for s in phases._seconds["slow"])


def test_the_summary_is_milliseconds_a_finished_trial_over_every_driver_process(
        tmp_path: Path) -> None:
    (tmp_path / "nas-1.json").write_text(json.dumps({"suggest": [0.010, 0.030],
                                                     "end": [0.004]}))
    (tmp_path / "nas-2.json").write_text(json.dumps({"suggest": [0.020], "end": [0.006]}))
    (tmp_path / "tune-3.json").write_text(json.dumps({"suggest": [1.0]}))  # the other arm
    line = phases.summary(tmp_path, "nas", trials=2)
    assert line == ("  nas: the driver a trial: suggest 30.0 ms (median 20.0, 3 calls), end "
                    "5.0 ms (median 5.0, 2 calls); in all 35.0 ms")
    assert phases.summary(tmp_path, "other", trials=2) == ""
    assert phases.summary(tmp_path, "nas", trials=0) == ""
