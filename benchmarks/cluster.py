"""Driver throughput on a local multi-node Ray cluster, against plain Ray Tune + OptunaSearch
(issue 22, items 2 and 7; issue 34, item 3); and the fault scenarios on the same kind of cluster.

    python benchmarks/cluster.py [--concurrency 8,32,64] [--trials 400] [--epochs 4]
        [--epoch-seconds 1] [--nodes 4] [--cpus-per-node 16] [--arms nas,tune] [--fresh]
        [--phases] [--quick] [--faults]

Starts its own PostgreSQL (``initdb`` in a temporary folder, a free port on loopback) and its own
Ray cluster: ``ray start --block`` for a head and ``--nodes - 1`` more nodes, each with its own
temporary folder and explicitly chosen free ports, each in a process group of its own. It never
calls ``ray stop`` (that would end every Ray on the machine): it ends the process groups it
started, in a ``finally`` and on SIGINT/SIGTERM.

Per concurrency C, both arms run side by side against the same cluster and database, each as its
own driver process: (1) ``nas run`` of a study whose ``evaluator:`` sleeps ``--epoch-seconds``
per epoch (``benchmarks/_sleep_trial.py``), the study's default sampler (``costaware``: accuracy
and params, a cost known before training) over the ``quickstart`` space, no early stopping,
``resources.cpu`` = cluster CPUs / C (so C trials fit at once); (2) plain Ray Tune with
``OptunaSearch`` (multivariate TPE with a constant liar for the trials still running, what a
careful user picks; define-by-run over the same space, the same storage URL, a different study
name), the same sleeping trainable, the same CPUs per trial and ``max_concurrent_trials=C``.
Each arm's numbers come from its Optuna study (trial start = ask, end = tell), the same way for
both: wall seconds of the driver process, seconds to the first finished trial, finished trials
per second while active (first start to last end), mean busy slots (summed trial durations over
that window), engine/Tune ratio, % of the ideal (trials * epochs * epoch-seconds / C), and the
median seconds its sampler took per suggestion (``costaware`` records them on each trial,
``costaware:seconds``, its candidates' costing on the meta device included; the peer's sampler
is timed by a wrapper that records the same, ``bench:suggest_seconds``). Below each arm's row, what
its driver adds to a trial (the trials time themselves, ``$NAS_BENCH_TIMES``): the median and
90th percentile of a report's round trip (Tune's function trainable waits for the driver to
handle each result), a trial's seconds from ask to tell (median, mean, and mean past the first C
trials asked, whose worker processes start) against its function's seconds on the worker, the
median and mean time from a tell to the next ask, and a worker's refill: the time from one
function's end to the next one's start in the same worker process (Tune reuses its actors), the
freed slot's refill as the worker sees it. From ``studies.searcher.ASK_AHEAD_FROM`` (8) trials at
once the engine asks a trial ahead of a free slot: such a trial starts in the database before its
slot frees, so the engine's ask-to-tell spans, busy slots and tell-to-ask times include that
wait (trials per second and the worker's refill do not).

The arms run one after the other, so the second finds a cluster the first has run on (at 64
trials at once the arm that ran second did better in every pair of runs, whichever it was).
``--fresh`` runs each arm on a cluster of its own, started for it and ended after it (the same
nodes, ports chosen afresh), so neither arm inherits the other's state; ``--arms`` sets the
order.

``--phases`` also times, inside each driver process, the calls through which Tune hands the
driver's work to its searcher, and Tune's saving of its experiment state
(``benchmarks/_driver_phases.py``): printed below each arm as milliseconds a finished trial.
The engine's driver then runs as ``cluster.py _nas`` (``nas run`` in a process that times it).

``--faults`` runs, on a fresh small cluster, the fault scenarios: a worker node's raylet killed
mid-run, the head killed mid-run then ``nas resume`` on a new cluster, the driver killed
(SIGKILL) then ``nas resume``, and PostgreSQL restarted mid-run; each prints whether any trial
was left RUNNING and whether the budget held (counted trials == budget).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
RAY = str(BIN / "ray")
NAS = str(BIN / "nas")
NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
              "--runtime-env-agent-port")
GIB = 2**30
sys.path.insert(0, str(ROOT / "tests"))  # the tests' PostgreSQL and free-port helpers
from _driver_phases import PHASES_ENV, summary  # noqa: E402  (this script's folder)
from ports import free_ports  # noqa: E402


# ----------------------------------------------------------------------------- processes
def end_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
              grace: float = 15.0) -> None:
    """End the process group we started ``proc`` in (its own session): ``sig``, up to
    ``grace`` seconds for ``proc`` to end, then SIGKILL whatever of the group is left."""
    for s in (sig, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace if s == sig else 10.0)


#: The cluster's own HOME and token (``ray start --head`` turns token auth on where
#: ``~/.ray/auth_token`` exists; this cluster always uses its own): set by :func:`main`.
_OWN: dict[str, str] = {}


def own_auth(root: Path) -> None:
    """A HOME and a token of this benchmark's own, under ``root``."""
    import secrets

    home = root / "home"
    home.mkdir(exist_ok=True)
    token = root / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    _OWN.update(HOME=str(home), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))


