"""The dashboard end to end in headless Chromium (Selenium), on a study the engine produced.

The study is made by ``studies.create_study`` + ``studies.run_study`` on local Ray, with a fake
trainer (``dashboard_helpers.make_evaluator``): completed, early-stopped (ASHA), failed and
constraint-rejected trials, written by the engine itself. The app runs in a real server thread.
Screenshots go to ``artifacts/screenshots/`` for a reviewer. Skipped, with the reason, when
Chromium, its driver or Selenium is missing (``.ci/system-deps.sh`` installs the first two).
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
import yaml
from dashboard_helpers import GEOMETRY, OBJECTIVES, SPACE, make_evaluator, params_limit
from markup_study import MarkupStudy, write_markup_study
from optuna.trial import TrialState

from dashboard import create_app
from nas.config import ArchConfig
from studies import StudySpec, create_study, run_study
from studies.store import Status, StudyKey, TrialKey

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                "(pip install selenium; the test extra has it)")
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    StaleElementReferenceException,
)
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
    evil.set_user_attr(StudyKey.OBJECTIVES, ["accuracy"])
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


def _read(read: Callable[[], Any], timeout: float = 45.0) -> Any:
    """``read()``, again while Dash re-renders the element under it (a stale reference)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return read()
        except StaleElementReferenceException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _text(browser: Any, by: str, value: str) -> str:
    return str(_read(lambda: browser.find_element(by, value).text))


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


def _open_view(browser: Any, label: str) -> None:
    """Click the tab of one of the views below the front."""
    tab = _wait(lambda: browser.find_element(
        By.XPATH, f"//div[contains(@class, 'tab') and normalize-space()='{label}']"),
        f"the {label!r} tab")
    browser.execute_script("arguments[0].scrollIntoView()", tab)
    tab.click()


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
    rejected = [t for t in trials if t.user_attrs.get(TrialKey.STATUS) == Status.REJECTED]
    assert complete and front

    browser.get(server + "/")
    _wait(lambda: NAME in browser.find_element(By.ID, "studies-list").text, "the studies list")
    assert EVIL in _text(browser, By.ID, "studies-list")
    _shot(browser, "01-studies.png")

    browser.get(server + _study_path(NAME))
    traces = _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    counts = {t["name"].split(" (")[0]: t["n"] for t in traces}
    assert counts == {"dominated": len(complete) - len(front), "Pareto-optimal": len(front),
                      "rejected by a constraint": len(rejected)}
    assert set(traces[1]["trials"]) == front
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-table td"), "the trial table")
    _open_view(browser, "Importance")
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
    assert "backbone" in _text(browser, By.ID, "trial-cost")
    _shot(browser, "03-trial.png", height=2000)

    # The yaml export downloads a config that builds this trial's architecture.
    browser.find_element(By.XPATH, "//button[text()='yaml']").click()
    target = downloads / f"trial-{number}.yaml"
    _wait(target.exists, f"{target.name} to download")
    doc = yaml.safe_load(_wait(target.read_text, "the download to finish"))
    stored = study.trials[number].user_attrs
    assert ArchConfig.from_dict(doc["arch"]).arch_id == stored[TrialKey.ARCH_ID]
    assert doc["arch"] == stored[TrialKey.ARCH]
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
                user_attrs={**template.user_attrs, TrialKey.STATUS: Status.COMPLETED}))
            time.sleep(0.2)

    completed = sum(t.user_attrs.get(TrialKey.STATUS) == Status.COMPLETED for t in study.trials)
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


def _rows(browser: Any, column: str) -> list[str]:
    return list(_read(lambda: [c.text for c in browser.find_elements(
        By.CSS_SELECTOR, f'#trial-table td[data-dash-column="{column}"]')]))


def test_text_filter_keeps_the_rows_that_contain_it(browser: Any, server: str,
                                                   study_url: str) -> None:
    study = optuna.load_study(study_name=NAME, storage=study_url)
    expected = sorted(t.number for t in study.trials
                      if "kv" in str(t.params.get("attention_sharing")))
    assert expected and len(expected) < len(study.trials)
    browser.get(server + _study_path(NAME))
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-table td"), "the trial table")
    box = _wait(lambda: browser.find_element(
        By.CSS_SELECTOR, 'th.dash-filter[data-dash-column="attention_sharing"] input'),
        "the filter box")
    box.click()
    box.send_keys("kv\n")

    def shown() -> list[int] | None:
        numbers = sorted(int(n) for n in _rows(browser, "number"))
        return numbers if numbers == expected else None

    _wait(shown, f"the table to keep trials {expected}", timeout=15)
    assert all("kv" in v for v in _rows(browser, "attention_sharing"))


