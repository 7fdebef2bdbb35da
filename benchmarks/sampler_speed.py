"""Milliseconds per suggestion against the number of finished trials: the default sampler
(``costaware``, built as a study file without ``sampler`` gets it: ``make_sampler``) driven by
ask/tell over a table of known answers, beside Optuna's multivariate TPE (constant liar) in the
same run.

    .venv/bin/python benchmarks/sampler_speed.py [--quick] [--dataset cora]
        [--sizes 50,200,1000,5000] [--window 20] [--peer tpe] [--peer-max 1000]

The table is NAS-Bench-Graph's (``benchmarks/_tabular.py``; ``make bench-env`` installs the
package that ships it): 26,206 networks, 3 objectives (validation accuracy, parameters,
latency), the costs known to ``costaware`` before it chooses. Two trials run at once (the
oldest is told first), as in the project's benchmarks. For each size ``n`` the study runs until
``n + window`` trials were asked and the median time of the ``window`` asks made after ``n``
were asked is printed (an ask includes drawing the parameters: the sampler's whole work). The
peer runs up to ``--peer-max`` trials. The issue's targets: a median of at most 50 ms at 1,000
trials and 250 ms at 5,000, on two cores. The load average is printed before and after: on a
shared machine, time it when the load is low (``nice -n -5`` where allowed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tabular import ARMS, extract, load, run_arm

TARGETS = {1000: 50.0, 5000: 250.0}  # ms, the issue's


def timed(table_arm: str, table: object, sizes: list[int], window: int, seed: int
          ) -> dict[int, tuple[float, float]]:
    """The median ms per ask over the ``window`` asks after each size: wall, and the process's
    CPU time (what the sampler itself used, whatever else the machine runs)."""
    times: list[tuple[float, float]] = []
    run_arm(table, ARMS[table_arm](seed), max(sizes) + window, 2,  # type: ignore[arg-type]
            lambda wall, cpu: times.append((wall, cpu)))
    return {n: (1000 * statistics.median(w for w, _ in times[n:n + window]),
                1000 * statistics.median(c for _, c in times[n:n + window])) for n in sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 50,200,1000")
    parser.add_argument("--dataset", default="cora")
    parser.add_argument("--sizes", default=None, help="default 50,200,1000,5000")
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--peer", default="tpe", help="the arm timed beside (tpe, gp, nsga2)")
    parser.add_argument("--peer-max", type=int, default=1000,
                        help="the largest size the peer runs to")
    parser.add_argument("--bench-python", type=Path,
                        default=Path(__file__).resolve().parent.parent / ".venv-bench/bin/python")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in (args.sizes or ("50,200,1000" if args.quick
                                                     else "50,200,1000,5000")).split(","))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        table = load(extract(args.dataset, args.bench_python, Path(folder)))
    load_before = os.getloadavg()
    start = time.perf_counter()
    mine = timed("default", table, sizes, args.window, 0)
    peer_sizes = [n for n in sizes if n <= args.peer_max]
    theirs = timed(args.peer, table, peer_sizes, args.window, 0) if peer_sizes else {}
    print(f"NAS-Bench-Graph {args.dataset}: median ms per suggestion over {args.window} asks "
          f"after n trials, 2 at once")
    print("(wall ms, and in brackets the process's CPU ms; the target is on wall time)")
    print(f"{'n':>6}{'costaware':>18}{args.peer:>18}{'ratio':>8}  target")
    for n in sizes:
        (wall, cpu), peer = mine[n], theirs.get(n)
        target = TARGETS.get(n)
        verdict = "" if target is None else (f"<= {target:.0f} "
                                             f"{'met' if wall <= target else 'NOT met'}")
        print(f"{n:>6}{f'{wall:.1f} ({cpu:.1f})':>18}"
              f"{'' if peer is None else f'{peer[0]:.1f} ({peer[1]:.1f})':>18}"
              f"{'' if peer is None else f'{wall / peer[0]:.2f}':>8}  {verdict}")
    print(f"total {time.perf_counter() - start:.0f} s; load average (1, 5, 15 min) before "
          + " ".join(f"{v:.1f}" for v in load_before) + ", after "
          + " ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