def env(**extra: str) -> dict[str, str]:
    """The environment of the nodes and drivers: this checkout and ``benchmarks/`` importable,
    no Ray address, token or storage from outside (the cluster's own token, see
    :func:`own_auth`)."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "NAS_STORAGE", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN",
                        "RAY_AUTH_TOKEN_PATH")}
    out.update(_OWN)
    paths = [str(ROOT), str(BENCH), *[p for p in out.get("PYTHONPATH", "").split(os.pathsep)
                                      if p]]
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return {**out, "RAY_AIR_NEW_OUTPUT": "0", **extra}


# ----------------------------------------------------------------------------- PostgreSQL
def _postgres_bin() -> Path:
    from postgres_fixture import find_postgres_bin

    found = find_postgres_bin()
    if found is None:
        raise SystemExit("benchmarks/cluster.py: PostgreSQL is not installed (initdb, pg_ctl)")
    return found


class Postgres:
    """A throwaway PostgreSQL server on a free loopback port (as the tests start theirs)."""

    def __init__(self) -> None:
        # A folder of its own in /tmp: the server runs as `postgres` when we are root.
        root = Path(tempfile.mkdtemp(prefix="nas-bc-pg-", dir="/tmp"))
        self.bin, self.root = _postgres_bin(), root
        self.data, self.log = root / "data", root / "server.log"
        self.user = "postgres" if os.geteuid() == 0 else None
        self.port = 0
        if self.user is not None:
            import pwd

            entry = pwd.getpwnam(self.user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        self.port = free_ports(1)[0]
        self.start()
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            conn.execute('CREATE DATABASE "nas"')
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/nas"

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([str(self.bin / tool), *args], cwd=self.root, user=self.user,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "LC_ALL": "C"})
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {args[-1]} failed: {done.stderr.strip()[-500:]}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o",
                  f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                  "-c max_connections=400 -c fsync=off -c full_page_writes=off "
                  "-c synchronous_commit=off", "start")

    def restart(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w",
                  "-t", "60", "restart")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


# ----------------------------------------------------------------------------- Ray
@dataclass
class Cluster:
    """``nodes`` Ray nodes started with ``ray start --block``, each its own process group."""

    root: Path
    nodes: int
    cpus: int
    memory: int
    node_env: dict[str, str]
    groups: list[subprocess.Popen[bytes]] = field(default_factory=list)
    address: str = ""

    def _args(self, temp: str, ports: Iterator[int]) -> list[str]:
        args = ["--temp-dir", str(self.root / temp), "--num-cpus", str(self.cpus),
                "--memory", str(self.memory)]
        for flag in NODE_PORTS:
            args += [flag, str(next(ports))]
        return [*args, "--min-worker-port", "0", "--max-worker-port", "0"]

    def _start(self, name: str, args: list[str]) -> None:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args],
                                    env=self.node_env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.groups.append(proc)
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start {name} failed: "
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)

    def start(self) -> Cluster:
        ports = iter(free_ports(2 + self.nodes * len(NODE_PORTS)))
        gcs, dashboard = next(ports), next(ports)
        self.address = f"127.0.0.1:{gcs}"
        stamp = time.monotonic_ns() % 10**6
        self._start("head", ["--head", "--port", str(gcs), "--include-dashboard", "false",
                             "--dashboard-port", str(dashboard),
                             *self._args(f"h{stamp}", ports)])
        for i in range(1, self.nodes):
            self._start(f"node{i}", ["--address", self.address,
                                     *self._args(f"n{i}-{stamp}", ports)])
        return self

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index``'s process group (0: the head)."""
        end_group(self.groups[index], signal.SIGKILL)

    def stop(self) -> None:
        for proc in reversed(self.groups):
            end_group(proc)
        self.groups = []


