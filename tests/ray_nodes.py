"""``ray start`` nodes for the tests that start Ray clusters of their own, as a user would.

Each node runs ``ray start --block`` in its own process group, so the test ends exactly its
own nodes (``ray stop`` would end every Ray on the machine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["RAY", "START_TIMEOUT", "START_TRIES", "end_groups", "start_node"]

RAY = str(Path(sys.executable).with_name("ray"))
#: Tries per node: see :func:`start_node`.
START_TRIES = 3
#: What Ray says when a node's raylet did not register with the GCS in its 30 s.
START_TIMEOUT = "timed out during startup"


def start_node(args_of: Callable[[], list[str]], env: dict[str, str],
               log_of: Callable[[int], Path], groups: list[int]) -> list[str]:
    """``ray start --block`` with the arguments ``args_of()`` gives (fresh ports each try), in
    its own process group, until Ray says it started; returns the arguments that started it.

    Ray gives a new node's raylet 30 s to register with the GCS (a constant in Ray's code, not
    a setting) and ends ``ray start`` when it has not. On two busy cores that happens, so a
    node that ended that way is ended and started again, up to :data:`START_TRIES` times; any
    other ending fails the test at once."""
    for attempt in range(START_TRIES):
        args, log = args_of(), log_of(attempt)
        with log.open("wb") as out:
            proc = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args],
                                    env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        groups.append(proc.pid)  # its own process group: raylet, GCS, workers and all
        if _wait_started(proc, log):
            return args
        end_groups([proc.pid])
    pytest.fail(f"ray start timed out registering {START_TRIES} times: "
                f"{log.read_text(errors='replace')[-3000:]}")


def _wait_started(proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> bool:
    """True once the node started; False when ``ray start`` ended because its raylet did not
    register in time (worth another try); fails the test on any other ending or at timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "Ray runtime started" in text:
            return True
        if proc.poll() is not None:
            if START_TIMEOUT in text:
                return False
            pytest.fail(f"ray start ended: {text[-3000:]}")
        time.sleep(0.5)
    pytest.fail(f"ray start did not start in time: {log.read_text(errors='replace')[-3000:]}")


def end_groups(groups: list[int], grace: float = 15.0) -> None:
    """SIGTERM each node's process group (ray start ends its processes), SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        alive = []
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
                alive.append(pgid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            alive = [g for g in alive if _group_alive(g)]
            time.sleep(0.3)
        if not alive:
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
