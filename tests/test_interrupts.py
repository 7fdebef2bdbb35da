"""Stopping a run with Ctrl-C (SIGINT) or SIGTERM (issue 37, item 1).

The first signal stops launching trials, closes the running ones as interrupted (enqueued
again) and ends the command in one line: the counts and the `nas resume` command that continues
it; exit 130 (SIGINT) or 143 (SIGTERM), without Ray's fatal-signal dump or a traceback. A second
Ctrl-C ends at once, and the printed resume closes what it left running. Ctrl-C is typed into a
real pseudo-terminal (the terminal driver signals the foreground process group, as a user's
terminal does); SIGTERM is sent to the driver's pid, as a batch scheduler does.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import shlex
import signal
import subprocess
import termios
import threading
import time
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h
from optuna.trial import TrialState

from nas_cli._signals import interrupted_line, resume_command
from studies import StudySpec, counted_trials, create_study, run_study
from studies.interrupts import (
    Interrupted,
    SignalStop,
    Stopped,
    check_signal,
    deferring,
    handling,
    kept_over,
    stopping_on_signals,
)
from studies.store import StudyKey, TrialKey

ray_local = h.ray_local

BUDGET = 8
#: 8 networks x 4 learning rates: few draws repeat one (a reused result ends at once).
SPACE = {**h.SMALL_SPACE, "train": {"lr": {"choices": [0.001, 0.002, 0.003, 0.004]}}}
#: What Ray's C failure-signal handler prints on SIGTERM, and what a traceback starts with.
DUMP_MARKS = ("SIGTERM received", "PC: @", "*** ", "Traceback")


# ----------------------------------------------------------------------------- in-process
@pytest.fixture()
def own_handlers() -> Iterator[dict[int, Any]]:
    """Handlers of this process's own for SIGINT and SIGTERM (a program calling run_study),
    put back as they were after the test."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def mine(signum: int, frame: Any) -> None:
        raise AssertionError(f"the caller's handler ran for signal {signum}")

    for s in before:
        signal.signal(s, mine)
    yield {s: mine for s in before}
    for s, handler in before.items():
        signal.signal(s, handler)


def test_a_signal_raises_interrupted_and_the_handlers_come_back(
        own_handlers: dict[int, Any]) -> None:
    for signum, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        with pytest.raises(Interrupted) as caught, stopping_on_signals("s", "m:f") as stop:
            assert signal.getsignal(signal.SIGINT) is signal.getsignal(signal.SIGTERM) is stop
            assert (stop.study, stop.evaluator) == ("s", "m:f")
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises before this ends
        assert caught.value.signum == signum and caught.value.exit_code == code
        assert stop.received == signum
        assert {s: signal.getsignal(s) for s in own_handlers} == own_handlers


def test_a_second_signal_calls_on_repeat_and_raises_again() -> None:
    repeats: list[int] = []
    stop = SignalStop(on_repeat=repeats.append)
    with pytest.raises(Interrupted):
        stop(signal.SIGTERM, None)
    assert repeats == []  # the first stops the run: the caller closes its trials
    with pytest.raises(Interrupted) as caught:
        stop(signal.SIGINT, None)
    assert repeats == [signal.SIGINT] and caught.value.signum == signal.SIGINT
    assert stop.received == signal.SIGTERM


def test_in_tunes_loop_the_first_signal_waits_for_a_step(own_handlers: dict[int, Any]) -> None:
    """While deferring (Tune's loop), the first signal is raised by check_signal (between
    two steps), or at the end of the block; a second one at once."""
    with handling(SignalStop()) as stop:
        with pytest.raises(Interrupted) as caught, deferring():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler has run: it only recorded the signal
            assert stop.received == signal.SIGTERM
            check_signal()
            pytest.fail("check_signal did not raise")
        assert caught.value.signum == signal.SIGTERM
        check_signal()  # raised once only
    with handling(SignalStop()) as stop, pytest.raises(Interrupted), deferring():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # not raised here: at the block's end
    with handling(SignalStop()) as stop, pytest.raises(Interrupted) as caught, deferring():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)  # a second one: at once
        time.sleep(5)
    assert caught.value.signum == signal.SIGINT and stop.received == signal.SIGTERM


