"""``nas dashboard``: serve the dashboard on a study database (read-only), see ``dashboard``.

``register(subparsers)`` adds the subcommand; Dash is imported only when it runs, so
``nas --help`` stays fast.
"""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any

__all__ = ["register"]

_DESCRIPTION = """\
Serve the dashboard on the study database: every study with its trial counts, best values and
hypervolume; per study the Pareto front in 2-D and 3-D, hypervolume over trials, parallel
coordinates, parameter importance, the effect of each knob, a trial table (CSV download) and a
comparison of two studies' fronts; per trial its architecture, cost by part, per-epoch curves
and config downloads. It refreshes while a study runs and never writes to the database.
Binds to 127.0.0.1 unless --host says otherwise (anyone who can reach the port can read every
study)."""


def _run(args: argparse.Namespace) -> int:
    from dashboard import create_app
    from nas.errors import NasError

    if not 1 <= args.port <= 65535:
        raise NasError(f"--port must be between 1 and 65535, but got {args.port}.")
    app = create_app(args.storage, refresh_seconds=args.refresh)
    url_host = f"[{args.host}]" if _is_ipv6(args.host) else args.host
    print(f"nas dashboard on http://{url_host}:{args.port}/ (Ctrl+C to stop)", flush=True)
    try:
        app.run(host=args.host, port=args.port, debug=args.debug_dash)
    except OSError as exc:  # the port is taken, or the host is not an address of this machine
        raise NasError(f"Cannot serve on {args.host}:{args.port}: {exc.strerror or exc}.") from None
    return 0


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False


def register(subparsers: Any) -> None:
    """Add ``dashboard`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser("dashboard", help="serve the dashboard on a study database",
                              description=_DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage", default=None,
                   help="SQLAlchemy URL of the study database (default: $NAS_STORAGE, else "
                   "sqlite:///nas_studies.db)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--refresh", type=float, default=5.0, metavar="SECONDS",
                   help="how often open pages check for new trials (default 5)")
    p.add_argument("--debug-dash", action="store_true",
                   help="Dash's debug mode (reloader and in-page error reports; development)")
    p.set_defaults(func=_run)
