"""Named groups of the portable attention kernels' values, so that their key loops
(attention.py, attention_int8.py, attention_fp8.py, attention_decode.py) take a few named
structures instead of twenty-odd positional values. Triton passes a NamedTuple into a
@triton.jit function as a tuple with named fields and flattens it to its fields, so the
compiled kernel is the one with the fields passed one by one (tests/kernels/attention_sass.py
compares the SASS).

The fields are run-time values only. A constexpr field keeps its constexpr-ness only while the
tuple is built inside a call's argument list; bound to a name first (`keys = KeyValues(...)`),
Triton 3.6 turns an int field into a tensor. So the tile's constexprs stay keyword arguments.
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl


class SoftmaxState(NamedTuple):
    """The online softmax's running state of a block of query rows: the unnormalised output acc
    [rows, D] (fp32), the row maxima m_i (base 2) and the row sums l_i. Every key block updates
    all three, so they travel, and are carried through the key loop, together."""

    acc: tl.tensor
    m_i: tl.tensor
    l_i: tl.tensor


@triton.jit
def softmax_start(ROWS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The state before the first key block: acc 0, m -inf (no key seen yet), l 0."""
    return SoftmaxState(
        acc=tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32),
        m_i=tl.full([ROWS], float("-inf"), dtype=tl.float32),
        l_i=tl.zeros([ROWS], dtype=tl.float32),
    )


class KeyValues(NamedTuple):
    """One (batch, head)'s keys and values as a key loop reads them, block by block: pointers to
    row 0 with their row and column strides, tensor descriptors over the same matrices (None
    where the pointers are used), and the number of keys n_keys (keys at and past it are
    masked). Every key block is read through them."""

    k_base: tl.tensor
    stride_ks: tl.tensor
    stride_kd: tl.tensor
    k_desc: tl.tensor
    v_base: tl.tensor
    stride_vs: tl.tensor
    stride_vd: tl.tensor
    v_desc: tl.tensor
    n_keys: tl.tensor


class Fp8KeyValues(NamedTuple):
    """One (batch, head)'s e4m3 keys and values as attention_fp8.py's passes wrote them: k8
    [S_pad, D] with one scale per KEY_BLOCK keys (k_scale_base), values transposed, vt8
    [D, S_pad]; both zero-padded to padded_len keys (so no load needs a mask), with tensor
    descriptors over them (None where the pointers are used); n_keys: the keys that exist."""

    k8_base: tl.tensor
    k8_desc: tl.tensor
    k_scale_base: tl.tensor
    vt8_base: tl.tensor
    vt8_desc: tl.tensor
    padded_len: tl.tensor
    n_keys: tl.tensor
