"""`nas promote`: the linked study it writes, its rank agreement, its refusals, `nas status`.

Real SQLite and a real local Ray runtime. Most studies use the fake evaluator of
``study_helpers`` (its accuracy rises by 0.01 an epoch, so a promotion keeps the proxy ranking);
one trains for real, tiny.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h
from optuna.trial import TrialState
from scipy.stats import kendalltau, spearmanr

from nas_cli.main import main as nas_main
from studies import StudySpec, create_study, run_study
from studies.pareto import nondominated_mask, to_minimization
from studies.promote import fidelity, rank_agreement, select_trials
from studies.store import StudyKey, TrialKey

pytestmark = [pytest.mark.timeout(600)]
ray_local = h.ray_local
OBJECTIVES = ["accuracy", "params", "madds"]


def _study(tmp_path: Path, name: str = "src", trials: int = 6, **overrides: Any) -> str:
    """A finished study of the fake evaluator (named in the study, so promotion inherits it)."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        name, objectives=OBJECTIVES, budget={"trials": trials},
        evaluator="study_helpers:instant", **overrides))
    run_study(create_study(spec, url, geometry=h.GEOMETRY), progress=False)
    return url


def _snapshot(url: str) -> dict[str, Any]:
    """Every study in the database with its attributes and trials."""
    out = {}
    for s in optuna.get_all_study_summaries(url):
        study = optuna.load_study(study_name=s.study_name, storage=url)
        out[s.study_name] = (study.user_attrs, [(t.number, t.state, t.values, t.user_attrs)
                                                for t in study.trials])
    return out


# ----------------------------------------------------------------------------- pure parts
@pytest.mark.parametrize("pairs", [
    ([0.1, 0.4, 0.3, 0.9, 0.5], [0.2, 0.5, 0.6, 0.8, 0.1]),
    ([0.1, 0.1, 0.3, 0.3], [0.5, 0.4, 0.4, 0.9]),  # ties: tau-b
    ([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]),
])
def test_rank_agreement_is_scipys(pairs: tuple[list[float], list[float]]) -> None:
    tau, rho = rank_agreement(*pairs)
    assert tau == pytest.approx(kendalltau(*pairs).statistic)
    assert rho == pytest.approx(spearmanr(*pairs).statistic)


def test_rank_agreement_is_undefined_without_two_distinct_values() -> None:
    assert rank_agreement([0.5], [0.7]) == (None, None)
    assert rank_agreement([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]) == (None, None)
    with pytest.raises(ValueError, match="one length"):
        rank_agreement([0.1, 0.2], [0.3])


def _trial(number: int, values: list[float], params: dict[str, Any]) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(values=values, params=params, distributions={
        k: optuna.distributions.CategoricalDistribution(list(range(100))) for k in params})


def test_selection_spreads_over_the_front_and_the_dominated() -> None:
    # A front of 5 (accuracy up, params up) and 7 dominated below it; one repeat of trial 0.
    front = [_trial(i, [0.5 + 0.1 * i, 10.0 + i], {"a": i}) for i in range(5)]
    dominated = [_trial(5 + i, [0.3 + 0.02 * i, 20.0 + i], {"a": 5 + i}) for i in range(7)]
    repeat = _trial(12, [0.5, 10.0], {"a": 0})
    trials = [*front, *dominated, repeat]
    for number, t in enumerate(trials):
        t.number = number
    picked_front, picked_dominated = select_trials(trials, ["maximize", "minimize"], 0, 3)
    # Evenly spaced by accuracy rank, best first: ranks 0, 2, 4 of each group.
    assert [t.number for t in picked_front] == [4, 2, 0]
    assert [t.number for t in picked_dominated] == [11, 8, 5]
    every_front, every_dominated = select_trials(trials, ["maximize", "minimize"], 0, 10)
    assert sorted(t.number for t in every_front) == [0, 1, 2, 3, 4]  # the repeat left out
    assert len(every_dominated) == 7


def _promoted(number: int, source: int, proxy: float, accuracy: float,
              cost: dict[str, Any] | None) -> optuna.trial.FrozenTrial:
    attrs: dict[str, Any] = {TrialKey.SOURCE_TRIAL: source, TrialKey.SOURCE_VALUE: proxy}
    if cost is not None:
        attrs[TrialKey.COST] = cost
    t = optuna.trial.create_trial(values=[accuracy, 1.0, 1.0], user_attrs=attrs)
    t.number = number
    return t


