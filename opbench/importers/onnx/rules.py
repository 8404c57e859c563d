"""Pattern rules: groups of ONNX nodes that are one suite op, found with onnxscript's rewriter.

Each rule replaces its match by one call node and keeps the matched nodes, with their names, as
the body of a model-local function (`as_function=True`): the walker reads the call as one op and
the body as the nodes the layer covers, so nothing is dropped and profiles still match by name.

Rules, in the order they are tried:
- onnxscript's own: RMS norm (Pow/ReduceMean(axis -1)/Add/Sqrt/Reciprocal/Mul →
  RMSNormalization), erf GELU and tanh GELU (→ com.microsoft Gelu / FastGelu), and the
  rotate-half rotary embedding x·cos + rotate_half(x)·sin (→ RotaryEmbedding);
- ours, for the forms those miss: RMS norm over a positive last axis, with Div(1, ·) or
  Div(x, ·) instead of Reciprocal, and x·x instead of Pow (torch's legacy exporter, opbench's
  own export); x·sigmoid(x) → Silu; MatMul + Add of a bias → Linear; repeat_kv's
  Unsqueeze + Expand of k or v → RepeatKV (grouped-query attention); and the attention core
  MatMul(q, kᵀ) · scale (+ mask) → Softmax → MatMul(·, v) → AttentionCore. onnxscript's SDPA
  rule matches only 4-D [B, H, S, D] q/k/v; exports fold the batch into the heads
  ([B·H, S, D]) or transpose k on the way, so the core is matched here on the three MatMul
  operands, whatever their layout, and views.py decides whether those are a head split.

Patterns name only what they need; `check` reads constants (scales, eps, masks must be
constant) and axes, and anything unexpected leaves the nodes unmatched (then unsupported, with
the node named).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from onnxscript import ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter._basics import MatchResult

OPBENCH = "opbench"


def _const(value: ir.Value | None) -> Any:
    """The value's constant as numpy, or None."""
    if value is None:
        return None
    tensor = value.const_value
    return None if tensor is None else tensor.numpy()


def _scalar(value: ir.Value | None) -> float | None:
    array = _const(value)
    if array is None or array.size != 1:
        return None
    return float(array.reshape(-1)[0])


def _last_axis(axes: ir.Value | None, rank: int | None) -> bool:
    array = _const(axes)
    if array is None or array.size != 1 or rank is None:
        return False
    return int(array.reshape(-1)[0]) % rank == rank - 1


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def _attr(value: ir.Value, name: str, default: Any) -> Any:
    node = value.producer()
    attr = node.attributes.get(name) if node is not None else None
    return default if attr is None else attr.value


class _RMSNorm(pattern.RewriteRuleClassBase):
    """x · rsqrt(mean(x², last axis) + eps) · w, in the spellings onnxscript's rule misses."""

    def pattern(self, op, x, two, axes, eps, one, w):
        square = pattern.OrValue([op.Pow(x, two), op.Mul(x, x)], tag_var="square")
        mean = op.ReduceMean(square, axes, _allow_other_attributes=True, _outputs=["mean"])
        root = op.Sqrt(op.Add(mean, eps))
        normed = pattern.OrValue(
            [op.Mul(x, op.Reciprocal(root)), op.Mul(x, op.Div(one, root)), op.Div(x, root)],
            tag_var="form",
        )
        return op.Mul(normed, w)

    def check(self, context, x, two, axes, eps, one, w, mean, square, form, **_) -> MatchResult:
        result = MatchResult()
        if square == 0 and _scalar(two) != 2.0:
            return result.fail("the square is not a power of 2")
        if form == 1 and _scalar(one) != 1.0:
            return result.fail("Div(c, sqrt) with c ≠ 1")
        if _attr(mean, "keepdims", 1) != 1 or not _last_axis(axes, _rank(x)):
            return result.fail("the mean is not over the last axis, keeping it")
        if _scalar(eps) is None or _const(w) is None or _const(w).ndim != 1:
            return result.fail("eps or the weight is not a constant")
        return result

    def rewrite(self, op, x, eps, w, **_):
        return op.RMSNormalization(x, w, axis=-1, epsilon=_scalar(eps), _domain=OPBENCH)


