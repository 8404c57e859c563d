"""View nodes: their effect on a view (`view_op`), and the layers they become where data moves.

Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout (inference), Transpose, Gather of one
constant index, an even Split, and a Slice of one even part are views. When an op needs the
tensor itself, `step_layers` turns one such node into suite layers on the canonical tensor
(batch first): a Transpose that moves more than the batch becomes `permute`/`transpose`, a
reshape `flatten`/`reshape` (views in every backend), a Gather/Split/Slice a `slice` (plus a
`reshape` dropping the axis a Gather removes).
"""

from __future__ import annotations

import math
from typing import Any

from opbench.importers.onnx import views as V
from opbench.importers.onnx.canon import Canon, LayerMaker, Step
from opbench.importers.onnx.rules import _const

VIEW_OPS = frozenset(
    {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose", "Gather",
     "Split", "Slice"}
)  # fmt: skip
_INT_MAX = 2**62


def attr(node: Any, name: str, default: Any = None) -> Any:
    a = node.attributes.get(name)
    return default if a is None else a.value


def _ints(value: Any) -> list[int] | None:
    array = _const(value)
    return None if array is None else [int(v) for v in array.reshape(-1)]


def _input(node: Any, i: int) -> Any:
    return node.inputs[i] if len(node.inputs) > i else None


def out_shape(node: Any, index: int = 0) -> tuple[int, ...]:
    shape = node.outputs[index].shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise V.NotAView(f"the shape of {node.outputs[index].name!r} is not known")
    return tuple(int(d) for d in shape)


def _axes(node: Any, rank: int) -> list[int] | None:
    axes = attr(node, "axes")
    if axes is None and _input(node, 1) is not None:
        axes = _ints(_input(node, 1))
    return None if axes is None else [int(a) % rank for a in axes]


