"""The dashboard end to end in headless Chromium (Selenium), on a study the engine produced.

The study is made by ``studies.create_study`` + ``studies.run_study`` on local Ray, with a fake
trainer (``dashboard_helpers.make_evaluator``): completed, early-stopped (ASHA), failed and
constraint-rejected trials, written by the engine itself. The app runs in a real server thread.
Screenshots go to ``artifacts/screenshots/`` for a reviewer. Skipped, with the reason, when
Chromium, its driver or Selenium is missing (``.ci/system-deps.sh`` installs the first two).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from dashboard_helpers import GEOMETRY, OBJECTIVES, SPACE, make_evaluator, params_limit
from optuna.trial import TrialState

from dashboard import create_app
from nas.config import ArchConfig
from studies import StudySpec, create_study, run_study

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                "(pip install selenium; the test extra has it)")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "artifacts" / "screenshots"
EVIL = "<script>alert(1)</script>"
NAME = "browser-study"
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def study_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A study run by the engine on Ray, plus a study with a hostile name made by Optuna."""
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("Chromium or chromedriver is not installed (apt-get install chromium "
                    "chromium-driver; .ci/system-deps.sh does it)")
    url = f"sqlite:///{tmp_path_factory.mktemp('browser') / 'studies.db'}"
    spec = StudySpec.from_dict({
        "name": NAME, "task": "digits", "space": SPACE, "objectives": OBJECTIVES,
        "constraints": {"params_max": params_limit()}, "sampler": {"name": "random"},
        "budget": {"trials": 10}, "seed": 3, "resources": {"cpu": 1},
        "fidelity": {"epochs": 3, "early_stopping": "asha", "grace_epochs": 1,
                     "reduction_factor": 2}})
    run = create_study(spec, url, geometry=GEOMETRY)
    evaluator = make_evaluator({"groups": 2, "group_ffn": True, "attention_sharing": "none"})
    run_study(run, evaluator=evaluator, geometry=GEOMETRY, progress=False)
    evil = optuna.create_study(storage=url, study_name=EVIL, directions=["maximize"])
    evil.set_user_attr("nas.objectives", ["accuracy"])
    evil.add_trial(optuna.trial.create_trial(
        params={"note": "<img src=x onerror=alert(2)>"}, values=[0.5],
        distributions={"note": optuna.distributions.CategoricalDistribution(
            ["<img src=x onerror=alert(2)>"])}))
    return url


