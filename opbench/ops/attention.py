"""Multi-head attention: self-attention over the input, or decode attention over a KV cache.

Four forms, by parameters (D = head size, H = heads, Hkv = kv_heads, G = H / Hkv):

- self-attention, one input [S, E]: q = k = v = the input split into H heads (E = H D);
- packed self-attention, one input [S, (H + 2 Hkv) D]: q | k | v side by side (with
  kv_heads = heads, the classic [S, 3E]); grouped-query attention (GQA) when Hkv < H;
- decode attention, `kv_len: N`: the input is the query [S, H D] of the S newest positions,
  and K and V are a cache of N positions, [N, Hkv D] each, held by the layer as state
  (`k_cache`, `v_cache`: seeded random data like weights; a decode step reads a resident cache
  exactly as it reads resident weights). Causal decode aligns the queries with the last S
  cache positions: query i sees keys j <= i + N - S, as `causal_lower_right` in torch.

- three inputs, `separate_qkv: true` with `inputs: [q, k, v]`: q [S, H D], k and v [N, Hkv D]
  (separate projections, or a cache that is a model input); N comes from k's shape, and
  causal queries are again the last S of the N positions.

- `layout: bhsd`: three inputs q [B, H, S, D], k and v [B, Hkv, N, D], heads before
  positions, as exporters (torch.onnx, Hugging Face's modules) write them after their
  transposes; GQA by kv_heads (the exporter's repeat_kv / Expand is part of the layer).
  The output is still [B, S, H D]: the exporter's transpose(1, 2).reshape(B, S, H D) after
  the attention is part of the layer too. (`layout: rows`, the default, is every form above.)

Two more parameters:
- `mask: true`: one more input, last: a key padding mask [B, N] (Hugging Face's
  `attention_mask`, int64 or float): key j of sequence b is visible only where mask[b, j] != 0;
  with `causal` both apply. A suite draws it as a model input `{shape: [N], dtype: int64,
  padding_mask: true}` (1 on a prefix of each row, so every query sees key 0);
- `append: true` (with `kv_len: N` and `packed_qkv`): a decode step's KV-cache append. The
  input is the packed q | k | v [S, (H + 2 Hkv) D] of the S new tokens; their k and v are
  written into the last S slots of the layer's cache (`k_cache`, `v_cache` [N, Hkv D], state
  like weights: slots before hold the past), then the queries attend over all N slots
  (causal: query i sees slots j <= N - S + i). Writing the same slots every call keeps the
  step repeatable for timing. Torch baseline: Hugging Face's StaticCache update
  (`cache[:, N-S:] = k`) then SDPA.

Output [S, H D]; scale 1/sqrt(D); each query head h reads kv head h // G.

The op is VARIADIC (`input_count`: 3 with separate_qkv or layout bhsd, else 1; one more with
mask): its methods get one shape (tensor) per input; they also take a bare shape (tensor) for
the one-input forms.
"""

from __future__ import annotations

import math

from opbench.ops.attention_onnx import read_attention, write_attention
from opbench.ops.base import VARIADIC, Example, Op, Param, ShapeError, numel

QUANT_CHOICES = ("none", "int8", "fp8")
LAYOUTS = ("rows", "bhsd")
# Scores of one (batch, head) computed at a time by the written-out reference: bounds its
# memory (the S x N matrix) at any size.
REFERENCE_CHUNK = 1 << 24


