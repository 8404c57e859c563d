"""ONNX values as views of the importer's canonical tensors: where the batch is, whatever the layout.

A suite layer's tensors have the batch first (`[B, *dims]`). An ONNX graph does not: a
sequence-first encoder carries `[S, B, E]`, multi-head attention folds the batch into the heads
(`[B·H, S, D]`), a vision transformer flattens `[S, B, E]` to `[S·B, E]` around a linear.
So every ONNX value is described as a *view* of a canonical tensor (a model input or a layer's
output, batch first): each of its dims is a run of *atoms*, pieces of the canonical tensor's
axes (an axis split by a reshape becomes several atoms), possibly with some atoms held at one
index (a Gather or Split of a packed q|k|v tensor).

Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Gather of a constant index and an even Split
change the view and move no data. A consumer then asks what it needs: a row-wise op (linear,
norms, softmax over the last axis) only needs the last dim to be the canonical tensor's last
axis, whatever the other dims hold; attention needs q, k and v to be the usual head split of
[B, S, E] tensors; other ops need the canonical tensor itself (the batch may sit anywhere).

Atoms of size 1 carry no index, so they are dropped: a dim of size 1 is an empty run. This
also makes a batch of 1 harmless: it is everywhere and nowhere, as it is for the data.

Pure Python: no onnx, no torch. Written by hand (no library tracks a batch axis through
reshapes); tests/unit/export/test_onnx_views.py checks it against numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

Shape = tuple[int, ...]

# The batch is 1 and the ONNX value has no dim for it: `[S, E]` for a canonical `[1, S, E]`.
ABSENT = -1


class NotAView(ValueError):
    """The node cannot be written as a view of the same canonical tensor; the message says why."""


@dataclass(frozen=True)
class Atom:
    """A piece of a canonical tensor's axis: index along the axis = Σ index(atom) · inner."""

    tensor: int
    axis: int  # 0 is the batch
    size: int
    inner: int = 1


Run = tuple[Atom, ...]  # one ONNX dim: atoms outer to inner


@dataclass(frozen=True)
class View:
    """One ONNX value as a view of canonical tensor `tensor` (of shape `base`)."""

    tensor: int
    base: Shape  # the canonical tensor's shape, batch first
    dims: tuple[Run, ...]
    fixed: tuple[tuple[Atom, int], ...] = ()  # atoms held at one index

    @property
    def shape(self) -> Shape:
        return tuple(math.prod(a.size for a in run) for run in self.dims)

    @property
    def batch(self) -> int:
        return self.base[0]


def _atom(tensor: int, axis: int, size: int, inner: int = 1) -> Run:
    return (Atom(tensor, axis, size, inner),) if size > 1 else ()


def identity(tensor: int, shape: Shape, batch_at: int = 0) -> View:
    """The canonical tensor itself, its batch axis shown at position `batch_at` (ABSENT: not
    shown, for a batch of 1)."""
    dims = [_atom(tensor, axis, size) for axis, size in enumerate(shape)]
    order = [*range(1, len(shape))]
    if batch_at == ABSENT:
        if shape[0] != 1:
            raise NotAView("only a batch of 1 can be left out")
    else:
        order.insert(batch_at, 0)
    return View(tensor, tuple(shape), tuple(dims[i] for i in order))


def normalise(run: Run) -> Run:
    """Merge neighbouring atoms that are consecutive pieces of one axis."""
    out: list[Atom] = []
    for atom in run:
        if (
            out
            and out[-1].tensor == atom.tensor
            and out[-1].axis == atom.axis
            and out[-1].inner == atom.inner * atom.size
        ):
            outer = out.pop()
            atom = Atom(atom.tensor, atom.axis, outer.size * atom.size, atom.inner)
        out.append(atom)
    return tuple(out)


def _full_axis(view: View, axis: int) -> Run:
    return _atom(view.tensor, axis, view.base[axis])


# ---- moving data without moving it ------------------------------------------------------------


def reshape(view: View, shape: Sequence[int]) -> View:
    """The view after ONNX Reshape to `shape` (already resolved: no 0 or -1)."""
    if math.prod(shape) != math.prod(view.shape):
        raise NotAView(f"reshape {list(view.shape)} → {list(shape)} changes the element count")
    stream = [a for run in view.dims for a in run]
    dims: list[Run] = []
    for want in shape:
        run: list[Atom] = []
        have = 1
        while have < want:
            if not stream:
                raise NotAView(f"reshape {list(view.shape)} → {list(shape)}")
            atom = stream.pop(0)
            need = want // have
            if atom.size <= need and need % atom.size == 0:
                run.append(atom)
                have *= atom.size
            elif atom.size % need == 0:  # split the atom: its outer part ends this dim
                rest = atom.size // need
                run.append(Atom(atom.tensor, atom.axis, need, atom.inner * rest))
                stream.insert(0, Atom(atom.tensor, atom.axis, rest, atom.inner))
                have *= need
            else:
                raise NotAView(
                    f"reshape {list(view.shape)} → {list(shape)} cuts an axis of size "
                    f"{atom.size} into pieces of {need}"
                )
        dims.append(tuple(run))
    if stream:
        raise NotAView(f"reshape {list(view.shape)} → {list(shape)}")
    return replace(view, dims=tuple(dims))


