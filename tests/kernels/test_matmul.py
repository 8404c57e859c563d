"""The batched matmul Triton kernel (kernels/gemm/matmul.py) vs float64, under the CPU interpreter:
odd M, N, K (partial tiles, K not a multiple of BLOCK_K), batches with broadcast leading dims,
each dtype; outputs start as NaN and must be fully written. Also: every GPU configuration
fits Hopper's shared memory."""

from __future__ import annotations

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.gemm.matmul import (
    HOPPER_SMEM_BYTES,
    bind_matmul,
    matmul,
    smem_bytes,
    tile_candidates,
)

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

# (a's shape, b's shape): a [..., M, K] @ b [..., K, N]
CASES = {
    "batched": ((2, 5, 7), (2, 7, 3)),
    "heads-partial-tiles": ((2, 3, 17, 33), (2, 3, 33, 19)),
    "broadcast-a": ((2, 1, 5, 7), (2, 4, 7, 3)),
    "broadcast-b": ((3, 5, 33), (1, 33, 18)),
    "one-row": ((2, 1, 40), (2, 40, 9)),
    "one-by-one": ((1, 1, 7), (1, 7, 1)),
    "q-kT": ((2, 2, 9, 8), (2, 2, 8, 9)),
}


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = torch.matmul(a.double(), b.double())  # the inputs as rounded, multiplied exactly
    assert out.shape == ref.shape
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[a.dtype], f"relative L2 error {err:.3e} > {TOLERANCE[a.dtype]:.0e}"


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("case", list(CASES))
def test_matmul_into_poisoned_output(case: str, dtype: torch.dtype) -> None:
    shape_a, shape_b = CASES[case]
    a, b = randn(*shape_a, dtype=dtype, seed=1), randn(*shape_b, dtype=dtype, seed=2)
    shape = (*torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    out = torch.full(shape, float("nan"), dtype=dtype)
    assert matmul(a, b, out) is out
    check(out, a, b)


def test_strided_operands() -> None:
    """k transposed as a view (q @ kᵀ without a copy): strides, not layouts, drive the loads."""
    q, k = randn(2, 9, 16, seed=3), randn(2, 11, 16, seed=4)
    out = torch.full((2, 9, 11), float("nan"))
    bind_matmul(q, k.transpose(1, 2), out).launch()
    check(out, q, k.transpose(1, 2))


def test_bound_launch_rewrites_the_same_output() -> None:
    a, b = randn(2, 6, 20, dtype=torch.float16, seed=5), randn(2, 20, 5, dtype=torch.float16)
    bound = bind_matmul(a, b)
    first = bound.launch()
    first.fill_(float("nan"))  # poison between launches: the second must rewrite all of it
    second = bound.launch()
    assert second.data_ptr() == first.data_ptr()
    check(second, a, b)


@pytest.mark.parametrize("element_size", [4, 2])
def test_every_gpu_configuration_fits_hopper_shared_memory(element_size: int) -> None:
    for m, n in [(4096, 4096), (512, 64), (1, 128), (16, 16)]:
        candidates = tile_candidates(m, n, element_size, gpu=True)
        assert candidates
        for config in candidates:
            assert smem_bytes(config, element_size) <= HOPPER_SMEM_BYTES, config
            assert config["BLOCK_K"] * element_size == 128  # the full 128-byte swizzle
            assert config["BLOCK_M"] <= max(16, m) * 2 and config["BLOCK_N"] <= max(16, n) * 2
    big = tile_candidates(4096, 4096, 2, gpu=True)
    assert {(c["BLOCK_M"], c["BLOCK_N"]) for c in big} >= {(128, 256), (256, 128), (128, 128)}
    # fp32 runs on FMA units: no tile whose accumulator alone fills the registers.
    big32 = tile_candidates(4096, 4096, 4, gpu=True)
    assert max(c["BLOCK_M"] * c["BLOCK_N"] // (32 * c.num_warps) for c in big32) <= 64


def test_empty_output() -> None:
    assert matmul(torch.empty(2, 0, 3), torch.empty(2, 3, 4)).shape == (2, 0, 4)


def test_rejects_what_it_does_not_handle() -> None:
    a = randn(2, 4, 6)
    with pytest.raises(Unsupported):
        matmul(a, randn(2, 6, 3, dtype=torch.float16))  # mixed dtypes
    with pytest.raises(Unsupported):
        matmul(torch.ones(2, 4, 6, dtype=torch.int32), torch.ones(2, 6, 3, dtype=torch.int32))
    with pytest.raises(Unsupported):
        matmul(randn(6), randn(6, 3))  # a 1-d operand
    with pytest.raises(ValueError):
        matmul(a, randn(2, 5, 3))  # K differs
    with pytest.raises(ValueError):
        matmul(a, randn(3, 6, 3))  # batch dims do not broadcast
    with pytest.raises(ValueError):
        matmul(a, randn(2, 6, 3), out=torch.empty(2, 4, 4))  # wrong output shape
    with pytest.raises(Unsupported):  # three batch axes that do not merge
        matmul(randn(2, 3, 2, 4, 5), randn(1, 3, 1, 5, 2))
