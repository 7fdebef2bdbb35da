"""A study that knows when to stop: ``budget.until: converged`` (spec, engine), and what
``nas status`` says of the default sampler's gains against the hypervolume's noise (values
read from the database: untrusted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h

from nas.errors import ConfigError
from nas_cli.main import main as nas_main
from studies import StudySpec, create_study, run_study, study_status
from studies.convergence import recorded_convergence
from studies.store import SamplerKey

ray_local = h.ray_local
GAIN, NOISE = SamplerKey.GAIN, SamplerKey.NOISE
COSTAWARE = {"name": "costaware"}


def test_budget_until_converged_is_read_checked_and_stored_only_where_set() -> None:
    data = h.study_dict("u", sampler=COSTAWARE, budget={"trials": 50, "until": "converged"})
    spec = StudySpec.from_dict(data)
    assert spec.budget.until == "converged"
    assert StudySpec.from_dict(spec.to_dict()).budget == spec.budget
    assert spec.budget.grown(counted=3, trials=80).until == "converged"
    plain = StudySpec.from_dict(h.study_dict("p", sampler=COSTAWARE))
    assert "until" not in plain.to_dict()["budget"]  # a stored spec of an earlier release
    with pytest.raises(ConfigError, match=r"`budget\.until` must be one of converged, but got "
                                          r"'done'"):
        StudySpec.from_dict({**data, "budget": {"trials": 5, "until": "done"}})
    with pytest.raises(ConfigError, match=r"needs the default sampler 'costaware'.*'tpe'"):
        StudySpec.from_dict({**data, "sampler": {"name": "tpe"}})


def test_stored_gains_and_noise_that_are_not_numbers_count_as_not_recorded() -> None:
    good = {GAIN: 0.001, NOISE: 0.01}
    found = recorded_convergence([good] * 3, patience=3, fraction=1.0)
    assert found is not None and found.at == 2
    # by default: a quarter of the noise, 0.0025, which 3 x 0.001 does not stay below
    assert not recorded_convergence([good] * 3, patience=3).converged  # type: ignore[union-attr]
    for bad in ("0.001", float("nan"), float("inf"), -1.0, True, None, [0.001]):
        found = recorded_convergence([good, good, {GAIN: bad, NOISE: 0.01}], patience=3,
                                     fraction=1.0)
        assert found is not None and not found.converged
        noisy = recorded_convergence([good, good, {GAIN: 0.001, NOISE: bad}], patience=3,
                                     fraction=1.0)
        assert noisy is not None and not noisy.converged  # no noise there: nothing is below
    assert recorded_convergence([{}, {"other": 1}]) is None  # another sampler records none


def _add(study: optuna.Study, attrs: dict[str, Any], value: float) -> None:
    dists = {"x": optuna.distributions.FloatDistribution(0, 1)}
    study.add_trial(optuna.trial.create_trial(params={"x": value}, distributions=dists,
                                              values=[value, 1000 * value], system_attrs=attrs))


def test_status_says_when_the_study_converged_with_the_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = StudySpec.from_dict(h.study_dict("c", sampler=COSTAWARE,
                                            budget={"trials": 40, "until": "converged"}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    gains = [0.2, 0.1, "junk", 0.05] + [0.0001] * 51
    for i, gain in enumerate(gains):
        _add(run.study, {GAIN: gain, NOISE: 0.024}, 0.3 + i / 200)
    report = study_status("c", url)["convergence"]
    # the first window of 50 clear of the unreadable gain and of 0.05 adds up to 0.005, below
    # a quarter of the noise (0.006)
    first = 3 + 50
    assert report == {"converged": True, "at": first, "gain": pytest.approx(0.005),
                      "noise": pytest.approx(0.024), "fraction": 0.25, "patience": 50,
                      "stops": True, "trials": len(gains)}
    assert nas_main(["status", "c", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert (f"converged at trial {first}: the expected hypervolume gains of 50 trials in a "
            "row add up to 0.005, below 0.25 x the hypervolume's noise 0.024; the study "
            "stopped there (budget.until: converged)") in out
    assert nas_main(["status", "c", "--storage", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["convergence"]["at"] == first


def test_status_of_a_study_not_converged_and_of_another_sampler(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    run = create_study(StudySpec.from_dict(h.study_dict("n", sampler=COSTAWARE)), url,
                       geometry=h.GEOMETRY)
    for i in range(52):
        _add(run.study, {GAIN: 0.001, NOISE: 0.024}, 0.3 + i / 200)
    report = study_status("n", url)["convergence"]
    assert not report["converged"] and report["at"] is None and not report["stops"]
    assert report["gain"] == pytest.approx(0.05) and report["noise"] == pytest.approx(0.024)
    assert nas_main(["status", "n", "--storage", url]) == 0
    assert ("not converged: the expected hypervolume gains of 50 trials in a row add up to "
            "0.05 (the last), not below 0.25 x the hypervolume's noise 0.024"
            ) in capsys.readouterr().out
    few = create_study(StudySpec.from_dict(h.study_dict("f", sampler=COSTAWARE)), url,
                       geometry=h.GEOMETRY)
    for i in range(12):  # fewer than the 50 in a row the rule judges (the demo's study)
        _add(few.study, {GAIN: 0.001, NOISE: 0.024}, 0.3 + i / 200)
    assert nas_main(["status", "f", "--storage", url]) == 0
    assert ("not converged: 12 trials so far, and it is judged over 50 in a row"
            in capsys.readouterr().out)
    other = create_study(StudySpec.from_dict(h.study_dict("r")), url, geometry=h.GEOMETRY)
    _add(other.study, {}, 0.5)
    assert study_status("r", url)["convergence"] is None
    assert nas_main(["status", "r", "--storage", url]) == 0
    assert "converged" not in capsys.readouterr().out


def converge_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's rule against a hypervolume noise of 10, above any gain, with a window of
    2: a study converges as soon as two trials were chosen."""
    import studies.searcher as searcher_module

    def generous(attrs: Any) -> Any:
        return recorded_convergence([{**a, NOISE: 10.0} for a in attrs], patience=2)

    monkeypatch.setattr(searcher_module, "recorded_convergence", generous)


