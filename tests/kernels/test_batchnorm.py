"""batchnorm2d (inference) Triton kernel vs a float64 reference, under the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.batchnorm import batchnorm2d, fold_batchnorm

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
EPS = 1e-5


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def statistics(channels: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "running_mean": torch.randn(channels, generator=gen),
        "running_var": torch.rand(channels, generator=gen) + 0.5,
        "weight": torch.randn(channels, generator=gen),
        "bias": torch.randn(channels, generator=gen),
    }


def reference(x: torch.Tensor, stats: dict[str, torch.Tensor]) -> torch.Tensor:
    s = {k: (v.double() if v is not None else None) for k, v in stats.items()}
    return F.batch_norm(
        x.double(), s["running_mean"], s["running_var"], s["weight"], s["bias"], False, 0.0, EPS
    )


def check(x: torch.Tensor, stats: dict[str, torch.Tensor]) -> None:
    scale, shift = fold_batchnorm(**stats, eps=EPS)
    out = torch.full(x.shape, float("nan"), dtype=x.dtype)
    assert batchnorm2d(x, scale, shift, out) is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    ref = reference(x, stats)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[x.dtype], f"relative L2 error {err:.3e} > {TOLERANCE[x.dtype]:.1e}"


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 1, 1), (3, 4, 1, 9), (2, 5, 9, 1)])
def test_batchnorm(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    check(randn(*shape, dtype=dtype, seed=sum(shape)), statistics(shape[1], seed=shape[1]))


def test_planes_longer_than_one_block() -> None:
    check(randn(2, 3, 9, 11, dtype=torch.float16, seed=1), statistics(3, seed=2))


def test_strided_and_channels_last_inputs() -> None:
    sliced = randn(2, 8, 5, 6, seed=3)[:, ::2]
    check(sliced, statistics(4, seed=4))
    channels_last = randn(2, 3, 5, 6, dtype=torch.bfloat16, seed=5)
    check(channels_last.to(memory_format=torch.channels_last), statistics(3, seed=6))


def test_fold_without_affine_parameters() -> None:
    stats = statistics(3, seed=7) | {"weight": None, "bias": None}
    scale, shift = fold_batchnorm(**stats, eps=EPS)
    assert scale.dtype == shift.dtype == torch.float32
    check(randn(2, 3, 4, 5, seed=8), stats)


def test_rejects_bad_arguments() -> None:
    scale, shift = fold_batchnorm(**statistics(3, seed=9), eps=EPS)
    with pytest.raises(Unsupported):
        batchnorm2d(randn(3, 4, 5), scale, shift)
    with pytest.raises(ValueError):
        batchnorm2d(randn(1, 3, 4, 5), scale.half(), shift)
    with pytest.raises(ValueError):
        batchnorm2d(randn(1, 4, 4, 5), scale, shift)
    with pytest.raises(Unsupported):
        batchnorm2d(randn(1, 3, 8, 10)[:, :, :, :5], scale, shift)  # H, W not one axis
