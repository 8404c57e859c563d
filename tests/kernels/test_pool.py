"""maxpool2d / avgpool2d Triton kernel vs a float64 reference, under the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten.
Kernels 2 and 3, strides 1 and 2, padding 0 and 1, rectangular windows, feature maps wider
than one tile (the paired stride-2 path shifts columns across tile edges), both the paired and
the plain (strided-load) paths for stride 2, maps whose rows allow alignment hints, and global
pooling through plane rows and through flat loads of consecutive planes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.kernels import Unsupported
from opbench.kernels.memory import pool, pool_global
from opbench.kernels.memory.pool import avgpool2d, maxpool2d
from opbench.kernels.tuning import Config

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
OPS = {"max": (maxpool2d, F.max_pool2d), "avg": (avgpool2d, F.avg_pool2d)}
# The interpreter indexes `range` with a 1-element array (global pooling's loop).
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def check(x: torch.Tensor, op: str, kernel_size, stride, padding) -> None:
    ours, theirs = OPS[op]
    ref = theirs(x.double(), kernel_size, stride, padding)
    out = torch.full(ref.shape, float("nan"), dtype=x.dtype)
    assert ours(x, kernel_size, stride, padding, out) is out
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[x.dtype], f"relative L2 error {err:.3e} > {TOLERANCE[x.dtype]:.1e}"
    if op == "max":
        assert torch.equal(out.double(), ref), "max pooling must pick input values exactly"


@pytest.fixture
def plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Use strided loads for stride 2 too (the interpreter's default config is paired)."""
    config = Config.of(BLOCK_H=4, BLOCK_W=8, PAIRED=False, num_warps=4)
    monkeypatch.setattr(pool, "tile_configs", lambda gpu=False: [config])


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("padding", [0, 1])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("kernel_size", [2, 3])
def test_square_windows(kernel_size: int, stride: int, padding: int, op: str) -> None:
    x = randn(1, 2, 9, 11, seed=kernel_size * 10 + stride * 3 + padding)
    check(x, op, kernel_size, stride, padding)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kernel_size,padding", [(2, 0), (3, 1), (3, 0)])
def test_stride_two_plain_path(kernel_size: int, padding: int, op: str, plain_path) -> None:
    check(randn(1, 2, 9, 11, seed=kernel_size + padding), op, kernel_size, 2, padding)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kernel_size,stride,padding", [(3, 2, 1), (2, 2, 0)])
def test_low_precision(dtype: torch.dtype, op: str, kernel_size: int, stride: int, padding: int):
    check(randn(2, 3, 8, 7, dtype=dtype, seed=kernel_size), op, kernel_size, stride, padding)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kernel_size,padding", [(3, 1), (3, 0), (4, 1), (2, 1)])
def test_wider_than_one_tile(kernel_size: int, padding: int, op: str) -> None:
    """20 output columns = 3 tiles of 8: shifted columns cross tile edges both ways."""
    check(randn(1, 1, 6, 40, seed=kernel_size + padding), op, kernel_size, 2, padding)


@pytest.mark.parametrize("op", list(OPS))
def test_rectangular_windows(op: str) -> None:
    x = randn(2, 2, 10, 9, seed=1)
    check(x, op, (3, 2), (1, 2), (1, 0))
    check(x, op, (2, 3), (2, 1), (0, 1))


@pytest.mark.parametrize("op", list(OPS))
def test_one_element_dims(op: str) -> None:
    check(randn(1, 1, 1, 5, seed=2), op, (1, 3), 1, (0, 1))
    check(randn(2, 3, 1, 1, seed=3), op, 1, 1, 0)


def test_channels_last_input() -> None:
    x = randn(2, 3, 9, 10, dtype=torch.float16, seed=4).to(memory_format=torch.channels_last)
    check(x, "max", 3, 2, 1)
    check(x, "avg", 2, 2, 0)


def test_rejects_what_torch_rejects() -> None:
    x = randn(1, 1, 5, 5)
    with pytest.raises(Unsupported):
        maxpool2d(x, 2, 2, 2)  # padding above half the window
    with pytest.raises(Unsupported):
        avgpool2d(x, 7, 1, 0)  # window larger than the map
    with pytest.raises(Unsupported):
        maxpool2d(randn(1, 5, 5), 2, 2, 0)  # not NCHW


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("op", list(OPS))
def test_global_pooling(op: str, dtype: torch.dtype) -> None:
    """A window covering the whole map takes the per-plane reduction kernel."""
    check(randn(2, 5, 7, 7, dtype=dtype, seed=5), op, 7, 7, 0)
    check(randn(2, 3, 5, 9, dtype=dtype, seed=6), op, (5, 9), 1, 0)
    channels_last = randn(2, 3, 4, 5, dtype=dtype, seed=7).to(memory_format=torch.channels_last)
    check(channels_last, op, (4, 5), 1, 0)