def _converging(name: str) -> dict[str, Any]:
    return h.study_dict(name, sampler={"name": "costaware", "candidates": 6},
                        budget={"trials": 8, "until": "converged"})


@pytest.mark.usefixtures("ray_local")
@pytest.mark.timeout(600)
def test_a_study_until_converged_stops_there_and_ends_as_a_run_that_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The engine asks no more trials once the recorded gains converge (here against a
    hypervolume noise of 10, above any gain, with a window of 2: it converges as soon as two
    trials were chosen) and the run ends without an error; without ``until`` it spends its
    budget."""
    converge_at_once(monkeypatch)
    url = f"sqlite:///{tmp_path / 's.db'}"
    run = create_study(StudySpec.from_dict(_converging("stop")), url, geometry=h.GEOMETRY)
    run_study(run, evaluator=h.instant, progress=False)
    trials = run.study.get_trials(deepcopy=False)
    assert 2 <= len(trials) < 8
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in trials)
    assert "Study 'stop' converged: the expected hypervolume gains of the 2 trials asked up " \
           "to trial 1" in capsys.readouterr().err
    data = h.study_dict("all", sampler={"name": "costaware", "candidates": 6},
                        budget={"trials": 4})
    run = create_study(StudySpec.from_dict(data), url, geometry=h.GEOMETRY)
    run_study(run, evaluator=h.instant, progress=False)
    assert study_status("all", url)["counted"] == 4


def test_the_dashboard_reads_the_same_convergence_and_ignores_what_does_not_parse(
        tmp_path: Path) -> None:
    """The study page's summary row: the figures ``nas status`` gives, read by SQL; a stored
    gain that is not JSON, or JSON of the wrong type, counts as not recorded."""
    from dashboard import data, layout

    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    spec = StudySpec.from_dict(h.study_dict("d", sampler=COSTAWARE))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    for i in range(54):
        _add(run.study, {GAIN: 0.0001, NOISE: 0.024}, 0.3 + i / 200)
    ids = [t._trial_id for t in run.study.get_trials(deepcopy=False)]
    update = "UPDATE trial_system_attributes SET value_json = ? WHERE trial_id = ? AND key = ?"
    h.edit_sqlite(db, [(update, ('"0.0004"', ids[2], GAIN))])
    engine = data.open_readonly(url)
    info = data.study_info(engine, "d")
    report = data.load_convergence(engine, info)
    assert report == study_status("d", url)["convergence"]
    assert report is not None and report["at"] == 52 and not report["stops"]  # 3..52
    # Text that is not JSON: `nas status` refuses it as the store refuses any stored value
    # that does not parse (naming it); the page keeps its summary and counts it as not recorded.
    h.edit_sqlite(db, [(update, ("{not json", ids[1], GAIN))])
    assert data.load_convergence(engine, info) == report
    summary = str(layout.study_summary(info, {}, {}, 0.5, None, convergence=report))
    assert "converged at trial 52" in summary and "summary-convergence" in summary
    assert "summary-convergence" not in str(layout.study_summary(info, {}, {}, 0.5, None))


def test_resume_until_budget_runs_a_converged_study_on_and_until_converged_is_checked(
        ray_local: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A converged study stops again at once on a plain resume; ``--until budget`` (stored)
    runs it to its trials; ``--until converged`` is refused for another sampler, nothing
    written."""
    from studies.engine import prepare_resume

    converge_at_once(monkeypatch)
    url = f"sqlite:///{tmp_path / 's.db'}"
    run_study(create_study(StudySpec.from_dict(_converging("c")), url, geometry=h.GEOMETRY),
              evaluator=h.instant, progress=False)
    first = study_status("c", url)["counted"]
    assert 2 <= first < 8
    run, _ = prepare_resume("c", url)
    run_study(run, evaluator=h.instant, progress=False)
    assert study_status("c", url)["counted"] == first  # converged before: stops at once
    run, _ = prepare_resume("c", url, until="budget")
    assert run.spec.budget.until is None
    run_study(run, evaluator=h.instant, progress=False)
    assert study_status("c", url)["counted"] == 8
    assert prepare_resume("c", url)[0].spec.budget.until is None  # stored with the study

    other = h.study_dict("n", budget={"trials": 2})
    run_study(create_study(StudySpec.from_dict(other), url, geometry=h.GEOMETRY),
              evaluator=h.instant, progress=False)
    before = len(optuna.load_study(study_name="n", storage=url).trials)
    with pytest.raises(ConfigError, match=r"`budget\.until: converged` needs the default"):
        prepare_resume("n", url, trials=4, until="converged")
    assert len(optuna.load_study(study_name="n", storage=url).trials) == before
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        nas_main(["resume", "n", "--storage", url, "--until", "later"])
    assert bad.value.code == 2 and "invalid choice: 'later'" in capsys.readouterr().err


