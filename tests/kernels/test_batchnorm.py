"""batchnorm2d (inference) Triton kernel vs a float64 reference, under the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten. Both
paths (plane tiles, flat blocks) are forced on small odd shapes, and every config the GPU
would try is run once.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.host import fold_batchnorm
from opbench.kernels.memory import batchnorm
from opbench.kernels.memory.batchnorm import batchnorm2d
from opbench.kernels.tuning import Config

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
EPS = 1e-5


def scale_and_shift(**stats) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's float32 parameters from the shared float64 fold."""
    scale, shift = fold_batchnorm(**stats)
    assert scale.dtype == shift.dtype == torch.float64
    return scale.float().contiguous(), shift.float().contiguous()


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
    scale, shift = scale_and_shift(**stats, eps=EPS)
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
    scale, shift = scale_and_shift(**stats, eps=EPS)
    assert scale.dtype == shift.dtype == torch.float32
    check(randn(2, 3, 4, 5, seed=8), stats)


def test_rejects_bad_arguments() -> None:
    scale, shift = scale_and_shift(**statistics(3, seed=9), eps=EPS)
    with pytest.raises(Unsupported):
        batchnorm2d(randn(3, 4, 5), scale, shift)
    with pytest.raises(ValueError):
        batchnorm2d(randn(1, 3, 4, 5), scale.half(), shift)
    with pytest.raises(ValueError):
        batchnorm2d(randn(1, 4, 4, 5), scale, shift)
    with pytest.raises(Unsupported):
        batchnorm2d(randn(1, 3, 8, 10)[:, :, :, :5], scale, shift)  # H, W not one axis


# --------------------------------------------------------------------------------------
# Small planes: the flat path and the aligned plane path, each forced
# --------------------------------------------------------------------------------------

FLAT = Config.of(BLOCK_P=1, BLOCK_HW=64, FLAT=True, num_warps=4)
PLANES = Config.of(BLOCK_P=4, BLOCK_HW=16, FLAT=False, num_warps=4)
SMALL_SHAPES = [
    (3, 5, 7, 7),
    (1, 1, 1, 1),
    (2, 3, 1, 9),
    (4, 3, 5, 1),
    (2, 3, 14, 14),
    (1, 2, 4, 2),
]


def gpu_configs(monkeypatch: pytest.MonkeyPatch) -> list[Config]:
    """The config list the GPU tunes over (the interpreter's has a single config)."""
    return batchnorm.tile_configs(gpu=True)


def prune(configs: list[Config], x: torch.Tensor, out: torch.Tensor) -> list:
    planes, pixels = x.shape[0] * x.shape[1], x.shape[2] * x.shape[3]
    return batchnorm.fit_tiles(configs, planes, pixels, batchnorm.flat_allowed(x, out))


def force(monkeypatch: pytest.MonkeyPatch, config: Config) -> None:
    """Tune over this one config (the interpreter runs the only candidate)."""
    monkeypatch.setattr(batchnorm, "tile_configs", lambda gpu=False: [config])


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("shape", SMALL_SHAPES)
@pytest.mark.parametrize("config", [FLAT, PLANES], ids=["flat", "planes"])
def test_small_planes(
    config: Config, shape: tuple, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flat blocks cross plane boundaries (channel per element); plane tiles with hints."""
    force(monkeypatch, config)
    seed = sum(shape) + config.kwargs["FLAT"]
    check(randn(*shape, dtype=dtype, seed=seed), statistics(shape[1], seed=seed + 1))


def test_plane_path_on_sliced_aligned_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plane strides 392/196 and 14x14 planes: ALIGN=4, with an input that is not contiguous."""
    force(monkeypatch, PLANES)
    x = randn(2, 6, 14, 14, dtype=torch.float16, seed=10)[:, ::2]
    assert batchnorm.plane_alignment((1176, 392, 1, 588, 196, 1), 196) == 4
    check(x, statistics(3, seed=11))


@pytest.mark.parametrize("shape", [(3, 5, 7, 7), (2, 3, 14, 14)])
def test_every_gpu_config(shape: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every config the GPU would try at this shape, forced one by one, writes every output."""
    x = randn(*shape, dtype=torch.float16, seed=12)
    configs = prune(gpu_configs(monkeypatch), x, x)
    assert {c.kwargs["FLAT"] for c in configs} == {False, True}
    for config in configs:
        force(monkeypatch, config)
        check(x, statistics(shape[1], seed=13))


def test_flat_path_only_for_contiguous_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = gpu_configs(monkeypatch)
    x = randn(2, 3, 5, 6)
    channels_last = x.to(memory_format=torch.channels_last)
    assert any(c.kwargs["FLAT"] for c in prune(configs, x, torch.empty_like(x)))
    assert not any(c.kwargs["FLAT"] for c in prune(configs, channels_last, x))
    assert not any(c.kwargs["FLAT"] for c in prune(configs, x, channels_last))
    for config in prune(configs, x, x):  # tiles fitted to 30-pixel planes
        assert config.kwargs["BLOCK_HW"] <= (32 if not config.kwargs["FLAT"] else 256)
