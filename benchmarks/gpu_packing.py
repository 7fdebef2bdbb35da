"""Trials packed on one GPU: trials per hour and each trial's memory plan against its real peak.

    python benchmarks/gpu_packing.py [--pack 1,2,4,8] [--repeats 2] [--workloads quickstart,vqa]
    python benchmarks/gpu_packing.py --write-jobs FILE    # the jobs, on a machine with the stack
    python benchmarks/gpu_packing.py --jobs FILE ...      # run them: torch and timm suffice

Needs a CUDA device to run (it exits with a one-line reason without one). A study with
``resources: {gpu: 1/N}`` has Ray start N trials on one card, each told its share: the trial
(``studies.worker.evaluate_trial`` with a ``trainers.devices.Placement`` of that fraction) plans
its memory for ``1/N`` of the card (``trainers.loop.check_gpu_share``: the meta-device estimate
plus the CUDA libraries' workspaces, against ``min(free, total / N)``) and holds PyTorch's
allocator to that share. This script does what those N trials do, without Ray's scheduling: N
processes (spawned, as Ray's workers are) each train ``--repeats`` trials one after another (a
reused worker: its task data built once), through the same ``evaluate_trial`` and placement.

The workloads are one proxy training each, at the trial settings a study gives it
(``studies._trials.base_settings``):

- ``quickstart``: the quickstart study (``studies/quickstart.yaml``) trial of its enqueued dense
  baseline (a 4-layer ViT of width 64 on 16x16 digits: 16 epochs of 23 batches of 32);
- ``vqa``: the ``lw_transformer`` space on ``synthetic-vqa`` at smoke scale (the smoke study of
  docs/guide/search.md, at the proxy fidelity ``benchmarks/proxy_fidelity.py`` measures: 4
  epochs of 10 batches of 64), of MCAN-small (the ``lw_transformer_vqa`` study's first enqueued
  architecture) shrunk to width 64, depth 2.

Printed for each workload and N: the wall seconds from the first process's start to the last
one's end, trials per hour over it (N x repeats / wall) and in steady state (the repeats after
each process's first, which pays for CUDA's start and the task's data), the median seconds of
one training (first and later), and per process: the plan (what ``check_gpu_share`` compares),
the share it is compared with, PyTorch's peak allocated and reserved bytes, and the card's
memory in use at its highest (NVML, sampled every 0.1 s: the CUDA contexts, which no share
counts, included).

Measured 2026-11-28 on one NVIDIA H200 (143,156 MiB; 16 CPU cores; torch 2.11), ``--repeats 3``
(``--jobs`` written here by ``--write-jobs``; each trial's share is 1/N of the card; the 25
tests of ``tests/test_cuda.py`` passed on the same machine in 93 s)::

    workload    N  wall s  trials/h  steady/h  1st s  next s  plan  alloc  resvd  card MiB
    quickstart 1    38.2       282       399  17.33    9.03   113     79     96       860
    quickstart 2    38.5       561       819  17.03    8.79   113     79     96     1,719
    quickstart 4    41.8     1,033     1,352  16.63   10.65   113     79     96     3,438
    quickstart 8    52.9     1,632     2,220  20.78   12.97   113     79     96     6,879
    vqa        1    14.0       774     2,387   7.78    1.51   160    117    144       910
    vqa        2    17.2     1,257     4,233   8.75    1.70   160    117    144     1,819
    vqa        4    14.6     2,957    10,635   6.97    1.35   160    117    144     3,638
    vqa        8    14.8     5,832    19,885   7.23    1.45   160    117    144     7,279

Both proxies are far too small to fill an H200: one trial's step is the host's Python and kernel
launches (the quickstart's 368 steps: 24 ms each), so 8 trials at once train 5.6x (quickstart)
and 8.3x (vqa) the trials per hour of one, each trial barely slower. The plan holds: PyTorch's
reserved peak is 0.85 and 0.90 of it. But each process also holds a CUDA context of about
765 MiB (the card's use per process, 860 MiB, less the 96 reserved) that neither the plan nor
``set_per_process_memory_fraction`` counts: at 8 trials it is 6.1 of the card's 6.9 GiB in use.
On a 16 GiB card, ``gpu: 0.0625`` (16 trials) would leave each 1 GiB: the contexts alone use 12.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MiB = 2**20


def write_jobs() -> list[dict[str, Any]]:
    """The workloads' trials: architecture, settings, task, options and resources.cpu."""
    from nas.config import ArchConfig
    from nas.loading import load_arch
    from studies._trials import base_settings
    from studies.spec import StudySpec, load_study_spec

    quick = load_study_spec(ROOT / "studies" / "quickstart.yaml")
    vqa = StudySpec.from_dict({
        "name": "lw-transformer-smoke", "task": "synthetic-vqa", "space": "lw_transformer",
        "objectives": [{"name": "accuracy"}, {"name": "params"}, {"name": "madds"}],
        "budget": {"trials": 1}, "fidelity": {"epochs": 4}, "smoke": True,
    })
    assert vqa.smoke is not None
    jobs = []
    for name, spec, arch in (("quickstart", quick, ArchConfig.from_dict(quick.enqueue[0])),
                             ("vqa", vqa, vqa.smoke.shrink(load_arch("mcan-small")))):
        jobs.append({"workload": name, "arch": arch.to_dict(), "settings": base_settings(spec),
                     "task": spec.task, "task_options": dict(spec.task_options),
                     "threads": max(1, int(spec.resources.cpu))})
    return jobs


