"""What costing one candidate takes in the engine's driver (``studies.searcher._cost_of``, for
the default sampler's candidates): the parameters alone on the meta build (a study whose
objectives and constraints name no MAdds) against the whole cost with its traced pass (MAdds
and the memory profile), side by side in one run; and the whole cost with its pass on meta
(what it took before a small model's pass ran on zeroed CPU tensors: ``nas.cost._real_pass``),
checked equal to the shipped one.

    .venv/bin/python benchmarks/candidate_cost.py [--space quickstart] [--task digits] [--n 40]

Draws ``--n`` architectures from the space (seeded), and times for each ``estimate_params``
and ``cost_and_memory`` (what the searcher calls), one thread. Prints the median ms of each,
their ratio, and the load average (the machine is shared: time it when the load is low).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

import nas.cost
from nas.cost import cost_and_memory, estimate_params
from search_spaces import load_space
from studies._draw import DrawnTrial
from trainers import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--space", default="quickstart")
    parser.add_argument("--task", default="digits")
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    space = load_space(args.space)
    geometry = get_task(args.task).geometry
    rng = np.random.default_rng(0)
    configs = []
    while len(configs) < args.n:
        try:
            configs.append(space.suggest(DrawnTrial(rng))[0])  # type: ignore[arg-type]
        except Exception:  # a draw the space refuses: draw again
            continue
    load_before = os.getloadavg()
    params_ms, whole_ms, meta_ms = [], [], []
    shipped = nas.cost.REAL_PASS_MAX_ELEMENTS
    for config in configs:
        began = time.perf_counter()
        params = estimate_params(config, geometry)
        params_ms.append(1000 * (time.perf_counter() - began))
        began = time.perf_counter()
        cost = cost_and_memory(config, geometry)
        whole_ms.append(1000 * (time.perf_counter() - began))
        assert params == cost[0].params, (config.arch_id, params, cost[0].params)
        nas.cost.REAL_PASS_MAX_ELEMENTS = 0  # every pass on meta
        try:
            began = time.perf_counter()
            on_meta = cost_and_memory(config, geometry)
            meta_ms.append(1000 * (time.perf_counter() - began))
        finally:
            nas.cost.REAL_PASS_MAX_ELEMENTS = shipped
        assert on_meta == cost, config.arch_id
    p, w, m = (statistics.median(v) for v in (params_ms, whole_ms, meta_ms))
    print(f"{args.space} on {args.task}, {args.n} architectures: median ms per candidate")
    print(f"  parameters on the meta build:        {p:.1f}")
    print(f"  whole cost (traced pass), shipped:   {w:.1f}")
    print(f"  whole cost, its pass on meta:        {m:.1f}  (equal figures: checked)")
    print(f"  ratio whole / parameters:            {w / p:.1f}")
    print(f"  ratio pass on meta / shipped:        {m / w:.2f}")
    print("load average (1, 5, 15 min) before " + " ".join(f"{v:.1f}" for v in load_before)
          + ", after " + " ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
