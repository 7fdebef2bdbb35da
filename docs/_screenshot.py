"""The dashboard picture of the README and the guide, taken from a real dashboard.

Serves ``dashboard.create_app`` on a study database on loopback, opens the study's page in
headless Chromium (Selenium, as the browser tests do), waits until its Pareto front is drawn and
saves a PNG::

    nas run studies/quickstart.yaml --storage sqlite:////tmp/shot/nas_studies.db
    python -m docs._screenshot --storage sqlite:////tmp/shot/nas_studies.db --study quickstart

Needs Chromium and chromedriver (``make system-deps``) and selenium (the test extra).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

__all__ = ["OUT", "main", "screenshot"]

OUT = Path(__file__).resolve().parent / "images" / "dashboard.png"

# True once plotly has drawn the front's points.
_DRAWN = """
const gd = document.querySelector('#pareto-2d .js-plotly-plot');
return !!(gd && gd._fullData && gd._fullData.length);
"""


def _chrome(profile: str, width: int, height: int) -> Any:
    from selenium import webdriver

    browser = next(p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                               shutil.which("google-chrome")) if p)
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--hide-scrollbars", f"--window-size={width},{height}",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    # The picture is the viewport: make it exactly width x height (the window has borders).
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return driver


def screenshot(storage: str, study: str, out: Path = OUT, *, width: int = 1280,
               height: int = 940, timeout: float = 120.0) -> Path:
    """Save a PNG of ``study``'s page in the dashboard over ``storage`` to ``out``."""
    from werkzeug.serving import make_server

    from dashboard import create_app

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    httpd = make_server("127.0.0.1", 0, create_app(storage).server, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as profile:
            driver = _chrome(profile, width, height)
            try:
                url = (f"http://127.0.0.1:{httpd.server_port}/study/"
                       f"{urllib.parse.quote(study, safe='')}")
                driver.get(url)
                deadline = time.monotonic() + timeout
                while not driver.execute_script(_DRAWN):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the front of {study!r} was not drawn in {timeout} s")
                    time.sleep(0.5)
                time.sleep(2.0)  # plotly's transitions settle
                out.parent.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(out))
            finally:
                driver.quit()
    finally:
        httpd.shutdown()
        thread.join(timeout=10)
    return out


def main(argv: list[str] | None = None) -> int:
    """Take the picture (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m docs._screenshot", description=main.__doc__)
    parser.add_argument("--storage", required=True, help="the study database's SQLAlchemy URL")
    parser.add_argument("--study", default="quickstart", help="the study to show")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the PNG (default {OUT})")
    args = parser.parse_args(argv)
    print(screenshot(args.storage, args.study, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
