"""Linear (fp16/bf16/fp32) Triton kernels vs a float64 reference, under the CPU interpreter.

Every launch writes into an output prefilled with NaN; all of it must be overwritten.
Shapes are odd on purpose: M = 1 (decode path), M > 64 (tile path), N and K not multiples of 16.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from opbench.backends.triton_table import check_quant
from opbench.kernels import Unsupported, tuning
from opbench.kernels.gemm.linear import Linear as prepare_linear
from opbench.kernels.gemm.linear_plans import gemm_plan

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-4}
ACTIVATIONS = {"none": lambda t: t, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu,
               "hardswish": F.hardswish, "tanh": torch.tanh}  # fmt: skip


def make_inputs(m: int, n: int, k: int, dtype: torch.dtype, bias: bool, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype) if bias else None
    return x, w, b


def reference(x, w, b, activation: str) -> torch.Tensor:
    y = x.double() @ w.double().T
    if b is not None:
        y = y + b.double()
    return ACTIVATIONS[activation](y)


def check(out: torch.Tensor, ref: torch.Tensor, tolerance: float) -> None:
    assert not torch.isnan(out).any(), "some outputs were never written"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance, f"relative L2 error {err:.3e} > {tolerance:.1e}"


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("m", [1, 67])
def test_fp16_activations_and_bias(m: int, bias: bool, activation: str) -> None:
    x, w, b = make_inputs(m, 45, 83, torch.float16, bias, seed=m)
    fn = prepare_linear(w, b, activation=activation)
    out = torch.full((m, 45), float("nan"), dtype=torch.float16)
    assert fn(x, out=out) is out
    check(out, reference(x, w, b, activation), TOLERANCE[torch.float16])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_every_kernel_kind(dtype: torch.dtype) -> None:
    """Streaming GEMV (16-bit weights), split-K (1 and 3 splits), tiled and TMA kernels;
    K = 72 keeps rows 16-byte aligned."""
    x, w, b = make_inputs(37, 51, 72, dtype, bias=True, seed=1)
    fn = prepare_linear(w, b, activation="gelu")
    plans = fn.candidates(x, every_kind=True)
    kinds = {"split_k", "tiled", "tma"} | ({"stream"} if dtype != torch.float32 else set())
    assert {p["KIND"] for p in plans} == kinds
    assert any(p["SPLIT_K"] > 1 for p in plans)
    ref = reference(x, w, b, "gelu")
    for plan in plans:
        out = torch.full((37, 51), float("nan"), dtype=dtype)
        fn.launch(plan, x, out)
        check(out, ref, TOLERANCE[dtype])
    assert int(fn.arrivals.abs().sum()) == 0, (
        "split-K tile counters must be reset for the next call"
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m", [1, 67])
def test_dispatch_other_dtypes(dtype: torch.dtype, m: int) -> None:
    x, w, b = make_inputs(m, 29, 41, dtype, bias=True, seed=2)
    fn = prepare_linear(w, b, activation="silu")
    out = torch.full((m, 29), float("nan"), dtype=dtype)
    fn(x, out=out)
    check(out, reference(x, w, b, "silu"), TOLERANCE[dtype])


def test_leading_dims_and_allocated_output() -> None:
    x, w, b = make_inputs(15, 33, 19, torch.float16, bias=True, seed=3)
    x3 = x.view(3, 5, 19)
    y = prepare_linear(w, b, activation="relu")(x3)
    assert y.shape == (3, 5, 33) and y.dtype == torch.float16
    check(y.view(15, 33), reference(x, w, b, "relu"), TOLERANCE[torch.float16])


def test_split_k_is_reusable() -> None:
    """The last split of each tile resets its counter: a second launch must be right too."""
    x, w, b = make_inputs(3, 40, 100, torch.float32, bias=False, seed=4)
    fn = prepare_linear(w, None)
    plan = gemm_plan("split_k", 16, 16, 32, 4, 1, split_k=3)
    for _ in range(2):
        out = torch.full((3, 40), float("nan"))
        fn.launch(plan, x, out)
        check(out, reference(x, w, b, "none"), TOLERANCE[torch.float32])


def test_rejects_what_it_cannot_run() -> None:
    _, w, b = make_inputs(1, 8, 8, torch.float16, bias=True)
    with pytest.raises(Unsupported):
        prepare_linear(w, b, activation="mish")
    with pytest.raises(Unsupported):
        check_quant("linear", "int4")
    fn = prepare_linear(w, b)
    with pytest.raises(Unsupported):
        fn(torch.randn(2, 8))  # float32 input, float16 weight
    with pytest.raises(ValueError):
        fn(torch.randn(2, 7).half())


def test_plan_cache_round_trip(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path))
    plan = gemm_plan("tma", 128, 256, 64, 8, 3, persistent=True)
    tuning._remember("gpu|linear|key", plan, [{"config": plan.to_json(), "ms": 1.25}])
    tuning.clear_memory()
    assert tuning.Config.from_json(tuning._disk()["gpu|linear|key"]["config"]) == plan
    assert (tmp_path / "plans.json").exists()
    tuning.clear_memory()