def test_the_searcher_finds_a_convergence_stored_before_and_one_reached_later(
        tmp_path: Path) -> None:
    """A resumed study that converged before stops at once; otherwise each new trial's record
    is checked with the windows it ends (the trial named is the study's own number)."""
    from studies.searcher import StudySearcher

    url = f"sqlite:///{tmp_path / 's.db'}"
    data = h.study_dict("r", sampler=COSTAWARE, budget={"trials": 500, "until": "converged"})
    done = create_study(StudySpec.from_dict(data), url, geometry=h.GEOMETRY)
    for i in range(60):  # noise 0.024: the gains must add up to less than 0.006
        _add(done.study, {GAIN: 0.05 if i == 4 else 0.0001, NOISE: 0.024}, 0.3 + i / 200)
    searcher = StudySearcher(done, h.GEOMETRY)
    assert searcher._converged() and searcher.pace.closed()
    assert "asked up to trial 54 add up to 0.005" in searcher.pace.finished

    later = create_study(StudySpec.from_dict({**data, "name": "l"}), url, geometry=h.GEOMETRY)
    for i in range(52):
        _add(later.study, {GAIN: 0.05 if i == 30 else 0.0001, NOISE: 0.024}, 0.3 + i / 200)
    searcher = StudySearcher(later, h.GEOMETRY)
    assert not searcher._converged()
    assert searcher.recorded is not None
    while not searcher._converged():
        searcher.recorded.append({GAIN: 0.0001, NOISE: 0.024})
        assert len(searcher.recorded) <= 81
    assert len(searcher.recorded) == 81  # trials 31..80: the first window clear of trial 30
    assert "asked up to trial 80 add up to 0.005" in searcher.pace.finished
    plain = create_study(StudySpec.from_dict({**data, "name": "p", "budget": {"trials": 9}}),
                         url, geometry=h.GEOMETRY)
    assert StudySearcher(plain, h.GEOMETRY).recorded is None