# ----------------------------------------------------------------------------- the arms
def _study_file(folder: Path, name: str, trials: int, epochs: int, cpu: float) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "task": "digits", "space": "quickstart",
        "objectives": [{"name": "accuracy", "direction": "maximize"},
                       {"name": "params", "direction": "minimize"}],
        "budget": {"trials": trials},  # the default sampler
        "fidelity": {"epochs": epochs, "early_stopping": "none"},
        "resources": {"cpu": cpu}, "seed": 0, "evaluator": "_sleep_trial:evaluate",
        "tune": {"callbacks": [], "storage_path": str(folder / "tune" / name)},
    }, sort_keys=False))
    return path


def tune_arm_main(argv: list[str]) -> None:
    """``cluster.py _tune``: plain Ray Tune + OptunaSearch (one driver process)."""
    p = argparse.ArgumentParser()
    for name in ("--address", "--storage", "--name", "--folder"):
        p.add_argument(name, required=True)
    for name in ("--trials", "--epochs", "--concurrency"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--cpu", type=float, required=True)
    a = p.parse_args(argv)
    import logging

    import optuna
    import ray
    from _driver_phases import time_peer
    from _sleep_trial import QuickstartSpace, tune_trainable
    from _timed_sampler import TimedSampler
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    define_by_run = QuickstartSpace(a.epochs)

    ray.init(address=a.address, logging_level=logging.ERROR, log_to_driver=False)
    time_peer()
    sampler = TimedSampler(optuna.samplers.TPESampler(seed=0, multivariate=True,
                                                      constant_liar=True))
    searcher = OptunaSearch(define_by_run, metric=["accuracy", "params"], mode=["max", "min"],
                            sampler=sampler,
                            storage=optuna.storages.RDBStorage(a.storage), study_name=a.name)
    tuner = tune.Tuner(
        tune.with_resources(tune_trainable, {"cpu": a.cpu}),
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=a.trials,
                                    max_concurrent_trials=a.concurrency, reuse_actors=True),
        run_config=tune.RunConfig(name=a.name, storage_path=str(Path(a.folder) / "tune"),
                                  verbose=0))
    tuner.fit()


def nas_arm_main(argv: list[str]) -> None:
    """``cluster.py _nas ARGS``: ``nas run ARGS`` in this process, its driver's calls timed
    (``--phases``: ``benchmarks/_driver_phases.py``)."""
    from _driver_phases import time_engine

    from nas_cli.main import main as nas_main

    time_engine()
    sys.exit(nas_main(["run", *argv]))


