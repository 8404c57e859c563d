"""Is this attention the suite's `attention`? q, k, v as head splits, the mask, the scale.

The suite's attention takes q, k and v as [B, S, E] tensors (or one packed [B, S, 3E] tensor)
and splits E into heads itself. In the ONNX graph the MatMuls see them after reshapes and
transposes: [B, H, S, D], or [B·H, S, D] with the batch folded into the heads, or k as
[B, H, D, S]. `head_split` reads such a view back (views.py) and says which canonical tensor
it splits, with how many heads, or why it is not a head split.

Hand-written, like views.py: it is the question of where the batch and the heads sit, which
no pattern library answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from opbench.importers.onnx.views import (
    Atom,
    NotAView,
    Run,
    View,
    normalise,
    reshape,
    transpose,
)

# An additive mask entry at or below this hides the position (torch writes -inf or finfo.min).
_HIDDEN = -1e4


@dataclass(frozen=True)
class HeadSplit:
    tensor: int
    base: tuple[int, ...]
    lead: tuple[tuple[tuple[int, int, int], ...], ...]  # leading dims as (axis, size, inner)
    heads: int
    head_dim: int
    seq: int
    packed: tuple[int, int] | None  # (parts, index) of a packed q|k|v tensor


def _key(run: Run) -> tuple[tuple[int, int, int], ...]:
    return tuple((a.axis, a.size, a.inner) for a in normalise(run))


def head_split(view: View, seq_last: bool = False) -> HeadSplit:
    """The view as [..., S, D] (or [..., D, S] with `seq_last`) of a [B, S, E] tensor whose E
    splits into (parts ×) heads × D; the leading dims hold the batch and the heads."""
    if len(view.base) != 3:
        raise NotAView(f"its tensor is {list(view.base)}, not [B, S, E]")
    if len(view.dims) < 2:
        raise NotAView("fewer than two dims")
    _, seq, width = view.base
    seq_run, d_run = (view.dims[-1], view.dims[-2]) if seq_last else view.dims[-2:]
    if _key(seq_run) != (((1, seq, 1),) if seq > 1 else ()):
        raise NotAView("the sequence axis is not one dim of its own")
    d = normalise(d_run)
    if len(d) != 1 or d[0].axis != 2 or d[0].inner != 1:
        raise NotAView("the head dim is not the innermost part of E")
    head_dim = d[0].size
    heads = 1
    lead_atoms = [a for run in view.dims[:-2] for a in normalise(run)]
    batch_seen = 0
    for atom in lead_atoms:
        if atom.axis == 0:
            batch_seen += atom.size
        elif atom.axis == 2 and atom.inner % head_dim == 0:
            heads *= atom.size
        else:
            raise NotAView("a leading dim holds part of the sequence")
    if view.base[0] > 1 and batch_seen != view.base[0]:
        raise NotAView("the batch is not in the leading dims")
    packed = None
    if view.fixed:
        if len(view.fixed) != 1:
            raise NotAView("more than one index held")
        atom, index = view.fixed[0]
        if atom.axis != 2 or atom.inner != heads * head_dim:
            raise NotAView("the index held is not a q|k|v part of E")
        packed = (atom.size, index)
    parts = packed[0] if packed else 1
    if parts * heads * head_dim != width:
        raise NotAView(f"E = {width} is not {parts} × {heads} heads × {head_dim}")
    lead = tuple(_key(run) for run in view.dims[:-2])
    return HeadSplit(view.tensor, view.base, lead, heads, head_dim, seq, packed)


def through_repeat(view: View, base: tuple[int, ...], source: View, groups: int) -> View:
    """A view of repeat_kv's [B, Hkv, G, S, D] stand-in (`base`) as a view of the repeated
    value `source` [B, Hkv, S, D], the G copies dropped: each head reads kv head h // G, so
    the G atom must sit right inside the Hkv atom (or Hkv be 1)."""
    if view.fixed:
        raise NotAView("an index held in repeat_kv's copies")
    to_source = {0: 0, 1: 1, 3: 2, 4: 3}
    dims = []
    for run in view.dims:
        atoms = normalise(run)
        new: list[Atom] = []
        for k, atom in enumerate(atoms):
            if atom.axis == 2:
                after_heads = base[1] == 1 or (k > 0 and atoms[k - 1].axis == 1)
                if atom.size != groups or atom.inner != 1 or not after_heads:
                    raise NotAView("repeat_kv's copies are not read as groups of query heads")
                continue
            if atom.size != base[atom.axis] or atom.inner != 1:
                raise NotAView("a dim of repeat_kv's output is split")
            new.extend(source.dims[to_source[atom.axis]])
        dims.append(tuple(new))
    return View(source.tensor, source.base, tuple(dims), source.fixed)


def from_3d(view: View, heads: int) -> View:
    """A [B, S, E] input of ONNX Attention with `heads` (q_num_heads) as [B, H, S, D]."""
    s, e = view.shape[-2:]
    if e % heads:
        raise NotAView(f"{heads} heads do not divide E = {e}")
    split = reshape(view, (*view.shape[:-1], heads, e // heads))
    rank = len(split.dims)
    return transpose(split, (*range(rank - 3), rank - 2, rank - 3, rank - 1))


def output_view(q: HeadSplit, tensor: int, batch: int, seq_last_dims: int = 2) -> View:
    """The attention output [lead..., S, D] as a view of its canonical [B, S, H·D] tensor."""
    e = q.heads * q.head_dim
    lead = tuple(
        tuple(Atom(tensor, axis, size, inner) for axis, size, inner in run) for run in q.lead
    )
    seq = (Atom(tensor, 1, q.seq, 1),) if q.seq > 1 else ()
    d = (Atom(tensor, 2, q.head_dim, 1),) if q.head_dim > 1 else ()
    return View(tensor, (batch, q.seq, e), (*lead, seq, d))


def causal_from_mask(mask: Any, seq: int, kind: str, fill: float | None = None) -> bool:
    """True for a causal mask, False for one that hides nothing; NotAView for any other mask.
    `kind`: "add" (added to the scores) or "keep" (True where the score is kept)."""
    import numpy as np

    m = np.asarray(mask)
    # A mask built for a fixed input (BERT's from all-ones ids, HF's causal mask expanded
    # over the batch) repeats one [S, S] mask over batch and heads: that one is the mask.
    while m.ndim > 2 and (m.shape[0] == 1 or bool((m == m[:1]).all())):
        m = m[0]
    if m.ndim != 2 or m.shape != (seq, seq):
        raise NotAView(f"a mask of shape {list(np.shape(mask))} (one per batch or head)")
    lower = np.tril(np.ones((seq, seq), dtype=bool))
    if kind == "add":
        hidden = m <= _HIDDEN
        if not np.all(m[~hidden] == 0):
            raise NotAView("an additive mask with values other than 0 and -inf")
    else:
        if fill is None or fill > _HIDDEN:
            raise NotAView("a mask that fills with a value other than -inf")
        hidden = ~m.astype(bool)
    if not hidden.any():
        return False
    if np.array_equal(~hidden, lower):
        return True
    raise NotAView("a mask that is neither causal nor empty")


def check_scale(scale: float | None, head_dim: int) -> None:
    """The suite's attention scales by 1/√D; another scale is another op."""
    want = 1.0 / math.sqrt(head_dim)
    if scale is not None and not math.isclose(scale, want, rel_tol=1e-4):
        raise NotAView(f"scale {scale:.6g} (the suite's attention uses 1/√D = {want:.6g})")


def _batch_lead(split: HeadSplit) -> tuple:
    return tuple(tuple(a for a in run if a[0] != 2) for run in split.lead)


def same_split(q: HeadSplit, k: HeadSplit, v: HeadSplit) -> None:
    """q, k and v pair batch and heads alike; k and v may have fewer heads (grouped-query:
    query head h reads kv head h // G, as repeat_kv and a broadcast MatMul both do)."""
    if not (_batch_lead(q) == _batch_lead(k) == _batch_lead(v)):
        raise NotAView("q, k and v do not pair batch and heads the same way")
    if k.heads != v.heads or q.heads % k.heads:
        raise NotAView(f"heads q {q.heads}, k {k.heads}, v {v.heads} are not grouped-query")
    if q.heads == k.heads and not (q.lead == k.lead == v.lead):
        raise NotAView("q, k and v do not pair batch and heads the same way")
    if not (q.head_dim == k.head_dim == v.head_dim):
        raise NotAView("q, k and v head sizes differ")
    if not (q.seq == k.seq == v.seq):
        raise NotAView("q and k/v sequence lengths differ (cross-attention)")