def test_study_opened_before_its_first_trial_gets_knobs(browser: Any, server: str,
                                                        study_url: str) -> None:
    name = "late-study"
    study = optuna.create_study(storage=study_url, study_name=name,
                                directions=["maximize", "minimize"])
    study.set_user_attr(StudyKey.OBJECTIVES, ["accuracy", "params"])
    browser.get(server + _study_path(name))
    _wait(lambda: browser.find_element(By.ID, "summary-table").text, "the summary")
    distributions = {"width": optuna.distributions.IntDistribution(16, 64),
                     "mixer": optuna.distributions.CategoricalDistribution(["conv", "attn"])}
    for i in range(3):
        study.add_trial(optuna.trial.create_trial(
            params={"width": 16 * (i + 1), "mixer": ["conv", "attn"][i % 2]},
            distributions=distributions, values=[0.5 + i / 10, 1000.0 * (i + 1)]))

    def headers() -> set[str]:
        return {h.text for h in browser.find_elements(By.CSS_SELECTOR,
                                                      "#trial-table th.dash-header")}

    _wait(lambda: {"width", "mixer"} <= headers(), "the knob columns", timeout=20)
    _wait(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#trial-table td")) > 0,
          "the trial rows")
    _open_view(browser, "Knob effect")
    knob = _wait(lambda: browser.find_element(By.CSS_SELECTOR, "#effect-knob").text,
                 "the knob drop-down to get a value", timeout=20)
    assert knob in ("width", "mixer")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#effect .boxlayer .trace, "
                                                         "#effect .scatterlayer .point"),
          "the knob's effect figure")


_FIGURE = """
const gd = document.querySelector(arguments[0] + ' .js-plotly-plot');
if (!gd || !gd._fullData || !gd._fullData.length) return null;
const frame = gd.querySelector('.main-svg').getBoundingClientRect();
const inside = r => r.width === 0 || (r.left >= frame.left - 1 && r.right <= frame.right + 1
                                      && r.top >= frame.top - 1 && r.bottom <= frame.bottom + 1);
const texts = Array.from(gd.querySelectorAll('.legendtext, .gtitle, .g-xtitle, .g-ytitle'));
const L = gd._fullLayout;
return {traces: gd._fullData.map(t => ({name: t.name, n: (t.x || []).length,
                                        visible: t.visible, size: (t.marker || {}).size,
                                        color: (t.marker || {}).color, opacity: t.opacity})),
        titles: L.scene ? [L.scene.xaxis.title.text, L.scene.yaxis.title.text,
                           L.scene.zaxis.title.text]
                        : [L.xaxis.title.text, L.yaxis.title.text],
        cut: texts.filter(e => !inside(e.getBoundingClientRect())).map(e => e.textContent)};
"""


# The 3-D scene's box in the graph's pixels (WebGL draws its labels: no DOM to measure).
_SCENE_BOX = """
const gd = document.querySelector('#pareto-3d .js-plotly-plot');
const s = gd._fullLayout._size, d = gd._fullLayout.scene.domain;
return [s.l + d.x[0] * s.w, s.t + (1 - d.y[1]) * s.h, s.l + d.x[1] * s.w,
        s.t + (1 - d.y[0]) * s.h];
"""


def _cut_in_scene(browser: Any) -> list[tuple[int, int]]:
    """Dark (text-coloured) pixels on the 3-D scene's edges: a label the scene cuts off."""
    image_module = pytest.importorskip("PIL.Image", reason="Pillow measures the screenshot")
    import io

    graph = browser.find_element(By.CSS_SELECTOR, "#pareto-3d .js-plotly-plot")
    browser.execute_script("arguments[0].scrollIntoView()", graph)
    time.sleep(1.0)
    left, top, right, bottom = (int(v) for v in browser.execute_script(_SCENE_BOX))
    image = image_module.open(io.BytesIO(graph.screenshot_as_png)).convert("RGB")
    scale = image.width / graph.size["width"]
    pixels = image.load()
    edge = 3
    spots = [(x, y) for y in range(top + 40, bottom) for x in range(left, right)
             if x - left < edge or right - x <= edge or bottom - y <= edge]
    dark = []
    for x, y in spots:
        r, g, b = pixels[int(x * scale), min(int(y * scale), image.height - 1)]
        if r < 150 and g < 150 and b < 180:
            dark.append((x, y))
    return dark