def profile_main(argv: list[str]) -> None:
    """``cluster.py _profile STUDY.yaml --storage URL --address A``: ``nas run`` in this
    process under cProfile, counting the database's commits and statements; prints them per
    finished trial and the driver's top functions by cumulative time."""
    import cProfile
    import pstats

    import optuna
    import sqlalchemy as sa

    from nas_cli.main import main as nas_main

    counts = {"commit": 0, "statement": 0}

    def count(kind: str) -> Any:
        def listener(*args: Any, **kwargs: Any) -> None:
            counts[kind] += 1
        return listener

    sa.event.listen(sa.engine.Engine, "commit", count("commit"))
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count("statement"))
    study, storage, address, out = argv[0], argv[1], argv[2], argv[3]
    profiler = cProfile.Profile()
    profiler.enable()
    code = nas_main(["run", study, "--storage", storage, "--address", address])
    profiler.disable()
    name = yaml.safe_load(Path(study).read_text())["name"]
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    finished = max(1, sum(t.state.is_finished() for t in trials))
    print(f"profile: rc={code}; {finished} finished trials; per trial "
          f"{counts['commit'] / finished:.1f} commits, {counts['statement'] / finished:.1f} "
          "statements (the whole driver: the study's creation and lease included)", flush=True)
    profiler.dump_stats(out)
    pstats.Stats(out).sort_stats("cumulative").print_stats(40)


@dataclass
class Row:
    arm: str
    concurrency: int
    wall: float
    first: float
    finished: int
    per_second: float
    busy: float
    ideal: float
    code: int
    suggest: float = float("nan")  # median seconds the sampler took per suggestion
    latency: str = ""  # what the driver adds to a trial (:func:`latency`)
    #: Each finished trial's (ask, tell) as POSIX seconds, in the order asked.
    ended: list[tuple[float, float]] = field(default_factory=list)

    def cells(self) -> str:
        return (f"{self.arm:<6} {self.concurrency:>4} {self.wall:8.1f} {self.first:8.1f} "
                f"{self.finished:>6} {self.per_second:8.2f} {self.busy:7.1f} "
                f"{self.ideal / self.wall * 100:6.0f}% {self.suggest * 1000:9.1f}  "
                f"rc={self.code}")


def measure(url: str, name: str, arm: str, concurrency: int, started: datetime, wall: float,
            ideal: float, code: int) -> Row:
    """An arm's numbers from its Optuna study (trial start = ask, end = tell)."""
    import optuna

    trials = [t for t in optuna.load_study(study_name=name, storage=url).get_trials(
        deepcopy=False) if t.datetime_complete is not None and t.datetime_start is not None]
    if not trials:
        return Row(arm, concurrency, wall, float("nan"), 0, 0.0, 0.0, ideal, code)
    first_start = min(t.datetime_start for t in trials if t.datetime_start)
    last_end = max(t.datetime_complete for t in trials if t.datetime_complete)
    window = max(1e-9, (last_end - first_start).total_seconds())
    busy = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in trials
               if t.datetime_complete and t.datetime_start)
    first = min((t.datetime_complete for t in trials if t.datetime_complete),
                default=last_end)
    from _timed_sampler import PEER_SECONDS

    from studies.costaware import SECONDS_KEY

    spent = [s for t in trials for key in (SECONDS_KEY, PEER_SECONDS)
             if isinstance(s := t.system_attrs.get(key), (int, float))]
    ended = sorted((t.datetime_start.timestamp(), t.datetime_complete.timestamp())
                   for t in trials if t.datetime_start and t.datetime_complete)
    return Row(arm, concurrency, wall, (first - started).total_seconds(), len(trials),
               len(trials) / window, busy / window, ideal, code,
               statistics.median(spent) if spent else float("nan"), ended=ended)


