"""The dashboard's study page on a 10,000-trial study, next to optuna-dashboard's API.

    python benchmarks/dashboard.py [--trials 10000] [--repeats 3] [--db PATH]

Builds a study shaped like the engine's (LW-Transformer's space on MCAN-small: knobs drawn by
the real ``SearchSpace.suggest``, every ``nas.*`` trial attribute, per-epoch rows in
``nas_epochs``; completed, early-stopped, constraint-rejected, failed and running trials) by
bulk-inserting straight into Optuna's tables in one transaction. Costs come from a made-up
formula (``nas cost`` takes 0.4 s per architecture here), not the cost model.

Then, side by side in one run, interleaved (so both see the same load on the machine), each
``--repeats`` times on a fresh app (nothing cached), reported as median, min and max:
- the dashboard: the first full render of the study page, i.e. every callback the browser fires
  when it opens ``/study/<name>``, sent through Flask's test client exactly as the browser sends
  them (the page route with the 2-D front, the summary, the open view (hypervolume history),
  the selection, the trial table's first page and the comparison; the other views are tabs,
  computed when opened); also every view through the data, analysis and figure functions
  without Dash;
- optuna-dashboard (if installed: ``pip install optuna-dashboard``): ``GET
  /api/studies/<id>?after=0`` through a test client of ``optuna_dashboard.wsgi(storage)``, the
  request its front end makes to show a study;
- for scale, ``optuna.load_study(...).best_trials``;
- in headless Chromium (Selenium; skipped without Chromium and chromedriver, or with
  ``--no-browser``): the seconds from navigating to the study page until its Pareto front is
  drawn (a plotly graph holding points), for the dashboard (``#pareto-2d``) and for
  optuna-dashboard (``#graph-pareto-front`` on ``/dashboard/studies/<id>``), each server fresh
  for every load (nothing cached on the server), interleaved, with the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import sqlalchemy as sa
from optuna.distributions import CategoricalDistribution, distribution_to_json
from optuna.trial import FixedTrial

from search_spaces import load_space
from studies.spec import StudySpec
from studies.store import STATE_OF, Status, StudyKey, TrialKey, epochs_table
from studies.store.storage import open_storage

NAME = "lw-transformer-10k"
# Outcomes of the trials that pass the constraint (about 12% break it and are rejected).
STATES = ((Status.COMPLETED, 0.78), (Status.STOPPED, 0.16), (Status.FAILED, 0.06))
PARAMS_MAX = 78e6


def _fake_cost(arch: dict[str, Any]) -> dict[str, Any]:
    """A plausible MCAN-small cost: group-wise layers divide their part by k, WS divides again."""
    k = arch["groups"]
    attn = 4 * 512 * 512 * (1 + (arch["qk_multiplier"] - 1) / 2)
    ffn = 2 * 512 * 2048.0
    if arch["group_attention"]:
        attn /= k * (k if arch["weight_sharing"] else 1)
    if arch["group_ffn"]:
        ffn /= k * (k if arch["weight_sharing"] else 1)
    if arch["group_merge"]:
        attn *= 0.9
    if arch["group_intermediate"]:
        ffn *= 0.85
    backbone = int(18 * (attn + ffn))
    embedding, head = 6_800_000, 3_300_000
    tokens = 114
    parts = {"backbone": backbone, "embedding": embedding, "head": head}
    out = {p: {"params": v, "params_matrix": int(v * 0.99), "madds": v * tokens}
           for p, v in parts.items()}
    total = sum(parts.values())
    return {"params": total, "params_matrix": sum(p["params_matrix"] for p in out.values()),
            "madds": total * tokens, "parts": out}


def build_study(path: Path, n_trials: int, seed: int = 0) -> str:
    """Write a ``n_trials``-trial study into the SQLite file ``path``; its storage URL."""
    url = f"sqlite:///{path}"
    space = load_space("lw_transformer")
    spec = StudySpec.from_dict({
        "name": NAME, "task": "vqa2", "space": "lw_transformer",
        "objectives": [{"name": "accuracy"}, {"name": "params"}, {"name": "madds"}],
        "constraints": {"params_max": PARAMS_MAX}, "sampler": {"name": "nsga2"},
        "budget": {"trials": n_trials}, "fidelity": {"epochs": 4, "early_stopping": "asha"},
        "seed": seed})
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name=NAME, directions=spec.directions)
    study.set_user_attr(StudyKey.SPEC, spec.to_dict())
    study.set_user_attr(StudyKey.SPACE, space.to_dict())
    study.set_user_attr(StudyKey.SPACE_HASH, space.hash)
    study.set_user_attr(StudyKey.OBJECTIVES, spec.objective_names)
    study_id = study._study_id
    rng = np.random.default_rng(seed)
    arch_dists = {k: d.to_dict() for k, d in space.arch.items()}
    suggested: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
    meta = sa.MetaData()
    meta.reflect(storage.engine)
    tables = meta.tables
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in (
        "trials", "trial_params", "trial_values", "trial_user_attributes",
        "trial_intermediate_values", epochs_table.name)}
    start = datetime(2025, 1, 1)
    statuses = rng.choice([s for s, _ in STATES], size=n_trials, p=[p for _, p in STATES])
    for number in range(n_trials):
        trial_id = number + 1
        draw = {k: d["choices"][rng.integers(len(d["choices"]))] for k, d in arch_dists.items()}
        key = tuple(draw.items())
        if key not in suggested:
            fixed = FixedTrial({**draw, "lr": 1e-3, "dropout": 0.1})
            config, _ = space.suggest(fixed)
            dists = dict(fixed.distributions)
            knobs = {k: fixed.params[k] for k in dists if k not in ("lr", "dropout")}
            suggested[key] = (config.to_dict(), knobs, dists)
        arch, knobs, dists = suggested[key]
        train = {"lr": float(math.exp(rng.uniform(math.log(1e-4), math.log(3e-3)))),
                 "dropout": float(rng.uniform(0.0, 0.3))}
        cost = _fake_cost(arch)
        status = str(statuses[number])
        if cost["params"] > PARAMS_MAX:
            status = Status.REJECTED
        elif number >= n_trials - 4:  # the last few still train
            status = "running"
        accuracy = (0.62 + 0.03 * math.log(cost["params"] / 1e7)
                    - 0.02 * abs(math.log(train["lr"] / 8e-4)) - 0.05 * train["dropout"]
                    + float(rng.normal(0, 0.004)))
        epochs = {Status.COMPLETED: 4, Status.STOPPED: int(rng.integers(1, 3)), Status.FAILED: 1,
                  Status.REJECTED: 0, "running": 2}[status]
        began = start + timedelta(seconds=30 * number)
        state = {**STATE_OF, "running": "RUNNING"}[status]
        rows["trials"].append({
            "trial_id": trial_id, "number": number, "study_id": study_id, "state": state,
            "datetime_start": began,
            "datetime_complete": None if state == "RUNNING" else began + timedelta(seconds=25)})
        for name, value in {**knobs, **train}.items():
            dist = dists[name]
            internal = (dist.to_internal_repr(value) if isinstance(dist, CategoricalDistribution)
                        else float(value))
            rows["trial_params"].append({
                "trial_id": trial_id, "param_name": name, "param_value": internal,
                "distribution_json": distribution_to_json(dist)})
        if state == "COMPLETE":
            for i, v in enumerate((accuracy, cost["params"], cost["madds"])):
                rows["trial_values"].append({"trial_id": trial_id, "objective": i,
                                             "value": float(v), "value_type": "FINITE"})
        attrs: dict[str, Any] = {
            TrialKey.ARCH: arch, TrialKey.ARCH_ID: f"{abs(hash(key)) % 16**12:012x}",
            TrialKey.COST: cost, TrialKey.TRAIN: {"epochs": 4, "seed": seed, **train},
            TrialKey.STATUS: status}
        if status != "running":
            attrs.update({TrialKey.EPOCHS_REACHED: epochs, TrialKey.SECONDS: 25.0,
                          TrialKey.NODE: "node-1", TrialKey.SAMPLES_PER_SECOND: 900.0})
        if status == Status.REJECTED:
            attrs[TrialKey.REASON] = (f"params {cost['params']:,} breaks "
                                      f"params_max={PARAMS_MAX:,.0f}")
        elif status == Status.FAILED:
            attrs[TrialKey.REASON] = "loss became nan at epoch 1, step 12"
        for k, v in attrs.items():
            rows["trial_user_attributes"].append({"trial_id": trial_id, "key": k,
                                                  "value_json": json.dumps(v)})
        for e in range(1, epochs + 1):
            value = accuracy * (0.7 + 0.3 * e / 4)
            rows["trial_intermediate_values"].append({
                "trial_id": trial_id, "step": e, "intermediate_value": value,
                "intermediate_value_type": "FINITE"})
            rows[epochs_table.name].append({
                "study_name": NAME, "trial_number": number, "epoch": e,
                "train_loss": 2.0 / e, "metric": "vqa_accuracy", "value": value,
                "seconds": 6.0, "extra": "{}"})
    with storage.engine.begin() as conn:
        for name, batch in rows.items():
            table = epochs_table if name == epochs_table.name else tables[name]
            conn.execute(table.insert(), batch)
    storage.engine.dispose()
    return url


# ----------------------------------------------------------------------------- timing
def _dashboard_render(url: str) -> tuple[float, list[Any]]:
    """A fresh app (empty caches), then the study page's first render through Flask."""
    from dashboard import create_app
    from dashboard.layout import study_href
    from dashboard.testing import first_render

    app = create_app(url)
    client = app.server.test_client()
    started = time.perf_counter()
    results = first_render(client, app, study_href(NAME))
    seconds = time.perf_counter() - started
    failed = [r for r in results if r.status != 200]
    if failed:
        raise RuntimeError(f"{failed[0].output}: HTTP {failed[0].status}")
    return seconds, results


