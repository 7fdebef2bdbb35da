"""``nas``: the command line.

User errors (``NasError``) end with one line on stderr and exit code 2; tracebacks only with
``--debug``. Heavy imports happen inside the subcommands so ``nas --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from nas.errors import NasError

__all__ = ["main"]

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# ----------------------------------------------------------------------------- subcommands
def _cmd_presets(args: argparse.Namespace) -> int:
    from nas.cost import estimate_cost
    from nas.presets import get_preset, list_presets

    rows: list[dict[str, Any]] = []
    for info in list_presets():
        cost = estimate_cost(get_preset(info["name"]))
        rows.append({**info, "params": cost.params, "madds": cost.madds, "task": cost.task})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'preset':<15} {'family':<7} {'params':>12} {'MAdds':>16}  {'task':<14} note")
    for r in rows:
        print(f"{r['name']:<15} {r['family']:<7} {r['params']:>12,} {r['madds']:>16,}  "
              f"{r['task']:<14} {r['note']}")
    return 0


def _cmd_cost(args: argparse.Namespace) -> int:
    from nas.cost import estimate_cost
    from nas.loading import load_arch

    config = load_arch(args.arch, args.set)
    cost = estimate_cost(config, args.task)
    if args.json:
        print(json.dumps(cost.to_dict()))
        return 0
    print(f"arch {args.arch} ({cost.family}, arch_id {cost.arch_id}) on task {cost.task}")
    print(f"{'part':<12} {'params':>14} {'weights only':>14} {'MAdds':>18}")
    for name, part in cost.parts.items():
        print(f"{name:<12} {part.params:>14,} {part.params_matrix:>14,} {part.madds:>18,}")
    print(f"{'total':<12} {cost.params:>14,} {cost.params_matrix:>14,} {cost.madds:>18,}")
    return 0


# ----------------------------------------------------------------------------- parser
def _add_arch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("arch", metavar="ARCH", help="a preset name or a YAML/JSON architecture file")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a key of the architecture (value parsed as YAML); repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nas",
        description="Architecture search for lightweight vision-and-language Transformers.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("presets", help="list the architecture presets with their costs")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=_cmd_presets)

    p = sub.add_parser(
        "cost", help="build an architecture on the meta device and report its cost",
        description="Report params, weight-matrix params and MAdds, split by part, of ARCH on a "
        "task geometry, without training and without allocating weights.",
    )
    _add_arch_args(p)
    p.add_argument("--task", default=None, help="task geometry (default: the family's task)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_cost)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nas`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except NasError as exc:
        if args.debug:
            raise
        message = " ".join(str(exc).split())  # always one line
        print(f"nas {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"nas {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