def run_arm(arm: str, cluster: Cluster, url: str, folder: Path, concurrency: int,
            trials: int, epochs: int, seconds: float, log: Path, phases: bool = False) -> Row:
    total_cpus = cluster.nodes * cluster.cpus
    cpu = total_cpus / concurrency
    name = f"{arm}-c{concurrency}-{int(time.time())}"
    timed = folder / "phases" / name  # with --phases: what the driver's clocks wrote
    if phases:
        timed.mkdir(parents=True)
    if arm == "nas":
        study = _study_file(folder, name, trials, epochs, cpu)
        run = ([sys.executable, __file__, "_nas"] if phases else [NAS, "run"])
        command = [*run, str(study), "--storage", url, "--address", cluster.address]
    else:
        command = [sys.executable, __file__, "_tune", "--address", cluster.address,
                   "--storage", url, "--name", name, "--folder", str(folder),
                   "--trials", str(trials), "--epochs", str(epochs),
                   "--concurrency", str(concurrency), "--cpu", str(cpu)]
    started, clock = datetime.now(), time.monotonic()
    with log.open("ab") as out:
        out.write(f"\n=== {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(command, cwd=folder, env=env(
            NAS_BENCH_EPOCH_SECONDS=str(seconds), **({PHASES_ENV: str(timed)} if phases else {})),
            stdout=out, stderr=subprocess.STDOUT, timeout=6 * 3600)
    wall = time.monotonic() - clock
    row = measure(url, name, arm, concurrency, started, wall,
                  trials * epochs * seconds / concurrency, done.returncode)
    row.latency = latency(folder / "times", "nas" if arm == "nas" else "tune",
                          started.timestamp(), row.ended, concurrency)
    row.latency = "\n".join(x for x in (row.latency, summary(timed, arm, row.finished)) if x)
    return row


def latency(times: Path, arm: str, since: float, ended: list[tuple[float, float]],
            concurrency: int) -> str:
    """What the driver adds to a trial, from the lines ``benchmarks/_sleep_trial.py`` wrote
    (``$NAS_BENCH_TIMES``): the median round trip of a report (the worker waits for the driver
    to handle each result), and the median of a trial's seconds in the database (ask to tell)
    against the mean seconds its function ran on the worker (their difference is the launch
    and the end), and the mean past the first ``concurrency`` trials asked (those wait for
    their worker processes to start)."""
    lines = [{**json.loads(line), "pid": f.stem} for f in sorted(times.glob("*.jsonl"))
             for line in f.read_text().splitlines() if line.strip()]
    mine = [x for x in lines if x["arm"] == arm and x["entered"] >= since]
    # A worker process (Tune reuses its actor) runs one trial after another: the gap from one
    # function's end to the next one's start there is the freed slot's refill, as the worker
    # sees it (the driver's handling of the end, the next suggestion, Tune's reset and start).
    runs: dict[str, list[tuple[float, float]]] = {}
    for x in mine:
        runs.setdefault(x["pid"], []).append((x["entered"], x["left"]))
    refills = [b[0] - a[1] for spans in map(sorted, runs.values())
               for a, b in itertools.pairwise(spans)]
    trips = [r for x in mine for r in x["reports"] if r > 1e-3]  # the engine's held report: 0
    if not mine or not trips or not ended:
        return ""
    ran = statistics.mean(x["left"] - x["entered"] for x in mine)
    spans = [told - asked for asked, told in ended]  # in the order asked
    asks = [asked for asked, _ in ended]
    # A slot freed by a tell is taken by the next ask after it (while the budget lasts).
    gaps = [asks[i] - told for _, told in ended
            if (i := bisect.bisect_left(asks, told)) < len(asks)] or [float("nan")]
    q = statistics.quantiles(trips, n=10)
    return (f"  {arm}: a report's round trip median {statistics.median(trips) * 1000:.1f} ms "
            f"(p90 {q[-1] * 1000:.1f}, {len(trips)} reports); a trial "
            f"{statistics.median(spans):.3f} s ask to tell (median, mean "
            f"{statistics.mean(spans):.3f}, past the first {concurrency} "
            f"{statistics.mean(spans[concurrency:] or spans):.3f}), its function {ran:.3f} s on "
            "the worker (mean, "
            f"{len(mine)} trials); a tell to the next ask median "
            f"{statistics.median(gaps) * 1000:.0f} ms (mean {statistics.mean(gaps) * 1000:.0f})"
            + (f"; a worker's refill (one function's end to the next one's start) median "
               f"{statistics.median(refills) * 1000:.0f} ms (mean "
               f"{statistics.mean(refills) * 1000:.0f}, {len(refills)})" if refills else ""))