def test_3d_front_shows_dominated_trials_and_readable_titles(browser: Any, server: str,
                                                             study_url: str) -> None:
    study = optuna.load_study(study_name=NAME, storage=study_url)
    template = next(t for t in study.trials if t.state == TrialState.COMPLETE)
    for i in range(2):  # dominated by the template: as costly, less accurate
        study.add_trial(optuna.trial.create_trial(
            params=template.params, distributions=template.distributions,
            values=[template.values[0] - 0.1 - i / 100, *template.values[1:]],
            user_attrs={**template.user_attrs, TrialKey.STATUS: Status.COMPLETED}))
    browser.get(server + _study_path(NAME))
    two = _wait(lambda: browser.execute_script(_FIGURE, "#pareto-2d"), "the 2-D front")
    _open_view(browser, "3-D front")
    three = _wait(lambda: browser.execute_script(_FIGURE, "#pareto-3d"), "the 3-D front")
    _shot(browser, "07-3d-front.png")
    assert not _cut_in_scene(browser), "a label of the 3-D scene runs off its edge"
    by_name = {t["name"].split(" (")[0]: t for t in three["traces"]}
    dominated = by_name["dominated"]
    assert dominated["n"] == {t["name"].split(" (")[0]: t for t in two["traces"]}[
        "dominated"]["n"] > 0
    # Visible as in 2-D: a marker as large as the 2-D one, drawn faded but not transparent
    # (WebGL 3-D markers with an rgba colour and a small size vanish among the others).
    assert dominated["visible"] is True and dominated["size"] >= 5
    assert not str(dominated["color"]).startswith("rgba") and 0.2 <= dominated["opacity"] < 1
    # Axis titles as the 2-D front's (name and direction), for the same objectives.
    assert three["titles"][0] == "accuracy (higher is better)"
    assert set(three["titles"][1:]) == {"params (lower is better)", "MAdds (lower is better)"}
    assert set(two["titles"]) <= {"accuracy (higher is better)", "params (lower is better)",
                                  "MAdds (lower is better)"}
    assert not three["cut"] and not two["cut"], (three["cut"], two["cut"])


_STATE_WORDS = re.compile(r"\b(pruned|fail|complete|COMPLETE|PRUNED|FAIL)\b")


def test_one_name_per_trial_state(browser: Any, server: str, study_url: str) -> None:
    study = optuna.load_study(study_name=NAME, storage=study_url)
    by_status = {t.user_attrs.get(TrialKey.STATUS): t.number for t in study.trials}
    assert {Status.STOPPED, Status.REJECTED, Status.FAILED, Status.COMPLETED} <= set(by_status)
    pages = [("/", "studies-list", None), (_study_path(NAME), "trial-table", None)]
    pages += [(f"{_study_path(NAME)}/trial/{by_status[s]}", "trial-state", s)
              for s in (Status.STOPPED, Status.REJECTED, Status.FAILED)]
    for path, ready, status in pages:
        browser.get(server + path)
        _wait(lambda ready=ready: browser.find_elements(By.CSS_SELECTOR, f"#{ready} td"), path)
        if ready == "trial-table":
            _wait(lambda: browser.find_element(By.ID, "summary-table").text, "the summary")
        page = _text(browser, By.TAG_NAME, "main")
        assert not _STATE_WORDS.findall(page), (path, _STATE_WORDS.findall(page))
        if status is not None:
            assert f"status {status}" in _text(browser, By.ID, "trial-state")


def test_numbers_and_headers_read_one_way(browser: Any, server: str, study_url: str) -> None:
    browser.get(server + _study_path(NAME))
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-table td"), "the trial table")
    headers = _read(lambda: [h.text for h in browser.find_elements(
        By.CSS_SELECTOR, "#trial-table th.dash-header")])
    assert not [h for h in headers if "_" in h or "." in h], headers
    suffixed = re.compile(r"^\d{1,3}(\.\d+)?[kMG]?$")
    for column in ("params", "madds"):
        cells = [c for c in _rows(browser, column) if c]
        assert cells and all(suffixed.match(c) for c in cells), (column, cells)
    accuracy = [c for c in _rows(browser, "accuracy") if c]
    assert accuracy and all(re.fullmatch(r"0\.\d{4}", c) for c in accuracy), accuracy
    summary = _text(browser, By.ID, "summary-table")
    assert re.search(r"params \d{1,3}(\.\d+)?[kMG]", summary), summary
    assert re.search(r"accuracy 0\.\d{4}\b", summary), summary


_HEAVY = ("#pareto-3d", "#parcoords", "#importance", "#effect", "#timeline", "#curves")


