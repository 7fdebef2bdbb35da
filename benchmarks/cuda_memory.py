"""The meta-device training-memory estimate against what PyTorch's CUDA allocator really peaks at.

    python benchmarks/cuda_memory.py [--batch-scale 1.0]

Needs a CUDA device (it exits with a one-line reason without one). For each case, one model
built on the GPU trains two steps (forward under autocast, as the trainer does, backward, AdamW:
the second step holds the optimizer's moments) and evaluates one batch without a graph, on the
family's ``example_inputs``; printed side by side: ``nas.memory``'s estimate
(``training_memory``: parameters x 16 bytes + buffers + inputs + the larger of the activation
figures), ``torch.cuda.max_memory_allocated`` over the run with mixed precision (bf16), without
it (fp32), and with mixed precision and cuDNN off, and each peak's ratio to the estimate. The
cases are the trainer tests' tiny models (``tests/tiny_models.py``) at batch 32 and the presets
at their own geometry at the batches named below. The first row is the fixed cost of the CUDA
libraries' own workspaces that the allocator holds (one bf16 matrix product and its backward
from a clean state), which no per-model estimate contains.

Measured 2026-11-27 on one NVIDIA H200 (torch 2.11): workspaces 64.06 MiB; the presets' bf16
peaks 0.41 (deit-tiny at 64, acort-small at 16) to 0.80 (ort-base at 16) of the estimate, fp32
0.51-0.78; the tiny models 0.34-1.55 (tiny MCAN's cuDNN LSTM workspace: 0.60 with cuDNN off),
which is why the checks on CUDA add ``nas.memory.CUDA_LIBRARY_BYTES`` (``tests/test_cuda.py``
checks the sum against fresh processes' peaks).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from nas.config import ArchConfig  # noqa: E402
from nas.loading import load_arch  # noqa: E402
from nas.memory import training_memory  # noqa: E402
from nas.models import create_model, resolve_task  # noqa: E402
from nas.presets import get_preset  # noqa: E402
from trainers import get_task  # noqa: E402

#: preset -> training batch of the measurement (the papers' per-GPU batches or less)
PRESET_BATCHES = {"deit-tiny": 64, "swin-tiny": 16, "mcan-small": 32, "lxmert": 16,
                  "ort-base": 16, "acort-small": 16}



def _peak(run: Callable[[], None]) -> int:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def _train_and_eval(config: ArchConfig, geometry: Any, batch: int, *, amp: bool,
                    cudnn: bool) -> None:
    with torch.backends.cudnn.flags(enabled=cudnn):
        model = create_model(config, geometry, device="cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        inputs = model.example_inputs(batch)
        model.train()
        for _ in range(2):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                out = model(**inputs)
            loss = out.float().logsumexp(-1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        del out, loss
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            model(**inputs)
        del model, opt, inputs


def _workspaces() -> None:
    a = torch.randn(64, 64, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        b = a @ a
    b.float().sum().backward()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-scale", type=float, default=1.0,
                        help="multiply the presets' batches (default 1)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("cuda_memory: needs a CUDA device; torch.cuda.is_available() is False here")
        return 2
    from tiny_models import TINY

    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    fixed = _peak(_workspaces)
    print(f"CUDA libraries' workspaces (first matrix product): {fixed / 2**20:.2f} MiB")
    cases: list[tuple[str, ArchConfig, Any, int]] = []
    for name, (preset, overrides, task) in TINY.items():
        options = {} if task == "digits" else {"train_size": 64, "val_size": 32}
        geometry = get_task(task, **options).geometry
        cases.append((f"tiny {name}", load_arch(preset, overrides), geometry, 32))
    for preset, batch in PRESET_BATCHES.items():
        config = get_preset(preset)
        cases.append((preset, config, resolve_task(config, None),
                      max(1, round(batch * args.batch_scale))))
    print(f"{'case':<16}{'batch':>6}{'estimate MiB':>14}{'bf16 MiB':>10}{'ratio':>7}"
          f"{'fp32 MiB':>10}{'ratio':>7}{'no cuDNN':>10}{'ratio':>7}")
    for label, config, geometry, batch in cases:
        parts = training_memory(config, geometry, batch)
        estimate = parts.total
        row = [f"{label:<16}{batch:>6}{estimate / 2**20:>14.2f}"]
        for amp, cudnn in ((True, True), (False, True), (True, False)):
            peak = _peak(functools.partial(_train_and_eval, config, geometry, batch, amp=amp,
                                           cudnn=cudnn))
            row.append(f"{peak / 2**20:>10.2f}{peak / estimate:>7.2f}")
        print("".join(row), flush=True)
        print(f"{'':<22}parts MiB: parameters {parts.parameter_bytes / 2**20:.2f}, buffers "
              f"{parts.buffer_bytes / 2**20:.2f}, inputs {parts.input_bytes / 2**20:.2f}, train "
              f"activations {parts.train_activation_bytes / 2**20:.2f}, eval activations "
              f"{parts.eval_activation_bytes / 2**20:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
