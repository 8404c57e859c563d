"""layernorm / rmsnorm Triton kernel vs a float64 reference, under the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten.
Covers hidden sizes from 1 to longer than one block (the chunked variant, whose layernorm
statistics merge chunks with Chan's formula), strided rows, missing weight or bias, and every
rows-per-program config the GPU would try on small odd shapes.
"""

from __future__ import annotations

import pytest
import torch

from opbench.kernels.memory import rows as row_module
from opbench.kernels.memory.norm import bind_norm, layernorm, rmsnorm

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 2e-2}
DTYPES = list(TOLERANCE)
EPS = 1e-5
pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered"),
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0"),
]


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def layernorm_reference(x, weight, bias) -> torch.Tensor:
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + EPS)
    y = y if weight is None else y * weight.double()
    return y if bias is None else y + bias.double()


def rmsnorm_reference(x, weight) -> torch.Tensor:
    x = x.double()
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS)
    return y if weight is None else y * weight.double()


def poisoned(x: torch.Tensor) -> torch.Tensor:
    return torch.full(x.shape, float("nan"), dtype=x.dtype)


def check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= TOLERANCE[dtype], f"relative L2 error {err:.3e} > {TOLERANCE[dtype]:.1e}"


def inputs(shape, dtype, seed):
    x = randn(*shape, dtype=dtype, seed=seed) * 3 + 1  # a non-zero mean to remove
    return (
        x,
        randn(shape[-1], dtype=dtype, seed=seed + 1),
        randn(shape[-1], dtype=dtype, seed=seed + 2),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 7, 13), (5, 1), (2, 300), (1, 77)])
def test_layernorm(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x, w, b = inputs(shape, dtype, seed=shape[-1])
    out = poisoned(x)
    assert layernorm(x, w, b, EPS, out) is out
    check(out, layernorm_reference(x, w, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 7, 13), (5, 1), (2, 300), (1, 77)])
def test_rmsnorm(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x, w, _ = inputs(shape, dtype, seed=shape[-1] + 100)
    out = poisoned(x)
    assert rmsnorm(x, w, EPS, out) is out
    check(out, rmsnorm_reference(x, w), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hidden_longer_than_one_block(dtype: torch.dtype) -> None:
    """9000 > MAX_ONE_PASS_BLOCK: statistics over 3 chunks, then a second pass."""
    x, w, b = inputs((2, 9000), dtype, seed=9)
    check(layernorm(x, w, b, EPS, poisoned(x)), layernorm_reference(x, w, b), dtype)
    check(rmsnorm(x, w, EPS, poisoned(x)), rmsnorm_reference(x, w), dtype)


def test_chunked_statistics_with_a_large_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny blocks and a mean 20x the spread: a naive E[x^2] - E[x]^2 would lose digits."""
    monkeypatch.setattr(row_module, "MAX_ONE_PASS_BLOCK", 8)
    monkeypatch.setattr(row_module, "LOOP_BLOCK", 8)
    x = randn(3, 5, 21, seed=11) * 5 + 100
    w, b = randn(21, seed=12), randn(21, seed=13)
    check(layernorm(x, w, b, EPS, poisoned(x)), layernorm_reference(x, w, b), torch.float32)
    check(rmsnorm(x, w, EPS, poisoned(x)), rmsnorm_reference(x, w), torch.float32)


def test_strided_rows_and_fp32_weights() -> None:
    x = randn(6, 10, 33, dtype=torch.float16, seed=14)[:, ::3]
    w, b = randn(33, seed=15), randn(33, seed=16)  # float32 parameters for a float16 input
    check(layernorm(x, w, b, EPS, poisoned(x)), layernorm_reference(x, w, b), torch.float16)
    check(rmsnorm(x, w, EPS, poisoned(x)), rmsnorm_reference(x, w), torch.float16)


def test_without_weight_or_bias() -> None:
    x = randn(4, 19, seed=17)
    check(layernorm(x, None, None, EPS, poisoned(x)), layernorm_reference(x, None, None), x.dtype)
    check(rmsnorm(x, None, EPS, poisoned(x)), rmsnorm_reference(x, None), x.dtype)


def test_rejects_mismatched_weight() -> None:
    x = randn(4, 19)
    with pytest.raises(ValueError):
        layernorm(x, randn(18), None, EPS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_test_only_slowdown_switch_keeps_layernorm_correct(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deliberately_slow (the gate's GPU demonstration) changes only the speed: the looped
    16-element kernel must still compute the same layernorm, on odd hidden sizes."""
    from opbench.kernels.memory import norm

    for shape in [(3, 37), (2, 5, 300)]:
        x, w, b = inputs(shape, dtype, seed=shape[-1] + 7)
        bound = bind_norm(x, w, b, EPS, poisoned(x), rms=False, deliberately_slow=True)
        assert bound.choices[0].config == norm.SLOW_CONFIG
        check(bound.launch(), layernorm_reference(x, w, b), dtype)


def gpu_row_configs(monkeypatch: pytest.MonkeyPatch) -> list:
    """The row configs the GPU tunes over (the interpreter's has a single config)."""
    return row_module.row_configs(gpu=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5, 24), (13, 40), (1, 1), (7, 1, 3)])
def test_every_gpu_config_on_small_rows(
    shape: tuple, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rows-per-program x warps config the GPU would try (several rows per program,
    partial last program), with the affine parameters loaded before the statistics."""

    rows = 1
    for size in shape[:-1]:
        rows *= size
    block_l, _ = row_module.row_block(shape[-1])
    configs = row_module.fit_rows_to_shape(gpu_row_configs(monkeypatch), rows, block_l)
    x, w, b = inputs(shape, dtype, seed=sum(shape))
    for config in configs:
        for weight, bias, rms, ref in [
            (w, b, False, layernorm_reference(x, w, b)),
            (w, None, True, rmsnorm_reference(x, w)),
            (None, b, False, layernorm_reference(x, None, b)),
        ]:
            bound = bind_norm(x, weight, bias, EPS, poisoned(x), rms=rms, config=config)
            check(bound.launch(), ref, dtype)


def test_rows_of_up_to_1024_elements_take_two_warp_programs(monkeypatch) -> None:
    """The H200's winners for 768- and 1024-element rows (norm.fit_norm_rows); longer rows
    keep every config `fit_rows_to_shape` keeps."""
    from opbench.kernels.memory import norm

    configs = gpu_row_configs(monkeypatch)
    short = norm.fit_norm_rows(configs, 12608, 1024)
    assert short and {c.num_warps for c in short} == {2}
    long = norm.fit_norm_rows(configs, 4096, 4096)
    assert long == row_module.fit_rows_to_shape(configs, 4096, 4096)