def test_the_front_draws_first_and_each_view_when_opened(browser: Any, server: str,
                                                         study_url: str) -> None:
    """The 2-D front and the summary need nothing else; the other views are tabs, none of
    whose figures is in the page until it is opened (the hypervolume, light, is open first)."""
    study = optuna.load_study(study_name=NAME, storage=study_url)
    completed = [t for t in study.trials if t.state == TrialState.COMPLETE]
    browser.get(server + _study_path(NAME))
    _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    _wait(lambda: browser.find_element(By.ID, "summary-table").text, "the summary")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#hypervolume .js-plotly-plot"),
          "the hypervolume view")
    assert not [s for s in _HEAVY if browser.find_elements(By.CSS_SELECTOR, s)]
    seen = {}
    for label, box, drawn in (
            ("3-D front", "#pareto-3d", ".gl-container"),
            ("Parallel coordinates", "#parcoords", ".parcoords"),
            ("Importance", "#importance", ".bars .point"),
            ("Timeline", "#timeline", ".bars .point"),
            ("Learning curves", "#curves", ".scatterlayer .trace")):
        _open_view(browser, label)
        _wait(lambda box=box, drawn=drawn: browser.find_elements(By.CSS_SELECTOR,
                                                                 f"{box} {drawn}"),
              f"the {label} view")
        others = [s for s in _HEAVY if s != box and browser.find_elements(By.CSS_SELECTOR, s)]
        assert not others, (label, others)  # one view in the page at a time
        if label in ("Timeline", "Learning curves"):
            seen[label] = browser.execute_script(_FIGURE, box)
        if label == "Importance":  # over so few trials it says it is unreliable, on the figure
            title = _text(browser, By.CSS_SELECTOR, "#importance .gtitle")
            assert f"only {len(completed)} completed trials" in title
    # The timeline has a bar per started trial; the curves show the stopped trials too.
    assert sum(t["n"] for t in seen["Timeline"]["traces"]) == sum(
        t.datetime_start is not None for t in study.trials)
    names = {t["name"].split(" (")[0] for t in seen["Learning curves"]["traces"]}
    assert {Status.COMPLETED, Status.STOPPED} <= names
    _shot(browser, "08-views.png", height=2200)
    browser.set_window_size(1400, 1000)


# The trials the front's traces show as selected (plotly keeps selectedpoints per trace).
_FRONT_SELECTED = """
const gd = document.querySelector('#pareto-2d .js-plotly-plot');
if (!gd || !gd._fullData) return null;
const out = [];
for (const t of gd._fullData) {
  if (t.selectedpoints) { for (const i of t.selectedpoints) out.push(t.customdata[i]); }
}
return out.sort((a, b) => a - b);
"""


def test_linked_selection_from_table_front_and_axes(browser: Any, server: str, study_url: str,
                                                    downloads: Path) -> None:
    """Trials chosen in the table, on the front or by brushing the parallel coordinates are
    the page's one selection: highlighted on the front, ticked in the table, and exported."""
    study = optuna.load_study(study_name=NAME, storage=study_url)
    completed = sorted(t.number for t in study.trials if t.state == TrialState.COMPLETE)
    browser.get(server + _study_path(NAME))
    _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-table td"), "the trial table")

    def tick(number: int) -> None:
        row = _wait(lambda: next(
            (r for r in browser.find_elements(By.CSS_SELECTOR, "#trial-table tbody tr")
             if r.find_elements(By.CSS_SELECTOR, 'td[data-dash-column="number"]')
             and r.find_element(By.CSS_SELECTOR, 'td[data-dash-column="number"]').text
             == str(number)), None), f"the row of trial {number}")
        row.find_element(By.CSS_SELECTOR, "td.dash-select-cell input").click()

    chosen = completed[:2]
    for number in chosen:
        tick(number)
    _wait(lambda: browser.execute_script(_FRONT_SELECTED) == chosen,
          f"the front to highlight trials {chosen}")
    _wait(lambda: _text(browser, By.ID, "selection-note") == "2 trials selected",
          "the note to say 2 trials selected")

    for old in downloads.glob("*-selected.csv"):
        old.unlink()
    browser.find_element(By.ID, "selection-csv").click()
    target = downloads / f"{NAME}-selected.csv"
    _wait(lambda: target.exists() and target.read_text().count("\n") == 3,
          "the selection's CSV")
    exported = sorted(int(line.split(",")[0]) for line in target.read_text().splitlines()[1:])
    assert exported == chosen

    # A box selection on the front (plotly's select event, as the box tool emits it).
    one = completed[-1]
    browser.execute_script("""
        const gd = document.querySelector('#pareto-2d .js-plotly-plot');
        gd.emit('plotly_selected', {points: [{customdata: arguments[0]}]});""", one)
    _wait(lambda: browser.execute_script(_FRONT_SELECTED) == [one], "the front's selection")
    _wait(lambda: browser.find_element(By.ID, "selection-note").text == "1 trial selected",
          "the note")

    # Brushing the accuracy axis of the parallel coordinates selects the trials inside.
    accuracy = {t.number: t.values[0] for t in study.trials if t.state == TrialState.COMPLETE}
    low = sorted(accuracy.values())[len(accuracy) // 2]
    inside = sorted(n for n, a in accuracy.items() if a >= low)
    _open_view(browser, "Parallel coordinates")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#parcoords .parcoords"),
          "the parallel coordinates")
    browser.execute_script("""
        const gd = document.querySelector('#parcoords .js-plotly-plot');
        const k = gd._fullData[0].dimensions.findIndex(d => d.label === 'accuracy');
        Plotly.restyle(gd, {['dimensions[' + k + '].constraintrange']: [[arguments[0], 2]]},
                       [0]);""", low)
    _wait(lambda: browser.execute_script(_FRONT_SELECTED) == inside,
          f"the front to highlight trials {inside}")
    _wait(lambda: _text(browser, By.ID, "selection-note").startswith(f"{len(inside)} trial"),
          f"the note to say {len(inside)} trials selected")
    browser.find_element(By.ID, "selection-clear").click()
    _wait(lambda: browser.find_element(By.ID, "selection-note").text == "no trials selected",
          "the selection to clear")
    _shot(browser, "09-selection.png")


