"""The documentation site: built with MkDocs (--strict), its generated reference complete, its
pages and search working in headless Chromium, and no link leaving the repository.

The site is built once per module into a temporary folder and served on loopback by Python's
own HTTP server. The browser tests skip, with the reason, when Chromium, its driver or Selenium
is missing (``.ci/system-deps.sh`` installs the first two); the build needs mkdocs and
mkdocs-material (the test extra).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from docs import _cli_reference, _study_keys
from docs._cli_reference import cli_reference, commands

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
DRIVER = shutil.which("chromedriver")


# ----------------------------------------------------------------------------- the build
@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``make docs`` builds it (``mkdocs build --strict``), in a temporary folder."""
    pytest.importorskip("material", reason="mkdocs-material is not installed (the test extra "
                        "has it)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _page(site: Path, path: str) -> str:
    return html.unescape((site / path).read_text())


def _text(site: Path, path: str) -> str:
    """The page's text, without its markup (highlighted code is split into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", (site / path).read_text()))


def test_the_build_renders_every_command_and_its_arguments(site: Path) -> None:
    page = _page(site, "reference/cli.html")
    found = commands()
    assert {name for name, _, _ in found} >= {
        "nas presets", "nas cost", "nas train", "nas run", "nas resume", "nas status",
        "nas pareto", "nas promote", "nas export", "nas dashboard"}
    for name, _, parser in found:
        slug = name.replace(" ", "-")
        assert f'<h{name.count(" ") + 1} id="{slug}"><code>{name}</code>' in page, name
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in page, (name, flag)


def test_the_build_renders_every_study_key_and_sampler(site: Path) -> None:
    page = _page(site, "reference/study-file.html")
    keys = _study_keys.accepted_keys()
    assert "budget" in keys[""] and "trials" in keys["budget"]
    for section, names in keys.items():
        for key in names:
            assert f"<code>{key}</code>" in page, (section, key)
    for sampler, options in _study_keys.sampler_options().items():
        assert f"<code>{sampler}</code>" in page
        for option in options:
            assert f"<code>{option}</code>" in page, (sampler, option)
    from search_spaces._knobs import train_fields

    for setting in train_fields():
        assert f"<td><code>{setting}</code></td>" in page, setting


def test_the_search_guide_lists_every_sharing_scheme(site: Path) -> None:
    from nas.sharing import format_pattern
    from search_spaces import SCHEMES

    page = _page(site, "guide/search.html")
    for name, build in SCHEMES.items():
        assert f"<td><code>{name}</code></td>" in page, name
        assert f"<code>{format_pattern(build(6))}</code>" in page, name


def test_the_build_renders_the_knob_table_and_presets(site: Path) -> None:
    from docs._generate import knob_table
    from nas.knobs import KNOBS
    from nas.presets import list_presets

    page = _page(site, "reference/architecture.html")
    assert knob_table().count("\n") == len(KNOBS) + 2
    for knob in KNOBS:
        assert f"<td><code>{knob.name}</code></td>" in page, knob.name
    for preset in list_presets():
        assert f"<td><code>{preset['name']}</code></td>" in page, preset["name"]


def test_the_plugin_example_is_on_the_plugins_page(site: Path) -> None:
    """The page shows the very file tests/test_plugins.py installs and runs."""
    from test_plugins import example_source

    text = _text(site, "guide/plugins.html")
    for line in example_source().splitlines():
        assert line.strip() in text, line


# ----------------------------------------------------------------------------- the generators
def test_nested_subcommands_get_their_own_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command with subcommands of its own (``nas data prepare``) is rendered too."""
    parser = argparse.ArgumentParser(prog="nas")
    sub = parser.add_subparsers(dest="command")
    data = sub.add_parser("data", help="prepared data")
    prepare = data.add_subparsers(dest="action").add_parser(
        "prepare", help="build a task's cache", description="Build the cache once per node.")
    prepare.add_argument("task", metavar="TASK", help="a task name")
    prepare.add_argument("--task-set", action="append", default=[], metavar="KEY=VALUE",
                         help="a task option")
    monkeypatch.setattr(_cli_reference, "_parser", lambda: parser)
    text = cli_reference()
    assert [name for name, _, _ in commands(parser)] == ["nas data", "nas data prepare"]
    assert "## `nas data`" in text and "### `nas data prepare`" in text
    assert "nas data prepare [-h] [--task-set KEY=VALUE] TASK" in text
    assert "| `--task-set KEY=VALUE` | a task option (repeatable) |" in text
    assert "Build the cache once per node." in text


def test_a_study_key_without_a_meaning_fails_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    meanings = dict(_study_keys.MEANINGS)
    del meanings["fidelity.grace_epochs"]
    monkeypatch.setattr(_study_keys, "MEANINGS", meanings)
    with pytest.raises(ValueError, match=r"no meaning for \['fidelity.grace_epochs'\]"):
        _study_keys.study_keys()
    monkeypatch.setattr(_study_keys, "MEANINGS", {**_study_keys.MEANINGS, "budget.epochs": "x"})
    with pytest.raises(ValueError, match=r"keys it refuses \['budget.epochs'\]"):
        _study_keys.study_keys()


# ----------------------------------------------------------------------------- links
_LINK = re.compile(r"\]\(([^)\s]+)")


def _documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "mkdocs.yml", *sorted((ROOT / "docs").rglob("*.md"))]


