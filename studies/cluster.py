"""Connecting to Ray: a local runtime, or an existing cluster with ``--address``.

The checks here run before a study is written: an address where nothing listens fails in one
line at once (Ray itself retries for minutes), a per-trial request finer than Ray schedules is
refused (Ray would reject each trial as Tune starts it), and so is one that no node of the
cluster can hold (Tune would wait for it forever).

Memory: each trial asks Ray for its ``memory`` resource (:class:`TrialResources`): the trial
process's baseline (measured by ``benchmarks/worker_memory.py``) plus the meta-device estimate
of training its architecture (``nas.memory``), so Ray never places more trials on a node than
its memory holds (Ray's memory monitor would kill them instead).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nas.errors import ConfigError, NasError, first_line
from studies._ray_auth import check_ray_token, token_error
from studies.interrupts import kept_over
from studies.spec import Resources

if TYPE_CHECKING:
    from ray.tune import PlacementGroupFactory

    from nas.memory import MemoryProfile
    from nas.tasks import TaskGeometry

__all__ = ["MEMORY_STEP", "RESOURCE_SCALING", "TRAINING_WORKER_BASELINE_BYTES",
           "WORKER_BASELINE_BYTES", "HeadWatch", "TrialResources", "check_ray_address",
           "check_resources", "connect", "count_slots"]

#: Ray counts a resource in units of 1/10,000 (``ray._raylet.RESOURCE_UNIT_SCALING``; its
#: ``MIN_RESOURCE_GRANULARITY`` is 0.0001): a nonzero request below one unit is refused.
RESOURCE_SCALING = 10_000

_MIB = 2**20
#: Resident memory of a trial process whose evaluator imports no torch (the tests' fake
#: evaluators): Ray's worker, Tune's function trainable and ``studies.worker``. Measured 200 MiB
#: (``benchmarks/worker_memory.py``: Ray 2.60, Python 3.11, Linux x86-64), rounded up.
WORKER_BASELINE_BYTES = 256 * _MIB
#: The same for a trial of the built-in trainer, after it trained: torch, timm, the models,
#: the trainers and the `digits` task imported and built. Measured 1,025 MiB peak (the same
#: benchmark; torch alone adds 500 MiB there, timm 120, the digits task 100), rounded up. A
#: larger task's data is not in it.
TRAINING_WORKER_BASELINE_BYTES = 1152 * _MIB
#: A trial's memory request is rounded up to this, so trials of similar size ask for the same
#: amount and Tune can reuse their actors (it reuses one only for an equal request).
MEMORY_STEP = 64 * _MIB


def check_ray_address(address: str | None, timeout: float = 5.0) -> None:
    """Fail fast, in one line, when ``address`` names a host:port where nothing listens.
    ``auto``, ``local`` and no address are left to ``ray.init``."""
    if not address or address in ("auto", "local"):
        return
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise NasError(f"--address must be 'auto', 'host:port' or 'ray://host:port', but got "
                       f"{address!r}.")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise NasError(f"Cannot reach the Ray cluster at {address!r}: {why}. Start it with "
                       "`ray start --head`, or leave out --address for a local Ray.") from None


def check_resources(resources: Resources) -> None:
    """Refuse a per-trial request that Ray cannot schedule: nonzero but less than one of its
    units (Ray's own test, ``int(quantity * RESOURCE_SCALING) == 0``)."""
    unit = 1 / RESOURCE_SCALING
    for key, value in (("cpu", resources.cpu), ("gpu", resources.gpu)):
        if value != 0 and int(value * RESOURCE_SCALING) == 0:
            raise ConfigError(
                f"Study key `resources.{key}` is {value:g}, finer than Ray schedules: a trial "
                f"asks for 0 {key} or from {unit:g} (Ray counts resources in units of {unit:g}) "
                "up to what one node of the cluster holds.")


#: What Ray's ``Node`` raises when a raylet it started did not register with the GCS in 30 s.
_RAY_START_TIMEOUT = "timed out during startup"


def _init(address: str | None) -> None:
    import ray
    from ray.exceptions import AuthenticationError

    check_ray_address(address)
    if ray.is_initialized():
        return
    check_ray_token(address)  # Ray would retry a refused token for 20 s, a warning a second
    try:
        with kept_over():  # a SignalStop handling SIGTERM before ray.init handles it after too
            if address:
                ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            else:
                # "local": a new runtime of our own, even where `ray start` left one running
                # (plain ray.init() would join it); --address joins a cluster on purpose.
                ray.init(address="local", include_dashboard=False,
                         logging_level=logging.ERROR, log_to_driver=False,
                         num_cpus=os.cpu_count())
    except AuthenticationError:  # token mode on here, but no token to be found
        raise token_error(address or "local") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise NasError(f"Cannot reach the Ray cluster at {address!r}: "
                       f"{first_line(exc)}") from None
    except Exception as exc:  # Ray raises a bare Exception when a node it starts is too slow
        if _RAY_START_TIMEOUT not in str(exc):
            raise
        raise NasError(f"Ray could not start its node on this machine: {first_line(exc)} "
                       "(Ray gives a new node 30 s to register, a constant of Ray's). Run "
                       "again when the machine is less loaded, or start Ray once with `ray "
                       "start --head` and pass `--address`.") from None


def _fits(node: Mapping[str, float], resources: Resources, memory: float) -> bool:
    return (node.get("CPU", 0) >= resources.cpu - 1e-9 and node.get("GPU", 0) >= resources.gpu
            - 1e-9 and node.get("memory", 0) >= memory)


def count_slots(nodes: Sequence[Mapping[str, float]], resources: Resources, memory: float) -> int:
    """How many trials asking for ``resources`` and ``memory`` bytes each the ``nodes`` (Ray's
    resources of each live node) hold at once; 0 when no node holds one."""
    slots = 0
    for n in nodes:
        if not _fits(n, resources, memory):
            continue
        per = [math.floor(n.get("memory", 0) / memory)] if memory > 0 else []
        if resources.cpu > 0:
            per.append(math.floor(n.get("CPU", 0) / resources.cpu + 1e-9))
        if resources.gpu > 0:
            per.append(math.floor(n.get("GPU", 0) / resources.gpu + 1e-9))
        slots += min(per) if per else 1
    return slots


def _live_nodes() -> list[dict[str, float]]:
    import ray

    return [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]


def connect(address: str | None, resources: Resources,
            memory: float = WORKER_BASELINE_BYTES) -> int:
    """Start or join Ray; the number of trials that can run at once with ``resources`` and
    ``memory`` bytes (Ray's ``memory`` resource; by default the light trial process's baseline:
    the least any trial asks for) each.

    Raises:
        NasError: a request Ray cannot schedule (:func:`check_resources`), or no node of the
            cluster has the CPUs, GPUs and memory one trial asks for.
    """
    check_resources(resources)
    _init(address)
    nodes = _live_nodes()
    slots = count_slots(nodes, resources, memory)
    if not slots:
        largest: Mapping[str, float] = max(
            nodes, key=lambda n: (n.get("GPU", 0), n.get("CPU", 0), n.get("memory", 0)),
            default={})
        raise NasError(
            f"Study key `resources` asks for {resources.cpu:g} cpu and {resources.gpu:g} gpu per "
            f"trial and a trial process needs {memory / 2**30:.2f} GiB of memory, but the "
            f"largest node of the Ray cluster has {largest.get('CPU', 0):g} CPUs, "
            f"{largest.get('GPU', 0):g} GPUs and {largest.get('memory', 0) / 2**30:.2f} GiB for "
            "Ray's workers; lower `resources` or add such a node.")
    return slots


@dataclass
class TrialResources:
    """What one trial asks Ray for, from its config: the study's ``resources`` (cpu, gpu) and
    Ray's ``memory`` resource. Tune calls it per trial (``tune.with_resources`` takes a callable
    ``config -> resources``; Ray 2.60's function trainable calls it from
    ``default_resource_request``).

    A trial asks for ``baseline`` plus, when it trains on the CPU, the meta-device estimate of
    training its architecture at its batch sizes (``nas.memory.training_memory``); a trial with
    a GPU keeps its model on the GPU (the trainer checks its share there), so it asks for the
    baseline alone. The request is rounded up to :data:`MEMORY_STEP` and capped at ``cap`` (the
    largest node's memory): a trial estimated larger than every node runs alone on one, where
    the trainer's own memory check refuses it with the figures, instead of waiting forever.
    """

    resources: Resources
    baseline: int
    geometry: TaskGeometry
    cap: float
    _known: dict[str, MemoryProfile | None] = field(default_factory=dict, repr=False)

    def estimate(self, config: Mapping[str, Any]) -> int:
        """The meta-device estimate for the trial ``config`` (0 when it has no architecture
        or the estimate cannot be made: the baseline then stands alone). A config that carries
        it (``memory_estimate``: the searcher computed it from the profile costing the
        architecture gave, :meth:`from_profile`) is not estimated again (Tune calls this on
        its own copy of this object, whose cache starts empty)."""
        known = config.get("memory_estimate")
        if isinstance(known, int) and not isinstance(known, bool) and known >= 0:
            return known
        arch = config.get("arch")
        if self.resources.gpu > 0 or not isinstance(arch, Mapping):
            return 0
        from nas.config import ArchConfig

        try:
            arch_config = ArchConfig.from_dict(dict(arch))
        except (ConfigError, TypeError, ValueError):
            return 0
        key = arch_config.arch_id
        if key not in self._known:
            from nas.memory import memory_profile

            try:
                self._known[key] = memory_profile(arch_config, self.geometry)
            except (ConfigError, RuntimeError, TypeError, ValueError):
                self._known[key] = None
        profile = self._known[key]
        return 0 if profile is None else self.from_profile(profile, config.get("settings") or {})

    def from_profile(self, profile: MemoryProfile, settings: Mapping[str, Any]) -> int:
        """The estimate for a trial training with ``settings`` (its batch sizes; the trainer's
        defaults where it leaves them out), from its architecture's ``profile``
        (``nas.memory.MemoryProfile``); 0 for a trial with a GPU (see the class)."""
        if self.resources.gpu > 0:
            return 0
        from trainers import TrainConfig  # its defaults: a setting the trial leaves out

        batch = settings.get("batch_size", TrainConfig.batch_size)
        evals = settings.get("eval_batch_size", TrainConfig.eval_batch_size)
        try:
            return profile.estimate(int(batch), eval_batch_size=int(evals)).total
        except (TypeError, ValueError):
            return 0

    def memory(self, config: Mapping[str, Any]) -> float:
        """Bytes of Ray's ``memory`` resource the trial ``config`` asks for."""
        wanted = self.baseline + self.estimate(config)
        return float(min(self.cap, math.ceil(wanted / MEMORY_STEP) * MEMORY_STEP))

    def request(self, config: Mapping[str, Any]) -> dict[str, float]:
        """The trial's request as Tune's resource mapping."""
        return {"cpu": self.resources.cpu, "gpu": self.resources.gpu,
                "memory": self.memory(config)}

    def __call__(self, config: Mapping[str, Any]) -> PlacementGroupFactory:
        from ray.tune.execution.placement_groups import resource_dict_to_pg_factory

        return resource_dict_to_pg_factory(self.request(config))


class HeadWatch:
    """Watches the Ray head (its GCS port) from a thread while a study runs.

    When the head stops answering for ``grace`` seconds, Ray would end this process from its
    C++ core some time later without running any Python cleanup. ``on_lost`` runs first (it
    closes the running trials in the database and ends the process with one line), while the
    database can still be written.
    """

    def __init__(self, on_lost: Callable[[str], None], *, interval: float = 1.0,
                 grace: float = 10.0) -> None:
        import ray

        self.address = ray.get_runtime_context().gcs_address
        self.on_lost, self.interval, self.grace = on_lost, interval, grace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="nas-ray-head-watch",
                                        daemon=True)

    def _answers(self) -> bool:
        host, _, port = self.address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
                return True
        except (OSError, ValueError):
            return False

    def _watch(self) -> None:
        silent_since: float | None = None
        while not self._stop.wait(self.interval):
            if self._answers():
                silent_since = None
                continue
            now = time.monotonic()
            silent_since = silent_since or now
            if now - silent_since >= self.grace:
                self.on_lost(f"the Ray cluster's head at {self.address} stopped answering "
                             f"(for {self.grace:g} s)")
                return

    def __enter__(self) -> HeadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
