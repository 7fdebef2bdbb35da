"""Stopping a run with SIGINT (Ctrl-C) or SIGTERM (``kill``, a batch scheduler, preemption).

While a study runs, the first SIGINT or SIGTERM raises :class:`Interrupted` (a
``KeyboardInterrupt``) in the main thread: no trial is launched any more, the running ones are
closed as interrupted and enqueued again (``studies.engine.run_study``), and the exception
carries what was stopped (:class:`Stopped`) to whoever prints it. While Ray Tune's loop runs,
it is raised between two of its steps (:func:`deferring`): raised wherever the main thread was,
it could break off a database call, whose driver then logs a traceback of its own. A second
signal while the trials are closed calls the handler's ``on_repeat`` (``nas`` ends at once: a
later ``nas resume`` closes what is left RUNNING), else raises :class:`Interrupted` again.

Why a handler of our own, and when: ``ray.init`` replaces SIGTERM's handler twice. Its Python
handler (``sys.exit(15)``) comes first; then Ray's core worker installs a C failure-signal
handler (Abseil's, for SIGSEGV, SIGILL, SIGFPE, SIGABRT and SIGTERM, calling the previous
handler after it) at the ``sigaction`` level, over Python's. On SIGTERM that handler prints a
stack dump (``*** SIGTERM received ...``, ``PC: @ ...``), Python's ``sys.exit`` runs, and (Ray
2.60) the process ends by SIGABRT while it exits: exit 134. Setting a Python handler with
``signal.signal`` after ``ray.init`` takes the ``sigaction`` back. So :func:`kept_over` puts back,
after ``ray.init``, a :class:`SignalStop` that was installed before it, and
:func:`stopping_on_signals` installs one (or reuses the one installed: the ``nas`` command's)
once Ray runs. Tune's own SIGINT handler (a graceful stop that returns as if the study had
ended) is off (``TUNE_DISABLE_SIGINT_HANDLER``, ``studies._tune``).

The handlers in place before are put back when the run ends: a program that calls ``run_study``
in-process (a notebook) keeps its own. (Ray's C handler for SIGTERM is not put back: Python
cannot; SIGTERM then goes to the Python handler Ray set, ``sys.exit``.)
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

__all__ = ["STOP_SIGNALS", "Interrupted", "SignalStop", "Stopped", "check_signal", "deferring",
           "handling", "kept_over", "resume_command", "stopping_on_signals"]

_Stop = TypeVar("_Stop", bound="SignalStop")

#: The signals that stop a run.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class Stopped:
    """What a stopped run left: study ``study`` (its ``evaluator``, the study key, which a
    resume must name), ``finished`` trials counted of ``budget``, ``closed`` running trials
    closed as interrupted by the stop (they run again on resume)."""

    study: str
    evaluator: str | None
    budget: int
    finished: int
    closed: int

    @property
    def to_run(self) -> int:
        """Trials still to run before the budget is spent."""
        return max(0, self.budget - self.finished)


class Interrupted(KeyboardInterrupt):
    """A run stopped by signal ``signum``; ``stopped`` says what it left (None: no study was
    running under this process then)."""

    def __init__(self, signum: int, stopped: Stopped | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.stopped = stopped

    @property
    def name(self) -> str:
        """``SIGINT`` or ``SIGTERM``."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's code of a process ended by the signal: 128 + its number (130, 143)."""
        return 128 + self.signum


class SignalStop:
    """The handler of :data:`STOP_SIGNALS`. The first one received raises :class:`Interrupted`,
    or, while ``deferring`` (Ray Tune's loop runs: :func:`deferring`), is only recorded, for
    :meth:`check` to raise where the run stops cleanly (not in the middle of a database
    write). Each later one calls ``on_repeat(signum)`` (which may end the process), then raises
    :class:`Interrupted` at once. ``study`` and ``evaluator`` name the study running under it,
    if any (set by :func:`stopping_on_signals`: what ``on_repeat`` may tell a user)."""

    def __init__(self, on_repeat: Callable[[int], None] | None = None) -> None:
        self.on_repeat = on_repeat
        self.received: int | None = None
        self.deferring = False
        self.study: str | None = None
        self.evaluator: str | None = None
        self._raised = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            if self.on_repeat is not None:
                self.on_repeat(signum)
            raise Interrupted(signum)
        self.received = signum
        if not self.deferring:
            self.check()

    def check(self) -> None:
        """Raise :class:`Interrupted` for the signal received, once."""
        if self.received is not None and not self._raised:
            self._raised = True
            raise Interrupted(self.received)


def _installed() -> SignalStop | None:
    """The :class:`SignalStop` handling SIGINT now, if any."""
    handler = signal.getsignal(signal.SIGINT)
    return handler if isinstance(handler, SignalStop) else None


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def handling(stop: _Stop) -> Iterator[_Stop]:
    """``stop`` handles :data:`STOP_SIGNALS` inside the block (in the main thread; elsewhere
    Python cannot set handlers and nothing changes); the handlers before are put back after."""
    if not _main_thread():
        yield stop
        return
    before: dict[signal.Signals, Any] = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, stop)
    try:
        yield stop
    finally:
        for s, handler in before.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)


@contextlib.contextmanager
def kept_over() -> Iterator[None]:
    """Around ``ray.init``: a :class:`SignalStop` handling the signals before it handles them
    after it too (Ray's SIGTERM handlers, Python's and the C one, are replaced)."""
    stop = _installed() if _main_thread() else None
    try:
        yield
    finally:
        if stop is not None:
            for s in STOP_SIGNALS:
                signal.signal(s, stop)


@contextlib.contextmanager
def deferring() -> Iterator[None]:
    """Inside the block (Ray Tune's loop) the first signal is only recorded: :func:`check_signal`
    raises it between Tune's steps, and the block's end raises it if none did."""
    stop = _installed() if _main_thread() else None
    if stop is None:
        yield
        return
    before, stop.deferring = stop.deferring, True
    try:
        yield
    finally:
        stop.deferring = before
    stop.check()


def check_signal() -> None:
    """Raise :class:`Interrupted` for a signal received while :func:`deferring` (a Tune
    callback calls it at the start of each step)."""
    stop = _installed()
    if stop is not None:
        stop.check()


@contextlib.contextmanager
def stopping_on_signals(study: str, evaluator: str | None = None) -> Iterator[SignalStop]:
    """While study ``study`` runs under this process (Ray started): the installed
    :class:`SignalStop` (``nas`` installs one for the whole command) or a new one handles
    :data:`STOP_SIGNALS`, installed again after whatever Ray set; the handlers before are put
    back after the block."""
    stop = _installed() or SignalStop()
    study_before, evaluator_before = stop.study, stop.evaluator
    stop.study, stop.evaluator = study, evaluator
    try:
        with handling(stop):
            yield stop
    finally:
        stop.study, stop.evaluator = study_before, evaluator_before


def resume_command(study: str, evaluator: str | None, *, storage: str | None = None,
                   address: str | None = None) -> str:
    """The ``nas resume`` command that continues ``study``: ``--storage`` and ``--address``
    when given (a storage from ``$NAS_STORAGE`` is read again, never printed), and
    ``--evaluator`` when the study names one (a resume runs it only when named). Names read
    from the database are made inert and quoted for a shell."""
    import shlex

    from studies.store import inert

    words = ["nas", "resume", inert(study)]
    if storage:
        words += ["--storage", storage]
    if evaluator:
        words += ["--evaluator", inert(evaluator)]
    if address:
        words += ["--address", address]
    return shlex.join(words)
