"""Which layers the triton backend runs as one kernel: fusion over the model's graph.

A fused group is a connected piece of the graph (spec/graph.py) whose inner values nothing
outside the group reads, so they never need to exist in memory. With `fuse: true` on a model,
these pieces become one kernel each (kernels named in brackets):

- **conv**: conv2d → [batchnorm2d] → [add(skip)] → [an op with an epilogue]: a residual
  block's tail. The batchnorm folds into the weights, the skip tile is read in the epilogue,
  then the activation (conv.py; depthwise.py without the add).
- **norm_fp8**: layernorm/rmsnorm → `quant: fp8` linear(s): the norm writes the e4m3 codes
  and per-row scales of its fp32 output (norm.py FP8_OUT) and the GEMM reads them
  (linear_fp8.bind_gemm_on): no fp16 output, no separate quantize pass. Every reader of the
  norm must be an fp8 linear; with several (LLaMA's attn_norm → q, k, v, ffn_norm → gate,
  up) the codes are written once and each GEMM reads them, each linear an output of the
  group (the last its result, the others `extra`).
- **glu_fp8**: [silu] → mul → `quant: fp8` linear (SwiGLU's silu(gate) * up feeding the down
  projection): the row quantizer computes the product in fp32 and writes its codes
  (quantize.py GATE), the GEMM reads them. These two are tried first: they take only layers
  whose output fp8 linears alone read, which no other pattern fuses on the fp8 path. Either,
  with one linear, takes the residual add that alone reads it into the GEMM's epilogue (the
  down projection + ffn_res). A norm → several linears takes no add: each linear's add would
  be its own epilogue, but a group ending in several adds is not worth its bookkeeping while
  LLaMA's q, k, v and gate, up are read by attention and silu, not by adds.
- **norm_int8**, **glu_int8**: the same two with `quant: int8` linears (int8 codes by the int8
  rule, norm.py INT8_OUT and quantize.py GATE; linear_codes.CodesInput's GEMM), above
  SWIGLU_MAX_ROWS rows only: at decode sizes the int8 SwiGLU GEMM below is the measured win
  and keeps its gate and up.
- **swiglu**: gate = linear(h), up = linear(h), silu(gate) (or the gate linear's own silu),
  mul(·, up): one GEMM over interleaved weights (swiglu.py), for at most SWIGLU_MAX_ROWS rows
  (decode sizes). Measured on an H100 (docs/perf/fusion.md): 1.14x the two GEMMs + silu·mul
  at M = 16, but 0.80x at M = 2048, where the GEMM is compute-bound and the pair epilogue costs
  the mainloop registers (255 against 156); larger M take the next rule for the gate instead.
- **linear + activation**: a projection whose only reader is an op with an epilogue (relu,
  gelu, silu, relu6: `Op.epilogue`, listed by ops/kinds.py): the activation
  runs in the GEMM's epilogue (the SwiGLU gate at prefill sizes: silu(gate) in one GEMM, then
  the mul).
- **linear + add**: a projection whose only reader is a residual add: the epilogue adds the
  other operand (linear_kernels.py, epilogue.store_output); 16-bit, int8 or fp8 (the
  attention out-projection + attn_res), as linear + activation (EPILOGUE_QUANTS).
- **add + norm**: an add whose output a layernorm/rmsnorm reads: both written in one pass
  (norm.py). The sum may have other readers (the pre-norm residual stream): it is a second
  output of the group. Tried last: when the add's operand comes from a projection, adding in
  that projection's epilogue moves fewer bytes (one write and one read of the sum, against
  the projection's write plus two reads).
- **linear_rope**: a plain 16-bit or fp32 projection (no quant, no activation) whose only
  reader is a rope on its `rows` or `packed` output (rotate-half at any size, interleaved up to
  ROPE_MAX_ROWS rows): the rotation runs in the GEMM's epilogue
  (gemm/linear_rope.py), one launch and one pass over q | k | v fewer. Tried before
  rope_append, which would take the same rope: at a decode step the projection then still
  writes the packed rows once, and the attention's own append copies k and v into the cache
  (2 B Hkv D bytes read and written per token) where rope_append reads all of q | k | v and
  writes it again ((H + 2 Hkv) D each way); both leave three launches (GEMM, a copy or rope
  pass, attention). Quantized projections keep rope_append.
- **rope_append**: rope on packed q | k | v → the decode step's attention with the KV-cache
  append (`append: true`): the rope kernel writes the rotated k and the v straight into the
  cache's last slots and the q heads to a buffer of their own (memory/rope.py APPEND); the
  split-K kernel then attends over the cache. One launch fewer, no packed output.

Every step takes a layer only when it is the sole reader of the value before it, reads
nothing else from inside the group, and has the group's dtype; an add only when both operands
have the full output shape (no broadcast). Pure Python over the spec: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opbench.ops.base import numel
from opbench.ops.kinds import epilogue_ops
from opbench.spec.model import LayerSpec, ModelSpec

# SwiGLU as one GEMM up to this many rows (tokens): the decode regime, where the weights'
# bytes bound the GEMM (kernels/linear_plans.SMALL_M; see the module docstring).
SWIGLU_MAX_ROWS = 64
NORMS = ("layernorm", "rmsnorm")
# The linears' quantizations the fused builders take (triton_fused.py): a residual or an
# activation in the epilogue of the 16-bit, int8 and fp8 GEMMs; SwiGLU's one GEMM in 16 bits
# or int8. Other linears run alone rather than as a group no builder can make.
EPILOGUE_QUANTS = ("none", "int8", "fp8")
SWIGLU_QUANTS = ("none", "int8")
# The row-quantized linears whose codes the layer before can write (norm_*, glu_* groups).
CODE_QUANTS = ("fp8", "int8")
# The projections that take a rope in their epilogue (linear_rope). The rotate-half form at
# every size: the warp-specialised GEMM that wins at prefill rotates in its epilogue
# (gemm/gemm_ws_epilogue.rope_halves; LLaMA-3-8B prefill qkv, 2048 rows, on an H200 2026-11-29:
# 0.1434 ms fused against 0.1522 for the GEMM then the rope kernel); the interleaved form up to
# ROPE_MAX_ROWS rows (tokens), the decode regime, where the GEMV or split-K kernel rotates (decode
# b16: 0.0245 against 0.0250): above it only the tiled and TMA kernels take that rotation, and
# the TMA kernel with it was 2x slower than the GEMM then the rope kernel at prefill.
ROPE_DTYPES = ("float16", "bfloat16", "float32")
ROPE_MAX_ROWS = 64
#: False: the rotate-half form too up to ROPE_MAX_ROWS only (the before of the measurement).
ROPE_HALF_ANY_ROWS = True


@dataclass(frozen=True)
class Fusion:
    """One group: its kind and its layer indices in walk order."""

    kind: str  # "single" | "norm_fp8" | "glu_fp8" | "norm_int8" | "conv" | "swiglu" | ...
    layers: tuple[int, ...]


class _Planner:
    def __init__(self, model: ModelSpec) -> None:
        self.model, self.graph = model, model.graph
        self.layers: Sequence[LayerSpec] = model.layers
        self.taken: set[int] = set()

    # ---- facts about one layer -------------------------------------------------------------
    def op(self, i: int) -> str:
        return self.layers[i].op

    def sole_reader(self, i: int) -> int | None:
        """The one layer that reads layer i's output, if exactly one does (model outputs have
        none) and it is not taken yet."""
        readers = self.graph.consumers[i]
        if len(readers) != 1 or i in self.graph.outputs or readers[0] in self.taken:
            return None
        return readers[0]

    def same_kind(self, i: int, j: int) -> bool:
        return self.layers[i].dtype == self.layers[j].dtype

    def full_add(self, i: int, op: str = "add") -> bool:
        """An add (or `op`) whose two operands are distinct values of the full output shape."""
        layer = self.layers[i]
        if layer.op != op or len(set(layer.inputs)) != 2:
            return False
        return all(tuple(s) == tuple(layer.output_shape) for s in layer.input_shapes)

    def other_operand(self, add: int, inner: int) -> str | None:
        """The add's operand that is not layer `inner`'s output, or None if both are."""
        name = self.graph.names[inner]
        others = [v for v in self.layers[add].inputs if v != name]
        return others[0] if len(others) == 1 else None

    # ---- patterns --------------------------------------------------------------------------
    def codes_linear(self, i: int, quant: str | None = None) -> bool:
        """A linear whose input codes the layer before may write: fp8, or int8 above the
        decode sizes (SWIGLU_MAX_ROWS); of quant `quant` when given."""
        layer = self.layers[i]
        if layer.op != "linear" or layer.quant not in CODE_QUANTS:
            return False
        if quant is not None and layer.quant != quant:
            return False
        shape = layer.output_shape
        return layer.quant == "fp8" or numel(shape) // max(shape[-1], 1) > SWIGLU_MAX_ROWS

    def codes_input(self, i: int) -> tuple[int, ...] | None:
        """The group that makes a quantized linear's codes where its input is made: at a
        norm, the norm and every reader (all fp8, or all int8, linears); at such a linear,
        [silu] → mul → it. Either with one linear may end in the residual add that alone
        reads it."""
        if self.op(i) in NORMS:
            return self.norm_codes(i)
        if not self.codes_linear(i):
            return None
        (maker,) = self.graph.producers[i]
        if maker is None or self.sole_reader(maker) != i or not self.same_kind(maker, i):
            return None
        if not self.full_add(maker, "mul"):
            return None
        for value in self.layers[maker].inputs:
            silu = self.graph.producer(value)
            if silu is not None and self.op(silu) == "silu" and \
                    self.sole_reader(silu) == maker and self.same_kind(silu, i):  # fmt: skip
                return self.with_residual((silu, maker, i))
        return self.with_residual((maker, i))

    def norm_codes(self, norm: int) -> tuple[int, ...] | None:
        """A norm whose readers are all fp8 (or all int8) linears of its dtype (LLaMA's
        ffn_norm → gate, up; attn_norm → q, k, v): it writes the codes once and each GEMM
        reads them. The linears' outputs are the group's outputs."""
        readers = self.graph.consumers[norm]
        if not readers or norm in self.graph.outputs:
            return None
        quant = self.layers[readers[0]].quant
        for r in readers:
            if r in self.taken or not self.codes_linear(r, quant) or not self.same_kind(norm, r):
                return None
        if len(readers) == 1:
            return self.with_residual((norm, readers[0]))
        return (norm, *sorted(readers))

    def with_residual(self, group: tuple[int, ...]) -> tuple[int, ...]:
        """`group` and the add that alone reads its last layer (a linear), when the add's
        other operand comes from outside the group: the GEMM's epilogue adds it."""
        linear = group[-1]
        add = self.sole_reader(linear)
        if add is None or not self.full_add(add) or not self.same_kind(linear, add):
            return group
        other = self.other_operand(add, linear)
        if other is None or self.graph.producer(other) in group:
            return group
        return (*group, add)

    def conv(self, i: int) -> tuple[int, ...] | None:
        layer = self.layers[i]
        if layer.op != "conv2d" or layer.params["activation"] != "none":
            return None
        depthwise = layer.params["groups"] != 1
        group = [i]
        nxt = self.sole_reader(i)
        if nxt is not None and self.op(nxt) == "batchnorm2d" and self.same_kind(i, nxt):
            group.append(nxt)
            nxt = self.sole_reader(nxt)
        if (nxt is not None and not depthwise and self.full_add(nxt) and self.same_kind(i, nxt)
                and self.other_operand(nxt, group[-1]) is not None):  # fmt: skip
            group.append(nxt)
            nxt = self.sole_reader(nxt)
        if nxt is not None and self.op(nxt) in epilogue_ops() and self.same_kind(i, nxt):
            group.append(nxt)
        return tuple(group) if len(group) > 1 else None

    def swiglu(self, mul: int) -> tuple[int, ...] | None:
        """gate/up linears, [silu], mul: the group ending at `mul`, or None."""
        layer = self.layers[mul]
        if layer.op != "mul" or len(set(layer.inputs)) != 2:
            return None
        shape = layer.output_shape
        if numel(shape) // max(shape[-1], 1) > SWIGLU_MAX_ROWS:
            return None
        a, b = (self.graph.producer(v) for v in layer.inputs)
        if a is None or b is None:
            return None
        for act_side, up in ((a, b), (b, a)):
            gate, silu = self._gate_of(act_side)
            if gate is None or not self._pairs(gate, up):
                continue
            members = {gate, up, mul} | ({silu} if silu is not None else set())
            for m in members - {mul}:
                readers = self.graph.consumers[m]
                inside = set(readers) <= members and m not in self.graph.outputs
                if not inside or m in self.taken or not self.same_kind(m, mul):
                    break
            else:
                return tuple(sorted(members))
        return None

    def _gate_of(self, i: int) -> tuple[int | None, int | None]:
        """(gate linear, its silu layer or None) when value i is silu(linear(h))."""
        if self.op(i) == "linear" and self.layers[i].params["activation"] == "silu":
            return i, None
        if self.op(i) == "silu":
            (producer,) = self.graph.producers[i]
            if producer is not None and self.op(producer) == "linear" and \
                    self.layers[producer].params["activation"] == "none":  # fmt: skip
                return producer, i
        return None, None

    def _pairs(self, gate: int, up: int) -> bool:
        """The two projections can share one GEMM: same input, width, quant, bias, no
        activation on up."""
        g, u = self.layers[gate], self.layers[up]
        return (u.op == "linear" and u.params["activation"] == "none" and g.inputs == u.inputs
                and g.params["quant"] in SWIGLU_QUANTS
                and g.params["out_features"] == u.params["out_features"]
                and g.params["quant"] == u.params["quant"]
                and g.params["bias"] == u.params["bias"])  # fmt: skip

    def linear_add(self, i: int) -> tuple[int, ...] | None:
        if self.op(i) != "linear" or self.layers[i].quant not in EPILOGUE_QUANTS:
            return None
        add = self.sole_reader(i)
        if add is None or not self.full_add(add) or not self.same_kind(i, add):
            return None
        return (i, add) if self.other_operand(add, i) is not None else None

    def linear_act(self, i: int) -> tuple[int, ...] | None:
        layer = self.layers[i]
        if layer.op != "linear" or layer.params["activation"] != "none" or \
                layer.quant not in EPILOGUE_QUANTS:  # fmt: skip
            return None
        act = self.sole_reader(i)
        if act is None or self.op(act) not in epilogue_ops() or not self.same_kind(i, act):
            return None
        if self.layers[act].params.get("approximate", "none") != "none":
            return None  # the GEMM epilogue has GELU's erf form only
        return (i, act)

    def linear_rope(self, i: int) -> tuple[int, ...] | None:
        """A plain projection whose only reader is a rope over its rows (rows or packed)."""
        layer = self.layers[i]
        if layer.op != "linear" or layer.params["activation"] != "none" or \
                layer.quant != "none" or layer.dtype not in ROPE_DTYPES:  # fmt: skip
            return None
        rope = self.sole_reader(i)
        if rope is None or self.op(rope) != "rope" or not self.same_kind(i, rope):
            return None
        params = self.layers[rope].params
        rows = numel(layer.output_shape) // max(layer.output_shape[-1], 1)
        any_rows = ROPE_HALF_ANY_ROWS and params["style"] == "half"
        if rows > ROPE_MAX_ROWS and not any_rows:
            return None  # interleaved prefill: the GEMM alone then the rope kernel (above)
        return (i, rope) if params["layout"] in ("rows", "packed") else None

    def rope_append(self, i: int) -> tuple[int, ...] | None:
        """rope on packed q | k | v whose only reader is the decode step's attention with the
        KV-cache append: the rope kernel writes k and v into the cache itself."""
        rope = self.layers[i]
        if rope.op != "rope" or rope.params["layout"] != "packed":
            return None
        attn = self.sole_reader(i)
        if attn is None or self.op(attn) != "attention" or not self.same_kind(i, attn):
            return None
        a, p = self.layers[attn].params, rope.params
        if not a["append"] or a["mask"] or (a["heads"], a["kv_heads"] or a["heads"]) != \
                (p["heads"], p["kv_heads"] or p["heads"]):  # fmt: skip
            return None
        return (i, attn)

    def add_norm(self, i: int) -> tuple[int, ...] | None:
        if not self.full_add(i):
            return None
        name = self.graph.names[i]
        for reader in self.graph.consumers[i]:
            norm = self.layers[reader]
            if norm.op in NORMS and reader not in self.taken and norm.inputs == (name,) and \
                    self.same_kind(i, reader):  # fmt: skip
                return (i, reader)
        return None

    # ---- the plan ----------------------------------------------------------------------------
    def plan(self) -> list[Fusion]:
        found: list[Fusion] = []
        passes = (("codes_input", self.codes_input), ("swiglu", self.swiglu), ("conv", self.conv),
                  ("linear_add", self.linear_add), ("linear_act", self.linear_act),
                  ("add_norm", self.add_norm), ("linear_rope", self.linear_rope),
                  ("rope_append", self.rope_append))  # fmt: skip
        for kind, pattern in passes:
            for i in self.graph.walk():
                if i in self.taken:
                    continue
                group = pattern(i)
                if group is not None and not self.taken & set(group):
                    assert self.graph.is_connected(group), (kind, group)
                    self.taken.update(group)
                    # The codes pass finds four kinds: named by their layers.
                    named = group_kind([self.layers[j] for j in group]) \
                        if kind == "codes_input" else kind  # fmt: skip
                    found.append(Fusion(named, group))
        found += [Fusion("single", (i,)) for i in self.graph.walk() if i not in self.taken]
        return sorted(found, key=lambda f: f.layers[0])


