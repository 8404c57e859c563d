"""attention's reading of an ONNX node (ops/attention.py declares the nodes; its module is at
the length limit): ONNX's Attention (opset 23) and importers/onnx/rules.py's AttentionCore.

What is the op's: the forms it cannot be (present or past key/value, softcap) and the causal
flag a node says. What the importer reads from the graph (importers/onnx/attention.py): the
heads, kv_heads and packing of q, k and v (head splits, repeat_kv), a mask that is causal or a
key padding mask, and a scale that must be 1/sqrt(D).
"""

from __future__ import annotations

from opbench.ops.onnx_reading import ATTENTION, OnnxNode, OnnxReading, Refused


def read_attention(node: OnnxNode) -> OnnxReading:
    if node.op_type == "AttentionCore":  # q, kᵀ, v [, mask | keep, fill]
        return OnnxReading({}, ATTENTION, reads=(0, 1, 2))
    if any(o is not None for o in node.outputs[1:]):
        raise Refused("Attention with present key/value or score outputs")
    if any(x is not None for x in node.inputs[4:]):
        raise Refused("Attention with past key/value inputs")
    if node.attr("softcap", 0.0):
        raise Refused("Attention with softcap")
    params = {"causal": True} if node.attr("is_causal", 0) else {}
    return OnnxReading(params, ATTENTION, reads=(0, 1, 2))
