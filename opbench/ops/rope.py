"""rope: the rotary position embedding (RoPE) applied to queries and keys.

For a head vector x of size D at position t, with inv_freq[i] = theta^(-2i / D), i < D/2,
and angle a_i = t · inv_freq[i], RoPE rotates D/2 pairs of x by their angles:
- `style: half` (Hugging Face's rotate-half, LLaMA/Qwen/Mistral/GPT-NeoX): pair i is
  (x[i], x[i + D/2]); out = x · cos + rotate_half(x) · sin, with cos/sin = [cos a, cos a]
  (the D/2 angles twice) and rotate_half(x) = [-x[D/2:], x[:D/2]];
- `style: interleaved` (Meta's original LLaMA code, GPT-J): pair i is (x[2i], x[2i + 1]).
Either way (x1, x2) of a pair becomes (x1 cos a - x2 sin a, x2 cos a + x1 sin a).

Parameters:
- `layout` (default `bhsd`): the input's layout, batch first:
  - `bhsd`: [B, n, S, D], heads before positions, as exporters write q and k after their
    transpose: every head rotated (q and k are two layers);
  - `rows`: [B, S, n·D], positions before heads, as a projection writes them: every head of
    size `head_dim` rotated;
  - `packed`: [B, S, (heads + 2 kv_heads)·D], the packed q | k | v of one projection, as
    `attention` with `packed_qkv` reads it: the heads of q and k rotated, v copied unchanged.
- `head_dim`: D (required with `rows`; with `packed` default width / (heads + 2 kv_heads);
  with `bhsd` the last dim, and if given it must equal it);
- `heads`, `kv_heads` (`packed` only; kv_heads defaults to heads);
- `style`: `half` (default) or `interleaved`;
- `theta` (default 10000.0): the base of the frequencies (LLaMA-3: 500000);
- `offset` (default 0): the position of the first of the S rows; positions are offset,
  offset + 1, ..., offset + S - 1 (a decode step of a sequence already N - 1 long: N - 1).

Output: the input's shape and dtype.

Torch baseline: Hugging Face's formula as its modules run it: cos/sin [S, D] precomputed
once (LlamaRotaryEmbedding: float32 angles, then cast to the layer's dtype; held by the layer
as state `cos`, `sin`, built from the parameters, not random), then `x * cos +
rotate_half(x) * sin` (interleaved: the same on the even/odd pairs). Reference: the rotation
written out in float64 with angles computed in float64 from theta and the positions (the
state tables are not used). Cost: 3 FLOPs per rotated element; bytes = input read + output
written (the tables are not needed: a kernel computes the angles).
"""

from __future__ import annotations

from typing import Any

from opbench.ops.base import ITEMSIZE, Example, Op, Param, ShapeError, numel
from opbench.ops.onnx_reading import HEADS, OnnxReading, Refused

LAYOUTS = ("bhsd", "rows", "packed")
STYLES = ("half", "interleaved")


# ---- the tables of an ONNX file read back into theta ------------------------------------------


def _table_atol(seq: int) -> float:
    """How close a file's cos/sin tables must be to the ones `rope` computes: float32
    angles lose about an ulp of the position (2.4e-4 at position 4096)."""
    return 1e-4 + 1e-7 * seq


def onnx_table(array: Any, seq: int, d: int) -> Any:
    """A cos or sin constant as float64 [S, D], or Refused."""
    import numpy as np

    if array is None:
        raise Refused("rotary embedding: cos/sin are not constants")
    if array.shape[-2:] != (seq, d) or array.size != seq * d:
        raise Refused(
            f"rotary embedding: a cos/sin table of shape {list(array.shape)}, not one [S, D]"
        )
    return array.reshape(seq, d).astype(np.float64)