def _direct_render(url: str) -> float:
    """The same views through the data, analysis and figure functions, without Dash."""
    import plotly.io.json

    from dashboard import figures
    from dashboard.analysis import StudyView
    from dashboard.data import fingerprint, load_study, open_readonly, study_info

    engine = open_readonly(url)
    started = time.perf_counter()
    info = study_info(engine, NAME)
    view = StudyView(load_study(engine, info, fingerprint(engine, info.study_id, info.name)))
    data = view.data
    labels = figures.hover_labels(data)
    made = [figures.pareto_2d(data, "params", "accuracy", view.front, labels=labels),
            figures.pareto_3d(data, view.front, labels=labels),
            figures.hypervolume_history(*view.curve),
            figures.parallel_coordinates(data), figures.importance(view.importances),
            figures.knob_effect(data, "groups", "accuracy")]
    for fig in made:
        plotly.io.json.to_json_plotly(fig)
    view.table.head(25)
    seconds = time.perf_counter() - started
    engine.dispose()
    return seconds


def _optuna_dashboard(url: str) -> tuple[float, int] | None:
    """A fresh optuna-dashboard app, then ``GET /api/studies/<id>?after=0``."""
    try:
        import optuna_dashboard
        from werkzeug.test import Client
    except ImportError:
        return None
    storage = optuna.storages.RDBStorage(url)
    study_id = storage.get_study_id_from_name(NAME)
    client = Client(optuna_dashboard.wsgi(storage))
    started = time.perf_counter()
    response = client.get(f"/api/studies/{study_id}?after=0")
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"optuna-dashboard: HTTP {response.status_code}")
    return seconds, len(response.data)


