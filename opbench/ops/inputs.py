"""Seeded random-normal data: never zeros, reproducible from the suite, model and layer names."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def seed_for(*names: str) -> int:
    """A stable seed from names (Python's hash() is salted per process)."""
    return zlib.crc32("/".join(names).encode())


def generator(seed: int) -> torch.Generator:
    import torch

    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def make_input(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    import torch

    return torch.randn(shape, generator=generator(seed), dtype=torch.float32)


def make_ids(shape: tuple[int, ...], seed: int, high: int) -> torch.Tensor:
    """int64 ids drawn uniformly in [0, high)."""
    import torch

    return torch.randint(0, high, shape, generator=generator(seed), dtype=torch.int64)


def make_padding_mask(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """An int64 padding mask: along the last dim, 1 on a prefix of each row (its length drawn
    in [1, the row's length]: a query always sees the first key) and 0 after."""
    import torch

    n = shape[-1]
    rows = torch.Size(shape[:-1]).numel()
    lengths = torch.randint(1, n + 1, (rows, 1), generator=generator(seed))
    return (torch.arange(n)[None, :] < lengths).to(torch.int64).reshape(shape)
