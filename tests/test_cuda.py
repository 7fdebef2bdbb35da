"""The trainer and the cost model on a real CUDA device (``gpu`` marker: skipped without one).

What the CPU suite cannot check: that every family trains on the GPU with mixed precision (bf16
where the card supports it; fp16 with the gradient scaler otherwise, forced here by hiding bf16),
that what the memory check plans for on CUDA (the meta-device estimate plus the CUDA libraries'
workspaces, ``nas.memory.device_bytes``) bounds what PyTorch's allocator really peaks at, that a
trial holding a share of the GPU (``resources.gpu`` < 1) is held to it by the allocator, and that
PyTorch's operation counter sees on CUDA the MAdds ``nas cost`` computes. It imports torch, timm
and the model code only (no Optuna, no Ray), so it runs on a bare GPU machine with
``python -m pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from tiny_models import TINY, fast, one_sample, tiny, tiny_tasks
from torch.utils.flop_counter import FlopCounterMode

import trainers.loop as loop
from nas.cost import estimate_cost
from nas.models import create_model, resolve_task
from nas.presets import get_preset
from trainers import TaskData, train

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tasks() -> dict[str, TaskData]:
    return tiny_tasks()


@pytest.mark.parametrize("bf16", [True, False], ids=["bf16", "fp16-scaler"])
@pytest.mark.parametrize("name", list(TINY))
def test_every_family_trains_on_cuda_with_mixed_precision(
    name: str, bf16: bool, tasks: dict[str, TaskData], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``device: auto`` is the GPU; the forward runs under autocast in the chosen dtype, the
    loss is finite and goes down, and the model's weights stay float32 on the GPU."""
    if not bf16:
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    elif not torch.cuda.is_bf16_supported():
        pytest.skip("this card has no bf16")
    seen: list[torch.dtype] = []
    built: list[torch.nn.Module] = []
    real = loop.create_model

    def spy(*args: object, **kwargs: object) -> torch.nn.Module:
        model = real(*args, **kwargs)  # type: ignore[arg-type]
        built.append(model)
        head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
        head.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype)
                                   if model.training else None)
        return model

    monkeypatch.setattr(loop, "create_model", spy)
    data = tasks[TINY[name][2]]
    steps = 30 if data.geometry.kind == "image" else 6
    result = train(tiny(name), fast(max_steps_per_epoch=steps, device="auto"), data)
    assert result.status == "completed", result.reason
    losses = [e["train_loss"] for e in result.epochs]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < 0.95 * losses[0], losses
    assert math.isfinite(result.value)
    assert set(seen) == {torch.bfloat16 if bf16 else torch.float16}, seen
    params = list(built[0].parameters())
    assert {p.device.type for p in params} == {"cuda"}
    assert {p.dtype for p in params} == {torch.float32}


@pytest.mark.parametrize("name", list(TINY))
def test_what_the_check_plans_for_bounds_the_cuda_allocators_peak(name: str) -> None:
    """``nas.memory.device_bytes`` on CUDA (the meta-device estimate plus the CUDA libraries'
    workspaces) is at least what the CUDA allocator holds at its peak over a real run (training
    steps and evaluation) in a fresh process, the libraries' first workspaces included."""
    script = textwrap.dedent(f"""
        import torch
        from nas.memory import device_bytes, training_memory
        from tiny_models import TINY, TINY_TASK_OPTIONS, fast, tiny
        from trainers import get_task, train
        task = TINY[{name!r}][2]
        data = get_task(task, **TINY_TASK_OPTIONS[task])
        cfg = fast(epochs=1, max_steps_per_epoch=4, batch_size=32, device="cuda")
        estimate = training_memory(tiny({name!r}), data.geometry, cfg.batch_size,
                                   eval_batch_size=cfg.eval_batch_size)
        result = train(tiny({name!r}), cfg, data)
        assert result.status == "completed", result.reason
        print(torch.cuda.max_memory_allocated(), estimate.total, device_bytes(estimate, "cuda"))
    """)
    done = _child(script)
    peak, estimate, planned = (int(v) for v in done.stdout.split()[-3:])
    print(f"{name}: peak {peak / 2**20:.2f} MiB, estimate {estimate / 2**20:.2f} MiB, "
          f"planned {planned / 2**20:.2f} MiB")
    assert 0 < peak <= planned


def test_a_trial_holding_half_a_gpu_is_held_to_half_by_the_allocator() -> None:
    """``train(..., gpu_fraction=0.5)`` sets PyTorch's per-process fraction: afterwards an
    allocation of 60% of the card fails in that process, while 40% succeeds. In a child process:
    the fraction lasts for the process."""
    script = textwrap.dedent("""
        import torch
        from tiny_models import fast, tiny
        from trainers import get_task, train
        data = get_task("digits")
        result = train(tiny("vit"), fast(epochs=1, max_steps_per_epoch=2, device="cuda"), data,
                       gpu_fraction=0.5)
        assert result.status == "completed", result.reason
        torch.cuda.empty_cache()
        total = torch.cuda.mem_get_info()[1]
        ok = torch.empty(int(0.4 * total), dtype=torch.uint8, device="cuda")
        del ok
        torch.cuda.empty_cache()
        try:
            torch.empty(int(0.6 * total), dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError as e:
            print("refused:", str(e).splitlines()[0])
        else:
            raise SystemExit("60% of the card was allocated past a 0.5 share")
    """)
    assert "refused:" in _child(script).stdout


@pytest.mark.parametrize("preset", ["deit-tiny", "swin-tiny", "mcan-small", "lxmert", "ort-base",
                                    "acort-small"])
def test_pytorchs_counter_on_cuda_sees_the_madds_nas_cost_computes(preset: str) -> None:
    """One forward pass of the preset on the GPU under mixed precision, counted by
    ``FlopCounterMode`` (FLOPs / 2), equals ``nas cost``'s MAdds: the kernels CUDA picks do the
    work the cost model counts. cuDNN is off for the pass: its fused LSTM (MCAN's question
    encoder) is opaque to the counter, as oneDNN's is on the CPU (tests/test_flop_counter.py)."""
    config = get_preset(preset)
    geometry = resolve_task(config, None)
    torch.manual_seed(0)
    model = create_model(config, geometry, device="cuda").eval()
    sample = one_sample(config, geometry, torch.Generator().manual_seed(0))
    inputs = {k: v.cuda() for k, v in sample.items()}
    counter = FlopCounterMode(display=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with torch.backends.cudnn.flags(enabled=False), torch.no_grad(), \
                torch.autocast("cuda", dtype=torch.bfloat16), counter:
            model(**inputs)
    counted = int(counter.get_total_flops()) // 2
    assert counted == estimate_cost(config, geometry).madds


def _child(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh Python process with the checkout and tests importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done