def test_the_cost_alone_is_ranked_against_the_same_promoted_truth() -> None:
    # Four source trials, two seeds each: the truth is each one's mean promoted accuracy.
    rows = [  # source, proxy, promoted accuracies (2 seeds), params, madds
        (0, 0.50, (0.70, 0.74), 300, 1_000),
        (1, 0.60, (0.80, 0.78), 100, 9_000),
        (2, 0.40, (0.60, 0.66), 400, 5_000),
        (3, 0.55, (0.75, 0.73), 200, 7_000),
    ]
    trials = [_promoted(2 * i + k, src, proxy, acc[k], {"params": params, "madds": madds})
              for i, (src, proxy, acc, params, madds) in enumerate(rows) for k in (0, 1)]
    got = fidelity(trials, OBJECTIVES, epochs=8, task="digits", proxy_epochs=2)
    truth = [sum(acc) / 2 for _, _, acc, _, _ in rows]
    assert got["pairs"] == 4
    assert got["kendall_tau"] == pytest.approx(
        kendalltau([r[1] for r in rows], truth).statistic)
    assert got["params_kendall_tau"] == pytest.approx(
        kendalltau([r[3] for r in rows], truth).statistic)  # more params ranked higher
    assert got["madds_kendall_tau"] == pytest.approx(
        kendalltau([r[4] for r in rows], truth).statistic)
    assert got["params_kendall_tau"] == pytest.approx(-1.0)  # the truth's order reversed
    assert got["madds_kendall_tau"] == pytest.approx(2 / 3)  # 5 of 6
    # A pair whose promoted trial holds no cost (or not that count) leaves the baseline
    # undefined rather than ranking fewer pairs than the proxy's tau.
    trials[-1] = _promoted(7, 3, 0.55, 0.73, None)
    trials[-2] = _promoted(6, 3, 0.55, 0.75, None)
    got = fidelity(trials, OBJECTIVES, epochs=8, task="digits")
    assert got["pairs"] == 4 and got["params_kendall_tau"] is None
    assert got["madds_kendall_tau"] is None
    trials[-1] = _promoted(7, 3, 0.55, 0.73, {"params": 200})
    trials[-2] = _promoted(6, 3, 0.55, 0.75, {"params": 200})
    got = fidelity(trials, OBJECTIVES, epochs=8, task="digits")
    assert got["params_kendall_tau"] is not None and got["madds_kendall_tau"] is None
    # Equal costs rank nothing.
    same = [_promoted(i, i, 0.1 * i, 0.2 * i, {"params": 5, "madds": 5}) for i in range(3)]
    got = fidelity(same, OBJECTIVES, epochs=8, task="digits")
    assert got["params_kendall_tau"] is None and got["kendall_tau"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- promotion
@pytest.mark.slow
def test_promote_writes_a_linked_study(tmp_path: Path, ray_local: None,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    url = _study(tmp_path, constraints={"params_max": 1e6})
    source = optuna.load_study(study_name="src", storage=url)
    assert source.user_attrs[StudyKey.REFERENCE][1] == 1e6
    complete = [t for t in source.trials if t.state == TrialState.COMPLETE]
    capsys.readouterr()
    # The database names the evaluator: the promotion vouches for it.
    assert nas_main(["promote", "src", "--top", "2", "--epochs", "5", "--evaluator",
                     "study_helpers:instant", "--storage", url]) == 0
    out = capsys.readouterr().out

    promoted = optuna.load_study(study_name="src-promoted", storage=url)
    assert promoted.directions == source.directions
    assert promoted.user_attrs[StudyKey.PROMOTED_FROM] == "src"
    assert promoted.user_attrs[StudyKey.REFERENCE] == source.user_attrs[StudyKey.REFERENCE]
    assert optuna.load_study(study_name="src", storage=url).user_attrs[
        StudyKey.PROMOTIONS] == ["src-promoted"]
    trials = promoted.trials
    by_number = {t.number: t for t in complete}
    # The front (at most 2) and at most 2 dominated trials, a repeated architecture once,
    # retrained for 5 epochs.
    distinct = list({json.dumps(t.params, sort_keys=True): t for t in reversed(complete)
                     }.values())
    mask = nondominated_mask(to_minimization([t.values for t in distinct],
                                             ["maximize", "minimize", "minimize"]))
    front = {t.number for t, m in zip(distinct, mask, strict=True) if m}
    sources = [t.user_attrs[TrialKey.SOURCE_TRIAL] for t in trials]
    assert len(sources) == len(set(sources)) == min(2, len(front)) + min(
        2, len(distinct) - len(front))
    assert sum(n in front for n in sources) == min(2, len(front))
    for t in trials:
        proxy = by_number[t.user_attrs[TrialKey.SOURCE_TRIAL]]
        assert t.state == TrialState.COMPLETE and t.params == proxy.params
        assert t.user_attrs[TrialKey.SOURCE_VALUE] == proxy.values[0]
        assert t.user_attrs[TrialKey.TRAIN]["epochs"] == 5
        assert t.values[0] == pytest.approx(proxy.values[0] + 0.01 * (5 - 2))
        assert t.values[1:] == proxy.values[1:]

    proxies = [t.user_attrs[TrialKey.SOURCE_VALUE] for t in trials]
    final = [t.values[0] for t in trials]
    fidelity = promoted.user_attrs[StudyKey.FIDELITY]
    assert fidelity["pairs"] == len(trials) >= 2
    assert fidelity["kendall_tau"] == pytest.approx(kendalltau(proxies, final).statistic)
    assert fidelity["spearman_rho"] == pytest.approx(spearmanr(proxies, final).statistic)
    assert fidelity["kendall_tau"] == pytest.approx(1.0)  # the fake keeps the proxy's order
    assert (fidelity["epochs"], fidelity["task"], fidelity["proxy_epochs"]) == (5, "digits", 2)
    assert f"Kendall tau {fidelity['kendall_tau']:+.3f}" in out
    # The cost alone against the same promoted accuracy: the free baseline, stored and printed.
    costs = {key: [t.user_attrs[TrialKey.COST][key] for t in trials] for key in ("params",
                                                                                 "madds")}
    for key in ("params", "madds"):
        want = rank_agreement(costs[key], final)[0]
        assert fidelity[f"{key}_kendall_tau"] == (None if want is None else pytest.approx(want))
    shown = ["-" if fidelity[f"{k}_kendall_tau"] is None else f"{fidelity[f'{k}_kendall_tau']:+.3f}"
             for k in ("params", "madds")]
    assert (f"parameters Kendall tau {shown[0]}, MAdds Kendall tau {shown[1]}") in out
    assert f"over {len(trials)} pairs" in out
    assert "Pareto front of 'src-promoted'" in out

    # `nas status`: the source lists its promotion, the promoted study its source.
    assert nas_main(["status", "src", "--storage", url, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["promotions"] == [{"name": "src-promoted", **fidelity}]
    assert nas_main(["status", "src-promoted", "--storage", url, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["promoted_from"] == "src" and status["fidelity"] == fidelity
    assert nas_main(["status", "src", "--storage", url]) == 0
    assert "promoted as 'src-promoted' (5 epochs on 'digits'): Kendall tau" in (
        capsys.readouterr().out)

    # A second promotion takes the next free name (4x the study's epochs by default).
    assert nas_main(["promote", "src", "--top", "1", "--evaluator", "study_helpers:instant",
                     "--storage", url]) == 0
    again = optuna.load_study(study_name="src-promoted-2", storage=url)
    assert again.user_attrs[StudyKey.FIDELITY]["epochs"] == 8
    assert optuna.load_study(study_name="src", storage=url).user_attrs[
        StudyKey.PROMOTIONS] == ["src-promoted", "src-promoted-2"]


@pytest.mark.slow
def test_bad_promotions_write_nothing(tmp_path: Path, ray_local: None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    url = _study(tmp_path, trials=2)
    empty = StudySpec.from_dict(h.study_dict("empty", objectives=OBJECTIVES))
    create_study(empty, url, geometry=h.GEOMETRY)
    no_accuracy = StudySpec.from_dict(h.study_dict("costs", objectives=["params", "madds"]))
    create_study(no_accuracy, url, geometry=h.GEOMETRY)
    before = _snapshot(url)
    cases = [
        (["promote", "nope"], "'nope'"),
        (["promote", "src", "--top", "0"], "--top >= 1"),
        (["promote", "src", "--epochs", "0"], "--epochs >= 1"),
        (["promote", "src", "--epochs", "many"], "'many'"),
        (["promote", "src", "--task", "mnist"], "'mnist'"),
        # another kind: the trainable tasks of the family's kind and (the study trains with
        # its own evaluator) the cost-only geometries of that kind
        (["promote", "src", "--task", "synthetic-vqa"], "`--task` 'synthetic-vqa' is a vqa "
         "task, but study 'src' searches family 'vit', which needs an image task: one of "
         "['digits', 'image-folder', 'cifar', 'cifar100', 'imagenet']."),
        (["promote", "empty"], "no completed trials"),
        (["promote", "costs"], "no accuracy objective"),
    ]
    capsys.readouterr()
    for argv, fragment in cases:
        try:
            code = nas_main([*argv, "--storage", url])
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
        _, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and fragment in lines[0], (argv, err)
        assert "Traceback" not in err
    assert _snapshot(url) == before


#: A VQA space small enough to price at once (a promotion to ``vqa-files`` builds the task).
_VQA_SPACE: dict[str, Any] = {
    "name": "tiny-vqa",
    "base": {"family": "mcan", "d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 1,
             "decoder_layers": 1},
    "arch": {"groups": {"choices": [1, 2]}},
}


@pytest.mark.slow
def test_a_refusal_when_the_task_is_built_is_one_line(tmp_path: Path, ray_local: None,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What only building the promoted task finds (here ``vqa-files`` without its files) is
    refused in one line: the announcement waits for the run to start. Nothing is written."""
    monkeypatch.chdir(tmp_path)  # vqa-files' default root: a folder without its files
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "vq", objectives=OBJECTIVES, space=_VQA_SPACE, evaluator="study_helpers:instant",
        task={"name": "synthetic-vqa", "train_size": 20, "val_size": 10}))
    run = create_study(spec, url)
    for i in range(2):  # closed by hand: the promotion plans from completed trials
        trial = run.study.ask()
        run.space.suggest(trial)
        run.study.tell(trial, [0.5 + 0.1 * i, 1000.0 * (i + 1), 1000.0 * (i + 1)])
    before = _snapshot(url)
    capsys.readouterr()
    code = nas_main(["promote", "vq", "--task", "vqa-files", "--evaluator",
                     "study_helpers:instant", "--storage", url])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("nas promote: error: VQA questions file ") and "does not exist" in err
    assert _snapshot(url) == before


@pytest.mark.slow
def test_a_real_promotion_on_digits(tmp_path: Path, ray_local: None,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The real trainer end to end: 3 tiny ViTs for 1 short epoch, promoted to 2."""
    url = f"sqlite:///{tmp_path / 'real.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "real", objectives=OBJECTIVES, budget={"trials": 3}, fidelity={"epochs": 1},
        train={"batch_size": 64, "max_steps_per_epoch": 4}))
    run_study(create_study(spec, url), progress=False)
    capsys.readouterr()
    assert nas_main(["promote", "real", "--epochs", "2", "--storage", url]) == 0
    promoted = optuna.load_study(study_name="real-promoted", storage=url)
    done = [t for t in promoted.trials if t.state == TrialState.COMPLETE]
    assert done and all(t.user_attrs[TrialKey.TRAIN]["epochs"] == 2 for t in done)
    assert all(t.user_attrs[TrialKey.TRAIN]["max_steps_per_epoch"] == 4 for t in done)
    fidelity = promoted.user_attrs[StudyKey.FIDELITY]
    assert fidelity["pairs"] == len(done)
    expected = rank_agreement([t.user_attrs[TrialKey.SOURCE_VALUE] for t in done],
                              [t.values[0] for t in done])
    assert (fidelity["kendall_tau"], fidelity["spearman_rho"]) == expected
    assert "over" in capsys.readouterr().out
