"""A Ray cluster with token authentication, started as the README says, on this one machine.

A head and a second node start with ``ray start`` (each with its own temp folder and free
ports, never the machine's default Ray), both with ``RAY_AUTH_MODE=token`` and
``RAY_AUTH_TOKEN_PATH`` naming a token file made here. ``nas run --address`` with the same two
variables runs a study whose trials land on both nodes; without them, or with another token, it
ends in one line, exit 2, with nothing written (Ray alone would retry for 20 seconds, a warning a
second). ``HOME`` is a folder of the test's, so a ``~/.ray/auth_token`` of the machine plays no
part. The nodes are ended by their process groups (``ray stop`` would end every Ray here).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import study_helpers as h
from optuna.trial import TrialState
from ports import free_ports
from ray_nodes import START_TRIES, end_groups, start_node

from studies import counted_trials

#: Tests that start Ray nodes of their own run one at a time under `make test`'s two
#: processes (pytest-xdist's `--dist loadgroup`): a head takes Ray's default ports.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.xdist_group("ray-start")]

#: Ports of one node besides the head's GCS port, each given explicitly.
NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
              "--runtime-env-agent-port")
WORKER_PORTS = 16  # per node: Tune's trial actors, the driver's and the pool's workers
BUDGET = 4


def held(arch: dict[str, Any], settings: dict[str, Any], task: str,
         task_options: dict[str, Any], *, latency: bool = False,
         report: h.Report = None) -> dict[str, Any]:
    """The study's evaluator on the nodes (``test_cluster_token:held``): marks that it trains
    (a file in ``$NAS_HELD_DIR``), then waits for ``$NAS_HELD_DIR/gate`` (300 s at most)."""
    folder = Path(os.environ["NAS_HELD_DIR"])
    (folder / f"training-{os.getpid()}-{time.monotonic_ns()}").touch()
    deadline = time.monotonic() + 300
    while not (folder / "gate").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return h.instant(arch, settings, task, task_options, latency=latency, report=report)




def _env(home: Path, **extra: str) -> dict[str, str]:
    """A `nas` or `ray` environment: the study helpers importable, no Ray address or token
    from outside, ``HOME`` the test's."""
    env = h.subprocess_env(HOME=str(home))
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    return {**env, **extra}


@dataclass
class TokenCluster:
    address: str  # the head's GCS, 127.0.0.1:PORT
    token_env: dict[str, str]  # RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH, as on the nodes
    home: Path
    root: Path


def _alive_nodes(cluster: TokenCluster) -> int:
    probe = (f"import ray; ray.init(address={cluster.address!r}, logging_level='ERROR'); "
             "print(sum(1 for n in ray.nodes() if n['Alive']))")
    done = subprocess.run([sys.executable, "-c", probe], env=_env(cluster.home,
                          **cluster.token_env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenCluster]:
    # A short root: Ray's socket paths under each node's temp folder must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="nas-tok-", dir="/tmp"))
    home = tmp_path_factory.mktemp("home")
    token = root / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    token_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    (root / "held").mkdir()
    node_env = _env(home, NAS_HELD_DIR=str(root / "held"), **token_env)
    groups: list[int] = []
    per_node = len(NODE_PORTS) + WORKER_PORTS
    ports = iter(free_ports(START_TRIES * (2 + 2 * per_node)))  # every try's, all distinct

    def node_args(temp: str) -> list[str]:
        args = ["--temp-dir", str(root / temp), "--num-cpus", "1"]
        for flag in NODE_PORTS:
            args += [flag, str(next(ports))]
        workers = [str(next(ports)) for _ in range(WORKER_PORTS)]
        return [*args, "--worker-port-list", ",".join(workers)]

    def head_args() -> list[str]:
        return ["--head", "--port", str(next(ports)), "--include-dashboard", "false",
                "--dashboard-port", str(next(ports)), *node_args("head")]

    try:
        started = start_node(head_args, node_env, lambda n: root / f"head-{n}.log", groups)
        address = f"127.0.0.1:{started[started.index('--port') + 1]}"
        start_node(lambda: ["--address", address, *node_args("node")], node_env,
                    lambda n: root / f"node-{n}.log", groups)
        cluster = TokenCluster(address, token_env, home, root)
        deadline = time.monotonic() + 120
        while _alive_nodes(cluster) < 2:
            assert time.monotonic() < deadline, "the second node did not join"
            time.sleep(1)
        yield cluster
    finally:
        end_groups(groups)
        shutil.rmtree(root, ignore_errors=True)


def _study(tmp_path: Path) -> Path:
    """Four different networks, enqueued: each is trained (none reuses another's result)."""
    base = h.SMALL_SPACE["base"]
    enqueue = [{**base, "groups": g, "group_ffn": g > 1, "attention_sharing": a}
               for g in (1, 2) for a in ("none", "kv")]
    return h.write_study(tmp_path / "tok.yaml", "tok", budget={"trials": BUDGET},
                         enqueue=enqueue,
                         evaluator="test_cluster_token:held", fidelity={"epochs": 1},
                         tune={"storage_path": str(tmp_path / "tune")})


def _wait_for_two_training(held: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    """Until two trials train at once (:func:`held` holds them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the study ended before two trials trained at once"
        if len(list(held.glob("training-*"))) >= 2:
            return
        time.sleep(0.3)
    pytest.fail("two trials never trained at once on the two one-CPU nodes")


def test_a_study_runs_through_the_token_cluster(token_cluster: TokenCluster,
                                                tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    with (tmp_path / "run.log").open("w+") as log:
        proc = subprocess.Popen([*h.NAS, "run", str(_study(tmp_path)), "--address",
                                 token_cluster.address, "--storage", url],
                                env=_env(token_cluster.home, **token_cluster.token_env),
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            _wait_for_two_training(token_cluster.root / "held", proc, timeout=300)
        finally:
            (token_cluster.root / "held" / "gate").touch()  # held trials end, the rest run
            code = proc.wait(timeout=300)
        log.seek(0)
        stderr = log.read()
    assert code == 0, stderr[-3000:]
    assert "InvalidAuthToken" not in stderr
    trials = h.load(url, "tok")
    assert counted_trials(trials) == BUDGET
    assert all(t.state == TrialState.COMPLETE for t in trials), Counter(t.state for t in trials)
    placed = Counter(t.user_attrs.get("nas.node") for t in trials)
    # Two trials of one CPU each trained at once on two nodes of one CPU each: one per node.
    assert None not in placed and len(placed) == 2, placed


@pytest.mark.parametrize("token", ["none", "another"])
def test_a_client_without_the_token_is_refused_in_one_line(token: str,
                                                           token_cluster: TokenCluster,
                                                           tmp_path: Path) -> None:
    extra: dict[str, str] = {}
    if token == "another":
        other = tmp_path / "other_token"
        other.write_text(secrets.token_hex(32))
        extra = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(other)}
    db = tmp_path / "studies.db"
    done = subprocess.run([*h.NAS, "run", str(_study(tmp_path)), "--address",
                           token_cluster.address, "--storage", f"sqlite:///{db}"],
                          env=_env(token_cluster.home, **extra), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert "requires token authentication" in lines[0]
    assert "RAY_AUTH_MODE=token" in lines[0] and "RAY_AUTH_TOKEN_PATH" in lines[0]
    if token == "another":
        assert str(tmp_path / "other_token") in lines[0]
    assert not db.exists() and not (tmp_path / "tune").exists()
