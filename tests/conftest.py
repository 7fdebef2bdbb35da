from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Tiny models: one thread is faster than two contending ones on this 2-core machine.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