def test_no_link_or_docstring_points_outside_the_repository() -> None:
    """No ``../shared/...`` or ``shared/design`` reference in the docs, the README or the code,
    and every relative link of the README and the pages names a file of the repository."""
    sources = [*_documents()]
    for package in ("nas", "nas_cli", "trainers", "search_spaces", "studies", "dashboard",
                    "docs", "benchmarks", "tests"):
        sources += sorted((ROOT / package).rglob("*.py"))
    needle = re.compile(r"\.\./shared|shared/design")
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in sources if p != Path(__file__)
                 for n, line in enumerate(p.read_text().splitlines(), 1) if needle.search(line)]
    assert not offenders, offenders
    for doc in _documents():
        for target in _LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:|#", target):
                continue
            resolved = (doc.parent / target.split("#")[0]).resolve()
            assert resolved.is_relative_to(ROOT), (doc, target)
            assert resolved.exists(), (doc, target)


# ----------------------------------------------------------------------------- the browser
class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0),
                                functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(served: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                    "(the test extra has it)")
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("Chromium or chromedriver is not installed (apt-get install chromium "
                    "chromium-driver; .ci/system-deps.sh does it)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
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


def _shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / name))


# Every request the page made, by URL (the page itself, its scripts, styles, fonts, images).
_REQUESTS = """
return [location.href, ...performance.getEntriesByType('resource').map(e => e.name)];
"""


@pytest.mark.slow
def test_every_page_of_the_nav_renders_from_loopback_alone(browser: Any, served: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{served}/index.html")
    _wait(lambda: browser.find_element(By.CSS_SELECTOR, "article h1").text == "lightweight-nas",
          "the home page's title")
    _shot(browser, "docs-home.png")
    links = browser.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link[href]")
    pages = sorted({a.get_attribute("href").split("#")[0] for a in links} - {""})
    assert len(pages) >= 20, pages
    for url in pages:
        browser.get(url)
        title = _wait(lambda: browser.find_element(By.CSS_SELECTOR, "article h1").text,
                      f"the title of {url}")
        assert "404" not in title and len(browser.find_elements(
            By.CSS_SELECTOR, "article p, article table")) >= 1, url
        outside = [r for r in browser.execute_script(_REQUESTS)
                   if not r.startswith(served + "/")]
        assert not outside, (url, outside)  # no font service, no CDN: the site works offline
    browser.get(f"{served}/reference/cli.html")
    headings = [h.text.rstrip("¶").strip()
                for h in browser.find_elements(By.CSS_SELECTOR, "article h2")]
    assert "nas run" in headings and "nas dashboard" in headings, headings
    _shot(browser, "docs-cli.png")


def _search(browser: Any, served: str, term: str, page: str) -> list[str]:
    """The pages the site's own search lists for ``term``, once one of them is ``page`` (or
    what it lists at the timeout, for the assertion to show). The list is read again while it
    re-renders (a search runs per keystroke: a result read as it is replaced goes stale)."""
    from selenium.webdriver.common.by import By

    browser.get(f"{served}/index.html")
    box = _wait(lambda: browser.find_element(By.CSS_SELECTOR, "input.md-search__input"),
                "the search box")
    box.click()
    box.send_keys(term)
    seen: list[str] = []

    def listed() -> bool:
        items = browser.find_elements(By.CSS_SELECTOR, "li.md-search-result__item a[href]")
        seen[:] = [a.get_attribute("href") for a in items]  # raises if it went stale
        return any(page in url for url in seen)

    with contextlib.suppress(AssertionError):
        _wait(listed, f"search results for {term!r} listing {page}")
    return seen


@pytest.mark.slow
def test_search_finds_guide_and_generated_reference_terms(browser: Any, served: str) -> None:
    found = _search(browser, served, "hypervolume", "/guide/search.html")
    assert any("/guide/search.html" in url for url in found), found
    _shot(browser, "docs-search.png")
    # Words only the generated sections hold: an NSGA-III option, a paper the knob table cites.
    found = _search(browser, served, "dividing_parameter", "/reference/study-file.html")
    assert any("/reference/study-file.html" in url for url in found), found
    found = _search(browser, served, "Dehghani", "/reference/architecture.html")
    assert any("/reference/architecture.html" in url for url in found), found


# ----------------------------------------------------------------------------- the README
def test_the_readme_is_short_and_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert text.count("\n") <= 200
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first_block.startswith("make demo") and "\nmake test" in first_block
    assert "](docs/images/dashboard.png)" in text  # the tour's picture
    for page in ("docs/guide/search.md", "docs/guide/cluster.md", "docs/guide/data.md",
                 "docs/guide/export.md", "docs/guide/plugins.md", "docs/guide/threat-model.md",
                 "docs/reference/cli.md", "docs/reference/study-file.md",
                 "docs/reference/architecture.md", "docs/benchmarks.md"):
        assert f"]({page})" in text, page
