"""Free loopback ports for servers the tests and benchmarks start (PostgreSQL, Ray nodes)."""

from __future__ import annotations

import socket
from contextlib import ExitStack

__all__ = ["free_port", "free_ports"]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports nothing listens on now (the kernel's choice; another process may
    take one before the caller does, so servers started on them retry or fail loudly)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def free_port() -> int:
    """One port nothing listens on now."""
    return free_ports(1)[0]
