"""torch.fx tracing with static shapes: each proxy carries the meta tensor of its value, so
that code which reads a tensor's shape, dtype or rank (`x.shape[-1]`, `x.dim()`, `if k.shape[1]
!= q.shape[1]`) traces as it runs on a real tensor: the branch taken and the sizes are baked
into the graph as constants, as in a module written for one input shape.

Every call appended to the graph is also run on the meta tensors of its arguments, to know its
result's shape. A proxy whose value has no meta tensor (a call that has no meta kernel) falls
back to fx's symbolic attributes, and code that branches on it fails to trace as under plain fx.
"""

from __future__ import annotations

from typing import Any

from torch import fx
from torch.fx.node import map_aggregate

_FALLBACK = object()


class ShapedProxy(fx.Proxy):
    """An fx proxy that knows its value's meta tensor (or tuple of them): `meta`."""

    meta: Any = None

    def _static(self, name: str) -> Any:
        import torch

        if isinstance(self.meta, torch.Tensor):
            return getattr(self.meta, name)
        return _FALLBACK

    @property
    def shape(self) -> Any:
        static = self._static("shape")
        return fx.Proxy.__getattr__(self, "shape") if static is _FALLBACK else static

    @property
    def dtype(self) -> Any:
        static = self._static("dtype")
        return fx.Proxy.__getattr__(self, "dtype") if static is _FALLBACK else static

    @property
    def ndim(self) -> Any:
        static = self._static("ndim")
        return fx.Proxy.__getattr__(self, "ndim") if static is _FALLBACK else static

    def dim(self) -> Any:
        static = self._static("dim")
        return fx.Proxy.__getattr__(self, "dim")() if static is _FALLBACK else static()

    def size(self, dim: int | None = None) -> Any:
        static = self._static("size")
        if static is _FALLBACK:
            method = fx.Proxy.__getattr__(self, "size")
            return method() if dim is None else method(dim)
        return static() if dim is None else static(dim)

    def __len__(self) -> int:
        if isinstance(self.meta, (tuple, list)):
            return len(self.meta)
        static = self._static("shape")
        if static is _FALLBACK:
            return fx.Proxy.__len__(self)
        return static[0]

    def __iter__(self):
        if isinstance(self.meta, (tuple, list)):  # x.split(...): unpacked as a tuple
            return iter([self[i] for i in range(len(self.meta))])
        return fx.Proxy.__iter__(self)


class ShapeTracer(fx.proxy.GraphAppendingTracer):
    """Appends to `graph`; every proxy it makes is a ShapedProxy with its meta value."""

    def proxy(self, node: fx.Node) -> ShapedProxy:
        return ShapedProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, *rest, **options) -> ShapedProxy:
        proxy = super().create_proxy(kind, target, args, kwargs, *rest, **options)
        metas = map_aggregate(args, _meta_of)
        kwarg_metas = map_aggregate(kwargs, _meta_of)
        try:
            if kind == "call_function":
                proxy.meta = target(*metas, **kwarg_metas)
            elif kind == "call_method":
                proxy.meta = getattr(metas[0], target)(*metas[1:], **kwarg_metas)
        except Exception:  # noqa: BLE001 - no meta kernel: the value's shape stays unknown
            proxy.meta = None
        return proxy

    def value(self, node: fx.Node, like: Any) -> ShapedProxy:
        """A proxy of `node` (a placeholder, get_attr or call_module) whose value is like
        `like` (a tensor, or a tuple of them; None: unknown)."""
        proxy = self.proxy(node)
        proxy.meta = map_aggregate(like, _to_meta) if like is not None else None
        return proxy


def _meta_of(value: Any) -> Any:
    if isinstance(value, ShapedProxy):
        if value.meta is None:
            raise ValueError("a value of unknown shape")
        return value.meta
    if isinstance(value, fx.Proxy):
        raise ValueError("a proxy without a shape")
    return value


def _to_meta(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value