class _Silu(pattern.RewriteRuleClassBase):
    def pattern(self, op, x):
        return op.Mul(x, op.Sigmoid(x))

    def rewrite(self, op, x):
        return op.Silu(x, _domain=OPBENCH)


class _LinearBias(pattern.RewriteRuleClassBase):
    """MatMul(x, W) + b with W a 2-D constant and b a 1-D constant: one linear layer."""

    def pattern(self, op, x, w, b):
        return op.Add(op.MatMul(x, w), b)

    def check(self, context, x, w, b, **_) -> MatchResult:
        result = MatchResult()
        weight, bias = _const(w), _const(b)
        if weight is None or weight.ndim != 2 or bias is None:
            return result.fail("not a constant 2-D weight and bias")
        if bias.ndim != 1 or bias.shape[0] != weight.shape[1]:
            return result.fail("the addend is not a bias over the output features")
        return result

    def rewrite(self, op, x, w, b, **_):
        return op.Linear(x, w, b, _domain=OPBENCH)


def _scale_of(kind: str, value: ir.Value | None) -> float | None:
    if kind == "none":
        return 1.0
    s = _scalar(value)
    if s is None or s == 0.0:
        return None
    return s if kind == "mul" else 1.0 / s


class _AttentionCore(pattern.RewriteRuleClassBase):
    """softmax(q·kᵀ · scale + mask) · v, the scale on q, k or the scores (or split between)."""

    def pattern(self, op, q, kt, v, q_scale, k_scale, s_scale, mask, keep, fill):
        kinds = ["mul", "div", "none"]
        q = pattern.OrValue(
            [op.Mul(q, q_scale), op.Div(q, q_scale), q], tag_var="q_kind", tag_values=kinds
        )
        kt = pattern.OrValue(
            [op.Mul(kt, k_scale), op.Div(kt, k_scale), kt], tag_var="k_kind", tag_values=kinds
        )
        scores = op.MatMul(q, kt)
        scores = pattern.OrValue(
            [op.Mul(scores, s_scale), op.Div(scores, s_scale), scores],
            tag_var="s_kind",
            tag_values=kinds,
        )
        scores = pattern.OrValue(
            [op.Add(scores, mask), op.Where(keep, scores, fill), scores],
            tag_var="mask_kind",
            tag_values=["add", "where", "none"],
        )
        probs = op.Softmax(scores, _allow_other_attributes=True, _outputs=["probs"])
        # (tag_var: onnxscript's commute() cannot copy an OrValue without one)
        probs = pattern.OrValue([op.Where(op.IsNaN(probs), 0.0, probs), probs], tag_var="nan_guard")
        return op.MatMul(probs, v)

    def check(self, context, probs, q_kind, k_kind, s_kind, mask_kind, **b) -> MatchResult:
        result = MatchResult()
        rank = _rank(probs)
        if rank is None or int(_attr(probs, "axis", -1)) % rank != rank - 1:
            return result.fail("softmax is not over the last axis")
        scales = [
            _scale_of(q_kind, b.get("q_scale")),
            _scale_of(k_kind, b.get("k_scale")),
            _scale_of(s_kind, b.get("s_scale")),
        ]
        if any(s is None for s in scales):
            return result.fail("a scale is not a constant scalar")
        # (an additive mask computed from a model input is the handler's to read: masks.py)
        if mask_kind == "where" and (
            _const(b.get("keep")) is None or _scalar(b.get("fill")) is None
        ):
            return result.fail("the mask is not a constant")
        self._scale = math.prod(s for s in scales if s is not None)
        return result

    def rewrite(self, op, q, kt, v, mask_kind, **b):
        inputs = [q, kt, v]
        if mask_kind == "add":
            inputs.append(b["mask"])
        elif mask_kind == "where":
            inputs += [b["keep"], b["fill"]]
        return op.AttentionCore(*inputs, scale=self._scale, mask=mask_kind, _domain=OPBENCH)


