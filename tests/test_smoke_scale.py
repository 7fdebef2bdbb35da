"""The study key ``smoke``: every shipped space, paper scale included, trains on a CPU in
seconds per trial, and what a trial records is the shrunk network it trained."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import study_helpers as h
import yaml
from optuna.trial import TrialState

from nas.config import ArchConfig
from nas.errors import ConfigError
from nas.loading import load_arch
from search_spaces import load_space
from studies import StudySpec, create_study, run_study
from studies.smoke import Smoke, parse_smoke

pytestmark = [pytest.mark.timeout(900)]
ray_local = h.ray_local

SHIPPED = sorted(p.stem for p in (Path(__file__).parents[1] / "search_spaces").glob("*.yaml"))
#: The proxy task each family trains on here (no dataset download).
PROXY = {"mcan": "synthetic-vqa", "lxmert": "synthetic-vqa", "ort": "synthetic-captions",
         "vit": "digits", "swin": "digits"}


# ----------------------------------------------------------------------------- the key
def test_the_key_reads_true_false_and_a_mapping() -> None:
    assert parse_smoke(None) is None and parse_smoke(False) is None
    assert parse_smoke(True) == Smoke()
    assert parse_smoke({"width": 32}) == Smoke(width=32, depth=2, steps=10)


@pytest.mark.parametrize(("value", "message"), [
    ({"widht": 32}, "Unknown key 'widht' in study `smoke`"),
    ({"depth": 0}, "`smoke.depth` must lie in [1, 64]"),
    ({"steps": 2.5}, "`smoke.steps` must be an integer"),
    ("yes", "`smoke` must be true, false or a mapping"),
])
def test_a_bad_smoke_key_is_refused_in_one_line(value: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        StudySpec.from_dict(h.study_dict("bad", smoke=value))
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("preset", ["mcan-small", "lw-3x", "acort-base", "lxmert",
                                    "lw-lxmert-1x", "deit-tiny", "lw-swin-tiny", "swin-tiny"])
def test_shrinking_keeps_the_knobs_and_caps_width_and_depth(preset: str) -> None:
    config, smoke = load_arch(preset), Smoke(width=64, depth=2)
    small = smoke.shrink(config)
    assert small.d_model <= 64 and small.d_model % small.heads == 0
    assert small.d_model % small.groups == 0 and small.d_ff % small.groups == 0
    assert all(depth <= 2 for depth in small.stacks.values())
    assert small.depths is None or max(small.depths) <= 2
    kept = ("family", "heads", "groups", "group_attention", "group_ffn", "weight_sharing",
            "qk_multiplier", "attention_sharing", "radix_base", "patch_size")
    assert {k: getattr(small, k) for k in kept} == {k: getattr(config, k) for k in kept}
    # a shared stack stays shared: (0x3,1x3) keeps its first two entries, (0,0)
    for stack in config.stacks:
        full, cut = config.sharing_pattern(stack), small.sharing_pattern(stack)
        assert cut == full[:2] or cut == tuple(range(len(cut)))
        assert len(set(cut)) == len(set(full[:2]))
    assert smoke.shrink(small) == small  # already within the caps


def test_the_steps_cap_keeps_a_smaller_one_of_the_study() -> None:
    assert Smoke(steps=10).train({"lr": 1e-3})["max_steps_per_epoch"] == 10
    assert Smoke(steps=10).train({"max_steps_per_epoch": 4})["max_steps_per_epoch"] == 4


def _settings(task: str, **study: object) -> dict[str, object]:
    from studies._trials import base_settings

    return base_settings(StudySpec.from_dict({
        "name": "s", "task": task, "space": "lw_transformer", "objectives": ["accuracy"],
        "budget": {"trials": 1}, "fidelity": {"epochs": 4}, **study}))


def test_a_smoke_vqa_trial_starts_from_the_measured_proxy_and_the_study_still_decides() -> None:
    """``SMOKE_TRAIN`` sits over the task's quick defaults in a smoke study only, and under the
    study's own ``train``."""
    from trainers.config import quick_defaults

    smoke = _settings("synthetic-vqa", smoke=True)
    assert {k: smoke[k] for k in ("batch_size", "schedule", "warmup_epochs", "lr")} == {
        "batch_size": 16, "schedule": "constant", "warmup_epochs": 0.0, "lr": 1e-3}
    full = _settings("synthetic-vqa")
    assert full["batch_size"] == quick_defaults("synthetic-vqa")["batch_size"] == 64
    assert "schedule" not in full and "warmup_epochs" not in full  # the trainer's cosine
    own = _settings("synthetic-vqa", smoke=True, train={"batch_size": 32, "warmup_epochs": 1})
    assert (own["batch_size"], own["warmup_epochs"], own["schedule"]) == (32, 1, "constant")
    other = _settings("synthetic-captions", smoke=True)  # no measured proxy: the task's own
    assert other["batch_size"] == quick_defaults("synthetic-captions")["batch_size"]
    assert "schedule" not in other


# ----------------------------------------------------------------------------- every space
@pytest.mark.slow
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("space", SHIPPED)
def test_every_shipped_space_trains_at_smoke_scale_on_a_cpu(space: str, tmp_path: Path) -> None:
    family = load_space(space).base_config.family
    data = h.study_dict(f"smoke-{space}", task=PROXY[family], space=space, smoke=True,
                        budget={"trials": 2}, fidelity={"epochs": 1}, sampler={"name": "random"})
    data.pop("constraints", None)
    spec = StudySpec.from_dict(yaml.safe_load(yaml.safe_dump(data)))
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    start = time.perf_counter()
    run = create_study(spec, url)
    run_study(run, progress=False)
    seconds = time.perf_counter() - start
    trials = h.load(url, spec.name)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 2, [(t.number, t.user_attrs.get("nas.reason")) for t in trials]
    for t in done:
        arch = ArchConfig.from_dict(t.user_attrs["nas.arch"])
        assert arch.d_model <= 64 and all(d <= 2 for d in arch.stacks.values())
        assert t.user_attrs["nas.train"]["max_steps_per_epoch"] == 10
        assert t.user_attrs["nas.cost"]["params"] == t.values[1]
    print(f"{space}: 2 smoke trials in {seconds:.0f} s")  # shown with -s; no timing asserted
