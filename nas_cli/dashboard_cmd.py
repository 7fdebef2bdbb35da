"""``nas dashboard``: serve the dashboard on a study database (read-only), see ``dashboard``.

``register(subparsers)`` adds the subcommand; Dash is imported only when it runs, so
``nas --help`` stays fast.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import math
import socket
from typing import Any

from nas_cli._common import STORAGE_HELP

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
    from werkzeug.serving import make_server

    from dashboard import create_app
    from nas.errors import NasError

    if not 1 <= args.port <= 65535:
        raise NasError(f"--port must be between 1 and 65535, but got {args.port}.")
    if not math.isfinite(args.refresh) or args.refresh <= 0:
        raise NasError(f"--refresh must be a positive number of seconds, but got {args.refresh}.")
    app = create_app(args.storage, refresh_seconds=args.refresh)
    url = f"http://{f'[{args.host}]' if _is_ipv6(args.host) else args.host}:{args.port}/"
    if args.debug_dash:  # Dash's own server: reloader, in-page errors, a log line per request
        print(f"nas dashboard on {url} (debug mode)", flush=True)
        app.run(host=args.host, port=args.port, debug=True)
        return 0
    _check_bind(args.host, args.port)
    server = make_server(args.host, args.port, app.server, threaded=True)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per refresh
    print(f"nas dashboard on {url} (Ctrl+C to stop)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def _check_bind(host: str, port: int) -> None:
    """``NasError`` when (host, port) cannot be served: werkzeug would print two lines and exit 1
    where ``nas`` promises one line and exit code 2."""
    from nas.errors import NasError

    try:
        family = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            probe.bind((host, port))
    except OSError as exc:  # the port is taken, or the host is not an address of this machine
        reason = getattr(exc, "strerror", None) or str(exc)
        raise NasError(f"Cannot serve on {host}:{port}: {reason}; choose another --port or "
                       "--host.") from None


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
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--refresh", type=float, default=5.0, metavar="SECONDS",
                   help="how often open pages check for new trials (default 5)")
    p.add_argument("--debug-dash", action="store_true",
                   help="Dash's debug mode (reloader and in-page error reports; development)")
    p.set_defaults(func=_run)
