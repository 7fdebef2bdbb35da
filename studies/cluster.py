"""Connecting to Ray: a local runtime, or an existing cluster with ``--address``.

The checks here run before a study is written: an address where nothing listens fails in one
line at once (Ray itself retries for minutes), a per-trial request finer than Ray schedules is
refused (Ray would reject each trial as Tune starts it), and so is one that no node of the
cluster can hold (Tune would wait for it forever).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable

from nas.errors import ConfigError, NasError
from studies._ray_auth import check_ray_token, token_error
from studies.spec import Resources

__all__ = ["RESOURCE_SCALING", "HeadWatch", "check_ray_address", "check_resources", "connect"]

#: Ray counts a resource in units of 1/10,000 (``ray._raylet.RESOURCE_UNIT_SCALING``; its
#: ``MIN_RESOURCE_GRANULARITY`` is 0.0001): a nonzero request below one unit is refused.
RESOURCE_SCALING = 10_000


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


def _init(address: str | None) -> None:
    import ray
    from ray.exceptions import AuthenticationError

    check_ray_address(address)
    if ray.is_initialized():
        return
    check_ray_token(address)  # Ray would retry a refused token for 20 s, a warning a second
    try:
        if address:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        else:
            # "local": a new runtime of our own, even where `ray start` left one running
            # (plain ray.init() would join it); --address joins a cluster on purpose.
            ray.init(address="local", include_dashboard=False, logging_level=logging.ERROR,
                     log_to_driver=False, num_cpus=os.cpu_count())
    except AuthenticationError:  # token mode on here, but no token to be found
        raise token_error(address or "local") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NasError(f"Cannot reach the Ray cluster at {address!r}: {first}") from None


def connect(address: str | None, resources: Resources) -> int:
    """Start or join Ray; the number of trials that can run at once with ``resources`` each.

    Raises:
        NasError: a request Ray cannot schedule (:func:`check_resources`), or no node of the
            cluster has the CPUs and GPUs one trial asks for.
    """
    import ray

    check_resources(resources)
    _init(address)
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    fits = [n for n in nodes if n.get("CPU", 0) >= resources.cpu - 1e-9
            and n.get("GPU", 0) >= resources.gpu - 1e-9]
    if not fits:
        largest: dict[str, float] = max(
            nodes, key=lambda n: (n.get("GPU", 0), n.get("CPU", 0)), default={})
        raise NasError(
            f"Study key `resources` asks for {resources.cpu:g} cpu and {resources.gpu:g} gpu per "
            f"trial, but the largest node of the Ray cluster has {largest.get('CPU', 0):g} CPUs "
            f"and {largest.get('GPU', 0):g} GPUs; lower `resources` or add such a node.")
    slots = 0
    for n in fits:
        per = []
        if resources.cpu > 0:
            per.append(math.floor(n.get("CPU", 0) / resources.cpu + 1e-9))
        if resources.gpu > 0:
            per.append(math.floor(n.get("GPU", 0) / resources.gpu + 1e-9))
        slots += min(per)
    return max(1, slots)


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
