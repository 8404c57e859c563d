"""Shared scratch (kernels/scratch.py) under the interpreter: the split-K GEMM's partial sums
come from the block that every group shares, and two layers bound into the same bytes, run
in turn from a block poisoned with NaN, are both right (each launch writes its partials
before it reads them)."""

from __future__ import annotations

import torch

from opbench.kernels.gemm.linear import Linear
from opbench.kernels.gemm.linear_plans import gemm_plan
from opbench.kernels.scratch import ScratchArena


def test_split_k_partials_share_one_block_between_layers() -> None:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 50, generator=gen)
    w1 = torch.randn(21, 50, generator=gen) / 50**0.5
    w2 = torch.randn(13, 21, generator=gen) / 21**0.5
    first, second = Linear(w1, None), Linear(w2, None)
    plan = gemm_plan("split_k", 16, 16, 32, 4, 1, split_k=2)
    mid = torch.empty(3, 21)
    out = torch.empty(3, 13)
    arena = ScratchArena("cpu")
    for _ in range(2):  # the first round learns the need, the second binds into the block
        arena.need = 0
        with arena.group():
            bound1 = first.bind(x, mid, config=plan)
        with arena.group():
            bound2 = second.bind(mid, out, config=plan)
        if not arena.fit():
            break
    block = arena.block
    assert block is not None and arena.nbytes == 2 * 3 * 21 * 4, "the larger layer's partials"
    for bound in (bound1, bound2):
        partials = [t for t in bound.keep if t.dim() == 1 and t.dtype == torch.float32]
        assert partials and partials[0].data_ptr() == block.data_ptr()
    block.fill_(255)  # NaN in every float32 of the block
    mid.fill_(float("nan"))
    out.fill_(float("nan"))
    bound1.launch()
    bound2.launch()
    want_mid = x.double() @ w1.double().T
    torch.testing.assert_close(mid.double(), want_mid, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.double(), mid.double() @ w2.double().T, rtol=1e-4, atol=1e-4)


def test_a_gpu_named_without_its_index_is_the_gpu_its_tensors_are_on(monkeypatch) -> None:
    """The pipeline names the device "cuda"; a tensor's device is "cuda:0". Compared as they
    are, no buffer ever came from the block on a GPU (ResNet-50 b32 held 171 MiB of private
    NHWC copies beside an unused block on an H100). A CPU tensor stands in for the block."""
    from opbench.kernels import scratch as scratch_module

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert scratch_module.placed("cuda") == torch.device("cuda", 0)
    assert scratch_module.placed(torch.device("cuda", 1)) == torch.device("cuda", 1)
    assert scratch_module.placed("cpu") == torch.device("cpu")
    arena = ScratchArena("cuda")
    arena.block = torch.empty(4096, dtype=torch.uint8)
    with arena.group():
        taken = arena.take((8, 4), torch.float16, torch.device("cuda", 0))
    assert taken.data_ptr() == arena.block.data_ptr() and not arena.missed
    assert taken.shape == (8, 4) and taken.dtype == torch.float16
