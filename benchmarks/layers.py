"""LW-1x layers against dense layers: forward+backward wall clock next to the MAdds ratio.

    python benchmarks/layers.py [--repeats 60] [--threads N] [--release-freed-memory]

One encoder layer (attention + FFN, post-LN) at d 512, d_ff 2048, 64 tokens, batch 32: dense, and
LW-1x (k = 2, G-MHA + G-FFN + WS). Both are timed in the same run, interleaved (dense, LW, dense,
LW, ...), and the ratio is the median over adjacent pairs of LW time / dense time, so slow drifts
of the machine cancel; the quartiles of the pair ratios show the spread. It is printed beside the
ratio of traced MAdds (0.714: all matrix products; 0.708 counts the linear layers alone).

Allocator: by default glibc hands every freed block of 128 KiB or more back to the OS and the next
step faults it in again (about 35 ms per 16 MB activation on a VM whose kernel pages out cold
memory). That is the allocator, not the layer, so the benchmark keeps freed memory (mallopt) and
says so; `--release-freed-memory` times with glibc's defaults instead.

Also times one `nas cost` for a preset (after import, the cost model's own work).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import time

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nas.cost import estimate_cost
from nas.layers import Attention, FeedForward
from nas.presets import get_preset

D, D_FF, TOKENS, BATCH = 512, 2048, 64, 32


class Layer(nn.Module):
    def __init__(self, groups: int) -> None:
        super().__init__()
        ws = groups > 1
        self.attn = Attention(D, 8, groups=groups, weight_sharing=ws)
        self.ffn = FeedForward(D, D_FF, groups=groups, weight_sharing=ws)
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ffn(x))


def madds(layer: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        layer(x)
    return counter.get_total_flops() // 2


def step(layer: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    layer(x).sum().backward()
    return time.perf_counter() - start


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks up to 32 MiB in the heap; False where that is not glibc."""
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    libc = ctypes.CDLL(path)
    if not hasattr(libc, "mallopt"):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    ok_mmap = libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)
    ok_trim = libc.mallopt(m_trim_threshold, 1024 * 1024 * 1024)
    return bool(ok_mmap and ok_trim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=60, help="interleaved pairs timed")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument(
        "--release-freed-memory", action="store_true",
        help="leave glibc's defaults: freed activations go back to the OS and fault in again",
    )
    args = parser.parse_args()
    kept = False if args.release_freed_memory else keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dense, lw = Layer(1), Layer(2)
    x = torch.randn(BATCH, TOKENS, D)
    ratio_madds = madds(lw, x[:1]) / madds(dense, x[:1])
    for _ in range(5):  # warm-up
        step(dense, x), step(lw, x)
    t_dense: list[float] = []
    t_lw: list[float] = []
    for _ in range(args.repeats):  # interleaved so both see the same machine state
        t_dense.append(step(dense, x))
        t_lw.append(step(lw, x))
    pairs = sorted(b / a for a, b in zip(t_dense, t_lw, strict=True))
    q1, ratio_time, q3 = statistics.quantiles(pairs, n=4)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"d={D} d_ff={D_FF} tokens={TOKENS} batch={BATCH}, {args.repeats} interleaved pairs, "
          f"freed memory {'kept' if kept else 'released to the OS'}")
    print(f"dense layer   fwd+bwd median {statistics.median(t_dense) * 1e3:8.2f} ms")
    print(f"LW-1x layer   fwd+bwd median {statistics.median(t_lw) * 1e3:8.2f} ms")
    print(f"MAdds ratio (LW / dense) {ratio_madds:.3f}")
    print(f"time ratio  (LW / dense) {ratio_time:.3f}  (pair quartiles {q1:.3f}-{q3:.3f}; "
          f"{abs(ratio_time - ratio_madds) / ratio_madds:.1%} from the MAdds ratio; target 10%)")

    # The first call for a family imports its module (timm for vit/swin) and warms torch's
    # dispatcher; the second is the cost model's own work, what every later call pays.
    for name in ("lw-1x", "acort-base", "deit-tiny", "swin-tiny"):
        seconds = []
        for _ in range(2):
            start = time.perf_counter()
            estimate_cost(get_preset(name))
            seconds.append(time.perf_counter() - start)
        print(f"nas cost {name:<11} {seconds[1]:.3f} s after import "
              f"(first call {seconds[0]:.3f} s, incl. importing the family's modules)")

if __name__ == "__main__":
    main()
