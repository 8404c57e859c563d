"""Poison: the bit pattern an output holds before a checked call, so an unwritten element shows.

Floating outputs are filled with all-one bytes: a NaN in float32, float16 and bfloat16 alike
(exponent all ones, mantissa non-zero), with a sign and payload that arithmetic does not
produce (the NaN a GPU or x86 computes is 0x7fff..., 0x7fc0... or 0xffc0...). So an element
that still holds the pattern after the call was never written. Integer outputs get the dtype's
maximum, as torch's own fill of uninitialised memory does.

Where the output comes from:
- a buffer the backend allocated at bind time (`Bound.out`): poisoned directly;
- memory the call allocates itself (`torch.empty` in a launcher): on CUDA every free block of
  the caching allocator is filled before the call, so recycled memory cannot carry an earlier
  answer. On the CPU there is no such cache: memory comes from malloc, which keeps no list of
  its free chunks that could be filled and writes its own bookkeeping into them. There, the
  checker fills every output it releases (`scrub`), so no checked answer outlives its check,
  and checks each backend on a second input no other computation has seen (pipeline/verify.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

POISON_BYTE = 0xFF


def _bits_dtype(dtype: torch.dtype) -> torch.dtype:
    import torch

    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]


def _pattern(dtype: torch.dtype) -> tuple[torch.dtype, int]:
    """(dtype to compare in, value in it) of the poison of `dtype`."""
    import torch

    if dtype.is_floating_point or dtype.is_complex:
        bits = _bits_dtype(dtype)
        return bits, (POISON_BYTE if bits == torch.uint8 else -1)  # all ones
    if dtype == torch.bool:
        return torch.uint8, POISON_BYTE
    return dtype, torch.iinfo(dtype).max


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill `t` with the poison of its dtype, whatever its layout. Returns `t`."""
    import torch

    bits, value = _pattern(t.dtype)
    if t.numel() == 0:
        return t
    if t.dtype == torch.bool:
        # A bool can only hold 0 or 1: the fill must not go through the bool dtype.
        t.view(torch.uint8).fill_(POISON_BYTE)
        return t
    if bits == t.dtype:
        return t.fill_(value)
    # A bitwise copy: filling a float with NaN would give torch's canonical NaN, not the pattern.
    t.copy_(torch.full((), value, dtype=bits, device=t.device).view(t.dtype).expand(t.shape))
    return t


def scrub(
    t: torch.Tensor | None, spare: torch.Tensor | Sequence[torch.Tensor] | None = None
) -> None:
    """Poison an output the checker is about to release, so that no checked answer stays
    behind in freed memory for a later call to pick up. An output that shares memory with
    `spare` (a view of one of the layer's inputs, as flatten returns) is left alone."""
    import torch

    if t is None or t.numel() == 0:
        return
    spares = () if spare is None else (spare,) if isinstance(spare, torch.Tensor) else spare
    where = t.untyped_storage().data_ptr()
    if any(where == s.untyped_storage().data_ptr() for s in spares):
        return
    mode = torch.inference_mode() if t.is_inference() else torch.no_grad()
    with mode:
        poison_(t)


def unwritten(t: torch.Tensor) -> int:
    """Elements of `t` still holding the poison: never written by the call that produced it."""
    import torch

    if t.numel() == 0:
        return 0
    bits, value = _pattern(t.dtype)
    flat = t.detach().contiguous()
    if t.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    elif bits != t.dtype:
        flat = flat.view(bits)
    return int((flat == value).sum().item())


def poison_free_memory(device: str, nbytes: int) -> bool:
    """Fill the free memory an allocation of the coming call may be served from. True where
    that is done (CUDA), False where the device has no cache to fill (the CPU: see above).

    nbytes: the output's size. A free block of at least that size is made first (and filled
    with the rest), so the output cannot come from a fresh segment holding anything else.
    """
    if not device.startswith("cuda"):
        return False
    import torch

    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device()
    with torch.cuda.device(index):
        if nbytes > 0:
            room = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{index}")
            del room
        stream = torch.cuda.current_stream(index).cuda_stream
        for segment in torch.cuda.memory_snapshot():
            if not _fillable(segment, index, stream):
                continue
            for block in segment["blocks"]:
                if block["state"] == "inactive" and block["size"] > 0:
                    _raw_bytes(block["address"], block["size"], index).fill_(POISON_BYTE)
    return True


def _fillable(segment: dict[str, Any], index: int, stream: int) -> bool:
    """A segment of the default pool on this device and stream: the ones a plain allocation on
    the current stream can be served from. Expandable segments are skipped: parts of their
    address range may not be mapped."""
    return (
        segment.get("device") == index
        and segment.get("stream") == stream
        and tuple(segment.get("segment_pool_id") or (0, 0)) == (0, 0)
        and not segment.get("is_expandable", False)
    )


class _DeviceBytes:
    """`size` bytes of device memory at `address`, in the CUDA array interface, so torch can
    view memory the caching allocator holds free without allocating it."""

    def __init__(self, address: int, size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
        }


def _raw_bytes(address: int, size: int, index: int) -> torch.Tensor:
    import torch

    return torch.as_tensor(_DeviceBytes(address, size), device=f"cuda:{index}")