@pytest.fixture(scope="module")
def server(study_url: str) -> Iterator[str]:
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    app = create_app(study_url, refresh_seconds=1)
    httpd = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(server: str, downloads: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=DRIVER))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                           {"behavior": "allow", "downloadPath": str(downloads)})
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(predicate: Callable[[], Any], what: str, timeout: float = 45.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the page is still rendering
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def _shot(driver: Any, name: str, height: int | None = None) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    if height is not None:
        driver.set_window_size(1400, height)
        time.sleep(1.0)  # let plotly resize
    path = SHOTS / name
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def _study_path(name: str) -> str:
    return "/study/" + urllib.parse.quote(name, safe="")


# The traces as plotly.js holds them once drawn (``_fullData``: typed arrays decoded).
_TRACES = """
const gd = document.querySelector('#pareto-2d .js-plotly-plot');
if (!gd || !gd._fullData || !gd._fullData.length) return null;
return gd._fullData.map(t => ({name: t.name, n: t.x.length, x: Array.from(t.x),
                               y: Array.from(t.y), trials: Array.from(t.customdata)}));
"""


# The SVG points of the front's trace, each with its index in the trace (d3 data on the nodes).
_FRONT_POINTS = """
const gd = document.querySelector('#pareto-2d .js-plotly-plot');
for (const g of gd.querySelectorAll('.scatterlayer .trace')) {
  const cd = g.__data__;
  if (cd && cd[0] && cd[0].trace && cd[0].trace.name.startsWith('Pareto-optimal')) {
    return Array.from(g.querySelectorAll('path.point')).map(p => [p, p.__data__.i]);
  }
}
return null;
"""


def test_study_page_front_click_and_download(browser: Any, server: str, study_url: str,
                                             downloads: Path) -> None:
    study = optuna.load_study(study_name=NAME, storage=study_url)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    front = {t.number for t in study.best_trials}
    rejected = [t for t in trials if t.user_attrs.get("nas.status") == "rejected"]
    assert complete and front

    browser.get(server + "/")
    _wait(lambda: NAME in browser.find_element(By.ID, "studies-list").text, "the studies list")
    assert EVIL in browser.find_element(By.ID, "studies-list").text
    _shot(browser, "01-studies.png")

    browser.get(server + _study_path(NAME))
    traces = _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    counts = {t["name"].split(" (")[0]: t["n"] for t in traces}
    assert counts == {"dominated": len(complete) - len(front), "Pareto-optimal": len(front),
                      "rejected by a constraint": len(rejected)}
    assert set(traces[1]["trials"]) == front
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-table td"), "the trial table")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#importance .bars .point"),
          "the importance chart", timeout=20)

    # Click the first point of the front: its trial page opens (without a page reload).
    browser.execute_script("window.__probe = 'same page'")
    points = _wait(lambda: browser.execute_script(_FRONT_POINTS), "the front's points")
    assert len(points) == len(front)
    point, index = points[0]
    here = (traces[1]["x"][index], traces[1]["y"][index])
    same_spot = {n for x, y, n in zip(traces[1]["x"], traces[1]["y"], traces[1]["trials"],
                                      strict=True) if (x, y) == here}
    ActionChains(browser).move_to_element(point).pause(0.5).click().perform()
    _wait(lambda: "/trial/" in browser.current_url, "the trial page to open")
    number = int(_wait(lambda: browser.find_element(By.ID, "trial-number").text,
                       "the trial number"))
    assert number in same_spot
    assert browser.execute_script("return window.__probe") == "same page"
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-curves .scatterlayer .trace"),
          "the epoch curves")
    assert "backbone" in browser.find_element(By.ID, "trial-cost").text
    _shot(browser, "03-trial.png", height=2000)

    # The yaml export downloads a config that builds this trial's architecture.
    browser.find_element(By.XPATH, "//button[text()='yaml']").click()
    target = downloads / f"trial-{number}.yaml"
    _wait(target.exists, f"{target.name} to download")
    doc = yaml.safe_load(_wait(target.read_text, "the download to finish"))
    stored = study.trials[number].user_attrs
    assert ArchConfig.from_dict(doc["arch"]).arch_id == stored["nas.arch_id"]
    assert doc["arch"] == stored["nas.arch"]
    assert doc["provenance"]["study"] == NAME and doc["provenance"]["trial"] == number
    _wait(lambda: "Downloaded" in browser.find_element(By.ID, "trial-message").text,
          "the download message")
    _shot(browser, "04-trial-downloaded.png")

    browser.get(server + _study_path(NAME))  # the whole study page, for the reviewer
    _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-table td"), "the trial table")
    _shot(browser, "02-study.png", height=4400)
    browser.set_window_size(1400, 1000)


def test_hostile_study_name_shows_as_text(browser: Any, server: str) -> None:
    browser.get(server + _study_path(EVIL))
    shown = _wait(lambda: browser.find_element(By.ID, "study-name").text, "the study name")
    assert shown == EVIL
    _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018  (an alert would mean injected script ran)
    assert not browser.find_elements(By.XPATH, "//img[@src='x']")
    _shot(browser, "05-hostile-name.png")


def test_live_refresh_while_the_database_is_written(browser: Any, server: str,
                                                    study_url: str) -> None:
    browser.get(server + _study_path(NAME))
    summary = _wait(lambda: browser.find_element(By.ID, "summary-table").text, "the summary")
    browser.execute_script("window.__probe = 'not reloaded'")
    study = optuna.load_study(study_name=NAME, storage=study_url)
    template = next(t for t in study.trials if t.state == TrialState.COMPLETE)
    added = 12

    def write() -> None:  # a driver writing trials while the page polls the database
        for i in range(added):
            study.add_trial(optuna.trial.create_trial(
                params=template.params, distributions=template.distributions,
                values=[0.95 + i / 1000, *template.values[1:]],
                user_attrs={**template.user_attrs, "nas.status": "completed"}))
            time.sleep(0.2)

    completed = sum(t.user_attrs.get("nas.status") == "completed" for t in study.trials)
    writer = threading.Thread(target=write)
    writer.start()
    _wait(lambda: browser.find_element(By.ID, "summary-table").text != summary,
          "the summary to refresh while trials are written")
    writer.join()
    expected = f"completed {completed + added}"
    _wait(lambda: expected in browser.find_element(By.ID, "summary-table").text,
          f"the summary to show {expected!r}")
    traces = _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    assert sum(t["n"] for t in traces[:2]) == len(
        [t for t in optuna.load_study(study_name=NAME, storage=study_url).trials
         if t.state == TrialState.COMPLETE])
    assert browser.execute_script("return window.__probe") == "not reloaded"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    _shot(browser, "06-live-refresh.png")