def _worker(job: dict[str, Any], fraction: float, repeats: int, start: Any,
            out: Any) -> None:
    import torch

    from nas.config import ArchConfig
    from nas.memory import CUDA_CONTEXT_BYTES
    from studies.worker import evaluate_trial, task_data
    from trainers import TrainConfig
    from trainers.devices import Placement, gpu_budget
    from trainers.loop import check_gpu_share

    torch.set_num_threads(job["threads"])
    start.wait()
    t0 = time.perf_counter()
    placement = Placement(("0",), fraction, "0")
    seconds, statuses = [], []
    for r in range(repeats):
        t = time.perf_counter()
        settings = {**job["settings"], "seed": job["settings"].get("seed", 0) + r}
        result = evaluate_trial(job["arch"], settings, job["task"], job["task_options"],
                                placement=placement)
        seconds.append(time.perf_counter() - t)
        statuses.append(result["status"] if result["status"] != "failed"
                        else f"failed: {result.get('reason')}")
    config = ArchConfig.from_dict(job["arch"])
    cfg = TrainConfig.from_dict(job["settings"])
    data = task_data(job["task"], job["task_options"])
    total = torch.cuda.mem_get_info(0)[1]
    # what the trial's memory check planned (check_gpu_share, as it ran: the card all free)
    plan = check_gpu_share(config, cfg, data, fraction, (total, total))
    out.put({"seconds": seconds, "statuses": statuses, "plan": plan,
             "share": gpu_budget(total, total, fraction, CUDA_CONTEXT_BYTES),
             "peak_allocated": torch.cuda.max_memory_allocated(0),
             "peak_reserved": torch.cuda.max_memory_reserved(0),
             "wall": time.perf_counter() - t0})


class _CardSampler(threading.Thread):
    """The card's memory in use (NVML), at its highest while running."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.done = threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.handle: Any = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.info = pynvml.nvmlDeviceGetMemoryInfo
        except Exception:  # NVML missing: the column says so
            self.handle = None

    def run(self) -> None:
        while self.handle is not None and not self.done.is_set():
            self.peak = max(self.peak, int(self.info(self.handle).used))
            time.sleep(0.1)


def run_pack(job: dict[str, Any], n: int, repeats: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(job, 1.0 / n, repeats, start, out))
             for _ in range(n)]
    for p in procs:
        p.start()
    sampler = _CardSampler()
    base = sampler.info(sampler.handle).used if sampler.handle is not None else 0
    sampler.start()
    t0 = time.perf_counter()
    start.set()
    rows = [out.get(timeout=3600) for _ in procs]
    wall = time.perf_counter() - t0
    sampler.done.set()
    for p in procs:
        p.join()
    return {"n": n, "wall": wall, "rows": rows, "card_peak": sampler.peak - base
            if sampler.handle is not None else None}


def report(name: str, pack: dict[str, Any], repeats: int) -> None:
    n, rows, wall = pack["n"], pack["rows"], pack["wall"]
    first = [r["seconds"][0] for r in rows]
    later = [s for r in rows for s in r["seconds"][1:]]
    steady = (n * 3600 / statistics.median(later)) if later else float("nan")
    bad = sorted({s for r in rows for s in r["statuses"] if s not in ("completed", "stopped")})
    card = "n/a" if pack["card_peak"] is None else f"{pack['card_peak'] / MiB:,.0f}"
    print(f"{name:<11}{n:>3}{wall:>8.1f}{n * repeats * 3600 / wall:>10,.0f}{steady:>10,.0f}"
          f"{statistics.median(first):>8.2f}"
          f"{statistics.median(later) if later else float('nan'):>8.2f}"
          f"{max(r['plan'] for r in rows) / MiB:>8.0f}{min(r['share'] for r in rows) / MiB:>9,.0f}"
          f"{max(r['peak_allocated'] for r in rows) / MiB:>8.0f}"
          f"{max(r['peak_reserved'] for r in rows) / MiB:>8.0f}{card:>10}"
          f"{max(r['peak_reserved'] / r['plan'] for r in rows):>7.2f}"
          + (f"  {'; '.join(bad)}" if bad else ""), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", default="1,2,4,8", help="trials at once on the card")
    parser.add_argument("--repeats", type=int, default=2, help="trials each process trains")
    parser.add_argument("--workloads", default="quickstart,vqa")
    parser.add_argument("--jobs", type=Path, help="read the jobs from this file")
    parser.add_argument("--write-jobs", type=Path, help="write the jobs to this file and stop")
    args = parser.parse_args()
    if args.write_jobs:
        args.write_jobs.write_text(json.dumps(write_jobs(), indent=1) + "\n")
        print(f"gpu_packing: wrote {args.write_jobs}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_packing: needs a CUDA device; torch.cuda.is_available() is False here")
        return 2
    jobs = json.loads(args.jobs.read_text()) if args.jobs else write_jobs()
    wanted = args.workloads.split(",")
    packs = [int(x) for x in args.pack.split(",")]
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{torch.cuda.mem_get_info(0)[1] / MiB:,.0f} MiB")
    print(f"{'workload':<11}{'N':>3}{'wall s':>8}{'trials/h':>10}{'steady/h':>10}"
          f"{'1st s':>8}{'next s':>8}{'plan':>8}{'share':>9}{'alloc':>8}{'resvd':>8}"
          f"{'card MiB':>10}{'rsv/pl':>7}")
    for job in jobs:
        if job["workload"] not in wanted:
            continue
        for n in packs:
            report(job["workload"], run_pack(job, n, args.repeats), args.repeats)
    print("MiB: plan = check_gpu_share's figure per trial; share = what it is compared with (1/N "
          "of the card less the CUDA context); alloc and "
          "resvd = the highest of PyTorch's peaks over the N processes; card = NVML's in use "
          "above idle at its highest (all N, their CUDA contexts included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