# The axis types of the front and, if open, of the 3-D front's scene.
_AXIS_TYPES = """
const out = {};
const gd = document.querySelector('#pareto-2d .js-plotly-plot');
if (gd && gd._fullLayout) { out.x = gd._fullLayout.xaxis.type; out.y = gd._fullLayout.yaxis.type; }
const g3 = document.querySelector('#pareto-3d .js-plotly-plot');
if (g3 && g3._fullLayout && g3._fullLayout.scene) {
  const s = g3._fullLayout.scene;
  out.scene = [s.xaxis.type, s.yaxis.type, s.zaxis.type];
}
return out;
"""


def test_log_axes_for_params_and_madds(browser: Any, server: str) -> None:
    """The front's params and MAdds axes switch to a log scale and back, on the 2-D front and
    on the 3-D front; accuracy stays linear."""
    browser.get(server + _study_path(NAME))
    _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    assert browser.execute_script(_AXIS_TYPES) == {"x": "linear", "y": "linear"}

    def choose(scale: str) -> None:
        browser.find_element(By.CSS_SELECTOR, f'#pareto-scale input[value="{scale}"]').click()

    choose("log")
    _wait(lambda: browser.execute_script(_AXIS_TYPES).get("x") == "log", "a log params axis")
    assert browser.execute_script(_AXIS_TYPES)["y"] == "linear"  # accuracy
    _open_view(browser, "3-D front")
    _wait(lambda: browser.execute_script(_AXIS_TYPES).get("scene") == ["linear", "log", "log"],
          "log params and MAdds axes in 3-D")
    choose("linear")
    _wait(lambda: browser.execute_script(_AXIS_TYPES) == {
        "x": "linear", "y": "linear", "scene": ["linear", "linear", "linear"]},
        "linear axes again")


def _choose(browser: Any, dropdown: str, value: str) -> None:
    """Open the Dash dropdown ``dropdown`` and click its option ``value``."""
    # Waited for, as everything else here: under load it has been seen to arrive after the
    # front is drawn.
    box = _wait(lambda: browser.find_element(By.ID, dropdown), f"the {dropdown!r} drop-down")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
    box.click()
    option = _wait(lambda: next((o for o in browser.find_elements(
        By.CSS_SELECTOR, "label.dash-dropdown-option") if o.find_elements(
        By.CSS_SELECTOR, f'input[value="{value}"]')), None), f"the option {value!r}")
    option.click()


