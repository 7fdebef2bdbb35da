"""LW-1x layers against dense layers: forward+backward wall clock next to the MAdds ratio.

    python benchmarks/layers.py [--repeats 20]

One encoder layer (attention + FFN, post-LN) at d 512, d_ff 2048, 64 tokens, batch 32: dense, and
LW-1x (k = 2, G-MHA + G-FFN + WS). Both are timed in the same run, interleaved, and the ratio of
median times is printed beside the ratio of traced MAdds. Also times one `nas cost` for a preset
(after import, the cost model's own work).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    dense, lw = Layer(1), Layer(2)
    x = torch.randn(BATCH, TOKENS, D)
    ratio_madds = madds(lw, x[:1]) / madds(dense, x[:1])
    for _ in range(3):  # warm-up
        step(dense, x), step(lw, x)
    times: dict[str, list[float]] = {"dense": [], "lw": []}
    for _ in range(args.repeats):  # interleaved so both see the same machine state
        times["dense"].append(step(dense, x))
        times["lw"].append(step(lw, x))
    t_dense, t_lw = statistics.median(times["dense"]), statistics.median(times["lw"])
    ratio_time = t_lw / t_dense
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"d={D} d_ff={D_FF} tokens={TOKENS} batch={BATCH}, median of {args.repeats}")
    print(f"dense layer   fwd+bwd {t_dense * 1e3:8.2f} ms")
    print(f"LW-1x layer   fwd+bwd {t_lw * 1e3:8.2f} ms")
    print(f"MAdds ratio (LW / dense) {ratio_madds:.3f}")
    print(f"time ratio  (LW / dense) {ratio_time:.3f}  "
          f"({abs(ratio_time - ratio_madds) / ratio_madds:.1%} from the MAdds ratio; target 10%)")

    estimate_cost(get_preset("lw-1x"))  # first call pays one-off dispatch warm-up
    for name in ("lw-1x", "acort-base", "deit-tiny"):
        start = time.perf_counter()
        estimate_cost(get_preset(name))
        print(f"nas cost {name:<11} {time.perf_counter() - start:.3f} s (after import)")


if __name__ == "__main__":
    main()