def plan_fusions(model: ModelSpec) -> list[Fusion]:
    """The model's fused groups and single layers, each once, ordered by first layer; every
    layer single unless the model sets `fuse: true`."""
    if not model.fuse:
        return [Fusion("single", (i,)) for i in range(len(model.layers))]
    return _Planner(model).plan()


def fusion_groups(model: ModelSpec) -> list[tuple[int, ...]]:
    """The groups as the backend protocol's `plan` returns them."""
    return [f.layers for f in plan_fusions(model)]


def group_kind(layers: Sequence[LayerSpec]) -> str:
    """The kind of a group from its layers alone (walk order), as `build` sees it."""
    ops = [layer.op for layer in layers]
    if len(ops) == 1:
        return "single"
    codes = _codes_kind(layers)
    if codes is not None:
        return codes
    if ops[0] == "conv2d":
        return "conv"
    if "mul" in ops:
        return "swiglu"
    if ops == ["linear", "rope"]:
        return "linear_rope"
    if ops[0] == "linear":
        return "linear_add" if ops[-1] == "add" else "linear_act"
    if ops[0] == "add" and ops[-1] in NORMS:
        return "add_norm"
    if ops == ["rope", "attention"]:
        return "rope_append"
    raise ValueError(f"no fused kernel for the group {' → '.join(ops)}")


def _codes_kind(layers: Sequence[LayerSpec]) -> str | None:
    """norm_<q> (a norm and its linears of quant q, fp8 or int8, one of them with a trailing
    add) or glu_<q> ([silu] → mul → such a linear [→ add]), else None."""
    if len(layers) > 2 and layers[-1].op == "add":
        layers = layers[:-1]  # the residual add of the one linear's epilogue
        if [la.op for la in layers].count("linear") != 1:
            return None
    *head, last = layers
    quant = last.quant
    if last.op != "linear" or quant not in CODE_QUANTS or not head:
        return None
    if head[0].op in NORMS and all(la.op == "linear" and la.quant == quant for la in head[1:]):
        return f"norm_{quant}"
    if head[-1].op == "mul" and len(head) <= 2:
        return f"glu_{quant}"
    return None
