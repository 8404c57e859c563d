"""Poison: the bit pattern an output holds before a checked call, so an unwritten element shows.

Floating outputs are filled with all-one bytes: a NaN in float32, float16 and bfloat16 alike
(exponent all ones, mantissa non-zero), with a sign and payload that arithmetic does not
produce (the NaN a GPU or x86 computes is 0x7fff..., 0x7fc0... or 0xffc0...). So an element
that still holds the pattern after the call was never written. Integer outputs get the dtype's
maximum, as torch's own fill of uninitialised memory does.

Where the output comes from:
- a buffer the backend allocated at bind time (`Bound.out`): poisoned directly;
- memory the call allocates itself (`torch.empty` in a launcher): poisoned the moment it is
  allocated (`poisoned_allocations`, around every checked call): torch's dispatcher hands every
  empty/empty_like/empty_strided/new_empty/resize_ of the call to us first, whatever allocator
  serves it, CPU or CUDA. Filling free memory before the call is not enough: memory the call
  itself frees and takes again (its own scratch that held the full answer, freed before it
  allocates the output) never passes through a fill, and on the CPU malloc keeps no list of
  free chunks to fill at all. Seen: a kernel writing half its output passed, its other half the
  answer an earlier computation had left in the chunk malloc handed back.
- memory no dispatcher call allocates (torch.compile's generated code, numpy): on CUDA every free
  block of the caching allocator is filled before the call (`poison_free_memory`); on the CPU
  the checker fills every output it releases (`scrub`), and checks each backend on a second
  input drawn afresh for each check (pipeline/checks.py), whose answer nothing else computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

POISON_BYTE = 0xFF
T = TypeVar("T")


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


# The aten ops that hand out memory without writing it. Their `.out` overloads, like resize_
# and resize_as_, resize a tensor they are given: only what they add is new memory.
_UNINITIALISED = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                  "empty_permuted")  # fmt: skip
_RESIZE = ("resize_", "resize_as_")


@contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Within the block, every tensor allocated uninitialised through torch's dispatcher (from
    Python, or from C++ through `at::empty`) holds the poison before its caller sees it, and so
    does what resize_ adds to a tensor. Not while a CUDA graph is being captured: the fill would
    join the graph and every replay. Numerics are untouched: each op runs as it would outside.

    torch.compile'd code runs compiled inside the block (the mode tells Dynamo to ignore it;
    without that, Dynamo would run the function eagerly, checking other code than is timed), and
    a torch that cannot be told so gets no mode at all."""
    mode = _mode()
    with mode if mode is not None else nullcontext():
        yield


# What torch says when code builds a Tensor subclass with the legacy constructor over a tensor
# a dispatch mode has seen (torch.nn.attention.bias.CausalBias does): any mode makes it fail.
_SUBCLASS_REFUSED = "Creating a new Tensor subclass"


def call_poisoned(call: Callable[[], T], prepare: Callable[[], object]) -> T:
    """`prepare()` (poison what the call will write), then `call()` within
    `poisoned_allocations`. Where torch refuses what the call does under a dispatch mode
    (building a Tensor subclass, above), both again without it: the outputs the call allocates
    are then covered as memory no dispatcher call allocates is (the module doc). Only torch's
    own layers are known to do that; every allocation of theirs is written by the op making it.
    """
    prepare()
    try:
        with poisoned_allocations():
            return call()
    except RuntimeError as exc:
        if _SUBCLASS_REFUSED not in str(exc):
            raise
    prepare()  # what the refused call wrote before it stopped must not pass for written
    return call()


_MODE_CLASS: list[Any] = []


def _mode() -> Any:
    if not _MODE_CLASS:
        _MODE_CLASS.append(_define_mode())
    cls = _MODE_CLASS[0]
    return cls() if cls is not None else None


def _define_mode() -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    if "ignore_compile_internals" not in vars(TorchDispatchMode):
        return None
    aten = torch.ops.aten
    fresh, growing = set(), set()
    for packet in _packets(aten, _UNINITIALISED):
        for name in packet.overloads():
            (growing if name == "out" else fresh).add(getattr(packet, name))
    for packet in _packets(aten, _RESIZE):
        growing.update(getattr(packet, name) for name in packet.overloads())

    class PoisonAllocations(TorchDispatchMode):
        # Higher-order ops (eager flex_attention, cond) come through as any op: run as they are.
        supports_higher_order_operators = True

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in growing:
                before = _storage_bytes(kwargs["out"] if "out" in kwargs else args[0])
                out = func(*args, **kwargs)
                _poison_grown(out, before)
                return out
            out = func(*args, **kwargs)
            if func in fresh and isinstance(out, torch.Tensor) and _poisonable(out):
                _quietly(out, _poison_storage)
            return out

    return PoisonAllocations


def _packets(aten: Any, names: Sequence[str]) -> list[Any]:
    return [getattr(aten, name) for name in names if hasattr(aten, name)]


def _poisonable(t: torch.Tensor) -> bool:
    import torch

    if t.numel() == 0 or t.layout != torch.strided or t.is_quantized or t.is_meta:
        return False
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def _poison_storage(t: torch.Tensor) -> None:
    """Poison the whole of a fresh tensor's storage, whatever its strides (overlapping ones
    included), as one flat run of its dtype."""
    import torch

    storage = t.untyped_storage()
    flat = torch.empty(0, dtype=t.dtype, device=t.device)
    flat.set_(storage, 0, (storage.nbytes() // t.element_size(),))
    poison_(flat)


def _storage_bytes(t: Any) -> int:
    try:
        return t.untyped_storage().nbytes()
    except Exception:  # no storage to speak of (a tensor subclass): nothing grows
        return -1


def _poison_grown(t: torch.Tensor, before: int) -> None:
    """Poison the elements of `t` lying in storage bytes it did not have before resize_."""
    if before < 0 or _storage_bytes(t) <= before or not _poisonable(t):
        return
    if not t.is_contiguous():
        _quietly(t, poison_)  # which elements are new is not simple: all of them, to be safe
        return
    first_new = max(0, -(-(before - t.storage_offset() * t.element_size()) // t.element_size()))
    if first_new < t.numel():
        _quietly(t.view(-1)[first_new:], poison_)


def _quietly(t: torch.Tensor, fill: Any) -> None:
    """`fill(t)` in place, outside autograd's view (an inference tensor in inference mode)."""
    import torch

    mode = torch.inference_mode() if t.is_inference() else torch.no_grad()
    with mode:
        fill(t)