def test_compare_on_one_reference_point(browser: Any, server: str, study_url: str) -> None:
    """Two studies' fronts overlay with both hypervolumes against one shared reference point,
    so equal trials give equal numbers although the studies store different references; studies
    with different objectives say they do not compare."""
    copy, two = f"{NAME}-copy", f"{NAME}-two-objectives"
    optuna.copy_study(from_study_name=NAME, from_storage=study_url, to_storage=study_url,
                      to_study_name=copy)
    other = optuna.create_study(storage=study_url, study_name=two,
                                directions=["maximize", "minimize"])
    other.set_user_attr(StudyKey.OBJECTIVES, ["accuracy", "params"])
    for accuracy, params in ((0.5, 20_000), (0.7, 40_000), (0.6, 50_000)):
        other.add_trial(optuna.trial.create_trial(values=[accuracy, params]))
    try:
        stored = optuna.load_study(study_name=NAME, storage=study_url).user_attrs[
            StudyKey.REFERENCE]
        copied = optuna.load_study(study_name=copy, storage=study_url)
        looser = [stored[0] / 2, stored[1] * 3, stored[2] * 3]  # less demanding on each
        copied.set_user_attr(StudyKey.REFERENCE, looser)
        browser.get(server + _study_path(NAME))
        _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
        _choose(browser, "compare-with", copy)
        title = _wait(lambda: next((t.text for t in browser.find_elements(
            By.CSS_SELECTOR, "#compare .gtitle") if "hypervolume" in t.text), None),
            "the comparison's title")
        head, point = title.split("on one reference point")
        volumes = dict(re.findall(r"(\S+) (\d\.\d{4})", head))
        assert set(volumes) == {NAME, copy} and volumes[NAME] == volumes[copy], title
        assert f"accuracy {looser[0]:.4f}" in point, title  # the least demanding reference
        legend = browser.execute_script(
            "return Array.from(document.querySelectorAll('#compare .legendtext'))"
            ".map(e => e.textContent)")
        assert any(t.startswith(f"{copy}: front") for t in legend), legend
        # A study on two of the three objectives: overlaid, but its hypervolume is another's.
        _choose(browser, "compare-with", two)
        _wait(lambda: any("do not compare" in t.text for t in browser.find_elements(
            By.CSS_SELECTOR, "#compare .gtitle")), "the note that the studies do not compare")
        assert any(t.startswith(f"{two}: front") for t in browser.execute_script(
            "return Array.from(document.querySelectorAll('#compare .legendtext'))"
            ".map(e => e.textContent)"))
    finally:
        optuna.delete_study(study_name=copy, storage=study_url)
        optuna.delete_study(study_name=two, storage=study_url)


def test_values_another_tool_wrote_show_as_one_line(browser: Any, server: str,
                                                    study_url: str) -> None:
    """A study whose stored study file another tool replaced by a string is listed as unreadable
    beside the others, and its page says why in one line; a trial whose status is not JSON
    leaves its study's page drawn, and its own view says why. No script runs."""
    bad, odd = f"{NAME}-unreadable", f"{NAME}-odd-trial"
    broken = optuna.create_study(storage=study_url, study_name=bad, directions=["maximize"])
    broken.set_user_attr(StudyKey.SPEC, EVIL)  # a string where the study file belongs
    other = optuna.create_study(storage=study_url, study_name=odd, directions=["maximize"])
    other.set_user_attr(StudyKey.OBJECTIVES, ["accuracy"])
    other.add_trial(optuna.trial.create_trial(values=[0.5],
                                              user_attrs={TrialKey.STATUS: Status.COMPLETED}))
    # What no Optuna call writes: a stored value that is not JSON at all.
    with contextlib.closing(sqlite3.connect(str(sa.make_url(study_url).database))) as conn, conn:
        conn.execute("UPDATE trial_user_attributes SET value_json = ? WHERE key = ? "
                     "AND trial_id IN (SELECT trial_id FROM trials JOIN studies USING (study_id) "
                     "WHERE study_name = ?)", ("{'oops" + EVIL, TrialKey.STATUS, odd))
    try:
        browser.get(server + "/")
        _wait(lambda: browser.find_element(By.CSS_SELECTOR, "#studies-list .unreadable"),
              "the unreadable study's mark")
        mark = _text(browser, By.CSS_SELECTOR, "#studies-list .unreadable")
        assert f"`{StudyKey.SPEC}`" in mark and f"study '{bad}'" in mark
        listed = _text(browser, By.ID, "studies-list")
        assert NAME in listed and odd in listed and EVIL in listed
        _shot(browser, "13-unreadable-listed.png")

        browser.get(server + _study_path(bad))
        line = _wait(lambda: browser.find_element(By.ID, "unreadable").text, "the reason")
        assert f"`{StudyKey.SPEC}`" in line and f"study '{bad}'" in line and "\n" not in line

        browser.get(server + _study_path(odd))
        _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
        browser.get(server + _study_path(odd) + "/trial/0")
        line = _wait(lambda: browser.find_element(By.ID, "trial-problem").text,
                     "the trial's reason")
        assert f"`{TrialKey.STATUS}`" in line and f"study '{odd}', trial 0" in line
        assert browser.find_element(By.PARTIAL_LINK_TEXT, "study").get_attribute(
            "href").endswith(_study_path(odd))  # the way back to the study
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018  (an alert would mean injected script ran)
        _shot(browser, "14-unreadable-trial.png")
    finally:
        optuna.delete_study(study_name=bad, storage=study_url)
        optuna.delete_study(study_name=odd, storage=study_url)


