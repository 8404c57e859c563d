"""`opbench suite from-onnx`: walk an ONNX graph into suite layers, write and check the suite YAML.

`read_chain` walks the nodes in order (readers in from_onnx.py). `write_suite` writes the YAML
to a temporary file, loads it with the suite loader and checks that every layer's input and
output shape equal ONNX shape inference's before putting it in place; so a suite that is
written always validates and has the model's shapes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from opbench.errors import ExitCode, InputError, OpbenchError
from opbench.export.from_onnx import (
    _ACTIVATIONS,
    _READERS,
    Chain,
    Draft,
    Unsupported,
    _eps,
    _flatten,
    _Graph,
    layer_name,
)

_FOLDS_INTO = ("conv2d", "linear")


def _silu_mul(g: _Graph, sigmoid: Any, x: str) -> Any:
    for node in g.consumers(sigmoid.output[0]):
        if node.op_type == "Mul" and set(node.input) == {x, sigmoid.output[0]}:
            return node
    raise ValueError("a Sigmoid alone is not a suite op (Sigmoid·Mul is silu)")


def _bias_add(g: _Graph, matmul: Any) -> Any | None:
    users = g.consumers(matmul.output[0])
    if len(users) == 1 and users[0].op_type == "Add":
        other = [i for i in users[0].input if i != matmul.output[0]]
        if len(other) == 1 and getattr(g.constants.get(other[0]), "ndim", 0) == 1:
            return users[0]
    return None


def _only_user(g: _Graph, node: Any, op_type: str) -> Any:
    users = g.consumers(node.output[0])
    if len(users) != 1 or users[0].op_type != op_type:
        raise ValueError(f"not followed by {op_type} alone")
    return users[0]


def _attention(g: _Graph, node: Any, x: str) -> tuple[str, dict[str, Any], list[Any]]:
    """Attention(q, k, v) with q = k = v = x, or on Split(x) into three (packed q|k|v)."""
    attention, extra, packed = node, [], False
    if node.op_type == "Split":
        if len(node.output) != 3:
            raise ValueError("a Split is a suite op only as packed q|k|v before Attention")
        attention = _only_user(g, node, "Attention")
        if list(attention.input[:3]) != list(node.output) or len(attention.input) > 3:
            raise ValueError("a Split is a suite op only as packed q|k|v before Attention")
        extra, packed = [attention], True
    elif list(node.input) != [x, x, x]:
        raise ValueError("only self-attention (q = k = v) without a mask is a suite op")
    a = g.attrs(attention)
    heads = int(a.get("q_num_heads", 0))
    if not heads or int(a.get("kv_num_heads", heads)) != heads or "scale" in a:
        raise ValueError("only 3-D Attention with q_num_heads = kv_num_heads, default scale")
    params = {"heads": heads, "causal": bool(a.get("is_causal", 0)), "packed_qkv": packed}
    return "attention", params, extra


def _rmsnorm(g: _Graph, square: Any, x: str) -> tuple[str, dict[str, Any], list[Any]]:
    """x / sqrt(mean(x·x over the last axis) + eps) · w, as `opbench export` writes rmsnorm."""
    try:
        mean = _only_user(g, square, "ReduceMean")
        add = _only_user(g, mean, "Add")
        root = _only_user(g, add, "Sqrt")
        div = _only_user(g, root, "Div")
        scale = _only_user(g, div, "Mul")
    except ValueError:
        raise ValueError("x·x is a suite op only as the start of an RMS norm") from None
    eps = [g.constants[i] for i in add.input if i in g.constants]
    if list(div.input) != [x, root.output[0]] or len(eps) != 1:
        raise ValueError("x·x is a suite op only as the start of an RMS norm")
    return (
        "rmsnorm",
        {"eps": _eps({"epsilon": float(eps[0].reshape(-1)[0])})},
        [mean, add, root, div, scale],
    )


def _recognise(g: _Graph, node: Any, x: str, in_shape) -> tuple[str, dict[str, Any], list[Any]]:
    """(suite op, parameters, nodes it covers beyond `node`), or ValueError saying why not."""
    op_type = node.op_type
    if op_type in _ACTIVATIONS:
        approximate = g.attrs(node).get("approximate", b"none")
        if approximate not in (b"none", "none"):
            raise ValueError("Gelu with the tanh approximation is not supported")
        return _ACTIVATIONS[op_type], {}, []
    if op_type == "Sigmoid":
        return "silu", {}, [_silu_mul(g, node, x)]
    if op_type == "Split" or op_type == "Attention":
        return _attention(g, node, x)
    if op_type == "Mul" and list(node.input) == [x, x]:
        return _rmsnorm(g, node, x)
    if op_type in ("Flatten", "Reshape"):
        out_shape = g.shape(node.output[0])
        if out_shape is None:
            raise ValueError("its output shape is unknown")
        op, params = _flatten(g, node, in_shape, out_shape)
        return op, params, []
    reader = _READERS.get(op_type)
    if reader is None:
        raise ValueError("not a supported op")
    op, params = reader(g, node, in_shape)
    if op_type == "MatMul":
        add = _bias_add(g, node)
        if add is not None:
            return op, params | {"bias": True}, [add]
    return op, params, []


def read_chain(proto: Any, *, batch: int | None = None, skip_unsupported: bool = False) -> Chain:
    """The model's chain of supported nodes; unsupported nodes and branches are listed."""
    g = _Graph(proto, batch)
    chain = Chain(graph_name=proto.graph.name, batch=g.batch)
    current = g.input
    covered: set[int] = set()
    gap = False
    used: set[str] = set()
    for index, node in enumerate(g.nodes):
        if id(node) in covered or all(out in g.constants for out in node.output):
            continue  # covered by a pattern, or a node that only makes constants
        data = g.data_inputs(node)

        def left_out(reason: str, node: Any = node, index: int = index) -> None:
            nonlocal current, gap
            chain.unsupported.append(Unsupported(node.name or f"#{index}", node.op_type, reason))
            chain.comments.append(
                (len(chain.layers), f"skipped: {node.name} ({node.op_type}): {reason}")
            )
            if len(node.output) == 1:
                current, gap = node.output[0], True

        if len(data) != 1:
            left_out(f"takes {len(data)} data inputs (a branch or a join)")
            continue
        x = data[0]
        if x in g.inputs and x != current:
            gap = True  # a graph input: a chain of its own
        if x != current and not gap:
            if not skip_unsupported:
                left_out("a branch: its input is not the previous layer's output")
                continue
            gap = True
        in_shape = g.shape(x)
        if in_shape is None:
            left_out("its input shape is unknown after shape inference")
            continue
        try:
            op, params, extra = _recognise(g, node, x, in_shape)
        except (ValueError, KeyError) as exc:
            left_out(str(exc) or "not a supported op")
            continue
        last_node = extra[-1] if extra else node
        out_shape = g.shape(last_node.output[0])
        if out_shape is None:
            left_out("its output shape is unknown after shape inference")
            continue
        covered.update(id(n) for n in extra)
        current = last_node.output[0]
        previous = chain.layers[-1] if chain.layers else None
        if (
            previous is not None
            and not gap
            and op in ("relu", "gelu", "silu")
            and previous.op in _FOLDS_INTO
            and previous.params.get("activation", "none") == "none"
            and node.name.startswith(f"{previous.reference_name or previous.name}/")
        ):
            chain.layers[-1] = dataclasses.replace(
                previous, params=previous.params | {"activation": op}, output_shape=out_shape
            )
            continue
        name, reference = layer_name(node, index)
        base, k = name, 2
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        chain.layers.append(
            Draft(name, op, params, in_shape, out_shape, gap or not chain.layers, reference)
        )
        gap = False
    return chain


