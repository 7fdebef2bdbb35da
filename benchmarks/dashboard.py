"""The dashboard's study page on a large study, next to optuna-dashboard, and where its time goes.

    python benchmarks/dashboard.py [--trials 10000] [--repeats 3] [--db PATH [--keep]]
                                   [--no-browser] [--no-optuna-dashboard]

Builds a study shaped like the engine's (``benchmarks/_study_db.py``: LW-Transformer's space on
MCAN-small, every ``nas.*`` trial attribute, per-epoch rows; completed, early-stopped,
constraint-rejected, failed and running trials) by bulk-inserting into Optuna's tables.

Then, side by side in one run, interleaved (so both see the same load on the machine), each
``--repeats`` times, reported as median, min and max:

- in this process, each on a fresh app (nothing cached): the route that answers the study page
  (``/study/<name>``, which carries the 2-D front) split into where its time goes: the study's
  ``query`` (its SQL run and fetched, replayed on the driver's own cursor), the ``frame``
  (turning those rows into the study's frame), the ``front`` (its Pareto-optimal trials), the
  ``figure`` and ``serialise`` (the page as JSON); then every callback the browser fires on
  opening the page, through Flask's test client;
- optuna-dashboard (``pip install optuna-dashboard``), ``GET /api/studies/<id>?after=0`` through
  a test client of ``optuna_dashboard.wsgi(storage)``: the request its front end makes to show a
  study;
- in headless Chromium (Selenium; skipped without Chromium and chromedriver, or with
  ``--no-browser``): the seconds from navigating to the study page until its Pareto front is
  drawn (``#pareto-2d``; optuna-dashboard's ``#graph-pareto-front`` on
  ``/dashboard/studies/<id>``), each load on a fresh server, split by
  ``benchmarks/_browser_front.py`` into before the request carrying the front, the server's
  answer, the transfer and the drawing, with CPU seconds of the server and the page beside;
  with ``--baseline DIR``, the study page of the checkout in DIR too (``git worktree add DIR
  <commit>``), interleaved.

Timings on a machine other work shares stretch every wait: compare the two dashboards measured
in the same run, and the CPU seconds, which that stretches less.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa

# Run as a script, this file's folder comes first on the import path and its name would shadow
# the `dashboard` package it measures: this checkout's root goes first and that folder last (its
# private modules stay importable).
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = ([str(Path(_HERE).parent)]
               + [p for p in sys.path if str(Path(p or ".").resolve()) != _HERE] + [_HERE])

from _browser_front import Load, chromium, front_load  # noqa: E402
from _study_db import write_study  # noqa: E402

#: The phases of the route's answer, in order.
PHASES = ("query", "frame", "front", "figure", "serialise")
#: The phases of a load in the browser, in order.
LOAD_PHASES = ("before", "server", "transfer", "drawing")


def study_name(n_trials: int) -> str:
    """The benchmark study's name for ``n_trials`` trials (``lw-transformer-10k``)."""
    return (f"lw-transformer-{n_trials // 1000}k" if n_trials % 1000 == 0
            else f"lw-transformer-{n_trials}")


