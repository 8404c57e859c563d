"""Scratch buffers of a bound launch: memory the launch writes before it reads (an NHWC copy
of the input, split-K partial sums, a quantized copy of the activations), never state that
outlives one launch.

A kernel family allocates such a buffer at bind with `scratch(shape, dtype, device)` instead of
`torch.empty`. Alone that is `torch.empty`. Inside a `ScratchArena.group()` (the pipeline's
whole-model forward binds each group in one) the buffer is a view of the arena's one block:
groups run one after another on one stream, so every group's scratch starts at offset 0 and
the forward holds the largest group's scratch, not the sum. A buffer whose content must
survive from bind to launch, or from one launch to the next (zeroed counters, packed
weights), must never come from here.

Sizes are known only once a group has bound, so the arena learns them: a group that asks for
more than the block holds gets private buffers and is marked `missed`; the pipeline then sizes
the block (`fit`) and binds those groups again.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch

# The byte alignment of each buffer within a group (the caching allocator's block size).
ALIGN = 512

_CURRENT: ContextVar[ScratchArena | None] = ContextVar("opbench_scratch_arena", default=None)


def scratch(shape: Sequence[int], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """An uninitialised contiguous buffer for one launch's scratch (see the module doc)."""
    arena = _CURRENT.get()
    if arena is None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    return arena.take(tuple(shape), dtype, torch.device(device))


def placed(device: torch.device | str) -> torch.device:
    """The device with its index: "cuda" (the current one) and "cuda:0" are the same GPU, but
    torch.device("cuda") != torch.device("cuda:0"), and a tensor's device always has the index."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class ScratchArena:
    """One block of scratch shared by the groups bound inside `group()`.

    need: the most bytes one group has asked for so far. missed: whether the group bound last
    asked for more than the block holds (it got private buffers)."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = placed(device)
        self.block: torch.Tensor | None = None
        self.need = 0
        self.used = 0
        self.missed = False

    @property
    def nbytes(self) -> int:
        return 0 if self.block is None else self.block.numel()

    @contextmanager
    def group(self) -> Iterator[ScratchArena]:
        """Bind one group's launches inside: their scratch comes from offset 0."""
        self.used, self.missed = 0, False
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)
            self.need = max(self.need, self.used)

    def take(
        self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        start = -(-self.used // ALIGN) * ALIGN
        self.used = start + nbytes
        here = placed(device) == self.device
        if not here or self.block is None or self.used > self.block.numel():
            self.missed = self.missed or here
            return torch.empty(shape, dtype=dtype, device=device)
        return self.block[start : start + nbytes].view(dtype).view(shape)

    def fit(self) -> bool:
        """Size the block to `need` bytes; True when that changed it (the groups bound before
        hold the old block, or private buffers: bind them again, and `fit` again, since a
        first bind's tuning may have asked for more than its launches use)."""
        if self.need == self.nbytes:
            return False
        self.block = (
            torch.empty(self.need, dtype=torch.uint8, device=self.device) if self.need else None
        )
        return True
