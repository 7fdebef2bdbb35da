"""Plugins: a throw-away package registers a family and a knob through the entry point groups
``nas.families`` and ``nas.knobs``; ``nas cost``, ``nas train``, a smoke study and the yaml,
json and torch exports work on it. The package's module is the example of the plugins guide
(docs/guide/plugins.md), verbatim."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import study_helpers as h
import yaml
from optuna.trial import TrialState

from nas import registry
from nas.config import ArchConfig
from nas.errors import ConfigError
from nas_cli.main import main as nas_main
from studies import StudySpec, create_study, run_study

pytestmark = [pytest.mark.timeout(900)]

GUIDE = Path(__file__).parents[1] / "docs" / "guide" / "plugins.md"
ENTRY_POINTS = """\
[nas.families]
tinyenc = tinyenc

[nas.knobs]
pool_tokens = tinyenc:POOL_TOKENS
"""


def example_source() -> str:
    """The guide's one-file example family (the block after ``<!-- plugin: tinyenc.py -->``)."""
    text = GUIDE.read_text()
    match = re.search(r"<!-- plugin: tinyenc\.py -->\s*```python\n(.*?)```", text, re.S)
    assert match, "docs/guide/plugins.md lost its example plugin"
    return match.group(1)


def write_package(folder: Path, *, broken: bool = False) -> None:
    (folder / "tinyenc.py").write_text(example_source())
    info = folder / "tinyenc-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyenc\nVersion: 0.1\n")
    points = ENTRY_POINTS
    if broken:
        points += "\n[nas.families]\nbroken = tinyenc_missing_module\n"
    (info / "entry_points.txt").write_text(points)


