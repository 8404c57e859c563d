"""The decode linears under Nsight Compute: why the weight-only kernels and the fp16 GEMV stop
at 50-89% of the copy rate (issue 31, targets 3 and 4; docs/perf/gemm.md).

Launches each kernel a few times on LLaMA-7B shapes at M = 1 and 16, each with the plan the
layer's rule picks, so `ncu` can profile them. The step that runs it
(bench/steps/ncu_decode.tsv) names the sections; a run of this file alone only checks that
every layer binds and launches.

    PYTHONPATH=. python3 bench/ncu_decode.py            # GPU machine
    PYTHONPATH=. python3 bench/ncu_decode.py --tiny     # CPU, Triton's interpreter
"""

from __future__ import annotations

import os
import sys

TINY = "--tiny" in sys.argv
if TINY:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from opbench.kernels.gemm.linear import Linear  # noqa: E402
from opbench.kernels.gemm.linear_weight_only import Int4WeightLinear, Int8WeightLinear  # noqa: E402

DEVICE = "cpu" if TINY else "cuda"
# (K, N): the up projection's shape and the down projection's.
SHAPES = [(64, 96)] if TINY else [(4096, 11008), (11008, 4096)]
ROWS = [1, 3] if TINY else [1, 16]
LAUNCHES = 1 if TINY else 3


def layers(w: torch.Tensor) -> dict[str, Linear]:
    return {
        "fp16": Linear(w, None),
        "int8-weight": Int8WeightLinear(w, None),
        "int4-weight": Int4WeightLinear(w, None, group_size=32 if TINY else 128),
    }


def main() -> None:
    generator = torch.Generator(device="cpu").manual_seed(31)
    for k, n in SHAPES:
        w = (torch.randn(n, k, generator=generator) / k**0.5).half().to(DEVICE)
        built = layers(w)
        for m in ROWS:
            x = torch.randn(m, k, generator=generator).half().to(DEVICE)
            exact = x.double() @ w.double().T
            for name, layer in built.items():
                out = torch.full((m, n), float("nan"), dtype=torch.float16, device=DEVICE)
                bound = layer.bind(x, out)
                for _ in range(LAUNCHES):
                    bound.launch()
                if DEVICE == "cuda":
                    torch.cuda.synchronize()
                error = ((out.double() - exact).norm() / exact.norm()).item()
                print(f"K {k} N {n} M {m} {name}: rel. L2 {error:.1e} against the fp16 layer")


if __name__ == "__main__":
    main()
