"""Prepared task data at full size: today's per-process build against the node's prepared arrays.

    python benchmarks/data.py [--scale 1.0] [--tasks vqa-files coco-files image-folder]
                              [--processes 3] [--baseline REV] [--tmp DIR] [--keep]
                              [--repeat 1]

Files shaped like the real datasets are generated under a temporary folder (``--scale`` of
their real size; 1.0, the default, needs about 1 GB of disk and some minutes): VQA v2's
questions and annotations with one region feature file per image, COCO's Karpathy split file
with its feature files, and an ImageNet-size ``image-folder`` listing (``_data_files``). For
each task, every figure comes from a fresh Python process (imports done before the clock
starts), one after the other, in one run, each started after ``os.sync()``: the generated files
and an earlier measurement's cache are on disk, as a real dataset long is, so their writeback
lands on none of the measured processes (it slowed both sides, and throttled a preparation's
write of its arrays by 0.1-0.3 s at random).

Each process imports the task's code (torch, torchvision) before its clock starts, as a
trial process has: the figures are the data's.

Times are wall and CPU seconds of the process (with those of the processes it started: the
image listing runs one process a CPU): on a shared machine the CPU time is the
figure to compare (it does not count time spent waiting for a core).

- today: ``get_task`` as revision ``--baseline`` builds it (the code before prepared data,
  extracted with ``git archive``): every process that trains or plans a trial did this. Time,
  the process's peak resident memory (``VmHWM``) and what the task adds to its resident set.
- first preparation: ``prepare_task`` into an empty cache: time and peak (its ratio to today's
  time is the target, >= 3).
- warm: a new trial process's ``get_task`` once the cache is there (target <= 2 s), and the
  driver's ``prepare_task`` (the validation size it reads).
- per additional process: ``--processes`` trial processes hold the task at once, each having
  read every page of its arrays (as an epoch does), and each reports what the task added to
  its unique set (``Private_Clean + Private_Dirty`` of ``/proc/self/smaps_rollup``: memory no
  other process shares, which another trial process adds; target <= 200 MB) and to its
  proportional set (PSS: its share of the mapped pages too). Today's build adds its whole
  resident growth per process.

``--repeat N`` times today's build and the first preparation N times each, taking turns (each
preparation into an empty cache), and shows the run of median wall time of each, with their
ranges and the turns' ratios: on a shared machine one run's ratio moves by 20%.

The temporary folder is removed at the end (``--keep`` keeps it and prints where).

Measured 2026-11-28 at ``--scale 1`` on an otherwise idle two-core machine (9 minutes): first
preparation 3.6x (vqa-files: 34.2 -> 9.43 s), 3.4x (coco-files: 12.9 -> 3.81 s) and 3.1x
(image-folder: 2.40 -> 0.77 s, both mostly listing 1.3 M files; the preparation splits the
listing between one process per CPU; ``--tasks image-folder --repeat 5``: 3.1-3.5x, median
3.2x) faster than today's build; a warm trial process 0.01-0.08 s; 0.1-4.3 MB added per
process against 276-1,457 MB today (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The last revision before prepared data (issue 35): its get_task is "today's build".
BASELINE = "db9c1b01ade785d95a751294339c31b31e3e797a"
TASKS = ("vqa-files", "coco-files", "image-folder")
MB = 2**20


# ----------------------------------------------------------------------------- a child process
def _memory() -> dict[str, int]:
    """Resident, peak, unique and proportional set sizes of this process, in bytes."""
    out: dict[str, int] = {}
    for name in ("/proc/self/status", "/proc/self/smaps_rollup"):
        with open(name) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "Pss", "Private_Clean", "Private_Dirty"):
                    out[key] = int(rest.split()[0]) * 1024
    out["USS"] = out.pop("Private_Clean") + out.pop("Private_Dirty")
    return out


def _touch(obj: Any, seen: set[int], depth: int = 0) -> int:
    """Read a byte of every page of every numpy array reachable from ``obj`` (a dataset: its
    attributes, a bound method's object, a closure's cells), as an epoch reads them; returns
    the bytes of those arrays."""
    import numpy as np

    if id(obj) in seen or depth > 5:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        if obj.size and obj.flags.c_contiguous:
            int(obj.reshape(-1).view(np.uint8)[::4096].sum())
        return int(obj.nbytes)
    inner: list[Any] = list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    inner += [getattr(obj, "__self__", None)]
    inner += [c.cell_contents for c in getattr(obj, "__closure__", None) or ()]
    return sum(_touch(v, seen, depth + 1) for v in inner if v is not None)


def _wait(path: Path) -> None:
    while not path.exists():
        time.sleep(0.02)


def _cpu() -> float:
    """CPU seconds of this process and of the processes it waited for (a listing's helpers)."""
    own, children = (resource.getrusage(who)
                     for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child(job: dict[str, Any]) -> dict[str, Any]:
    """One measurement in this process (``--child``): ``job["mode"]`` is ``build`` (today's
    get_task), ``prepare``, ``open`` (a warm trial process and the driver's read) or
    ``share`` (hold the task with others, measured between barriers)."""
    from trainers import get_task
    from trainers.tasks import task_options

    name, options = job["task"], job["options"]
    task_options(name)  # imports the task's module (torch, torchvision) before the clock
    before = _memory()
    start, cpu = time.perf_counter(), _cpu()
    if job["mode"] == "prepare":
        from trainers.tasks import prepare_task

        prepared = prepare_task(name, **options)
        return {"seconds": time.perf_counter() - start, "cpu": _cpu() - cpu,
                "built": prepared.built, "bytes": prepared.nbytes, "before": before,
                "after": _memory()}
    data = get_task(name, **options)
    out: dict[str, Any] = {"seconds": time.perf_counter() - start,
                           "cpu": _cpu() - cpu, "before": before,
                           "after": _memory(), "val": len(data.val), "train": len(data.train)}
    if job["mode"] == "open":
        from trainers.tasks import prepare_task

        start = time.perf_counter()
        out["driver_val"] = prepare_task(name, **options).items("val")
        out["driver_seconds"] = time.perf_counter() - start
    if job["mode"] == "share":
        out["touched"] = _touch(data.train, set()) + _touch(data.val, set())
        Path(job["ready"]).touch()
        _wait(Path(job["go"]))  # every process holds the task: shared pages are shared
        out["held"] = _memory()
        Path(job["done"]).write_text(json.dumps(out))
        _wait(Path(job["release"]))
    return out


# ----------------------------------------------------------------------------- the parent
def _run(job: dict[str, Any], tree: Path, cache: Path) -> subprocess.Popen[str]:
    # What was written before (the generated files, an earlier measurement's cache) is flushed
    # to disk first, as a real dataset's files long are: its writeback does not slow, or
    # throttle the writes of, whichever process is measured next.
    os.sync()
    env = {**os.environ, "PYTHONPATH": str(tree), "NAS_DATA_CACHE": str(cache),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, __file__, "--child", json.dumps(job)], env=env,
                            cwd=cache.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"a measuring process failed:\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _baseline(rev: str, into: Path) -> Path | None:
    """The ``nas`` and ``trainers`` packages of revision ``rev``, or None without git."""
    try:
        tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "nas",
                              "trainers"], check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"no baseline: git archive {rev} failed ({exc})")
        return None
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into