class Attention(Op):
    name = "attention"
    summary = "multi-head attention: self, packed or separate q,k,v (GQA), decode over a KV cache"
    engine_names = (
        "attention multiheadattention groupqueryattention mha "
        "aten::scaled_dot_product_attention aten::_scaled_dot_product_flash_attention"
    )
    torch_calls = ("torch.nn.functional.scaled_dot_product_attention",)
    reference_written_out = True
    arity = VARIADIC
    example = Example((5, 6), (5, 6), {"heads": 2, "causal": True})
    params = (
        Param("heads", "pos_int"),
        Param("causal", "bool", False),
        Param("packed_qkv", "bool", False),
        Param("kv_heads", "pos_int", None, help="key/value heads (GQA); default: heads"),
        Param("kv_len", "pos_int", None, help="KV-cache length (decode); default: none"),
        Param("separate_qkv", "bool", False, help="three inputs q, k, v"),
        Param("quant", "choice", "none", QUANT_CHOICES),
        Param("layout", "choice", "rows", LAYOUTS, help="rows [S, H D] | bhsd [H, S, D] inputs"),
        Param("mask", "bool", False, help="one more input: key padding mask [N]"),
        Param("append", "bool", False, help="write the new k, v into the cache (kv_len)"),
    )
    onnx_imports = (("", "Attention", {}), ("opbench", "AttentionCore", {}))

    def read_onnx(self, node, implied):
        return read_attention(node)  # ops/attention_onnx.py

    def input_count(self, params) -> int:
        three = params.get("separate_qkv") or params.get("layout") == "bhsd"
        return (3 if three else 1) + (1 if params.get("mask") else 0)

    def integer_inputs(self, params):
        return (self.input_count(params) - 1,) if params.get("mask") else ()

    # ---- pure: shapes and costs -------------------------------------------------------
    @staticmethod
    def shapes(in_shape) -> tuple[tuple[int, ...], ...]:
        """One shape per input, from a tuple of shapes or a bare shape."""
        if in_shape and isinstance(in_shape[0], (tuple, list)):
            return tuple(tuple(s) for s in in_shape)
        return (tuple(in_shape),)

    @staticmethod
    def dims(in_shape, p) -> tuple[int, int, int, int, int]:
        """(S, H, Hkv, D, N): query length, heads, kv heads, head size, keys per query."""
        shapes = Attention.shapes(in_shape)
        if p.get("mask"):
            shapes, mask = shapes[:-1], shapes[-1]
        found = Attention.unmasked_dims(shapes, p)
        if p.get("mask"):
            batch = shapes[0][0]
            if tuple(mask) != (batch, found[4]):
                raise ShapeError(f"the mask must be [N] = [{found[4]}] per sequence, got "
                                 f"{list(mask[1:])}", "mask")  # fmt: skip
        return found

    @staticmethod
    def unmasked_dims(shapes, p) -> tuple[int, int, int, int, int]:
        """dims() of the q/k/v inputs alone (the mask taken off)."""
        if p.get("append"):
            return Attention.append_dims(shapes, p)
        if p.get("layout") == "bhsd":
            return Attention.separate_dims(Attention.bhsd_as_rows(shapes, p), p)
        if p.get("separate_qkv"):
            return Attention.separate_dims(shapes, p)
        in_shape = shapes[0]
        if len(in_shape) != 3:
            raise ShapeError(f"attention needs input [S, E] (plus batch), got {list(in_shape[1:])}")
        seq, width = in_shape[1], in_shape[2]
        heads = p["heads"]
        kv_heads = p.get("kv_heads") or heads
        if heads % kv_heads:
            raise ShapeError(f"kv_heads={kv_heads} does not divide heads={heads}", "kv_heads")
        kv_len = p.get("kv_len")
        if kv_len is not None and p["packed_qkv"]:
            raise ShapeError(
                "packed_qkv does not go with kv_len: the input is the query, K and V the cache",
                "packed_qkv",
            )
        if p["packed_qkv"] and kv_heads == heads:
            if width % 3:
                raise ShapeError(
                    f"packed_qkv needs a last dim divisible by 3, got {width}", "packed_qkv"
                )
            if (width // 3) % heads:
                raise ShapeError(
                    f"heads={heads} does not divide the embedding size {width // 3}", "heads"
                )
            head_dim = width // (3 * heads)
        elif p["packed_qkv"]:
            parts = heads + 2 * kv_heads
            if width % parts:
                raise ShapeError(
                    f"packed_qkv with kv_heads needs a last dim divisible by heads + 2 kv_heads "
                    f"= {parts}, got {width}",
                    "packed_qkv",
                )
            head_dim = width // parts
        else:
            if width % heads:
                raise ShapeError(
                    f"heads={heads} does not divide the embedding size {width}", "heads"
                )
            if kv_len is None and kv_heads != heads:
                raise ShapeError(
                    "kv_heads < heads needs separate keys: packed_qkv, or kv_len (a cache)",
                    "kv_heads",
                )
            head_dim = width // heads
        if kv_len is not None and p["causal"] and kv_len < seq:
            raise ShapeError(
                f"causal decode needs kv_len >= the query length ({kv_len} < {seq})", "kv_len"
            )
        return seq, heads, kv_heads, head_dim, seq if kv_len is None else kv_len

    @staticmethod
    def bhsd_as_rows(shapes, p) -> tuple[tuple[int, ...], ...]:
        """q [B, H, S, D], k and v [B, Hkv, N, D] as the shapes of their rows forms."""
        if len(shapes) != 3 or any(len(s) != 4 for s in shapes):
            got = " and ".join(str(list(s[1:])) for s in shapes)
            raise ShapeError(f"layout bhsd needs q [H, S, D], k and v [Hkv, N, D]; got {got}",
                             "layout")  # fmt: skip
        q, k, _ = shapes
        kv_heads = p.get("kv_heads") or p["heads"]
        if q[1] != p["heads"] or k[1] != kv_heads:
            raise ShapeError(f"layout bhsd: q has {q[1]} heads and k {k[1]}, the layer says "
                             f"heads={p['heads']}, kv_heads={kv_heads}", "heads")  # fmt: skip
        return tuple((s[0], s[2], s[1] * s[3]) for s in shapes)

    @staticmethod
    def append_dims(shapes, p) -> tuple[int, int, int, int, int]:
        """dims() of a decode step's append: packed q | k | v [B, S, (H + 2 Hkv) D] of the new
        tokens, a cache of kv_len slots."""
        kv_len = p.get("kv_len")
        if kv_len is None or not p.get("packed_qkv") or p.get("separate_qkv"):
            raise ShapeError("append needs kv_len (the cache) and packed_qkv (the new q | k | v)",
                             "append")  # fmt: skip
        if p.get("layout") == "bhsd" or p.get("quant", "none") != "none":
            raise ShapeError("append takes layout rows and no quant", "append")
        (x,) = shapes if len(shapes) == 1 else (None,)
        if x is None or len(x) != 3:
            raise ShapeError("append needs one input [S, (heads + 2 kv_heads) D]", "append")
        heads = p["heads"]
        kv_heads = p.get("kv_heads") or heads
        if heads % kv_heads:
            raise ShapeError(f"kv_heads={kv_heads} does not divide heads={heads}", "kv_heads")
        parts = heads + 2 * kv_heads
        if x[2] % parts:
            raise ShapeError(f"the width {x[2]} does not split into heads + 2 kv_heads = {parts} "
                             "heads", "packed_qkv")  # fmt: skip
        if x[1] > kv_len:
            raise ShapeError(f"{x[1]} new tokens do not fit a cache of kv_len={kv_len}", "kv_len")
        return x[1], heads, kv_heads, x[2] // parts, kv_len

    @staticmethod
    def separate_dims(shapes, p) -> tuple[int, int, int, int, int]:
        """dims() of the three-input form: q [B, S, H D], k and v [B, N, Hkv D]."""
        if len(shapes) != 3 or any(len(s) != 3 for s in shapes):
            got = " and ".join(str(list(s)) for s in shapes)
            raise ShapeError(f"separate_qkv needs q [S, H D], k and v [N, Hkv D]; got {got} "
                             "(batch included)", "separate_qkv")  # fmt: skip
        q, k, v = shapes
        heads = p["heads"]
        kv_heads = p.get("kv_heads") or heads
        if heads % kv_heads:
            raise ShapeError(f"kv_heads={kv_heads} does not divide heads={heads}", "kv_heads")
        if p["packed_qkv"]:
            raise ShapeError("separate_qkv and packed_qkv exclude each other", "packed_qkv")
        if q[2] % heads:
            raise ShapeError(f"heads={heads} does not divide q's width {q[2]}", "heads")
        head_dim = q[2] // heads
        if k != v or k[0] != q[0] or k[2] != kv_heads * head_dim:
            raise ShapeError(
                f"k {list(k)} and v {list(v)} must both be [B, N, kv_heads x {head_dim}] = "
                f"[{q[0]}, N, {kv_heads * head_dim}] beside q {list(q)} (batch included)",
                "separate_qkv",
            )
        kv_len = k[1]
        if p.get("kv_len") is not None and p["kv_len"] != kv_len:
            raise ShapeError(f"kv_len={p['kv_len']} but k has {kv_len} positions", "kv_len")
        if p["causal"] and kv_len < q[1]:
            raise ShapeError(
                f"causal attention needs as many keys as queries ({kv_len} < {q[1]})", "causal"
            )
        return q[1], heads, kv_heads, head_dim, kv_len

    @staticmethod
    def embed_dim(in_shape, p) -> int:
        _, heads, _, head_dim, _ = Attention.dims(in_shape, p)
        return heads * head_dim

    def infer_shape(self, in_shape, p):
        seq, heads, _, head_dim, _ = self.dims(in_shape, p)
        return (self.shapes(in_shape)[0][0], seq, heads * head_dim)

    def weight_shapes(self, in_shape, p):
        """The KV cache of a decode layer, one [B, N, Hkv D] tensor each for K and V."""
        if p.get("kv_len") is None or p.get("separate_qkv") or p.get("layout") == "bhsd":
            return {}
        _, _, kv_heads, head_dim, kv_len = self.dims(in_shape, p)
        shape = (self.shapes(in_shape)[0][0], kv_len, kv_heads * head_dim)
        return {"k_cache": shape, "v_cache": shape}

    def input_numel(self, in_shape) -> int:
        return sum(numel(shape) for shape in self.shapes(in_shape))

    @staticmethod
    def visible_pairs(seq: int, kv_len: int, causal: bool) -> float:
        """(query, key) pairs computed per (batch, head). Causal counts S N - S^2 / 2 (the
        usual half of S^2 for self-attention; about N for one decode query)."""
        return seq * kv_len - seq * seq / 2 if causal else seq * kv_len

    def flops(self, in_shape, out_shape, p):
        seq, heads, _, head_dim, kv_len = self.dims(in_shape, p)
        # QK^T and PV, 2 FLOPs per multiply-add each.
        pairs = self.visible_pairs(seq, kv_len, p["causal"])
        return int(4 * self.shapes(in_shape)[0][0] * heads * head_dim * pairs)

    # ---- torch ----------------------------------------------------------------------------
    def split(self, x, weights, layer, *, write_cache: bool = False):
        """q [B, H, S, D], k and v [B, Hkv, N, D] (views of the input(s) or of the cache), and
        the key mask [B, N] or None. append: the new k and v written into the cache's last S
        slots in place (`write_cache`, the baseline's StaticCache update), else joined to a
        copy of the cache's other slots (the reference).

        The shapes were checked when the suite was read (`dims`): nothing is checked again
        here, so the torch forward costs the host what a user's module does."""
        import torch

        xs = tuple(x) if isinstance(x, (tuple, list)) else (x,)
        p = layer.params
        mask = None
        if p.get("mask"):
            xs, mask = xs[:-1], xs[-1]
        if p.get("layout") == "bhsd":
            return (*xs, mask)
        h = p["heads"]
        hkv = p.get("kv_heads") or h
        packed = p.get("packed_qkv")
        d = xs[0].shape[-1] // (h + 2 * hkv if packed else h)

        def heads(t, n):
            return t.unflatten(-1, (n, d)).transpose(1, 2)

        if p.get("separate_qkv"):
            q, k, v = xs
            return heads(q, h), heads(k, hkv), heads(v, hkv), mask
        x = xs[0]
        if p.get("append"):
            q, k_new, v_new = x.split([h * d, hkv * d, hkv * d], dim=-1)
            seq = x.shape[1]
            caches = []
            for new, key in ((k_new, "k_cache"), (v_new, "v_cache")):
                cache = weights[key]
                if write_cache:
                    cache[:, cache.shape[1] - seq :] = new
                else:
                    cache = torch.cat((cache[:, : cache.shape[1] - seq], new), dim=1)
                caches.append(heads(cache, hkv))
            return heads(q, h), *caches, mask
        if p.get("kv_len") is not None:
            k, v = (heads(weights[key], hkv) for key in ("k_cache", "v_cache"))
            return heads(x, h), k, v, mask
        if packed:
            return (*self.packed_heads(x, h, hkv, d), mask)
        q = heads(x, h)
        return q, q, q, mask

    @staticmethod
    def packed_heads(x, h: int, hkv: int, d: int):
        """q [B, H, S, D], k and v [B, Hkv, S, D] of a packed q | k | v [B, S, (H + 2 Hkv) D],
        as a user writes it: one view, one permute and an unbind (a split along the heads
        for GQA). Views of x, the same strides as a split of the last dim then one
        unflatten + transpose per part, in three calls of the dispatcher instead of seven."""
        b, s, _ = x.shape
        if hkv == h:
            return x.view(b, s, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
        return x.view(b, s, h + 2 * hkv, d).transpose(1, 2).split((h, hkv, hkv), dim=1)

    @staticmethod
    def visible(s: int, n: int, causal: bool, mask, device):
        """Which keys each query sees, bool [B or 1, 1, S, N], or None when all: causal
        (query i is position i + N - S) and the key mask."""
        import torch

        seen = None
        if causal:
            seen = torch.ones(s, n, dtype=torch.bool, device=device).tril(n - s)[None, None]
        if mask is not None:
            keys = (mask != 0)[:, None, None, :]
            seen = keys if seen is None else seen & keys
        return seen

    def forward(self, x, weights, layer):
        """F.scaled_dot_product_attention as a user writes it: enable_gqa for grouped heads,
        causal_lower_right for a causal query shorter than its keys, a boolean attn_mask for
        a padding mask (with the causal one folded in)."""
        import torch.nn.functional as F

        q, k, v, mask = self.split(x, weights, layer, write_cache=True)
        causal = layer.params["causal"]
        extra = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
        if mask is not None:
            seen = self.visible(q.shape[2], k.shape[2], causal, mask, q.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, **extra)
        elif causal and k.shape[2] != q.shape[2]:
            from torch.nn.attention.bias import causal_lower_right

            bias = causal_lower_right(q.shape[2], k.shape[2])
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, **extra)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
        b, h, s, d = out.shape
        return out.transpose(1, 2).reshape(b, s, h * d)

    def reference(self, x, weights, layer):
        """softmax(q k^T / sqrt(D) + mask) v, written out, one (batch, head) at a time (few
        at a time when small) so the S x N score matrix stays bounded."""
        import torch

        q, k, v, mask = self.split(x, weights, layer)
        b, h, s, d = q.shape
        group = h // k.shape[1]
        n = k.shape[2]
        out = torch.empty_like(q)
        seen = self.visible(s, n, layer.params["causal"], mask, q.device)
        per_step = max(1, REFERENCE_CHUNK // max(1, s * n))
        pairs = [(bi, hi) for bi in range(b) for hi in range(h)]
        for start in range(0, len(pairs), per_step):
            chunk = pairs[start : start + per_step]
            bi = torch.tensor([p[0] for p in chunk], device=q.device)
            hi = torch.tensor([p[1] for p in chunk], device=q.device)
            qs, ks, vs = q[bi, hi], k[bi, hi // group], v[bi, hi // group]
            scores = qs @ ks.transpose(-1, -2) / math.sqrt(d)
            if seen is not None:
                hidden = ~seen[bi if seen.shape[0] > 1 else 0, 0]
                scores = scores.masked_fill(hidden, float("-inf"))
            out[bi, hi] = scores.softmax(-1) @ vs
        return out.transpose(1, 2).reshape(b, s, h * d)

    def to_onnx(self, scope, x, weights, layer):
        return write_attention(self, scope, x, weights, layer)  # ops/attention_onnx.py