def split_part(node: Any, index: int, size: int) -> tuple[int, int]:
    """(start, end) of output `index` of a Split along a dim of `size`."""
    sizes = _ints(_input(node, 1)) if _input(node, 1) is not None else attr(node, "split")
    if sizes is None:
        parts = int(attr(node, "num_outputs", len(node.outputs)))
        chunk = -(-size // parts)
        sizes = [min(chunk, size - i * chunk) for i in range(parts)]
    start = sum(sizes[:index])
    return start, start + int(sizes[index])


def slice_range(node: Any, size: int) -> tuple[int, int, int, int]:
    """(axis, start, end, step) of a Slice over one axis, clamped like ONNX does."""
    starts, ends = _ints(_input(node, 1)), _ints(_input(node, 2))
    axes = _ints(_input(node, 3)) if _input(node, 3) is not None else [0]
    steps = _ints(_input(node, 4)) if _input(node, 4) is not None else [1]
    if starts is None or ends is None or axes is None or steps is None:
        raise V.NotAView("a Slice with bounds that are not constants")
    if len(starts) != 1:
        raise V.NotAView("a Slice over more than one axis")
    start, end, step = starts[0], ends[0], steps[0]
    if step < 1:
        raise V.NotAView("a Slice with a negative step")
    start = max(0, min(size, start + size if start < 0 else start))
    end = max(0, min(size, end + size if end < 0 else min(end, _INT_MAX)))
    return axes[0], start, end, step


def view_op(node: Any, vin: V.View, index: int = 0) -> V.View:
    """The view of output `index` of view node `node` given its input's view (NotAView if the
    node moves data)."""
    op = node.op_type
    rank = len(vin.dims)
    if op in ("Identity", "Dropout"):
        return vin
    if op == "Transpose":
        perm = attr(node, "perm") or list(reversed(range(rank)))
        return V.transpose(vin, [int(p) for p in perm])
    if op in ("Reshape", "Flatten"):
        return V.reshape(vin, out_shape(node))
    if op == "Squeeze":
        return V.squeeze(vin, _axes(node, rank))
    if op == "Unsqueeze":
        axes = _axes(node, rank + len(_ints(_input(node, 1)) or attr(node, "axes") or []))
        if axes is None:
            raise V.NotAView("Unsqueeze without constant axes")
        return V.unsqueeze(vin, axes)
    if op == "Gather":
        index_value = _const(_input(node, 1))
        axis = int(attr(node, "axis", 0)) % rank
        if (
            index_value is not None
            and index_value.ndim
            and _is_arange(index_value, vin.shape[axis])
        ):
            # every index once, in order (torch exports `as_strided` views this way): a reshape
            shape = (*vin.shape[:axis], *index_value.shape, *vin.shape[axis + 1 :])
            return V.reshape(vin, shape)
        if index_value is None or index_value.ndim != 0:
            raise V.NotAView("a Gather of more than one constant index")
        return V.select(vin, axis, int(index_value))
    if op == "Split":
        axis = int(attr(node, "axis", 0)) % rank
        start, end = split_part(node, index, vin.shape[axis])
        return _even_part(vin, axis, start, end)
    if op == "Slice":
        axis, start, end, step = slice_range(node, vin.shape[_axis0(node, rank)])
        if step != 1:
            raise V.NotAView("a strided Slice")
        return _even_part(vin, axis % rank, start, end)
    raise V.NotAView(f"{op} is not a view")


def _is_arange(indices: Any, size: int) -> bool:
    import numpy as np

    flat = np.asarray(indices).reshape(-1)
    return flat.size == size and bool(np.array_equal(flat % size, np.arange(size)))


def _axis0(node: Any, rank: int) -> int:
    axes = _ints(_input(node, 3)) if _input(node, 3) is not None else [0]
    if not axes:
        raise V.NotAView("a Slice without axes")
    return axes[0] % rank


def _even_part(vin: V.View, axis: int, start: int, end: int) -> V.View:
    size, part = vin.shape[axis], end - start
    if part < 1 or size % part or start % part:
        raise V.NotAView(f"[{start}:{end}] of {size} is not one of equal parts")
    return V.split_even(vin, axis, size // part, start // part)


# ---- view nodes as layers -----------------------------------------------------------------


def _cax(i: int, pos: int) -> int:
    """The canonical axis of ONNX dim i when the batch sits at ONNX dim `pos` (or is ABSENT)."""
    if pos == V.ABSENT:
        return i + 1
    return 0 if i == pos else (i + 1 if i < pos else i)


def _batch_out(w: LayerMaker, node: Any, vin: V.View, shape: tuple[int, ...], index: int) -> int:
    """Where the batch is in the node's output (ABSENT: batch 1 and no dim of size 1)."""
    if w.batch == 1:
        ones = [i for i, n in enumerate(shape) if n == 1]
        return ones[0] if ones else V.ABSENT
    try:
        pos = V.batch_dim(view_op(node, vin, index))
    except V.NotAView:
        pos = None
    if pos is None:
        raise V.NotAView(f"{node.op_type} folds the batch into another dim")
    return pos


def step_layers(w: LayerMaker, step: Step, canon: Canon, pos: int) -> tuple[Canon, int]:
    """The layers that make `step.out` from `canon` (its input, batch at ONNX dim `pos`)."""
    node = step.node
    index = [o.name for o in node.outputs].index(step.out)
    shape = out_shape(node, index)
    vin = V.identity(canon.id, canon.shape, pos)
    names = (node.name,)
    op = node.op_type
    if op == "Transpose":
        perm = [int(p) for p in (attr(node, "perm") or reversed(range(len(vin.dims))))]
        pos_out = V.ABSENT if pos == V.ABSENT else perm.index(pos)
        dims = [0] + [_cax(p, pos) for j, p in enumerate(perm) if j != pos_out]
        if dims == sorted(dims):
            return canon, pos_out
        moved = [i for i, d in enumerate(dims) if d != i]
        new_shape = tuple(canon.shape[d] for d in dims)
        if len(moved) == 2:
            out = w.add_layer("transpose", {"dims": moved}, [(canon, None)], new_shape, names)
        else:
            out = w.add_layer("permute", {"dims": dims}, [(canon, None)], new_shape, names)
        return out, pos_out
    if op in ("Gather", "Split", "Slice"):
        return _slice_layers(w, node, index, canon, pos, shape)
    pos_out = _batch_out(w, node, vin, shape, index)
    rest = shape if pos_out == V.ABSENT else shape[:pos_out] + shape[pos_out + 1 :]
    new_shape = (w.batch, *rest)
    if new_shape == canon.shape:
        return canon, pos_out
    return reshape_layer(w, canon, new_shape, names), pos_out


def reshape_layer(w: LayerMaker, canon: Canon, new_shape: tuple[int, ...], names) -> Canon:
    for start in range(1, len(canon.shape)):
        if new_shape == (*canon.shape[:start], math.prod(canon.shape[start:])):
            return w.add_layer("flatten", {"start_dim": start}, [(canon, None)], new_shape, names)
    return w.add_layer("reshape", {"shape": list(new_shape[1:])}, [(canon, None)], new_shape, names)


def _slice_layers(
    w: LayerMaker, node: Any, index: int, canon: Canon, pos: int, shape: tuple[int, ...]
) -> tuple[Canon, int]:
    op = node.op_type
    rank = len(canon.shape)
    names = (node.name,)
    if op == "Gather":
        index_value = _const(_input(node, 1))
        if index_value is None or index_value.ndim != 0:
            raise V.NotAView("a Gather of more than one constant index")
        axis = int(attr(node, "axis", 0)) % rank
        size = canon.shape[_cax(axis, pos)]
        start = int(index_value) % size
        end, step = start + 1, 1
    elif op == "Split":
        axis = int(attr(node, "axis", 0)) % rank
        start, end = split_part(node, index, canon.shape[_cax(axis, pos)])
        step = 1
    else:
        axis = _axis0(node, rank)
        axis, start, end, step = slice_range(node, canon.shape[_cax(axis, pos)])
        axis %= rank
    if axis == pos:
        raise V.NotAView(f"{op} along the batch")
    cax = _cax(axis, pos)
    length = len(range(start, end, step))
    sliced = tuple(length if i == cax else n for i, n in enumerate(canon.shape))
    params = {"axis": cax, "start": start, "end": end}
    if step != 1:
        params["step"] = step
    out = w.add_layer("slice", params, [(canon, None)], sliced, names)
    if op != "Gather":
        return out, pos
    dropped = sliced[:cax] + sliced[cax + 1 :]
    pos_out = pos if pos == V.ABSENT or axis > pos else pos - 1
    return reshape_layer(w, out, dropped, names), pos_out