def _holds(path: Path, name: str, n_trials: int) -> bool:
    """Whether the SQLite file ``path`` holds study ``name`` with ``n_trials`` trials."""
    if not path.exists():
        return False
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.text(
                "SELECT count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                "WHERE s.study_name = :n"), {"n": name}).scalar()
    except sa.exc.DBAPIError:
        return False
    finally:
        engine.dispose()
    return found == n_trials


# ----------------------------------------------------------------------------- in process
def _query_seconds(engine: sa.Engine, statements: Sequence[tuple[str, Any]]) -> float:
    """Seconds to run ``statements`` and fetch their rows on the driver's own cursor."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        started = time.perf_counter()
        for statement, parameters in statements:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH")):
                continue  # the snapshot's BEGIN and the like
            cursor.execute(statement, parameters)
            cursor.fetchall()
        return time.perf_counter() - started
    finally:
        raw.close()


def _timed(record: dict[str, float], phase: str, work: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    out = work()
    record[phase] = record.get(phase, 0.0) + time.perf_counter() - started
    return out


def route_phases(url: str, name: str) -> dict[str, float]:
    """The study page's route on a fresh app, by phase (see :data:`PHASES`), as
    ``dashboard.pages.study.page`` answers it; with ``total``, the route itself through Flask's
    test client, timed apart."""
    import plotly.io.json

    from dashboard import create_app, figures, layout
    from dashboard.analysis import StudyView
    from dashboard.data import fingerprint, load_front, load_study, open_readonly, study_info
    from dashboard.testing import callback_body, post_callback

    engine = open_readonly(url)
    statements: list[tuple[str, Any]] = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda conn, cursor, statement, parameters, context, many:
                    statements.append((statement, parameters)))
    record: dict[str, float] = {}
    info = _timed(record, "frame", lambda: study_info(engine, name))
    version = _timed(record, "frame", lambda: fingerprint(engine, info.study_id, info.name))
    data = _timed(record, "frame", lambda: load_front(engine, info, version))
    query = _query_seconds(engine, statements)
    record["query"], record["frame"] = query, record["frame"] - query
    view = StudyView(data, rest=lambda front: load_study(engine, info, version))
    mask = _timed(record, "front", lambda: view.front)
    x, y = layout.front_axes(info.objectives)
    fig = _timed(record, "figure", lambda: figures.pareto_2d(
        data, x, y, mask, brief=len(data.trials) >= figures.WEBGL_FROM))
    _timed(record, "serialise", lambda: plotly.io.json.to_json_plotly(fig))
    engine.dispose()
    app = create_app(url)
    started = time.perf_counter()
    answer = post_callback(app.server.test_client(), callback_body(
        app, "page.children", {"url.pathname": layout.study_href(name)}))
    record["total"] = time.perf_counter() - started
    if answer.status != 200:
        raise RuntimeError(f"the study page answered HTTP {answer.status}")
    return record


def first_render(url: str, name: str) -> tuple[float, list[Any]]:
    """A fresh app, then every callback the browser fires on opening the study page."""
    from dashboard import create_app
    from dashboard.layout import study_href
    from dashboard.testing import first_render as render

    app = create_app(url)
    started = time.perf_counter()
    results = render(app.server.test_client(), app, study_href(name))
    seconds = time.perf_counter() - started
    failed = [r for r in results if r.status != 200]
    if failed:
        raise RuntimeError(f"{failed[0].output}: HTTP {failed[0].status}")
    return seconds, results


def optuna_dashboard_api(url: str, name: str) -> tuple[float, int] | None:
    """A fresh optuna-dashboard app, then ``GET /api/studies/<id>?after=0``: (seconds, bytes);
    None where optuna-dashboard is not installed."""
    try:
        import optuna_dashboard
        from werkzeug.test import Client
    except ImportError:
        return None
    storage = optuna.storages.RDBStorage(url)
    study_id = storage.get_study_id_from_name(name)
    client = Client(optuna_dashboard.wsgi(storage))
    started = time.perf_counter()
    response = client.get(f"/api/studies/{study_id}?after=0")
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"optuna-dashboard: HTTP {response.status_code}")
    return seconds, len(response.data)


# ----------------------------------------------------------------------------- printing
def _runs(label: str, times: Sequence[float]) -> str:
    return (f"  {label:<44} median {statistics.median(times):7.2f} s  (min {min(times):.2f}, "
            f"max {max(times):.2f}; runs {', '.join(f'{t:.2f}' for t in times)})")


def _medians(label: str, rows: Sequence[dict[str, float]], keys: Sequence[str]) -> str:
    return f"  {label:<22}" + "".join(
        f" {statistics.median(r[k] for r in rows):9.3f}" for k in keys)


def _print_in_process(url: str, name: str, repeats: int, theirs: bool) -> None:
    routes: list[dict[str, float]] = []
    renders: list[float] = []
    api: list[float] = []
    size, results = 0, []
    for _ in range(repeats):  # interleaved, so both see the same machine load
        routes.append(route_phases(url, name))
        seconds, results = first_render(url, name)
        renders.append(seconds)
        other = optuna_dashboard_api(url, name) if theirs else None
        if other is not None:
            api.append(other[0])
            size = other[1]
    print("\nthe study page's route (carrying the 2-D front), in this process on a fresh app, "
          "median seconds by phase:")
    print(f"  {'':<22}" + "".join(f" {p:>9}" for p in (*PHASES, "sum", "route")))
    for r in routes:
        r["sum"] = sum(r[p] for p in PHASES)
        r["route"] = r["total"]
    print(_medians("dashboard", routes, (*PHASES, "sum", "route")))
    total = sum(r.size for r in results)
    print(f"\nevery callback the browser fires on opening it, through Flask's test client "
          f"({total / 1e6:.1f} MB of JSON in all):")
    print(_runs("dashboard (fresh app each run)", renders))
    print("    last run by callback: " + ", ".join(
        f"{r.output.strip('.').split('.')[0].split('@')[0]} {r.seconds:.2f} s "
        f"({r.size / 1e6:.2f} MB)" for r in results))
    if api:
        import optuna_dashboard

        print(_runs(f"optuna-dashboard {optuna_dashboard.__version__} study API "
                    f"({size / 1e6:.1f} MB)", api))
        ratio = statistics.median(r["route"] for r in routes) / statistics.median(api)
        print(f"  ratio dashboard route / optuna-dashboard API (medians): {ratio:.3f}")
    elif theirs:
        print("  optuna-dashboard is not installed (pip install optuna-dashboard): skipped")


def _print_loads(label: str, loads: Sequence[Load | None], timeout: float) -> None:
    drawn = [x for x in loads if x is not None]
    missed = len(loads) - len(drawn)
    if not drawn:
        print(f"  {label:<22} not drawn within {timeout:.0f} s ({missed} of {len(loads)})")
        return
    keys = ("total", *LOAD_PHASES, "megabytes", "server_cpu", "browser_cpu")
    print(f"  {label:<22}" + "".join(
        f" {statistics.median(getattr(x, k) for x in drawn):9.3f}" for k in keys)
        + (f"   ({missed} of {len(loads)} not drawn within {timeout:.0f} s)" if missed else ""))


def _print_browser(url: str, name: str, repeats: int, theirs: bool, timeout: float,
                   baseline: Path | None) -> None:
    import importlib.util

    from dashboard.layout import study_href

    print("\nin headless Chromium, from navigation until the Pareto front is drawn (a fresh "
          "server for every load), median seconds:")
    driver = chromium()
    if driver is None:
        print("  Chromium, chromedriver or selenium is missing: skipped")
        return
    theirs = theirs and importlib.util.find_spec("optuna_dashboard") is not None
    study_id = optuna.storages.RDBStorage(url).get_study_id_from_name(name)
    ours: list[Load | None] = []
    before: list[Load | None] = []
    other: list[Load | None] = []
    try:
        for _ in range(repeats):  # interleaved
            ours.append(front_load(driver, url, "ours", study_href(name), "#pareto-2d",
                                   "page.children", timeout))
            if baseline is not None:
                before.append(front_load(driver, url, "ours", study_href(name), "#pareto-2d",
                                         "page.children", timeout, root=baseline))
            if theirs:
                other.append(front_load(driver, url, "optuna-dashboard",
                                        f"/dashboard/studies/{study_id}", "#graph-pareto-front",
                                        f"/api/studies/{study_id}", timeout))
    finally:
        driver.quit()
    print(f"  {'':<22}" + "".join(f" {k:>9}" for k in (
        "total", *LOAD_PHASES, "MB", "srv CPU", "page CPU")))
    _print_loads("dashboard", ours, timeout)
    if baseline is not None:
        _print_loads("dashboard --baseline", before, timeout)
    if theirs:
        _print_loads("optuna-dashboard", other, timeout)
    mine = [x.total for x in ours if x is not None]
    if mine:
        print(_runs("dashboard: #pareto-2d drawn", mine))
    old = [x.total for x in before if x is not None]
    if mine and old:
        print(_runs(f"--baseline ({baseline})", old))
        print("  ratio dashboard / --baseline (medians): "
              f"{statistics.median(mine) / statistics.median(old):.3f}")
    drawn = [x.total for x in other if x is not None]
    if mine and drawn:
        print(_runs("optuna-dashboard: #graph-pareto-front", drawn))
        print("  ratio dashboard / optuna-dashboard (medians): "
              f"{statistics.median(mine) / statistics.median(drawn):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs of each (each on a fresh app or server: nothing cached)")
    parser.add_argument("--db", default=None, help="SQLite file to write (default: a temp file)")
    parser.add_argument("--keep", action="store_true",
                        help="reuse --db where it already holds the study at this size")
    parser.add_argument("--no-browser", action="store_true",
                        help="skip the measurement in headless Chromium")
    parser.add_argument("--no-optuna-dashboard", action="store_true",
                        help="measure the dashboard alone (optuna-dashboard takes minutes)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds a page may take to draw its front in the browser")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout whose dashboard loads in the browser too, "
                             "interleaved (its study page as it was, say)")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per study created
    name = study_name(args.trials)
    theirs = not args.no_optuna_dashboard
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "bench.db"
        if args.keep and _holds(path, name, args.trials):
            print(f"reusing the {args.trials:,}-trial study in {path}")
        else:
            for old in path.parent.glob(path.name + "*"):
                old.unlink()
            started = time.perf_counter()
            write_study(path, name, args.trials)
            print(f"built a {args.trials:,}-trial study in {time.perf_counter() - started:.1f} s "
                  f"({path.stat().st_size / 1e6:.1f} MB)")
        url = f"sqlite:///{path}"
        _print_in_process(url, name, args.repeats, theirs)
        if not args.no_browser:
            _print_browser(url, name, args.repeats, theirs, args.timeout, args.baseline)
        print(f"\nload average during the runs: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
              f" on {os.cpu_count()} CPUs (other work on the machine slows both sides)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