def _generate(task: str, root: Path, scale: float) -> str:
    from _data_files import write_coco, write_image_folder, write_vqa

    start = time.perf_counter()
    root.mkdir(parents=True)
    writer = {"vqa-files": write_vqa, "coco-files": write_coco,
              "image-folder": write_image_folder}[task]
    sizes = writer(root, scale)
    what = ", ".join(f"{k} {v / MB:.0f} MB" if k.endswith(".json") else f"{k} {v:,} files"
                     for k, v in sizes.items())
    return f"generated in {time.perf_counter() - start:.0f} s: {what}"


def _options(task: str, root: Path) -> dict[str, Any]:
    from _data_files import FEATURE_DIM, FEATURE_REGIONS

    if task == "image-folder":
        return {"root": str(root)}
    return {"root": str(root), "region_dim": FEATURE_DIM, "max_regions": FEATURE_REGIONS}


def _share(task: str, options: dict[str, Any], tmp: Path, cache: Path, n: int
           ) -> list[dict[str, Any]]:
    """``n`` trial processes holding the task at once; each one's figures while all hold it."""
    sync = tmp / f"sync-{task}"
    sync.mkdir()
    jobs = [{"mode": "share", "task": task, "options": options, "ready": str(sync / f"r{i}"),
             "go": str(sync / "go"), "done": str(sync / f"d{i}"),
             "release": str(sync / "release")} for i in range(n)]
    procs = [_run(job, REPO, cache) for job in jobs]
    for job, proc in zip(jobs, procs, strict=True):
        while not Path(job["ready"]).exists():
            if proc.poll() is not None:
                _result(proc)  # raises with its error
            time.sleep(0.05)
    Path(jobs[0]["go"]).touch()
    for job in jobs:
        _wait(Path(job["done"]))
    Path(jobs[0]["release"]).touch()
    for proc in procs:
        _result(proc)
    return [json.loads(Path(job["done"]).read_text()) for job in jobs]