# ----------------------------------------------------------------------------- faults
def _counts(url: str, name: str) -> tuple[int, int]:
    """(trials RUNNING, counted trials) of a study."""
    import optuna
    from optuna.trial import TrialState

    from studies import counted_trials

    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    return sum(t.state == TrialState.RUNNING for t in trials), counted_trials(trials)


def _finished(url: str, name: str) -> int:
    import optuna

    try:
        trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    except Exception:  # not created yet, or the server is down
        return 0
    return sum(t.state.is_finished() for t in trials)


def fault_scenarios(args: argparse.Namespace, root: Path, pg: Postgres,
                    stack: ExitStack) -> list[str]:
    """Each scenario on a fresh small cluster; one line each."""
    budget, epochs, concurrency = 24, 3, 4
    lines = []
    for scenario in args.scenarios.split(","):
        folder = root / f"fault-{scenario}"
        folder.mkdir()
        cluster = Cluster(folder, 2, 2, 8 * GIB, env(NAS_BENCH_EPOCH_SECONDS="1"))
        stack.callback(cluster.stop)
        cluster.start()
        name = f"fault-{scenario}"
        study = _study_file(folder, name, budget, epochs, 2 * 2 / concurrency)
        log = folder / "driver.log"
        out = log.open("ab")
        command = [NAS, "run", str(study), "--storage", pg.url, "--address", cluster.address]
        proc = subprocess.Popen(command, cwd=folder, env=env(NAS_BENCH_EPOCH_SECONDS="1"),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(end_group, proc, signal.SIGKILL, 1.0)
        deadline = time.monotonic() + 600
        while _finished(pg.url, name) < budget // 3 and proc.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        note, resumed = "", False
        if scenario == "node":
            cluster.kill_node(1)
        elif scenario == "head":
            cluster.kill_node(0)
        elif scenario == "driver":
            end_group(proc, signal.SIGKILL, 1.0)
        else:
            pg.restart()
        code = proc.wait(timeout=900)
        if scenario in ("head", "driver") or code != 0:
            cluster.stop()
            cluster = Cluster(folder, 2, 2, 8 * GIB, env(NAS_BENCH_EPOCH_SECONDS="1"))
            stack.callback(cluster.stop)
            cluster.start()
            again = subprocess.run([NAS, "resume", name, "--storage", pg.url, "--address",
                                    cluster.address, "--evaluator", "_sleep_trial:evaluate"],
                                   cwd=folder,
                                   env=env(NAS_BENCH_EPOCH_SECONDS="1"), stdout=out,
                                   stderr=subprocess.STDOUT, timeout=900)
            note, resumed = f"; resume rc={again.returncode}", True
        out.close()
        cluster.stop()
        running, counted = _counts(pg.url, name)
        verdict = "OK" if running == 0 and counted == budget else "FAILED"
        lines.append(f"{scenario:<9} run rc={code}{note}: RUNNING left {running}, counted "
                     f"{counted}/{budget} -> {verdict}" + (" (after resume)" if resumed else ""))
        print(lines[-1], flush=True)
    return lines


# ----------------------------------------------------------------------------- main
def main() -> None:
    if sys.argv[1:2] == ["_tune"]:
        tune_arm_main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["_nas"]:
        nas_arm_main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["_profile"]:
        profile_main(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", default="8,32,64")
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--epoch-seconds", type=float, default=1.0)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--cpus-per-node", type=int, default=16)
    p.add_argument("--arms", default="nas,tune", help="which arms, in order (nas, tune)")
    p.add_argument("--fresh", action="store_true",
                   help="each arm on a cluster of its own, started for it")
    p.add_argument("--phases", action="store_true",
                   help="time each driver's calls (the engine's as `cluster.py _nas`, nas run "
                   "in a process that times it)")
    p.add_argument("--quick", action="store_true", help="concurrency 8,16 and 80 trials")
    p.add_argument("--faults", action="store_true", help="run the fault scenarios instead")
    p.add_argument("--scenarios", default="node,head,driver,database",
                   help="which fault scenarios --faults runs")
    p.add_argument("--profile", type=int, default=0, metavar="C",
                   help="instead: profile the engine's driver (cProfile, commits and "
                   "statements per trial) at concurrency C")
    args = p.parse_args()
    if args.quick:
        args.concurrency, args.trials = "8,16", 80
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    root = Path(tempfile.mkdtemp(prefix="nas-bc-", dir="/tmp"))  # short: Ray's socket paths

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    rows: list[Row] = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        own_auth(root)
        pg = Postgres()
        stack.callback(pg.remove)
        if args.faults:
            fault_scenarios(args, root, pg, stack)
            return
        memory = args.cpus_per_node * 2 * GIB  # Ray's logical `memory`: CPUs bound the slots
        (root / "times").mkdir()
        cluster = Cluster(root, args.nodes, args.cpus_per_node, memory,
                          env(NAS_BENCH_EPOCH_SECONDS=str(args.epoch_seconds),
                              NAS_BENCH_TIMES=str(root / "times")))
        stack.callback(cluster.stop)  # before it starts: a node that fails ends the others
        cluster.start()
        log = Path(os.environ.get("NAS_BENCH_LOG") or root / "drivers.log")
        print(f"cluster {args.nodes} nodes x {args.cpus_per_node} CPUs at {cluster.address}; "
              f"PostgreSQL {pg.url}; {args.trials} trials x {args.epochs} epochs x "
              f"{args.epoch_seconds:g} s; drivers' output in {log}"
              f"{'; each arm on a fresh cluster' if args.fresh else ''}", flush=True)
        if args.profile:
            c = args.profile
            name = f"prof-c{c}-{int(time.time())}"
            study = _study_file(root, name, args.trials, args.epochs,
                                args.nodes * args.cpus_per_node / c)
            out = Path(os.environ.get("NAS_BENCH_PROFILE") or root / f"{name}.prof")
            subprocess.run([sys.executable, __file__, "_profile", str(study), pg.url,
                            cluster.address, str(out)], cwd=root, timeout=6 * 3600,
                           env=env(NAS_BENCH_EPOCH_SECONDS=str(args.epoch_seconds)))
            return
        print("arm       C   wall s  first s  trials  trials/s   busy  ideal  suggest ms",
              flush=True)
        for c in levels:
            pair: dict[str, Row] = {}
            for arm in args.arms.split(","):
                if args.fresh and (pair or c != levels[0]):  # the first arm takes the first
                    cluster.stop()
                    cluster.start()
                row = run_arm(arm, cluster, pg.url, root, c, args.trials, args.epochs,
                              args.epoch_seconds, log, args.phases)
                pair[arm] = row
                rows.append(row)
                print(row.cells(), flush=True)
                if row.latency:
                    print(row.latency, flush=True)
            if "nas" in pair and "tune" in pair and pair["tune"].per_second > 0:
                print(f"  engine/Tune at C={c}: trials/s "
                      f"{pair['nas'].per_second / pair['tune'].per_second:.2f}x, wall "
                      f"{pair['tune'].wall / pair['nas'].wall:.2f}x", flush=True)


if __name__ == "__main__":
    main()
