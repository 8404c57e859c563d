"""The embedding Triton kernel vs indexing in float64, under the CPU interpreter; outputs
prefilled with NaN (poisoned): every element must be written."""

from __future__ import annotations

import pytest
import torch

from opbench.kernels import Unsupported
from opbench.kernels.memory.embedding import bind_embedding, embedding


def table(vocab: int, dim: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(vocab, dim, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "ids_shape,vocab,dim", [((3, 7), 13, 5), ((1, 1), 2, 33), ((2, 9), 50, 96)]
)
def test_rows_gathered_into_poisoned_output(ids_shape, vocab, dim, dtype) -> None:
    gen = torch.Generator().manual_seed(vocab)
    ids = torch.randint(0, vocab, ids_shape, generator=gen)
    w = table(vocab, dim, dtype)
    out = torch.full((*ids_shape, dim), float("nan"), dtype=dtype)
    assert embedding(ids, w, out=out) is out
    assert torch.equal(out.double(), w.double()[ids])  # a copy: exact


def test_int32_ids_and_a_strided_table() -> None:
    wide = table(9, 12, torch.float16)
    w = wide[:, :7]  # rows 12 apart
    ids = torch.tensor([[8, 0, 3, 3, 5]], dtype=torch.int32)
    assert torch.equal(embedding(ids, w), w[ids.long()])


def test_positions_restart_every_sequence() -> None:
    w = table(20, 6, torch.float32, seed=2)
    ids = torch.randint(0, 20, (3, 5))
    out = torch.full((3, 5, 6), float("nan"))
    bind_embedding(ids, w, out, positions=True, offset=4).launch()
    assert torch.equal(out, w[4:9].expand(3, 5, 6))


def test_bound_launch_rewrites_its_output() -> None:
    w = table(7, 10, torch.float32, seed=3)
    ids = torch.randint(0, 7, (2, 4))
    bound = bind_embedding(ids, w)
    first = bound.launch()
    first.fill_(float("nan"))
    assert torch.equal(bound.launch(), w[ids])


def test_out_of_range_ids_read_zeros_not_memory_past_the_table() -> None:
    w = table(4, 3, torch.float32)
    out = embedding(torch.tensor([[0, 4, -1, 3]]), w)
    assert torch.equal(out[0, [0, 3]], w[[0, 3]]) and (out[0, 1:3] == 0).all()


def test_rejects_what_it_does_not_handle() -> None:
    w = table(4, 3, torch.float32)
    with pytest.raises(Unsupported):
        embedding(torch.zeros(2, 3), w)  # float ids
    with pytest.raises(Unsupported):
        embedding(torch.zeros(2, 3, dtype=torch.long), w, positions=True, offset=2)  # past V
