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