# Installed before any page script: polls until the plotly graph under ``selector`` holds
# points and has drawn its SVG frame, then records the time since navigation started.
_DRAWN_PROBE = """
window.__drawn = null;
const poll = () => {
  const el = document.querySelector(%s);
  const gd = el && (el.classList.contains('js-plotly-plot') ? el
                    : el.querySelector('.js-plotly-plot'));
  if (gd && gd._fullData && gd._fullData.some(t => t.x && t.x.length > 0)
      && gd.querySelector('.main-svg')) {
    window.__drawn = performance.now();
  } else {
    setTimeout(poll, 10);
  }
};
poll();
"""


# A server in its own process (requests a page left running must not slow the next one):
# builds the WSGI app, prints its port once listening, serves until killed.
_SERVER = """
import logging, sys
from werkzeug.serving import make_server
url, which = sys.argv[1], sys.argv[2]
if which == "ours":
    from dashboard import create_app
    app = create_app(url).server
else:
    import optuna, optuna_dashboard
    app = optuna_dashboard.wsgi(optuna.storages.RDBStorage(url))
logging.getLogger("werkzeug").setLevel(logging.ERROR)
httpd = make_server("127.0.0.1", 0, app, threaded=True)
print(httpd.server_port, flush=True)
httpd.serve_forever()
"""