def _measure(task: str, root: Path, tmp: Path, baseline: Path | None, n: int,
             repeat: int = 1) -> None:
    options = _options(task, root)
    cache = tmp / f"cache-{task}"
    rows = []
    todays, firsts = [], []
    for r in range(repeat):  # today's build and a first preparation, taking turns
        if baseline is not None:
            todays.append(_result(_run({"mode": "build", "task": task, "options": options},
                                       baseline, cache)))
        into = cache if r == repeat - 1 else tmp / f"cache-{task}-{r}"  # the last one is kept
        into.mkdir()
        firsts.append(_result(_run({"mode": "prepare", "task": task, "options": options}, REPO,
                                   into)))
        assert firsts[-1]["built"], "the first preparation found a cache"
        if into != cache:
            shutil.rmtree(into)
    today = _median_run(todays) if todays else None
    first = _median_run(firsts)
    if today is not None:
        added = today["after"]["VmRSS"] - today["before"]["VmRSS"]
        rows.append(("today: get_task, every process", today["seconds"], today["cpu"],
                     today["after"]["VmHWM"], added))
    rows.append(("first preparation (once a node)", first["seconds"], first["cpu"],
                 first["after"]["VmHWM"], None))
    warm = _result(_run({"mode": "open", "task": task, "options": options}, REPO, cache))
    rows.append(("warm trial process: get_task", warm["seconds"], warm["cpu"],
                 warm["after"]["VmHWM"], warm["after"]["VmRSS"] - warm["before"]["VmRSS"]))
    rows.append(("driver: validation size", warm["driver_seconds"], None, None, None))
    shared = _share(task, options, tmp, cache, n)
    uss = [s["held"]["USS"] - s["before"]["USS"] for s in shared]
    pss = [s["held"]["Pss"] - s["before"]["Pss"] for s in shared]

    print(f"\n{task}: {warm['train']:,} training and {warm['val']:,} validation items; "
          f"prepared arrays {first['bytes'] / MB:.1f} MB")
    print(f"  {'':<34} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12} {'task adds MB':>13}")
    for label, seconds, cpu, peak, add in rows:
        cpu_text = f"{cpu:>8.2f}" if cpu is not None else f"{'':>8}"
        peak_text = f"{peak / MB:>12.0f}" if peak is not None else f"{'':>12}"
        add_text = f"{add / MB:>13.1f}" if add is not None else f"{'':>13}"
        print(f"  {label:<34} {seconds:>8.2f} {cpu_text} {peak_text} {add_text}")
    if today is not None:
        print(f"  first preparation is {rows[0][1] / first['seconds']:.1f}x faster than today's "
              f"build in wall time, {rows[0][2] / first['cpu']:.1f}x in CPU time (target >= 3)")
    if repeat > 1 and todays:
        ratios = sorted(t["seconds"] / f["seconds"] for t, f in zip(todays, firsts, strict=True))
        print(f"  (the median run of {repeat} of each; today's build "
              f"{min(t['seconds'] for t in todays):.2f}-{max(t['seconds'] for t in todays):.2f} "
              f"s, first preparation "
              f"{min(f['seconds'] for f in firsts):.2f}-{max(f['seconds'] for f in firsts):.2f} "
              f"s; the turns' ratios, lowest first, "
              + ", ".join(f"{x:.1f}x" for x in ratios) + ")")
    print(f"  warm get_task {warm['seconds']:.2f} s (target <= 2 s); driver read "
          f"{warm['driver_val']:,} validation items in {warm['driver_seconds']:.3f} s")
    print(f"  {n} processes holding it, each having read {shared[0]['touched'] / MB:.0f} MB of "
          f"arrays: unique memory added per process {statistics.median(uss) / MB:.1f} MB "
          f"(max {max(uss) / MB:.1f}; target <= 200), proportional "
          f"{statistics.median(pss) / MB:.1f} MB")
    if today is not None:
        print(f"  today every process adds {rows[0][4] / MB:.0f} MB (its own parsed task)")


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time (the lower middle one of an even number)."""
    return sorted(runs, key=lambda run: run["seconds"])[(len(runs) - 1) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of the real datasets' sizes (default 1.0: full size)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--processes", type=int, default=3,
                        help="trial processes holding a task at once (default 3)")
    parser.add_argument("--baseline", default=BASELINE,
                        help="revision whose get_task is today's build ('none' skips it)")
    parser.add_argument("--tmp", default=None, help="where the temporary folder goes")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--repeat", type=int, default=1,
                        help="time today's build and the first preparation this many times "
                             "each, taking turns, and show the median run (default 1)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    if not 0 < args.scale <= 1:
        parser.error(f"--scale must lie in (0, 1], but got {args.scale}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, but got {args.repeat}")
    tmp = Path(tempfile.mkdtemp(prefix="nas-data-bench-", dir=args.tmp))
    try:
        baseline = None if args.baseline == "none" else _baseline(args.baseline, tmp / "base")
        print(f"scale {args.scale:g}, {os.cpu_count()} CPUs; baseline "
              f"{args.baseline[:12] if baseline else 'none'}; files under {tmp}")
        for task in args.tasks:
            print(f"{task}: {_generate(task, tmp / task, args.scale)}", flush=True)
            _measure(task, tmp / task, tmp, baseline, args.processes, args.repeat)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