def _flow(mapping: dict[str, Any]) -> str:
    return yaml.safe_dump(mapping, default_flow_style=True, sort_keys=False, width=1000).strip()


def suite_yaml(chain: Chain, suite_name: str, model_name: str, source: str, dtype: str) -> str:
    if not chain.layers:
        raise InputError(f"{source}: no supported node to make a layer of")
    first = chain.layers[0]
    lines = [
        f"# Written by `opbench suite from-onnx` from {source}: one layer per supported node.",
        f"name: {suite_name}",
        "defaults:",
        f"  dtype: {dtype}",
        "  backends: [torch, triton]",
        "models:",
        f"  - name: {model_name}",
        f"    batch: {chain.batch}",
        f"    input: {_flow(list(first.input_shape[1:]))}",
        "    layers:",
    ]
    comments: dict[int, list[str]] = {}
    for position, text in chain.comments:
        comments.setdefault(position, []).append(text)
    for i, layer in enumerate(chain.layers):
        lines.extend(f"      # {text}" for text in comments.get(i, []))
        entry: dict[str, Any] = {"name": layer.name, "op": layer.op, **layer.params}
        if layer.fresh_input and i:
            entry["input"] = list(layer.input_shape[1:])
        if layer.reference_name:
            entry["reference_name"] = layer.reference_name
        lines.append(f"      - {_flow(entry)}")
    lines.extend(f"      # {text}" for text in comments.get(len(chain.layers), []))
    return "\n".join(lines) + "\n"


def portable_name(text: str, fallback: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or fallback


def write_suite(chain: Chain, out: Path, text: str) -> Any:
    """Validate the YAML (loader + shapes) in a temporary file, then move it to OUT."""
    from opbench.spec.load import load_suite

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=".yaml", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        suite = load_suite(Path(tmp))
        model = suite.models[0]
        for draft, layer in zip(chain.layers, model.layers, strict=True):
            if (layer.input_shape, layer.output_shape) != (draft.input_shape, draft.output_shape):
                raise OpbenchError(
                    f"layer {draft.name!r}: the suite gives {list(layer.input_shape)} → "
                    f"{list(layer.output_shape)}, ONNX shape inference "
                    f"{list(draft.input_shape)} → {list(draft.output_shape)}",
                    exit_code=ExitCode.BAD_INPUT,
                )
        os.replace(tmp, out)
        return suite
    finally:
        Path(tmp).unlink(missing_ok=True)