def _serve(url: str, which: str) -> tuple[Any, str]:
    """A fresh server (``ours`` or optuna-dashboard's) for ``url`` in a subprocess:
    (process, base URL)."""
    import subprocess

    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen([sys.executable, "-c", _SERVER, url, which], cwd=root, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port.isdigit():
        process.kill()
        raise RuntimeError(f"the {which} server did not start")
    return process, f"http://127.0.0.1:{port}"


def _stop(process: Any) -> None:
    process.kill()
    process.wait(timeout=30)


def _chromium() -> Any:
    """A headless Chromium driven by Selenium, or None when either is missing."""
    import shutil

    binary = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                               shutil.which("google-chrome")) if p), None)
    driver_path = shutil.which("chromedriver")
    try:
        from selenium import webdriver
    except ImportError:
        return None
    if binary is None or driver_path is None:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--disable-background-networking"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(300)
    return driver


def _front_drawn(driver: Any, page: str, selector: str, timeout: float = 300.0) -> float:
    """Seconds from navigating to ``page`` until the plotly graph at ``selector`` is drawn."""
    script = _DRAWN_PROBE % json.dumps(selector)
    handle = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": script})
    try:
        driver.get("about:blank")
        driver.get(page)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # performance.now() counts from the navigation's start (the document's timeOrigin)
            drawn = driver.execute_script("return window.__drawn")
            if drawn is not None:
                return float(drawn) / 1000.0
            time.sleep(0.05)
        raise RuntimeError(f"{page}: the front at {selector} was not drawn in {timeout:.0f} s")
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                               {"identifier": handle["identifier"]})


def _browser_fronts(url: str, repeats: int) -> tuple[list[float], list[float]] | None:
    """(dashboard, optuna-dashboard) seconds until the front is drawn, each load on a fresh
    server; None without Chromium. optuna-dashboard's list is empty when it is missing."""
    import importlib.util

    driver = _chromium()
    if driver is None:
        return None
    from dashboard.layout import study_href

    installed = importlib.util.find_spec("optuna_dashboard") is not None
    study_id = optuna.storages.RDBStorage(url).get_study_id_from_name(NAME)
    ours: list[float] = []
    theirs: list[float] = []
    try:
        for _ in range(repeats):
            process, base = _serve(url, "ours")
            try:
                ours.append(_front_drawn(driver, base + study_href(NAME), "#pareto-2d"))
            finally:
                _stop(process)
            if installed:
                process, base = _serve(url, "optuna-dashboard")
                try:
                    theirs.append(_front_drawn(driver, f"{base}/dashboard/studies/{study_id}",
                                               "#graph-pareto-front"))
                finally:
                    _stop(process)
    finally:
        driver.quit()
    return ours, theirs


def _best_trials(url: str) -> float:
    started = time.perf_counter()
    assert optuna.load_study(study_name=NAME, storage=url).best_trials
    return time.perf_counter() - started