# --------------------------------------------------------------------------------------
# Small maps: global pooling through flat loads, aligned stride-2 tiles
# --------------------------------------------------------------------------------------


def global_config(planes: int, block_hw: int, flat: bool) -> Config:
    return Config.of(PLANES=planes, BLOCK_HW=block_hw, FLAT=flat, num_warps=4)


def force_global(monkeypatch: pytest.MonkeyPatch, config: Config) -> None:
    """Tune over this one config (the interpreter runs the only candidate)."""
    monkeypatch.setattr(pool_global, "tile_configs", lambda gpu=False: [config])


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize(
    "config",
    # 8 or 5 consecutive planes per program (tile rows padded to 8), or plane rows of 3.
    [global_config(8, 64, True), global_config(5, 64, True), global_config(3, 16, False)],
    ids=["flat8", "flat5", "rows3"],
)
@pytest.mark.parametrize("shape", [(3, 5, 7, 7), (1, 1, 1, 1), (2, 3, 1, 9), (4, 3, 5, 1)])
def test_global_pooling_small_maps(
    shape: tuple, config: Config, op: str, dtype: torch.dtype, monkeypatch
) -> None:
    force_global(monkeypatch, config)
    x = randn(*shape, dtype=dtype, seed=sum(shape) + config.kwargs["PLANES"])
    check(x, op, shape[2:], 1, 0)


@pytest.mark.parametrize("op", list(OPS))
def test_every_gpu_global_config(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every config the GPU would try for 7x7 maps (flat: 16 planes a program), forced."""
    x = randn(3, 27, 7, 7, dtype=torch.float16, seed=14)
    assert pool_global.planes_consecutive(x)
    configs = pool_global.fit_tiles(pool_global.tile_configs(gpu=True), 49, consecutive=True)
    assert {c.kwargs["PLANES"] for c in configs if c.kwargs["FLAT"]} == {16}
    for config in configs:
        force_global(monkeypatch, config)
        check(x, op, 7, 7, 0)


def test_flat_global_pooling_only_for_consecutive_planes() -> None:
    configs = pool_global.tile_configs(gpu=True)
    x = randn(2, 8, 7, 7)
    # channels_last: plane c starts at element c, not c * 49.
    assert not pool_global.planes_consecutive(x.to(memory_format=torch.channels_last))
    assert pool_global.planes_consecutive(x)
    assert not any(c["FLAT"] for c in pool_global.fit_tiles(configs, 49, consecutive=False))
    assert any(c["FLAT"] for c in pool_global.fit_tiles(configs, 49, consecutive=True))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("shape", [(2, 3, 12, 12), (1, 2, 8, 16), (2, 2, 8, 56)])
def test_aligned_maps(shape: tuple, op: str) -> None:
    """Widths and strides that are multiples of 4-16 elements: hinted loads and stores."""
    for kernel_size, padding in [(2, 0), (3, 1)]:
        check(randn(*shape, seed=sum(shape) + kernel_size), op, kernel_size, 2, padding)


@pytest.mark.parametrize("op", list(OPS))
def test_aligned_maps_plain_path(op: str, plain_path) -> None:
    check(randn(2, 3, 12, 12, seed=15), op, 2, 2, 0)
    check(randn(1, 2, 8, 16, dtype=torch.bfloat16, seed=16), op, 3, 1, 1)


def test_sliced_map_with_hints() -> None:
    """A 12-wide view of 16-wide rows: row stride 16, width 12, so X_ALIGN is 4."""
    x = randn(2, 3, 8, 16, dtype=torch.float16, seed=17)[..., :12]
    check(x, "avg", 2, 2, 0)
    check(x, "max", 3, 2, 1)


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize(
    "kernel_size,stride,padding,size", [(3, 2, 0, 8), (3, 2, 1, 9), (2, 2, 0, 7)]
)
def test_ceil_mode_max_pool(kernel_size, stride, padding, size, paired, monkeypatch) -> None:
    """SqueezeNet's and GoogLeNet's pools round the size up: the last window hangs off the map."""
    config = Config.of(BLOCK_H=4, BLOCK_W=8, PAIRED=paired, num_warps=4)
    monkeypatch.setattr(pool, "tile_configs", lambda gpu=False: [config])
    x = randn(1, 2, size, size + 3, seed=size)
    ref = F.max_pool2d(x.double(), kernel_size, stride, padding, ceil_mode=True)
    assert ref.shape != F.max_pool2d(x, kernel_size, stride, padding).shape
    out = torch.full(ref.shape, float("nan"))
    pool.bind_pool2d(x, kernel_size, stride, padding, out, is_max=True, ceil_mode=True).launch()
    assert torch.equal(out.double(), ref)


def test_ceil_mode_average_pool_is_refused() -> None:
    with pytest.raises(Unsupported, match="ceil_mode"):
        pool.bind_pool2d(randn(1, 1, 8, 8), 3, 2, 0, is_max=False, ceil_mode=True)