# ----------------------------------------------------------------------------- markup
@pytest.fixture(scope="module")
def markup(study_url: str) -> MarkupStudy:
    """The study another tool wrote with markup in every stored string the pages show."""
    return write_markup_study(study_url)


# What would have run or loaded had a page rendered the markup as HTML, and the page's text
# (HTML and SVG) that shows the markup's escaped form instead of the markup: escaped twice.
_INJECTED = """
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const escaped = [];
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const parent = node.parentNode ? node.parentNode.nodeName : '';
  const shown = parent !== 'SCRIPT' && parent !== 'STYLE';
  if (shown && /&lt;\\/?(img|script|svg)/.test(node.nodeValue)) escaped.push(node.nodeValue);
}
return {owned: typeof owned,
        images: Array.from(document.images).filter(i => i.getAttribute('src') === 'x').length,
        handlers: document.querySelectorAll('[onload], [onerror]').length,
        scripts: Array.from(document.scripts).filter(s => s.textContent.includes('owned'))
                      .length,
        fetched: performance.getEntriesByType('resource').filter(e => /\\/x$/.test(e.name))
                            .length,
        escaped: escaped};
"""


def _nothing_ran(browser: Any) -> None:
    """No script of the markup ran, no image of it loaded, and no text shows it escaped."""
    assert _read(lambda: browser.execute_script(_INJECTED)) == {
        "owned": "undefined", "images": 0, "handlers": 0, "scripts": 0, "fetched": 0,
        "escaped": []}
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018


def _svg_texts(browser: Any, selector: str) -> list[str]:
    """The text plotly drew in ``selector`` (SVG text, as the page shows it)."""
    return list(_read(lambda: browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent)",
        selector)))