def _runs(label: str, times: list[float]) -> str:
    return (f"  {label:<46} median {statistics.median(times):6.2f} s  (min {min(times):.2f}, "
            f"max {max(times):.2f}; runs {', '.join(f'{t:.2f}' for t in times)})")


def _print_browser(url: str, repeats: int) -> None:
    fronts = _browser_fronts(url, repeats)
    print("\nin headless Chromium, from navigation until the Pareto front is drawn (a fresh "
          "server for every load):")
    if fronts is None:
        print("  Chromium, chromedriver or selenium is missing: skipped")
        return
    ours, theirs = fronts
    print(_runs("dashboard: #pareto-2d", ours))
    if not theirs:
        print("  optuna-dashboard is not installed (pip install optuna-dashboard): skipped")
        return
    print(_runs("optuna-dashboard: #graph-pareto-front", theirs))
    ratio = statistics.median(ours) / statistics.median(theirs)
    verdict = "meets" if statistics.median(ours) <= 2.0 and ratio < 1 else "misses"
    print(f"  ratio dashboard / optuna-dashboard (medians): {ratio:.2f}")
    print(f"target (the front drawn within 2 s, before optuna-dashboard's): {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed runs of each (each on a fresh app: nothing cached)")
    parser.add_argument("--db", default=None, help="SQLite file to create (default: a temp file)")
    parser.add_argument("--no-browser", action="store_true",
                        help="skip the in-browser measurement of the front")
    args = parser.parse_args(argv)
    # Run as a script, this file's folder comes first on the import path and its name would
    # shadow the `dashboard` package it measures.
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != here]

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "bench.db"
        for old in path.parent.glob(path.name + "*"):
            old.unlink()
        t0 = time.perf_counter()
        url = build_study(path, args.trials)
        print(f"built a {args.trials:,}-trial study in {time.perf_counter() - t0:.1f} s "
              f"({path.stat().st_size / 1e6:.1f} MB)")
        ours: list[float] = []
        direct: list[float] = []
        theirs: list[float] = []
        size = 0
        results: list[Any] = []
        for _ in range(args.repeats):  # interleaved, so both see the same machine load
            seconds, results = _dashboard_render(url)
            ours.append(seconds)
            direct.append(_direct_render(url))
            other = _optuna_dashboard(url)
            if other is not None:
                theirs.append(other[0])
                size = other[1]
        total = sum(r.size for r in results)
        print(f"\nstudy page, first render (every callback the browser fires on opening it, "
              f"through Flask's test client; {total / 1e6:.1f} MB of JSON):")
        print(_runs("dashboard (fresh app each run)", ours))
        print("    last run by callback: " + ", ".join(
            f"{r.output.strip('.').split('.')[0]} {r.seconds:.2f}" for r in results))
        print(_runs("dashboard views without Dash (data+figures)", direct))
        if theirs:
            import optuna_dashboard

            print(_runs(f"optuna-dashboard {optuna_dashboard.__version__} API "
                        f"({size / 1e6:.1f} MB)", theirs))
        else:
            print("  optuna-dashboard is not installed (pip install optuna-dashboard): skipped")
        print(_runs("optuna.load_study(...).best_trials", [_best_trials(url)
                                                            for _ in range(2)]))
        ours_median = statistics.median(ours)
        verdict = ("meets" if ours_median <= 2.0
                   and (not theirs or max(ours) <= min(theirs)) else "misses")
        print(f"\ntarget (the study page within 2 s, no slower than optuna-dashboard): {verdict}"
              f" (dashboard median {ours_median:.2f} s, slowest {max(ours):.2f} s"
              + (f"; optuna-dashboard fastest {min(theirs):.2f} s)" if theirs else ")"))
        if not args.no_browser:
            _print_browser(url, args.repeats)
        print(f"load average during the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
              f"on {os.cpu_count()} CPUs (other work on the machine slows both sides)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
