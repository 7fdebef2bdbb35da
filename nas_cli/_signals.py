"""Ctrl-C (SIGINT) and SIGTERM on the ``nas`` commands that run a study (``run``, ``resume``,
``promote``: those that set ``runs_study=True``).

For the whole command a ``studies.interrupts.SignalStop`` handles both signals. The first one
stops the run (``studies.engine.run_study`` closes the running trials as interrupted and
enqueues them again) and the command ends with ONE line on stderr: what was stopped, the counts,
and the ``nas resume`` command that continues it with the flags it needs; exit code 130 for
SIGINT, 143 for SIGTERM (128 + the signal's number, as a shell reports a process the signal
ended). A second signal ends the process at once with the same code: trials it leaves RUNNING
are closed by that ``nas resume``, which takes over the lease of a process that is gone.

After a stop, Ray is shut down before the command returns, while the handler still runs:
otherwise Ray's own shutdown at exit would run under Python's default handlers (a second Ctrl-C
there prints a traceback). After a run that ended by itself Ray still shuts down at exit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator

from studies.interrupts import Interrupted, SignalStop, Stopped, handling
from studies.interrupts import resume_command as continue_with

__all__ = ["CommandStop", "interrupted_line", "resume_command", "shut_down_ray", "stopping"]


def resume_command(args: argparse.Namespace, study: str, evaluator: str | None) -> str:
    """The ``nas resume`` command that continues ``study`` as this command ran it
    (``studies.interrupts.resume_command`` with the ``--storage`` and ``--address`` given)."""
    return continue_with(study, evaluator, storage=args.storage, address=args.address)


def _counts(stopped: Stopped) -> str:
    closed = f"{stopped.closed} running trial{'s' if stopped.closed != 1 else ''}"
    return (f"{stopped.finished} of {stopped.budget} trials finished, {closed} closed as "
            f"interrupted (they run again), {stopped.to_run} still to run")


def interrupted_line(args: argparse.Namespace, exc: Interrupted) -> str:
    """The one line a command ends with when a signal stopped it."""
    from studies.store import inert

    stopped = exc.stopped
    if stopped is None:
        return f"nas {args.command}: interrupted by {exc.name}"
    what = "the promoted study" if args.command == "promote" else "study"
    return (f"nas {args.command}: stopped by {exc.name}: {what} {inert(stopped.study)!r}, "
            f"{_counts(stopped)}; continue with: "
            f"{resume_command(args, stopped.study, stopped.evaluator)}")


class CommandStop(SignalStop):
    """The ``SignalStop`` of one command (``args``); ``reported``: its line was printed."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(on_repeat=self._at_once)
        self.args = args
        self.reported = False

    def _at_once(self, signum: int) -> None:
        """A second signal: end now, with one line unless the first was printed already."""
        if not self.reported:
            line = (f"nas {self.args.command}: stopped at once by a second "
                    f"{signal.Signals(signum).name}")
            if self.study is not None:
                line += (f"; trials left running are closed by: "
                         f"{resume_command(self.args, self.study, self.evaluator)}")
            # Written to the file descriptor: the handler may run inside a write to
            # sys.stderr (a signal interrupting it), which Python's stream refuses to reenter.
            with contextlib.suppress(OSError, ValueError):  # closed: the exit code says it
                newline = "\n" if os.isatty(2) else ""  # after the progress line
                os.write(2, f"{newline}{line}\n".encode(errors="replace"))
        os._exit(128 + signum)


@contextlib.contextmanager
def stopping(args: argparse.Namespace) -> Iterator[CommandStop | None]:
    """The command's :class:`CommandStop` while it runs (None for a command that runs no
    study); the handlers before are put back after it."""
    if not args.runs_study:
        yield None
        return
    with handling(CommandStop(args)) as stop:
        yield stop


def shut_down_ray() -> None:
    """Ray's shutdown, here rather than at exit (see the module's docstring)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
