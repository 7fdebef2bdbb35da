from __future__ import annotations

import os

import optuna
import pytest
import torch

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# The process's log levels, as the CLI sets them (nas_cli.main): Optuna's INFO lines (a study
# created, each trial told) are no test's output.
optuna.logging.set_verbosity(optuna.logging.WARNING)
# Tiny models: one thread is faster than two contending ones on this 2-core machine.
torch.set_num_threads(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--flop-seed", type=int, default=0,
        help="seed of the random architectures tests/test_flop_counter.py draws (default 0)",
    )


@pytest.fixture
def flop_seed(request: pytest.FixtureRequest) -> int:
    """The ``--flop-seed`` option: rotate it to try new random architectures."""
    return int(request.config.getoption("--flop-seed"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _tune_folders(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Ray Tune's experiment folders of the tests' studies go to a temporary folder, not to
    ``nas_runs/`` in the checkout."""
    os.environ["NAS_RUNS"] = str(tmp_path_factory.mktemp("nas_runs"))


@pytest.fixture(autouse=True, scope="session")
def _data_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Prepared task data (``trainers.tasks.cache``) goes to a temporary folder, not to
    ``~/.cache/nas/data``."""
    os.environ["NAS_DATA_CACHE"] = str(tmp_path_factory.mktemp("nas_data"))
