"""benchmarks/gpu_packing.py's jobs are the trials a study trains (its GPU run needs CUDA)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nas.config import ArchConfig
from studies._trials import base_settings
from studies.spec import load_study_spec

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_packing.py"


def test_the_jobs_are_the_studies_trials(tmp_path: Path) -> None:
    out = tmp_path / "jobs.json"
    subprocess.run([sys.executable, str(SCRIPT), "--write-jobs", str(out)], check=True,
                   capture_output=True, text=True, timeout=300)
    jobs = {job["workload"]: job for job in json.loads(out.read_text())}
    assert set(jobs) == {"quickstart", "vqa"}
    quick = load_study_spec(ROOT / "studies" / "quickstart.yaml")
    assert jobs["quickstart"]["settings"] == base_settings(quick)
    assert jobs["quickstart"]["arch"] == ArchConfig.from_dict(quick.enqueue[0]).to_dict()
    assert (jobs["quickstart"]["task"], jobs["quickstart"]["task_options"]) == (
        "digits", {"image_size": 16})
    vqa = jobs["vqa"]
    assert vqa["task"] == "synthetic-vqa" and vqa["arch"]["family"] == "mcan"
    assert vqa["arch"]["d_model"] == 64 and vqa["arch"]["encoder_layers"] == 2  # smoke scale
    assert vqa["settings"]["max_steps_per_epoch"] == 10 and vqa["settings"]["epochs"] == 4


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the run is the benchmark")
def test_without_cuda_it_says_so(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs", str(tmp_path / "none.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stdout.strip() == ("gpu_packing: needs a CUDA device; torch.cuda.is_available() "
                                   "is False here")