def test_markup_in_every_stored_string_shows_as_text(browser: Any, server: str,
                                                     markup: MarkupStudy) -> None:
    """A study whose stored strings hold HTML and script text (``markup_study``): its page
    draws its front, views and table and its trial pages draw, each string shown as written
    (entities too) in components and in plotly's figures; no script runs, no image loads; only
    the exports, which need the search space nas cannot parse, are refused, in one line."""
    m = markup
    browser.get(server + "/")
    _wait(lambda: m.name in browser.find_element(By.ID, "studies-list").text,
          "the markup study in the list")
    assert m["task"] in _text(browser, By.ID, "studies-list")
    _nothing_ran(browser)
    browser.get(server + _study_path(m.name))
    traces = _wait(lambda: browser.execute_script(_TRACES), "the Pareto graph")
    assert {t["name"].split(" (")[0]: t["n"] for t in traces} == {
        "dominated": 1, "Pareto-optimal": 3, "rejected by a constraint": 1}
    assert _text(browser, By.ID, "study-name") == m.name
    summary = _text(browser, By.ID, "summary-table")
    assert m["task"] in summary and f"{m['objective']} (minimize)" in summary
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-table td"), "the trial table")
    headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR,
                                                     "#trial-table th.dash-header")]
    assert {m["knob"], m["width"], m["objective"]} <= set(headers), headers
    cells = {c.text for c in browser.find_elements(By.CSS_SELECTOR, "#trial-table td")}
    assert {m["choiceA"], m["choiceB"], m["reason"], m["archid"]} <= cells
    message = _text(browser, By.ID, "pareto-message")
    assert f"`{StudyKey.SPACE}`" in message and m["knob"] in message
    # A front point's hover label: reason, knob = choice, objective and architecture id.
    point, _ = _wait(lambda: browser.execute_script(_FRONT_POINTS), "the front's points")[0]
    ActionChains(browser).move_to_element(point).pause(0.5).perform()
    hover = _wait(lambda: " ".join(_svg_texts(browser, "#pareto-2d .hoverlayer .hovertext")),
                  "the hover label")
    assert all(m[p] in hover for p in ("reason", "knob", "choiceA", "objective", "archid")), hover
    _choose(browser, "compare-with", NAME)  # its name in the comparison's legend and title
    legend = _wait(lambda: _svg_texts(browser, "#compare .legendtext"), "the comparison")
    assert f"{m.name}: all (4)" in legend, legend
    assert m.name in " ".join(_svg_texts(browser, "#compare .gtitle"))
    _nothing_ran(browser)
    _shot(browser, "15-markup-study.png", height=2400)
    browser.set_window_size(1400, 1000)

    drawn = {"3-D front": "#pareto-3d .gl-container",
             "Parallel coordinates": "#parcoords .parcoords",
             "Importance": "#importance .bars .point",
             "Knob effect": "#effect .boxlayer .trace, #effect .scatterlayer .point",
             "Timeline": "#timeline .bars .point",
             "Learning curves": "#curves .scatterlayer .trace",
             "Proxy vs promoted": "#promotion .js-plotly-plot"}
    for label, selector in drawn.items():
        _open_view(browser, label)
        _wait(lambda selector=selector: browser.find_elements(By.CSS_SELECTOR, selector),
              f"the {label} view")
        if label == "Parallel coordinates":  # knob and objective names, choices: as written
            titles = _svg_texts(browser, "#parcoords .axis-title")
            assert {m["knob"], m["width"], m["objective"]} <= set(titles), titles
            assert {m["choiceA"], m["choiceB"]} <= set(_svg_texts(browser, "#parcoords .tick"))
        if label == "Knob effect":
            ticks = _svg_texts(browser, "#effect .xtick")
            assert {m["choiceA"], m["choiceB"]} <= set(ticks), ticks
        _nothing_ran(browser)

    browser.get(server + _study_path(m.name) + "/trial/0")
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#trial-curves .legendtext"),
          "the epoch curves")
    for box, places in {"trial-arch": ("archkey", "archvalue"),
                        "trial-train": ("trainkey", "trainvalue"),
                        "trial-params": ("knob", "choiceA", "width"), "trial-cost": ("part",),
                        "trial-state": ("reason", "archid", "checkpoint", "objective")}.items():
        shown = _text(browser, By.ID, box)
        assert all(m[p] in shown for p in places), (box, shown)
    assert m["metric"] in _svg_texts(browser, "#trial-curves .legendtext")
    assert m["part"] in _svg_texts(browser, "#trial-cost-figure .xtick")
    refused = _text(browser, By.ID, "trial-no-exports")
    assert f"`{StudyKey.SPACE}`" in refused and "\n" not in refused
    _nothing_ran(browser)
    _shot(browser, "16-markup-trial.png", height=2000)
    browser.set_window_size(1400, 1000)
    browser.get(server + _study_path(m.name) + "/trial/5")  # rejected: never trained
    _wait(lambda: "rejected" in browser.find_element(By.ID, "trial-state").text,
          "the rejected trial's page")
    _nothing_ran(browser)


def test_the_summary_says_when_the_default_samplers_study_converged(
        browser: Any, server: str, study_url: str) -> None:
    """A study whose default sampler recorded gains that stayed below a quarter of the
    hypervolume's noise for 50 trials: its summary says so, with the figures (a study of
    another sampler shows no such row: the engine-run study above)."""
    from studies.store import SamplerKey

    spec = StudySpec.from_dict({
        "name": "converging", "task": "digits", "space": SPACE, "objectives": OBJECTIVES,
        "sampler": {"name": "costaware"}, "budget": {"trials": 200, "until": "converged"},
        "resources": {"cpu": 1}})
    run = create_study(spec, study_url, geometry=GEOMETRY)
    dists = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for i in range(55):
        gain = 0.05 if i == 2 else 0.0001
        run.study.add_trial(optuna.trial.create_trial(
            params={"x": i / 55}, distributions=dists, values=[0.3 + i / 200, 1e4, 1e6],
            system_attrs={SamplerKey.GAIN: gain, SamplerKey.NOISE: 0.024}))
    browser.get(server + _study_path("converging"))
    row = _wait(lambda: browser.find_element(By.ID, "summary-convergence").text,
                "the convergence row")
    assert row == ("converged at trial 52: the expected hypervolume gains of 50 trials in a "
                   "row add up to 0.005, below 0.25 x the hypervolume's noise 0.024; the study "
                   "stopped there (budget.until: converged)")
    browser.get(server + _study_path(NAME))
    _wait(lambda: browser.find_element(By.ID, "summary-table").text, "the summary")
    assert not browser.find_elements(By.ID, "summary-convergence")
