"""permute / transpose Triton kernels vs a float64 reference, under the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten, and a
permutation must reproduce its input exactly. Shapes are odd on purpose and cover both
kernel paths: the transposing tile (the innermost axis moves) and the copy-like tile, with and
without alignment hints.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.host import alignment, collapse_dims
from opbench.kernels.memory import transpose as transpose_module
from opbench.kernels.memory.transpose import permute, transpose
from opbench.kernels.tuning import Config

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def poisoned(shape, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(tuple(shape), float("nan"), dtype=dtype)


def check_exact(out: torch.Tensor, ref: torch.Tensor) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    assert out.is_contiguous()
    assert torch.equal(out.double(), ref), "a permutation must move values unchanged"


@pytest.mark.parametrize("dims", list(itertools.permutations(range(4))))
def test_all_24_permutations_fp32(dims: tuple[int, ...]) -> None:
    x = randn(3, 5, 6, 7, seed=sum(d * 10**i for i, d in enumerate(dims)))
    ref = x.double().permute(dims).contiguous()
    out = poisoned(ref.shape, x.dtype)
    assert permute(x, dims, out) is out
    check_exact(out, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 45), (1, 19), (33, 1), (70, 3)])
def test_transpose_2d(dtype: torch.dtype, shape: tuple[int, int]) -> None:
    x = randn(*shape, dtype=dtype, seed=shape[0])
    ref = x.double().t().contiguous()
    check_exact(transpose(x, 0, 1, poisoned(ref.shape, dtype)), ref)
    check_exact(transpose(x, -1, -2), ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dims", [(0, 2, 3, 1), (3, 1, 0, 2), (1, 0, 2, 3), (0, 1, 3, 2)])
def test_strided_input(dtype: torch.dtype, dims: tuple[int, ...]) -> None:
    """A sliced view (no unit stride on two axes) goes in without a copy."""
    x = randn(4, 10, 5, 12, dtype=dtype, seed=7)[:, ::2, :, 1:]
    ref = x.double().permute(dims).contiguous()
    check_exact(permute(x, dims, poisoned(ref.shape, dtype)), ref)


@pytest.mark.parametrize("dims", [(0, 2, 3, 1), (3, 2, 1, 0), (2, 0, 1, 3)])
def test_one_element_dims(dims: tuple[int, ...]) -> None:
    x = randn(1, 7, 1, 9, dtype=torch.float16, seed=3)
    ref = x.double().permute(dims).contiguous()
    check_exact(permute(x, dims, poisoned(ref.shape, x.dtype)), ref)


def test_copy_path_with_several_tiles() -> None:
    """The innermost axis stays put: a copy-like tile, rows longer than one block."""
    x = randn(3, 11, 70, dtype=torch.bfloat16, seed=5)
    ref = x.double().permute(1, 0, 2).contiguous()
    check_exact(permute(x, (1, 0, 2), poisoned(ref.shape, x.dtype)), ref)


def test_rank_one_and_three() -> None:
    x = randn(13, seed=1)
    check_exact(permute(x, (0,)), x.double())
    y = randn(5, 6, 7, dtype=torch.float16, seed=2)
    check_exact(permute(y, (2, 0, 1)), y.double().permute(2, 0, 1).contiguous())


def test_collapse_dims_merges_what_both_layouts_walk_together() -> None:
    # NCHW -> NHWC: H and W merge, N, C stay; size-1 axes vanish.
    sizes, (xs, ys) = collapse_dims([2, 1, 4, 5, 3], [60, 60, 5, 1, 20], [60, 60, 15, 3, 1])
    assert sizes == [2, 20, 3]
    assert xs == [60, 1, 20] and ys == [60, 3, 1]


def test_rejects_bad_arguments() -> None:
    x = randn(3, 4)
    with pytest.raises(ValueError):
        permute(x, (0, 0))
    with pytest.raises(ValueError):
        permute(x, (1, 0), out=torch.empty(3, 4))
    with pytest.raises(Unsupported):
        permute(torch.ones(3, 4, dtype=torch.int32), (1, 0))


# --------------------------------------------------------------------------------------
# Small maps: partial tiles and alignment hints
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape,dims",
    [
        ((3, 5, 7, 7), (0, 2, 3, 1)),  # NCHW -> NHWC of 7x7 maps (transposing)
        ((3, 5, 14, 14), (0, 2, 3, 1)),  # 196-element rows: X_ALIGN = 4
        ((3, 5, 24), (0, 2, 1)),  # tokens -> channels (transposing)
        ((2, 3, 1, 9), (0, 2, 3, 1)),
        ((1, 7, 1, 9), (3, 2, 1, 0)),
        ((3, 5, 6, 7), (1, 0, 2, 3)),  # copy-like
        ((4, 6, 8), (1, 0, 2)),  # copy-like, 8-element rows: aligned
    ],
)
def test_small_maps_with_partial_tiles(
    shape: tuple, dims: tuple, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 x 4 tiles, forced on both kernels: no axis divides into whole tiles."""
    config = Config.of(BLOCK_T=8, BLOCK_I=4, num_warps=4)
    monkeypatch.setattr(transpose_module, "tile_configs", lambda copying, gpu=False: [config])
    x = randn(*shape, dtype=dtype, seed=sum(shape))
    ref = x.double().permute(dims).contiguous()
    check_exact(permute(x, dims, poisoned(ref.shape, dtype)), ref)


def test_alignment_hints() -> None:
    assert alignment(196, 200704) == 4 and alignment(0, 48) == 16 and alignment(197) == 1
    x_strides = torch.empty(32, 1024, 14, 14, device="meta").permute(0, 2, 3, 1).stride()
    plan = transpose_module._strided_plan((32, 14, 14, 1024), x_strides, (200704, 14336, 1024, 1))
    assert not plan.copying and plan.sizes == (1, 32, 196, 1024)
    assert (plan.x_align, plan.y_align) == (4, 16)


@pytest.mark.parametrize("dims", [(0, 2, 3, 1), (0, 1, 3, 2)])
def test_sliced_input_with_hints(dims: tuple) -> None:
    """A sliced input whose strides are multiples of 4 and 8: hinted, and still exact."""
    x = randn(3, 8, 6, 4, dtype=torch.float16, seed=9)[:, ::2]
    ref = x.double().permute(dims).contiguous()
    check_exact(permute(x, dims, poisoned(ref.shape, x.dtype)), ref)