def rope_theta(cos: Any, sin: Any) -> float:
    """The base θ of tables cos/sin [S, D] = [cos a, cos a] with a[t, i] = t · θ^(-2i/D) at
    positions 0 .. S-1, or Refused saying how they differ."""
    import numpy as np

    seq, d = cos.shape
    half = d // 2
    if seq < 2 or half < 2:
        raise Refused("rotary embedding: too few positions or frequencies to read θ from")
    # angle step from position 0 to 1 is the frequency itself (no wrap: every frequency ≤ 1)
    step = np.arctan2(sin[1, :half], cos[1, :half]) - np.arctan2(sin[0, :half], cos[0, :half])
    estimate = float(step[1] ** (-d / 2))  # float32 tables: a few parts in 1e6
    t = np.arange(seq, dtype=np.float64)[:, None]

    def fits(theta: float) -> bool:
        freq = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angles = np.concatenate([t * freq, t * freq], axis=1)
        atol = _table_atol(seq)
        return np.allclose(np.cos(angles), cos, atol=atol) and np.allclose(
            np.sin(angles), sin, atol=atol
        )

    # The shortest θ that gives the file's tables: 500000, not 500001.3.
    for digits in range(2, 8):
        theta = float(f"{estimate:.{digits}g}")
        if fits(theta):
            return theta
    raise Refused(
        "rotary embedding: the cos/sin tables are not cos/sin(t · θ^(-2i/D)) at positions "
        "0 .. S-1 (scaled, shifted or interleaved tables are not the suite's rope)"
    )


