"""What several ``nas`` subcommands print or check alike (below ``nas_cli.main`` and the
subcommand modules, which all import it)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from nas.errors import NasError

__all__ = ["ADDRESS_HELP", "EVALUATOR_HELP", "STORAGE_HELP", "add_arch_args",
           "add_stored_run_args", "format_agreement", "objective_value", "print_front",
           "refuse_memory_storage"]

#: ``--storage`` of every command that opens the study database.
STORAGE_HELP = ("SQLAlchemy URL of the study database (default: $NAS_STORAGE, else "
                "sqlite:///nas_studies.db)")

#: ``--address`` of the commands that run trials.
ADDRESS_HELP = "an existing Ray cluster (e.g. auto)"

#: ``--evaluator`` of ``nas resume`` and ``nas promote``.
EVALUATOR_HELP = (
    "required when the study names its own evaluator, and equal to it: the database stores "
    "it, and importing it runs code, so it runs only when you name it (nothing is imported "
    "otherwise)")


def add_stored_run_args(p: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int],
                        ) -> None:
    """``--storage``, ``--address``, ``--evaluator`` and ``--verbose`` of a command that runs a
    study already stored (``nas resume``, ``nas promote``), and its ``run`` function."""
    p.add_argument("--storage", default=None, help=STORAGE_HELP)
    p.add_argument("--address", default=None, help=ADDRESS_HELP)
    p.add_argument("--evaluator", default=None, metavar="MODULE:FUNCTION",
                   help=EVALUATOR_HELP)
    p.add_argument("--verbose", action="store_true", help="also show Ray Tune's own output")
    p.set_defaults(func=run, prints_stored=True, runs_study=True)


def add_arch_args(p: argparse.ArgumentParser) -> None:
    """ARCH and ``--set KEY=VALUE`` (``nas cost``, ``nas train``)."""
    p.add_argument("arch", metavar="ARCH", help="a preset name or a YAML/JSON architecture file")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a key of the architecture (value parsed as YAML); repeatable",
    )


def print_front(name: str, storage: str | None) -> None:
    """The Pareto front of study ``name``: one line per trial, its objectives and arch_id."""
    from studies import pareto_trials

    front = pareto_trials(name, storage)
    print(f"Pareto front of {name!r}: {len(front)} trials")
    if not front:
        return
    names = list(front[0]["values"])
    noisy = "noise_from" in front[0]  # a seeded promotion (nas promote --seeds)
    print("  trial  " + "  ".join(f"{n:>14}" for n in names) + "  arch_id"
          + ("  promoted accuracy, mean ± std (seeds)" if noisy else ""))
    for t in front:
        vals = "  ".join(f"{objective_value(n, v):>14}" for n, v in t["values"].items())
        print(f"  {t['number']:>5}  {vals}  {t['arch_id']}" + (_noise(t) if noisy else ""))
    if noisy:
        seeded = [t for t in front if t["within_noise"] is not None]
        standing = sum(1 for t in seeded if not t["within_noise"])
        print(f"  {standing} of {len(seeded)} seeded front trials stand out from the seed noise "
              f"of {front[0]['noise_from']!r}; ~ marks one within the noise of the trial named "
              "(it costs no more, and is less accurate by less than their combined std)")


def _noise(t: dict[str, Any]) -> str:
    """A front trial's promoted accuracy over its seeds, and its within-noise mark."""
    if t["within_noise"] is None:
        return "  - (not trained with 2 seeds or more)"
    mark = f"  ~ trial {t['noise_neighbour']}" if t["within_noise"] else ""
    return f"  {t['accuracy_mean']:.4f} ± {t['accuracy_std']:.4f} ({t['seeds']}){mark}"


def objective_value(name: str, value: float | None) -> str:
    """One format per objective everywhere the CLI prints one: the metric and latency with 4
    decimals, counts (params, MAdds) as integers with thousands separators."""
    if value is None:
        return "-"
    return f"{value:,.4f}" if name in ("accuracy", "latency_ms") else f"{value:,.0f}"


def refuse_memory_storage(storage: str | None) -> None:
    """A study lives in its database: an in-memory one would be lost when the command ends."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from studies import resolve_storage_url

    url = resolve_storage_url(storage)
    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # open_storage says what is wrong with it
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise NasError(f"Storage {url!r} is an in-memory database: the study would be lost when "
                       "the command ends; give a file, e.g. sqlite:///nas_studies.db.")


def format_agreement(result: dict[str, Any]) -> str:
    """One line: tau, rho and the number of pairs (``-`` where undefined), and after a seeded
    promotion the noise ceiling of its truth (``studies.fidelity.noise_ceiling``)."""
    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:+.3f}"

    line = (f"Kendall tau {fmt(result.get('kendall_tau'))}, Spearman rho "
            f"{fmt(result.get('spearman_rho'))} over {result.get('pairs', 0)} pairs")
    ceiling = result.get("noise_ceiling")
    if isinstance(ceiling, dict) and all(  # read back from the database: printed only when sound
            isinstance(ceiling.get(k), (int, float)) and not isinstance(ceiling.get(k), bool)
            and math.isfinite(ceiling[k]) for k in ("seeds", "noise_free", "one_seed")):
        line += (f" (against the mean of {ceiling['seeds']} seeds, the seed noise caps tau near "
                 f"{fmt(ceiling['noise_free'])} for a noise-free proxy and "
                 f"{fmt(ceiling['one_seed'])} for one more training)")
    return line
