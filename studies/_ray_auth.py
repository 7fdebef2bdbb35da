"""Joining a Ray cluster that authenticates clients with a token (Ray 2.60's token auth).

A cluster started with ``RAY_AUTH_MODE=token`` (or by ``ray start --head`` on a machine that
holds ``~/.ray/auth_token``) answers a client without its token with ``InvalidAuthToken``, and
``ray.init`` retries that for about 20 seconds, one warning line a second, before it gives up
with a message that does not say why. :func:`check_ray_token` asks the cluster's GCS once,
before ``ray.init``, and turns that refusal into one line that says what to set.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

from nas.errors import NasError

__all__ = ["check_ray_token", "token_error"]

#: Ray's variables: the mode (``token`` or ``disabled``), the token itself, or a file holding it.
AUTH_MODE, AUTH_TOKEN, AUTH_TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


def token_error(address: str) -> NasError:
    """The one line for a cluster at ``address`` that refuses this process's token (or its
    lack of one), naming what this process has and what to set."""
    mode, path = os.environ.get(AUTH_MODE), os.environ.get(AUTH_TOKEN_PATH)
    if (mode or "").lower() != "token":
        have = f"{AUTH_MODE} is {mode or 'unset'} here, so no token is sent"
    elif os.environ.get(AUTH_TOKEN):
        have = f"the token in ${AUTH_TOKEN} is not the cluster's"
    elif path:
        have = f"the token in {AUTH_TOKEN_PATH}={path!r} is missing or not the cluster's"
    else:
        have = "~/.ray/auth_token is missing or not the cluster's token"
    return NasError(
        f"Cannot join the Ray cluster at {address!r}: it requires token authentication and "
        f"{have}; set {AUTH_MODE}=token and {AUTH_TOKEN_PATH} to a copy of the head's token "
        "file, here and on every node (docs/guide/cluster.md, 'Token authentication').")


@contextlib.contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """Collect what is written to file descriptor 2 (Ray's C++ core logs there) meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            out.append(sink.read().decode(errors="replace"))


def check_ray_token(address: str | None) -> None:
    """Refuse, in one line, to join a cluster whose GCS rejects this process's token.

    ``address`` as ``--address`` takes it (``auto``: the cluster ``ray start`` last started on
    this machine, or ``$RAY_ADDRESS``). A local runtime, a Ray Client address (``ray://``) and
    any other failure to ask are left to ``ray.init``, which reports them itself.

    Raises:
        NasError: the cluster requires a token this process does not have (see
            :func:`token_error`).
    """
    if not address or address == "local" or "://" in address:
        return
    from ray._private.services import canonicalize_bootstrap_address
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.exceptions import AuthenticationError

    try:
        gcs_address = canonicalize_bootstrap_address(address)
    except Exception:  # ray.init reports a bad address in its own words
        return
    if gcs_address is None:
        return
    refused = False
    with _stderr_captured() as logged:
        try:
            GcsClient(address=gcs_address)  # fetches the cluster id: one authenticated call
        except AuthenticationError:
            refused = True
        except Exception:  # not ours to judge: ray.init reports it
            pass
    if refused:
        raise token_error(address) from None
    if logged and logged[0]:
        sys.stderr.write(logged[0])  # what Ray said besides a refusal is the user's to see