class Rope(Op):
    name = "rope"
    summary = "rotary position embedding (rotate-half or interleaved) on q/k heads"
    engine_names = "rotaryembedding rotary_embedding rope"
    # rotate_half's concatenation (the interleaved form stacks instead); the rest is arithmetic.
    torch_calls = ("torch.cat",)
    reference_written_out = True
    derived_weights = True
    example = Example((3, 5, 8), (3, 5, 8), {"theta": 100.0, "offset": 2})
    params = (
        Param("layout", "choice", "bhsd", LAYOUTS),
        Param("style", "choice", "half", STYLES),
        Param("theta", "pos_float", 10000.0),
        Param("offset", "nonneg_int", 0, help="position of the first row"),
        Param("head_dim", "pos_int", None, help="D (rows: required)"),
        Param("heads", "pos_int", None, help="query heads (packed)"),
        Param("kv_heads", "pos_int", None, help="key/value heads (packed; default heads)"),
    )
    #: onnxscript's fusion of x·cos + rotate_half(x)·sin (importers/onnx/rules.py)
    onnx_imports = (("ai.onnxruntime._fusion", "RotaryEmbedding", {}),)

    def read_onnx(self, node, implied):
        """RotaryEmbedding(x [B, H, S, D], cos, sin), rotate-half: theta read back from the
        file's tables (which stay the layer's state); the importer places x (bhsd, or the rows
        of the projection its heads are split from: `layout`, `head_dim`)."""
        if node.attr("interleaved", 0):
            raise Refused("an interleaved rotary embedding")
        _, _, seq, d = (int(n) for n in node.shape(0))
        cos, sin = (onnx_table(node.constant(i), seq, d) for i in (1, 2))
        weights = {"cos": (1, "asis"), "sin": (2, "asis")}
        return OnnxReading({"theta": rope_theta(cos, sin)}, HEADS, weights)

    # ---- pure: shapes and costs -------------------------------------------------------
    @staticmethod
    def geometry(in_shape, p) -> tuple[int, int, int]:
        """(S, D, rotated width): positions, head size, and how many leading elements of a
        row are rotated (rows/packed: the row of n·D; bhsd: D)."""
        layout = p["layout"]
        if layout == "bhsd":
            if len(in_shape) != 4:
                raise ShapeError(f"rope layout bhsd needs [n, S, D], got {list(in_shape[1:])}")
            d = in_shape[3]
            if p.get("head_dim") not in (None, d):
                raise ShapeError(f"head_dim={p['head_dim']} but the input's D is {d}", "head_dim")
            return in_shape[2], d, d
        if len(in_shape) != 3:
            raise ShapeError(f"rope layout {layout} needs [S, W], got {list(in_shape[1:])}")
        width = in_shape[2]
        if layout == "rows":
            d = p.get("head_dim")
            if d is None:
                raise ShapeError("rope layout rows needs head_dim", "head_dim")
            if width % d:
                raise ShapeError(f"head_dim={d} does not divide the width {width}", "head_dim")
            return in_shape[1], d, width
        heads = p.get("heads")
        if heads is None:
            raise ShapeError("rope layout packed needs heads (and kv_heads for GQA)", "heads")
        kv_heads = p.get("kv_heads") or heads
        parts = heads + 2 * kv_heads
        if width % parts:
            raise ShapeError(f"the width {width} does not split into heads + 2 kv_heads = "
                             f"{parts} heads", "heads")  # fmt: skip
        d = width // parts
        if p.get("head_dim") not in (None, d):
            raise ShapeError(f"head_dim={p['head_dim']} but the packed heads are {d}", "head_dim")
        return in_shape[1], d, (heads + kv_heads) * d

    def infer_shape(self, in_shape, p):
        _, d, _ = self.geometry(in_shape, p)
        if d % 2:
            raise ShapeError(f"rope needs an even head size, got {d}")
        return in_shape

    def weight_shapes(self, in_shape, p):
        seq, d, _ = self.geometry(in_shape, p)
        return {"cos": (seq, d), "sin": (seq, d)}

    def flops(self, in_shape, out_shape, p):
        _, _, rotated = self.geometry(in_shape, p)
        return 3 * numel(in_shape) // in_shape[-1] * rotated

    def min_bytes(self, in_shape, out_shape, p, dtype):
        return 2 * numel(in_shape) * ITEMSIZE[dtype]

    # ---- torch ----------------------------------------------------------------------------
    @staticmethod
    def angles(seq: int, d: int, p, dtype, device):
        """[S, D/2] angles (offset + t) · theta^(-2i/D), computed in `dtype`."""
        import torch

        inv_freq = 1.0 / (p["theta"] ** (torch.arange(0, d, 2, dtype=dtype, device=device) / d))
        pos = torch.arange(seq, dtype=dtype, device=device) + p["offset"]
        return pos[:, None] * inv_freq[None, :]

    def make_weights(self, layer, generator):
        """cos and sin [S, D] in float32, as LlamaRotaryEmbedding computes them (each angle
        twice: [a, a] for the rotate-half form, [a0, a0, a1, a1, ...] interleaved)."""
        import torch

        seq, d, _ = self.geometry(self.layer_shape(layer), layer.params)
        ang = self.angles(seq, d, layer.params, torch.float32, "cpu")
        if layer.params["style"] == "half":
            emb = torch.cat((ang, ang), dim=-1)
        else:
            emb = ang.repeat_interleave(2, dim=-1)
        return {"cos": emb.cos(), "sin": emb.sin()}

    @staticmethod
    def heads_view(x, p, d: int, rotated: int):
        """The rotated part of x as [..., S or n, n or S, D]: (view, passthrough or None)."""
        if p["layout"] == "bhsd":
            return x, None
        return x[..., :rotated].unflatten(-1, (rotated // d, d)).transpose(-2, -3), x[..., rotated:]

    @staticmethod
    def merge(y, rest, p):
        """Back to the input's layout from heads_view's form (the passthrough copied after)."""
        if p["layout"] == "bhsd":
            return y
        import torch

        y = y.transpose(-2, -3).flatten(-2)
        if rest is None or not rest.shape[-1]:
            return y
        # cat, as a user writes it: an item assignment into a new tensor cannot be traced,
        # and made the whole-model torch module run this layer as a leaf module.
        return torch.cat((y, rest), dim=-1)

    def forward(self, x, weights, layer):
        """Hugging Face's apply_rotary_pos_emb on one tensor, cos/sin as its modules hold them."""
        import torch

        p = layer.params
        _, d, rotated = self.geometry(tuple(x.shape), p)
        h, rest = self.heads_view(x, p, d, rotated)
        cos, sin = weights["cos"], weights["sin"]
        if p["style"] == "half":
            half = d // 2
            rotated_half = torch.cat((-h[..., half:], h[..., :half]), dim=-1)
        else:
            pairs = h.unflatten(-1, (d // 2, 2))
            rotated_half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        return self.merge(h * cos + rotated_half * sin, rest, p)

    def reference(self, x, weights, layer):
        """Each pair (x1, x2) -> (x1 cos a - x2 sin a, x2 cos a + x1 sin a), angles in x's
        precision (float64) from theta and the positions."""
        import torch

        p = layer.params
        seq, d, rotated = self.geometry(tuple(x.shape), p)
        h, rest = self.heads_view(x, p, d, rotated)
        ang = self.angles(seq, d, p, x.dtype, x.device)
        cos, sin = ang.cos(), ang.sin()
        if p["style"] == "half":
            x1, x2 = h[..., : d // 2], h[..., d // 2 :]
        else:
            x1, x2 = h[..., 0::2], h[..., 1::2]
        y = torch.empty_like(h)
        if p["style"] == "half":
            y[..., : d // 2], y[..., d // 2 :] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        else:
            y[..., 0::2], y[..., 1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        return self.merge(y, rest, p)

    def to_onnx(self, scope, x, weights, layer):
        """x · cos + rotate_half(x) · sin with the layer's cos/sin tables as initializers
        (Hugging Face's exported form); rows and packed rows are reshaped to [B, S, n, D]
        first, the v heads of packed rows carried through with cos = 1, sin = 0 (exact)."""
        import numpy as np

        p = layer.params
        _, d, rotated = self.geometry(layer.input_shape, p)
        cos, sin = weights["cos"], weights["sin"]  # [S, D]
        if p["layout"] == "bhsd":
            heads = x
        else:  # [B, S, n, D], tables [S, n, D]: the v heads of packed rows turn by angle 0
            n = layer.input_shape[-1] // d
            cos = np.repeat(cos[:, None, :], n, axis=1)
            sin = np.repeat(sin[:, None, :], n, axis=1)
            cos[:, rotated // d :], sin[:, rotated // d :] = 1.0, 0.0
            heads = scope.one("Reshape", [x, scope.ints("heads", [0, 0, n, d])])
        turned = self._rotate_half_onnx(scope, heads, d, p["style"] == "interleaved")
        y = scope.one("Add", [scope.one("Mul", [heads, scope.weight("cos", cos)]),
                              scope.one("Mul", [turned, scope.weight("sin", sin)])])  # fmt: skip
        if p["layout"] == "bhsd":
            return y
        return scope.one("Reshape", [y, scope.ints("rows", [0, 0, -1])])

    @staticmethod
    def _rotate_half_onnx(scope, x: str, d: int, interleaved: bool) -> str:
        """[-x2, x1] of each pair along the last axis of a [B, n or S, S or n, D] tensor."""
        rank = 4
        axis = rank - 1
        if interleaved:
            pairs = scope.one("Reshape", [x, scope.ints("pairs", [0] * axis + [d // 2, 2])])
            first, second = scope.node("Split", [pairs], outputs=2, axis=rank, num_outputs=2)
            turned = scope.one("Concat", [scope.one("Neg", [second]), first], axis=rank)
            return scope.one("Reshape", [turned, scope.ints("unpairs", [0] * axis + [d])])
        first, second = scope.node("Split", [x], outputs=2, axis=axis, num_outputs=2)
        return scope.one("Concat", [scope.one("Neg", [second]), first], axis=axis)
