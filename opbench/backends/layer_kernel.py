"""A built Triton layer (`LayerKernel`): what every builder of the Triton backend's table
(backends/triton_table.py) and its fused groups (backends/triton_fused.py) return."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Binder = Callable[..., Any]  # *torch.Tensor -> kernels.launch.BoundKernels


class LayerKernel:
    """A built layer: `bind(*xs)` fixes everything for inputs xs; `kernel(*xs)` launches the
    binding of the last inputs, kept while those same tensors come back, so a model forward
    that feeds each layer its producers' (bound) outputs also launches at the floor. Its
    result is the bound output buffer, overwritten by the next call.

    extra_names: a fused group's other outputs, by layer name, in the order of the bound
    kernels' `extra` buffers (add → norm: the add's sum).
    takes_out: `bind` also takes the buffers to write, `bind(*xs, out=t)` (and `extra=(...)`
    for a group with extra outputs): a whole-model forward plans them (`bind_into`)."""

    def __init__(
        self, bind: Binder, extra_names: tuple[str, ...] = (), takes_out: bool = False
    ) -> None:
        self.bind = bind
        self.extra_names = extra_names
        self.takes_out = takes_out
        self.key: tuple | None = None
        self.inputs: tuple[Any, ...] = ()
        self.launch: Callable[[], Any] | None = None

    def __call__(self, *xs: Any) -> Any:
        if len(xs) != len(self.inputs) or any(
            x is not y for x, y in zip(xs, self.inputs, strict=True)
        ):
            key = tuple((x.data_ptr(), tuple(x.shape), x.stride(), x.dtype, x.device) for x in xs)
            if key != self.key or self.launch is None:
                self.launch = self.bind(*xs).launch
                self.key = key
            self.inputs = xs  # holding them keeps their memory: no other tensor takes a key
        return self.launch()

    def bind_into(self, xs: tuple[Any, ...], out: Any, extra: tuple[Any, ...] = ()) -> Any:
        """`bind(*xs)` writing the output into `out` (and the extra outputs into `extra`)."""
        if not self.takes_out:
            raise ValueError("this kernel allocates its own output")
        if extra:
            return self.bind(*xs, out=out, extra=extra)
        return self.bind(*xs, out=out)