class _RepeatKV(pattern.RewriteRuleClassBase):
    """Hugging Face's repeat_kv: k or v [B, Hkv, S, D] unsqueezed at 2 and expanded to
    [B, Hkv, G, S, D], each kv head read by G query heads (grouped-query attention). The
    handler reads it as kv_heads of the attention, not as a copy."""

    def pattern(self, op, x, axes, shape):
        return op.Expand(op.Unsqueeze(x, axes), shape, _outputs=["out"])

    def check(self, context, x, axes, shape, out, **_) -> MatchResult:
        result = MatchResult()
        if x.shape is None or len(x.shape) != 4 or not all(isinstance(d, int) for d in x.shape):
            return result.fail("not a static 4-D tensor")
        found, target = _const(axes), _const(shape)
        if found is None or [int(a) % 5 for a in found.reshape(-1)] != [2]:
            return result.fail("not unsqueezed at dim 2")
        b, h, s, d = x.shape
        if target is None or target.size != 5:
            return result.fail("not expanded to 5 dims")
        t = [int(v) for v in target.reshape(-1)]
        if [t[0], t[1], t[3], t[4]] not in ([b, h, s, d], [1, 1, 1, 1]) or t[2] < 1:
            return result.fail("not an expansion of the new dim alone")
        return result

    def rewrite(self, op, x, shape, **_):
        groups = int(_const(shape).reshape(-1)[2])
        return op.RepeatKV(x, groups=groups, _domain=OPBENCH)


def _library_rules() -> list[pattern.RewriteRule]:
    """onnxscript's own fusion rules, extracted as functions like ours (so the nodes stay)."""
    from onnxscript.rewriter.ort_fusions import erfgelu
    from onnxscript.rewriter.ort_fusions import gelu as ort_gelu
    from onnxscript.rewriter.ort_fusions import rotary_embedding as rope
    from onnxscript.rewriter.rules.fusion import _rms_normalization as rms

    rules = []
    for mul_order in (True, False):
        rule = rms.RmsNormFusion(f"onnxscript.RmsNorm{int(mul_order)}", mul_order=mul_order)
        rules.append(_as_function(rule))
    for cls in (ort_gelu.GeluErfFusion, ort_gelu.GeluTanhFusion):
        rules.append(_as_function(cls(f"onnxscript.{cls.__name__}")))
    # x·cos + rotate_half(x)·sin on [B, H, S, D] (Hugging Face's apply_rotary_pos_emb)
    rules.append(_as_function(rope.RotaryEmbeddingFusion()))
    for form in (erfgelu.erf_gelu_pattern_1, erfgelu.erf_gelu_pattern_2):
        rules.append(
            pattern.RewriteRule(
                form, erfgelu.gelu, name=f"onnxscript.{form.__name__}", as_function=True
            )
        )
    return rules


def _as_function(instance: pattern.RewriteRuleClassBase) -> pattern.RewriteRule:
    return pattern.RewriteRule(
        instance.pattern,
        instance.rewrite,
        instance.check,
        name=instance.name,
        graph_pre_visitor=instance.setup,
        graph_post_visitor=instance.cleanup,
        as_function=True,
    )


def _own_rules() -> list[pattern.RewriteRule]:
    return [
        _as_function(cls(f"opbench.{cls.__name__.strip('_')}"))
        for cls in (_RMSNorm, _Silu, _RepeatKV, _AttentionCore, _LinearBias)
    ]


def apply_rules(model: ir.Model, log: Callable[[str], None] = lambda _m: None) -> int:
    """Apply every rule (commuted operands included) until none matches; how many matched."""
    library: list[pattern.RewriteRule] = []
    try:
        library = _library_rules()
    except (ImportError, AttributeError) as exc:  # an onnxscript without them: ours still run
        log(f"onnxscript's fusion rules are not available ({exc}); using opbench's own")
    # onnxscript's rules spell their own operand orders (and its commute() cannot copy an
    # OrValue without a tag, which they use); ours are commuted.
    sets = [pattern.RewriteRuleSet(library), pattern.RewriteRuleSet(_own_rules(), commute=True)]
    kept: dict = {}
    total = 0
    for rules in sets:
        # apply_to_model also rewrites the model's functions: the bodies made by an earlier
        # set hold the very nodes that set matched, and must stay as they are.
        kept.update(model.functions)
        model.functions.clear()
        total += rules.apply_to_model(model)
        clash = set(kept) & set(model.functions)
        if clash:
            raise AssertionError(f"two rule sets made the same function {sorted(clash)[0]}")
    model.functions.update(kept)
    return total
