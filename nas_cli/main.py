"""``nas``: the command line.

Every subcommand lives in its own module ``nas_cli/<name>_cmd.py`` and registers itself:
``register(subparsers)`` adds its parser (cheaply: the module imports only argparse and
``nas_cli._common`` at the top) and sets ``func``, the function that runs it, which imports the
heavy things (torch, Optuna, Ray, Dash) when it is called. So ``nas --help`` and every
``nas COMMAND --help`` answer without them. A command whose output shows what the study
database holds sets ``prints_stored=True``: its standard output is then made inert (no escape
sequence from the database reaches the terminal). A new command is a new module and one entry
in ``COMMANDS``.

User errors (``NasError``) end with one line on stderr and exit code 2; tracebacks only with
``--debug``. Ctrl-C (SIGINT) and SIGTERM end a command in one line too, exit code 130 and 143;
on the commands that run a study (``runs_study=True``) the line says what was stopped and the
``nas resume`` command that continues it (``nas_cli._signals``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NoReturn

from nas.errors import NasError
from nas_cli import (
    cost_cmd,
    dashboard_cmd,
    data_cmd,
    export_cmd,
    pareto_cmd,
    presets_cmd,
    promote_cmd,
    resume_cmd,
    run_cmd,
    status_cmd,
    train_cmd,
)
from nas_cli._signals import CommandStop, interrupted_line, shut_down_ray, stopping
from studies.interrupts import Interrupted

__all__ = ["COMMANDS", "build_parser", "main"]

EXIT_USAGE = 2

#: The subcommands' modules, in the order ``nas --help`` lists them.
COMMANDS: tuple[ModuleType, ...] = (
    presets_cmd, cost_cmd, train_cmd, run_cmd, resume_cmd, status_cmd, pareto_cmd, promote_cmd,
    export_cmd, dashboard_cmd, data_cmd,
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``nas`` parser, every subcommand registered by its module."""
    parser = _Parser(
        prog="nas",
        description="Architecture search for lightweight vision-and-language Transformers.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.set_defaults(prints_stored=False, runs_study=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def _log_levels(args: argparse.Namespace) -> None:
    """The libraries' log levels for this process, set here rather than at import: Optuna's
    INFO lines (a study created, each trial told) are not the command's output."""
    if args.prints_stored or args.command == "dashboard":  # the commands that read studies
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nas`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    _log_levels(args)
    with stopping(args) as stop:
        return _dispatch(args, stop)


def _dispatch(args: argparse.Namespace, stop: CommandStop | None) -> int:
    """Run the command; a user error or a signal ends it in one line on stderr."""
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        if args.prints_stored:  # what the database holds cannot drive the terminal
            from studies.store import InertStream

            with contextlib.redirect_stdout(InertStream(sys.stdout)):
                return func(args)
        return func(args)
    except NasError as exc:
        if args.debug:
            raise
        from studies.store import inert

        message = inert(" ".join(str(exc).split()))  # always one line, never an escape sequence
        print(f"nas {args.command}: error: {message}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (`nas status | head`): nothing to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet too
        return 1
    except KeyboardInterrupt as exc:  # a SIGINT or SIGTERM, see nas_cli._signals
        stopped = exc if isinstance(exc, Interrupted) else Interrupted(
            (stop.received if stop is not None else None) or signal.SIGINT)
        print(interrupted_line(args, stopped), file=sys.stderr, flush=True)
        if stop is not None:
            stop.reported = True
            shut_down_ray()  # while `stop` ends the process at a second signal
        return stopped.exit_code


if __name__ == "__main__":
    sys.exit(main())
