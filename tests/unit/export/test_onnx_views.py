"""The importer's view algebra (opbench/importers/onnx/views.py) against numpy: a view must
name, for every element of the ONNX value, the element of its canonical tensor it holds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from opbench.importers.onnx import views as V

RNG = np.random.default_rng(7)


def materialise(view: V.View, canonical: np.ndarray) -> np.ndarray:
    """The ONNX value a view describes, element by element from the canonical tensor."""
    out = np.empty(view.shape, dtype=canonical.dtype)
    for index in itertools.product(*(range(n) for n in view.shape)):
        where = [0] * canonical.ndim
        for dim, run in zip(index, view.dims, strict=True):
            digit = dim
            for atom in reversed(run):  # inner atoms take the low digits
                where[atom.axis] += (digit % atom.size) * atom.inner
                digit //= atom.size
        for atom, held in view.fixed:
            where[atom.axis] += held * atom.inner
        out[index] = canonical[tuple(where)]
    return out


def _check(view: V.View, canonical: np.ndarray, expected: np.ndarray) -> None:
    assert view.shape == expected.shape
    np.testing.assert_array_equal(materialise(view, canonical), expected)


def test_sequence_first_attention_heads_fold_the_batch():
    # nn.MultiheadAttention on [S, B, E]: [S, B, E] -> [S, B·H, D] -> [B·H, S, D]
    b, s, h, d = 2, 5, 3, 4
    canonical = RNG.standard_normal((b, s, h * d))
    onnx_in = canonical.transpose(1, 0, 2)  # what the graph carries: [S, B, E]
    view = V.identity(0, canonical.shape, batch_at=1)
    _check(view, canonical, onnx_in)
    folded = V.transpose(V.reshape(view, (s, b * h, d)), (1, 0, 2))
    _check(folded, canonical, onnx_in.reshape(s, b * h, d).transpose(1, 0, 2))
    assert V.canonical_position(folded) is None and V.canonical_position(view) == 1


def test_packed_qkv_select_holds_one_part():
    b, s, e = 2, 3, 8
    canonical = RNG.standard_normal((b, s, 3 * e))
    view = V.identity(0, canonical.shape)
    parts = V.reshape(view, (b, s, 3, e))
    for j in range(3):
        piece = V.select(parts, 2, j)
        _check(piece, canonical, canonical.reshape(b, s, 3, e)[:, :, j])
        even = V.split_even(view, 2, 3, j)
        _check(even, canonical, canonical[:, :, j * e : (j + 1) * e])


def test_reshape_splits_and_merges_atoms():
    canonical = RNG.standard_normal((2, 6, 4))
    view = V.identity(0, canonical.shape)
    for shape in [(2, 24), (12, 4), (2, 3, 2, 4), (4, 3, 4), (48,), (2, 2, 3, 2, 2)]:
        _check(V.reshape(view, shape), canonical, canonical.reshape(shape))
    twisted = V.reshape(V.transpose(view, (0, 2, 1)), (2, 2, 2, 6))
    _check(twisted, canonical, canonical.transpose(0, 2, 1).reshape(2, 2, 2, 6))


def test_reshape_that_cuts_across_atoms_is_not_a_view():
    canonical = RNG.standard_normal((1, 6, 4))
    view = V.transpose(V.identity(0, canonical.shape), (0, 2, 1))  # [1, 4, 6]
    # [4, 6] → [8, 3] splits the 6 into 2 × 3: a view; [4, 6] → [3, 8] cuts the 4: not one.
    _check(V.reshape(view, (1, 8, 3)), canonical, canonical.transpose(0, 2, 1).reshape(1, 8, 3))
    with pytest.raises(V.NotAView):
        V.reshape(view, (1, 3, 8))


def test_batch_one_is_anywhere():
    canonical = RNG.standard_normal((1, 7, 5))
    view = V.identity(0, canonical.shape)
    moved = V.transpose(view, (1, 0, 2))  # [7, 1, 5]
    assert V.canonical_position(moved) == 1
    dropped = V.reshape(view, (7, 5))
    assert V.canonical_position(dropped) == V.ABSENT
    _check(dropped, canonical, canonical.reshape(7, 5))


def test_rows_of_last_axis_reads_through_any_row_order():
    b, s, e = 3, 4, 5
    view = V.identity(0, (b, s, e))
    rows = V.reshape(V.transpose(view, (1, 0, 2)), (s * b, e))
    assert V.rows_of_last_axis(rows) and V.canonical_position(rows) is None
    assert not V.rows_of_last_axis(V.transpose(view, (0, 2, 1)))


def test_same_layout_compares_structure_not_tensor():
    a = V.transpose(V.identity(0, (2, 3, 4)), (1, 0, 2))
    b = V.transpose(V.identity(1, (2, 3, 4)), (1, 0, 2))
    assert V.same_layout(a, b)
    assert not V.same_layout(a, V.identity(1, (2, 3, 4)))