def _install(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    state = registry._state()
    monkeypatch.syspath_prepend(str(folder))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), str(h.TESTS_DIR), *paths]))
    importlib.invalidate_caches()
    monkeypatch.setattr(registry, "_loaded", False)
    try:
        yield folder
    finally:
        registry._restore(state)
        sys.modules.pop("tinyenc", None)


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The package installed (on ``sys.path`` and ``PYTHONPATH``), the registry restored after."""
    write_package(tmp_path)
    yield from _install(tmp_path, monkeypatch)


def test_the_entry_points_register_the_family_its_presets_and_its_knob(plugin: Path) -> None:
    assert "tinyenc" in registry.family_names()
    assert [k.name for k in registry.plugin_knobs()] == ["pool_tokens"]
    config = ArchConfig.from_dict({"family": "tinyenc", "pool_tokens": 2})
    assert config.knob("pool_tokens") == 2 and config.to_dict()["pool_tokens"] == 2
    assert "pool_tokens" not in ArchConfig.from_dict({"family": "tinyenc"}).to_dict()
    assert ArchConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="pool_tokens <= 64"):
        config.replace(pool_tokens=65)
    with pytest.raises(ConfigError, match="does not apply to family 'vit'"):
        ArchConfig.from_dict({"family": "vit", "pool_tokens": 3})


def test_nas_cost_and_presets_on_the_plugin_family(plugin: Path, capsys) -> None:
    assert nas_main(["presets"]) == 0
    assert "tinyenc-wide" in capsys.readouterr().out
    assert nas_main(["cost", "tinyenc", "--set", "pool_tokens=2", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)
    assert (cost["family"], cost["task"]) == ("tinyenc", "cifar100")
    assert cost["params"] == sum(p["params"] for p in cost["parts"].values()) > 0
    assert set(cost["parts"]) == {"embedding", "backbone", "head"}
    assert nas_main(["cost", "tinyenc", "--set", "layer_sharing=(0x2)", "--json"]) == 0
    shared = json.loads(capsys.readouterr().out)
    assert shared["params"] < cost["params"] and shared["arch_id"] != cost["arch_id"]


def test_nas_train_on_the_plugin_family(plugin: Path, tmp_path: Path, capsys) -> None:
    assert nas_main(["train", "tinyenc", "--set", "d_model=32", "--set", "d_ff=64", "--task",
                     "digits", "--epochs", "1", "--out", str(tmp_path / "run"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["metric"] == "accuracy" and len(result["epochs"]) == 1
    assert 0.0 <= result["value"] <= 1.0


def test_a_broken_plugin_is_one_warning_line(tmp_path: Path, monkeypatch) -> None:
    write_package(tmp_path, broken=True)
    for _ in _install(tmp_path, monkeypatch):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert "tinyenc" in registry.family_names()  # the good one still loads
        lines = [str(w.message) for w in caught if "broken" in str(w.message)]
        assert len(lines) == 1 and "\n" not in lines[0]
        assert "'broken'" in lines[0] and "tinyenc_missing_module" in lines[0]
        with pytest.raises(ConfigError, match="plugin entry point 'broken' failed"):
            ArchConfig.from_dict({"family": "broken"})


def test_a_builder_that_returns_no_family_model_is_one_line() -> None:
    from torch import nn

    from nas.models import create_model

    state = registry._state()
    try:
        @registry.register_family("plainnet", task="cifar100",
                                  base={"d_model": 8, "heads": 1, "d_ff": 16})
        def build(config: ArchConfig, task: object, **kwargs: object) -> nn.Module:
            return nn.Linear(8, 8)

        with pytest.raises(ConfigError, match=r"'plainnet': its build returned a Linear, "
                                              r"not a nas\.models\.FamilyModel"):
            create_model(ArchConfig.from_dict({"family": "plainnet"}), device="meta")
    finally:
        registry._restore(state)


def test_a_registered_knob_may_not_name_a_built_in_family() -> None:
    from nas.knobs import Knob

    # Knob's families default to the five built-in ones, whose blocks would never read it.
    for families in ({}, {"families": ("tinyenc", "vit")}):
        with pytest.raises(ConfigError, match="built-in families"):
            registry.register_knob(Knob("dead_knob", "bool", "m", "p", dense=False, **families))
    assert "dead_knob" not in {k.name for k in registry.plugin_knobs()}


def test_a_search_space_draws_the_plugin_knob(plugin: Path) -> None:
    import optuna

    from search_spaces import SearchSpace

    base = {"family": "tinyenc", "d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 2,
            "patch_size": 8}
    space = SearchSpace.from_dict({"name": "s", "base": base,
                                   "arch": {"pool_tokens": {"low": 1, "high": 8}}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    drawn = set()
    for _ in range(12):
        trial = study.ask()
        config, _ = space.suggest(trial)
        assert config.knob("pool_tokens") == trial.params["pool_tokens"]
        assert space.params_for(config) == trial.params  # the way back, for enqueued trials
        drawn.add(trial.params["pool_tokens"])
    assert len(drawn) > 1 and drawn <= set(range(1, 9))
    # Its row's bounds and kind hold in a space as in a config.
    for arch, match in (({"pool_tokens": {"low": 1, "high": 65}}, "pool_tokens <= 64"),
                        ({"pool_tokens": {"choices": [True]}}, "integers"),
                        ({"pool_tokenz": {"choices": [1]}}, "Unknown arch knob 'pool_tokenz'")):
        with pytest.raises(ConfigError, match=match):
            SearchSpace.from_dict({"name": "s", "base": base, "arch": arch})


@pytest.mark.slow
def test_a_smoke_study_and_its_exports_on_the_plugin_family(plugin: Path, tmp_path: Path) -> None:
    import ray

    ray.shutdown()  # Ray workers must start with the plugin on their PYTHONPATH
    h.start_ray()
    try:
        space = {"name": "tinyenc-space",
                 "base": {"family": "tinyenc", "d_model": 32, "d_ff": 64, "heads": 2,
                          "encoder_layers": 2, "patch_size": 8},
                 "arch": {"groups": {"choices": [1, 2]}, "group_ffn": {"choices": [False, True]},
                          "pool_tokens": {"choices": [1, 4]}}}
        data = h.study_dict("plugin-smoke", space=space, smoke=True, budget={"trials": 2},
                            fidelity={"epochs": 1})
        data.pop("constraints", None)
        spec = StudySpec.from_dict(yaml.safe_load(yaml.safe_dump(data)))
        url = f"sqlite:///{tmp_path / 'studies.db'}"
        run_study(create_study(spec, url), progress=False)
    finally:
        ray.shutdown()
    trials = h.load(url, "plugin-smoke")
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 2, [(t.number, t.user_attrs.get("nas.reason")) for t in trials]
    assert all(t.user_attrs["nas.arch"]["family"] == "tinyenc" for t in done)
    for t in done:  # the plugin's knob was searched: drawn by Optuna, stored in the trial's arch
        arch = ArchConfig.from_dict(t.user_attrs["nas.arch"])
        assert arch.knob("pool_tokens") == t.params["pool_tokens"] in (1, 4)
    number = done[0].number
    for fmt in ("yaml", "json", "torch"):
        out = tmp_path / fmt
        assert nas_main(["export", "plugin-smoke", "--trial", str(number), "--format", fmt,
                         "--out", str(out), "--storage", url]) == 0
        assert any(out.iterdir())
    record = json.loads((tmp_path / "json" / f"trial-{number}.json").read_text())
    assert record["arch"]["family"] == "tinyenc"
    script = subprocess.run([sys.executable, str(tmp_path / "torch" / f"trial-{number}.py")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert script.returncode == 0 and "output (2, 10)" in script.stdout, script.stderr
    # the dashboard: its data over the study, the app, the formats it offers for the family
    from dashboard import create_app
    from dashboard.data import load_study, open_readonly, study_info
    from dashboard.pages._common import formats as _formats

    engine = open_readonly(url)
    data = load_study(engine, study_info(engine, "plugin-smoke"))
    engine.dispose()
    assert data is not None
    assert create_app(url) is not None
    assert _formats("tinyenc") == ["yaml", "json", "torch"]