def test_the_handler_is_installed_again_over_what_ray_init_sets(
        own_handlers: dict[int, Any]) -> None:
    """Ray's init replaces SIGTERM's handler: one installed before it is put back after."""
    with handling(SignalStop()) as stop:
        with kept_over():
            signal.signal(signal.SIGTERM, lambda signum, frame: None)  # as ray.init does
        assert signal.getsignal(signal.SIGTERM) is stop
    with kept_over():  # none of ours installed: what is set inside stays
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_run_study_in_process_keeps_the_callers_handlers(
        tmp_path: Path, ray_local: None, own_handlers: dict[int, Any]) -> None:
    """A program (a notebook) that calls run_study keeps its handlers; ours handle the
    signals only while the study runs."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict("inproc", budget={"trials": 2},
                                            evaluator="study_helpers:instant"))
    during: list[Any] = []
    run_study(create_study(spec, url, geometry=h.GEOMETRY), progress=False,
              on_start=lambda counted: during.append(signal.getsignal(signal.SIGTERM)))
    assert len(during) == 1 and isinstance(during[0], SignalStop)
    assert {s: signal.getsignal(s) for s in own_handlers} == own_handlers
    assert counted_trials(h.load(url, "inproc")) == 2


def test_the_line_names_the_resume_command_with_its_flags() -> None:
    stopped = Stopped("it's mine", "pkg.mod:fn", budget=8, finished=3, closed=1)
    args = Namespace(command="run", storage="sqlite:///a b.db", address="auto")
    line = interrupted_line(args, Interrupted(signal.SIGTERM, stopped))
    assert line == ("nas run: stopped by SIGTERM: study \"it's mine\", 3 of 8 trials finished, "
                    "1 running trial closed as interrupted (they run again), 5 still to run; "
                    "continue with: nas resume 'it'\"'\"'s mine' --storage 'sqlite:///a b.db' "
                    "--evaluator pkg.mod:fn --address auto")
    plain = Namespace(command="resume", storage=None, address=None)
    assert resume_command(plain, "s", None) == "nas resume s"  # $NAS_STORAGE is read again
    assert interrupted_line(plain, Interrupted(signal.SIGINT)) == (
        "nas resume: interrupted by SIGINT")  # before the study ran: nothing to continue
    # A name read from the database cannot drive the terminal.
    assert "\x1b" not in resume_command(plain, "s\x1b[2J", "m:f\x1b]0;x\x07")


# ----------------------------------------------------------------------------- processes
class Terminal:
    """``nas ARGS`` on a new pseudo-terminal, its controlling terminal (^C typed there is a
    SIGINT to it, as at a shell's prompt); its output read by a thread, so that the child never
    blocks on a full terminal.

    This process keeps the terminal's other end open, as the shell of a real terminal does.
    With the child its only holder, the terminal hangs up the moment the child ends, and Linux
    may then answer the reader with EIO before what the child wrote last has reached it (a
    second Ctrl-C's line, written just before ``os._exit``)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.fd, self._other_end = os.openpty()
        self.pid = os.fork()
        if self.pid == 0:  # the child: a session of its own, the terminal its controlling one
            try:
                os.close(self.fd)
                os.setsid()
                fcntl.ioctl(self._other_end, termios.TIOCSCTTY, 0)
                for target in (0, 1, 2):
                    os.dup2(self._other_end, target)
                os.chdir(cwd)
                os.execve(h.NAS[0], [*h.NAS, *args], env)
            finally:
                os._exit(127)
        self.output = bytearray()
        self.status: int | None = None
        self._ended = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # EIO: the terminal hung up
                    return
                if not data:
                    return
                self.output += data
            elif self._ended.is_set():  # the child has ended and nothing came for 0.2 s
                return

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def alive(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status is None

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                pytest.fail(f"`nas` did not end in {timeout} s: {self.text()[-2000:]}")
            time.sleep(0.1)
        self._ended.set()
        self._reader.join(timeout=10)
        os.close(self.fd)
        os.close(self._other_end)
        assert self.status is not None
        return self.status

    def text(self) -> str:
        return self.output.decode(errors="replace")


def _wait_for_training(url: str, name: str, alive: Any, *, counted: int = 1,
                       timeout: float = 300) -> None:
    """Until ``counted`` trials are counted and one is training."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert alive(), "the driver ended before it was stopped"
        try:
            trials = h.load(url, name)
        except (KeyError, optuna.exceptions.StorageInternalError):
            trials = []  # not created yet
        if counted_trials(trials) >= counted and any(
                t.state == TrialState.RUNNING and TrialKey.ARCH in t.user_attrs for t in trials):
            return
        time.sleep(0.3)
    pytest.fail("the study did not start training in time")


def _stop_line(output: str, command: str, signame: str) -> re.Match[str]:
    """The one line the stopped command ended with (and no dump, no traceback)."""
    for mark in DUMP_MARKS:
        assert mark not in output, output[-3000:]
    lines = [line for line in re.split(r"[\r\n]+", output) if "nas resume" in line]
    assert len(lines) == 1, output[-3000:]
    match = re.search(rf"nas {command}: stopped by {signame}: (?:the promoted )?study '(.+)', "
                      r"(\d+) of (\d+) trials finished, (\d+) running trials? closed as "
                      r"interrupted \(they run again\), (\d+) still to run; continue with: "
                      r"(nas resume .+)$", lines[0])
    assert match, lines[0]
    return match


def _check_closed(url: str, name: str, line: re.Match[str], *, budget: int = BUDGET,
                  interrupted_before: frozenset[int] = frozenset()) -> set[int]:
    """The database agrees with the line: nothing RUNNING, the counts, each trial the stop
    closed (not one of ``interrupted_before``) enqueued again. Returns the interrupted
    trials."""
    trials = h.load(url, name)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    interrupted = {t.number for t in trials
                   if t.user_attrs.get(TrialKey.STATUS) == "interrupted"}
    finished, total, closed, to_run = (int(line.group(i)) for i in (2, 3, 4, 5))
    assert (finished, total, to_run) == (counted_trials(trials), budget, budget - finished)
    assert closed == len(interrupted - interrupted_before) >= 1
    reruns = {t.user_attrs.get(TrialKey.RERUN_OF) for t in trials}
    for t in trials:
        if t.number in interrupted - interrupted_before and TrialKey.ARCH in t.user_attrs:
            assert t.number in reruns  # its configuration runs again
    return interrupted


def _finish(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the printed ``nas resume ...`` command to its end."""
    words = shlex.split(command)
    assert words[:2] == ["nas", "resume"]
    done = subprocess.run([*h.NAS, *words[1:]], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _study_file(tmp_path: Path, name: str = "k") -> Path:
    return h.write_study(tmp_path / f"{name}.yaml", name, space=SPACE,
                         budget={"trials": BUDGET}, evaluator="study_helpers:slow")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ctrl_c_closes_the_run_and_says_how_to_resume(tmp_path: Path) -> None:
    """Ctrl-C on `nas run`, then on the `nas resume` it printed; the resume it printed then
    finishes the study."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    env = h.subprocess_env(NAS_FAKE_SLEEP="1.5")
    term = Terminal(["run", str(_study_file(tmp_path)), "--storage", url], env, tmp_path)
    _wait_for_training(url, "k", term.alive)
    term.type(b"\x03")
    assert term.wait(120) == 130
    line = _stop_line(term.text(), "run", "SIGINT")
    assert line.group(1) == "k"
    assert line.group(6) == shlex.join(["nas", "resume", "k", "--storage", url, "--evaluator",
                                        "study_helpers:slow"])
    before = _check_closed(url, "k", line)

    # The resume it printed, stopped the same way: the same line, from `nas resume`.
    term = Terminal(shlex.split(line.group(6))[1:], env, tmp_path)
    _wait_for_training(url, "k", term.alive, counted=0)
    term.type(b"\x03")
    assert term.wait(120) == 130
    again = _stop_line(term.text(), "resume", "SIGINT")
    assert again.group(6) == line.group(6)
    _check_closed(url, "k", again, interrupted_before=frozenset(before))

    done = _finish(again.group(6), h.subprocess_env(NAS_FAKE_SLEEP="0.05"), tmp_path)
    assert "Pareto front of 'k'" in done.stdout
    trials = h.load(url, "k")
    assert counted_trials(trials) == BUDGET
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_on_the_driver_is_143_without_rays_dump(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    env = h.subprocess_env(NAS_FAKE_SLEEP="1.5")
    log = tmp_path / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*h.NAS, "run", str(_study_file(tmp_path)), "--storage", url],
                                env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            _wait_for_training(url, "k", lambda: proc.poll() is None)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=120) == 143
        finally:
            if proc.poll() is None:
                proc.kill()
    line = _stop_line(log.read_text(), "run", "SIGTERM")
    assert line.group(6) == shlex.join(["nas", "resume", "k", "--storage", url, "--evaluator",
                                        "study_helpers:slow"])
    _check_closed(url, "k", line)  # the Ctrl-C test runs such a resume to its end


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_second_ctrl_c_ends_at_once_and_resume_closes_what_it_left(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    env = h.subprocess_env(NAS_FAKE_SLEEP="1.5")
    term = Terminal(["run", str(_study_file(tmp_path)), "--storage", url], env, tmp_path)
    _wait_for_training(url, "k", term.alive)
    # Ctrl-C again and again, as an impatient user does: the first stops the run, one of the
    # next lands while its trials are being closed.
    deadline = time.monotonic() + 60
    while term.alive() and time.monotonic() < deadline:
        term.type(b"\x03")
        time.sleep(0.01)
    assert term.wait(60) == 130
    output = term.text()
    for mark in DUMP_MARKS:
        assert mark not in output, output[-3000:]
    lines = [line for line in re.split(r"[\r\n]+", output) if "nas resume" in line]
    assert len(lines) == 1, output[-3000:]
    command = shlex.join(["nas", "resume", "k", "--storage", url, "--evaluator",
                          "study_helpers:slow"])
    assert lines[0] == ("nas run: stopped at once by a second SIGINT; trials left running are "
                        f"closed by: {command}"), output[-3000:]
    left = [t.number for t in h.load(url, "k") if t.state == TrialState.RUNNING]

    _finish(command, h.subprocess_env(NAS_FAKE_SLEEP="0.05"), tmp_path)
    trials = h.load(url, "k")
    assert counted_trials(trials) == BUDGET
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for t in trials:  # what the stop left RUNNING, the resume closed as interrupted
        if t.number in left:
            assert t.user_attrs[TrialKey.STATUS] == "interrupted"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_on_promote_says_how_to_continue_the_promotion(tmp_path: Path,
                                                               ray_local: None) -> None:
    """A promotion stopped is continued by `nas resume NAME-promoted` (a second `nas promote`
    would start another promotion, NAME-promoted-2), which stores its rank agreement."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict("src", budget={"trials": BUDGET},
                                            evaluator="study_helpers:slow"))
    # The workers of this process's Ray sleep 1 s an epoch ($NAS_FAKE_SLEEP unset).
    run_study(create_study(spec, url, geometry=h.GEOMETRY), progress=False)
    env = h.subprocess_env(NAS_FAKE_SLEEP="1.5")
    log = tmp_path / "promote.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*h.NAS, "promote", "src", "--top", "3", "--evaluator",
                                 "study_helpers:slow", "--storage", url],
                                env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            _wait_for_training(url, "src-promoted", lambda: proc.poll() is None, counted=0)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=120) == 143
        finally:
            if proc.poll() is None:
                proc.kill()
    line = _stop_line(log.read_text(), "promote", "SIGTERM")
    assert line.group(1) == "src-promoted"
    assert line.group(6) == shlex.join(["nas", "resume", "src-promoted", "--storage", url,
                                        "--evaluator", "study_helpers:slow"])
    chosen = {t.user_attrs[TrialKey.SOURCE_TRIAL] for t in h.load(url, "src-promoted")}
    _check_closed(url, "src-promoted", line, budget=len(chosen))
    _finish(line.group(6), h.subprocess_env(NAS_FAKE_SLEEP="0.05"), tmp_path)
    promoted = optuna.load_study(study_name="src-promoted", storage=url)
    assert counted_trials(promoted.trials) == int(line.group(3))
    assert promoted.user_attrs[StudyKey.FIDELITY]["pairs"] >= 2
