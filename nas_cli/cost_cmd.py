"""``nas cost``: an architecture's params, weight-matrix params and MAdds by part, built on the
meta device (see ``nas.cost``); torch is imported only when it runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from nas_cli._common import add_arch_args

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    from nas.cost import estimate_cost
    from nas.loading import exported_geometry, load_arch

    config = load_arch(args.arch, args.set)
    cost = estimate_cost(config, args.task or exported_geometry(args.arch))
    if args.json:
        print(json.dumps(cost.to_dict()))
        return 0
    print(f"arch {args.arch} ({cost.family}, arch_id {cost.arch_id}) on task {cost.task}")
    print(f"{'part':<12} {'params':>14} {'weights only':>14} {'MAdds':>18}")
    for name, part in cost.parts.items():
        print(f"{name:<12} {part.params:>14,} {part.params_matrix:>14,} {part.madds:>18,}")
    print(f"{'total':<12} {cost.params:>14,} {cost.params_matrix:>14,} {cost.madds:>18,}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``cost`` to the ``nas`` subcommands (``subparsers`` from ``add_subparsers``)."""
    p = subparsers.add_parser(
        "cost", help="build an architecture on the meta device and report its cost",
        description="Report params, weight-matrix params and MAdds, split by part, of ARCH on a "
        "task geometry, without training and without allocating weights.",
    )
    add_arch_args(p)
    p.add_argument("--task", default=None, help="task geometry (default: the family's task)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)
