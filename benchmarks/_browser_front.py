"""Time to a drawn Pareto front in headless Chromium, and where that time goes
(``benchmarks/dashboard.py``).

Each load is on a fresh server in its own process (nothing cached on the server), started
before the navigation. The server adds a ``Server-Timing`` header to every answer (the seconds
its app took, and which Dash callback or path it answered), and a probe installed before any
page script records when the plotly graph holds points and has drawn its frame. From the
browser's resource timing of the request that carries the front, one load splits into:

- ``before``: from navigation until the browser sends that request (the page, its scripts, and
  for Dash the layout and the callback graph);
- ``server``: the server's app answering it (reading, computing, serialising);
- ``transfer``: from the answer's first byte to its last (``MB``: its size on the wire);
- ``drawing``: from the answer's last byte until the front is drawn (parsing, rendering).

The four add up to the total, up to the request's own wait between sending and the server's
first byte beyond the app's time (a few milliseconds). Beside them, CPU seconds, which other
work on the machine does not stretch as it does waits: the server's process answering that
request, and the page's main thread until the front was drawn (Chrome's ``ThreadTime``,
polled every 50 ms, so a little of what follows the drawing may count).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Load", "chromium", "front_load"]

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

# Every request the page made, as the browser's resource timing saw it (milliseconds since
# the navigation started), with the server's Server-Timing entries.
_RESOURCES = """
return performance.getEntriesByType('resource').map(r => ({
  name: r.name, start: r.startTime, request: r.requestStart, first: r.responseStart,
  end: r.responseEnd, size: r.encodedBodySize,
  server: r.serverTiming.map(s => ({name: s.name, duration: s.duration,
                                    description: s.description}))}));
"""

# A server in its own process: builds the WSGI app (``ours`` or optuna-dashboard's), wraps it
# so that every answer says in a Server-Timing header how long the app took and for what (the
# Dash callback's output, else the path), prints its port once listening, serves until killed.
_SERVER = """
import io, json, logging, sys, time
from werkzeug.serving import make_server
url, which = sys.argv[1], sys.argv[2]
if which == "ours":
    from dashboard import create_app
    app = create_app(url).server
else:
    import optuna, optuna_dashboard
    app = optuna_dashboard.wsgi(optuna.storages.RDBStorage(url))

def timed(environ, start_response):
    started, cpu = time.perf_counter(), time.process_time()
    label = environ.get("PATH_INFO", "")
    if label.endswith("_dash-update-component"):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            label = json.loads(body).get("output", label)
        except ValueError:
            pass
    def start(status, headers, exc_info=None):
        ms = (time.perf_counter() - started) * 1000
        cpu_ms = (time.process_time() - cpu) * 1000
        desc = "".join(c for c in label if c.isalnum() or c in "./-_")[:120]
        headers.append(("Server-Timing", f'app;dur={ms:.1f};desc="{desc}"'))
        headers.append(("Server-Timing", f"cpu;dur={cpu_ms:.1f}"))
        return start_response(status, headers, exc_info)
    return app(environ, start)

logging.getLogger("werkzeug").setLevel(logging.ERROR)
httpd = make_server("127.0.0.1", 0, timed, threaded=True)
print(httpd.server_port, flush=True)
httpd.serve_forever()
"""


@dataclass(frozen=True)
class Load:
    """One load of a page until its front was drawn: seconds in total and by phase."""

    total: float
    before: float
    server: float
    transfer: float
    drawing: float
    megabytes: float
    server_cpu: float  # the server process's CPU seconds answering the request
    browser_cpu: float  # the page's main thread's CPU seconds until the front was drawn


def _serve(url: str, which: str, root: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """A fresh server (``ours`` or optuna-dashboard's) for ``url``, with the dashboard of the
    checkout at ``root`` (default: this one): (process, base URL)."""
    root = root or Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    process = subprocess.Popen([sys.executable, "-c", _SERVER, url, which], cwd=root, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port.isdigit():
        process.kill()
        raise RuntimeError(f"the {which} server did not start")
    return process, f"http://127.0.0.1:{port}"


def chromium() -> Any:
    """A headless Chromium driven by Selenium, or None when either is missing."""
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
    driver.set_page_load_timeout(900)
    return driver


def _phases(drawn_ms: float, resources: list[dict[str, Any]], carrier: str,
            browser_cpu: float) -> Load:
    """The load's phases, from the request whose Server-Timing names ``carrier`` (the largest
    such answer: optuna-dashboard asks for a study more than once)."""
    mine = [r for r in resources
            if any(carrier in (s["description"] or "") for s in r["server"])]
    if not mine:
        raise RuntimeError(f"no request answered {carrier!r}: {[r['name'] for r in resources]}")
    r = max(mine, key=lambda r: r["size"])
    timing = {s["name"]: s["duration"] / 1000 for s in r["server"]}
    return Load(total=drawn_ms / 1000, before=r["start"] / 1000, server=timing["app"],
                transfer=(r["end"] - r["first"]) / 1000, drawing=(drawn_ms - r["end"]) / 1000,
                megabytes=r["size"] / 1e6, server_cpu=timing["cpu"], browser_cpu=browser_cpu)


def _main_thread_cpu(driver: Any) -> float:
    """CPU seconds of the page's main thread so far (Chrome's ``ThreadTime``; a page on a new
    server is a new site, in a renderer process of its own)."""
    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return float(next(m["value"] for m in metrics if m["name"] == "ThreadTime"))


def front_load(driver: Any, url: str, which: str, path: str, selector: str, carrier: str,
               timeout: float, root: Path | None = None) -> Load | None:
    """Load ``path`` of a fresh ``which`` server on ``url`` (the dashboard of the checkout at
    ``root``, default this one) until the plotly graph at ``selector`` is drawn; its phases
    (``carrier``: what the Server-Timing of the request carrying the front names). None when
    it is not drawn within ``timeout`` seconds."""
    process, base = _serve(url, which, root)
    script = _DRAWN_PROBE % json.dumps(selector)
    handle = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": script})
    try:
        driver.get("about:blank")
        driver.execute_cdp_cmd("Performance.enable", {"timeDomain": "threadTicks"})
        driver.get(base + path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # performance.now() counts from the navigation's start (the document's timeOrigin)
            drawn = driver.execute_script("return window.__drawn")
            if drawn is not None:
                cpu = _main_thread_cpu(driver)
                return _phases(float(drawn), driver.execute_script(_RESOURCES), carrier, cpu)
            time.sleep(0.05)
        return None
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                               {"identifier": handle["identifier"]})
        driver.get("about:blank")  # no request of the page outlives its server
        process.kill()
        process.wait(timeout=30)