def transpose(view: View, perm: Sequence[int]) -> View:
    if sorted(perm) != list(range(len(view.dims))):
        raise NotAView(f"perm {list(perm)} is not a permutation of {len(view.dims)} dims")
    return replace(view, dims=tuple(view.dims[p] for p in perm))


def squeeze(view: View, axes: Sequence[int] | None) -> View:
    rank = len(view.dims)
    if axes is None:
        axes = [i for i, n in enumerate(view.shape) if n == 1]
    drop = {a % rank for a in axes}
    if any(view.shape[a] != 1 for a in drop):
        raise NotAView(f"squeeze of a dim that is not 1 in {list(view.shape)}")
    return replace(view, dims=tuple(r for i, r in enumerate(view.dims) if i not in drop))


def unsqueeze(view: View, axes: Sequence[int]) -> View:
    rank = len(view.dims) + len(axes)
    dims = list(view.dims)
    for a in sorted(a % rank for a in axes):
        dims.insert(a, ())
    return replace(view, dims=tuple(dims))


def select(view: View, axis: int, index: int) -> View:
    """Gather of one constant index along `axis`: the dim goes, its atoms are held fixed."""
    axis %= len(view.dims)
    size = view.shape[axis]
    if not -size <= index < size:
        raise NotAView(f"index {index} out of range for a dim of {size}")
    index %= size
    fixed = list(view.fixed)
    for atom in reversed(view.dims[axis]):  # inner atoms take the low digits
        fixed.append((atom, index % atom.size))
        index //= atom.size
    dims = view.dims[:axis] + view.dims[axis + 1 :]
    return replace(view, dims=dims, fixed=tuple(fixed))


def split_even(view: View, axis: int, pieces: int, index: int) -> View:
    """Piece `index` of `pieces` equal parts along `axis` (Split, or Slice of one part)."""
    axis %= len(view.dims)
    size = view.shape[axis]
    if pieces < 1 or size % pieces:
        raise NotAView(f"a dim of {size} does not split into {pieces} equal parts")
    tmp = reshape(view, (*view.shape[:axis], pieces, size // pieces, *view.shape[axis + 1 :]))
    return select(tmp, axis, index)


# ---- what consumers ask ---------------------------------------------------------------------


def batch_dim(view: View) -> int | None:
    """The ONNX dim that holds the whole batch and nothing else, or None (batch 1: any size-1
    dim does; the first is returned)."""
    if view.batch == 1:
        ones = [i for i, n in enumerate(view.shape) if n == 1]
        return ones[0] if ones else None
    hits = [i for i, run in enumerate(view.dims) if any(a.axis == 0 for a in run)]
    if len(hits) != 1 or normalise(view.dims[hits[0]]) != _full_axis(view, 0):
        return None
    return hits[0]


def canonical_position(view: View) -> int | None:
    """Where the batch sits if this view *is* its canonical tensor with the batch moved (no data
    moves between them): an ONNX dim, or ABSENT (batch 1, no dim for it); else None."""
    if view.fixed:
        return None
    if view.batch == 1:
        candidates = [i for i, n in enumerate(view.shape) if n == 1]
        if len(view.dims) == len(view.base) - 1:
            candidates = [ABSENT]
        elif len(view.dims) != len(view.base):
            return None
    else:
        if len(view.dims) != len(view.base):
            return None
        candidates = [batch_dim(view)]
    for pos in candidates:
        if pos is None:
            continue
        rest = view.dims if pos == ABSENT else view.dims[:pos] + view.dims[pos + 1 :]
        if all(
            normalise(run) == _full_axis(view, axis)
            and math.prod(a.size for a in run) == view.base[axis]
            for axis, run in enumerate(rest, start=1)
        ):
            return pos
    return None


def rows_of_last_axis(view: View) -> bool:
    """The last dim is the canonical tensor's whole last axis and no atom is held: an op over
    the last axis (linear, norms, softmax) may run on the canonical tensor itself, whatever the
    other dims are (rows are independent)."""
    if view.fixed or not view.dims or len(view.base) < 2:
        return False
    last = len(view.base) - 1
    return view.base[last] > 1 and normalise(view.dims[-1]) == _full_axis(view, last)


def same_layout(a: View, b: View) -> bool:
    """The two views arrange their canonical tensors identically (so an elementwise op on the
    ONNX values is the same op on the canonical tensors)."""
    if a.base != b.base or len(a.dims) != len(b.dims):
        return False

    def strip(v: View) -> tuple:
        runs = tuple(tuple((x.axis, x.size, x.inner) for x in normalise(r)) for r in v.dims)
        held = tuple(sorted((x.axis, x.size, x.inner, i) for x, i in v.fixed))
        return runs, held

    return strip(a) == strip(b)


def retarget(view: View, tensor: int, base: Shape, last: int | None = None) -> View:
    """The same arrangement over another canonical tensor (an elementwise op's output); with
    `last`, the last axis replaced by one of that size (a linear layer's output)."""
    old_last = len(view.base) - 1
    dims = []
    for run in view.dims:
        atoms = []
        for a in run:
            if last is not None and a.axis == old_last:
                continue
            atoms.append(Atom(tensor, a.axis, a.size, a.inner))
        dims.append(tuple(atoms))
    if last is not None:
        dims[-1] = _atom(tensor, len(base) - 1, last)
    fixed = tuple((Atom(tensor, a.axis, a.size, a.inner), i) for a, i in view.fixed)
    return View(tensor, tuple(base), tuple(dims), fixed)
