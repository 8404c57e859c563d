"""Layer names from the torch module path of the nodes, readable and unique in the model.

Where the path comes from, in order:
1. a file written by `opbench export` names each layer's first node after the layer: kept as is;
2. the layer's weight, when its initializer is a parameter path (`layer1.0.conv1.weight`) that
   one node uses and that lies under the node's module: `layer1.0.conv1`. This is what names a
   conv the dynamo exporter fused with its batch norm (the node's metadata names the norm);
3. the node's module scope: the dynamo exporter's `pkg.torch.onnx.name_scopes` metadata (the
   module path, then the fx node's own name), or the older exporter's node path
   (`/layer1/layer1.0/conv1/Conv`). A layer that is everything its module computes is named
   after the module (`encoder.layers.encoder_layer_0.ln_1`); otherwise the fx name or op type is
   appended (`layer1.0.add`, `encoder.layers.encoder_layer_0.self_attention.scaled_dot_product_attention`);
4. the op and a number.
A repeated name gets `_2`, `_3`, … The ONNX node name of the layer's first node becomes its
`reference_name` (what an ONNX Runtime profile of the file calls it) unless it is the name.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_PLAIN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_GENERATED = re.compile(r"^(node_|n\d+$|_unnamed_|[A-Z][A-Za-z]*_\d+$)")
_PARAM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)[._](weight|bias)$")
_COUNTER = re.compile(r"_\d+$")
# Layers of a pattern that a function computes in its module's forward (Hugging Face's
# apply_rotary_pos_emb): the first node is a generic `mul`, so the op names the layer.
_NAMED_BY_OP = frozenset({"rope"})


@dataclass(frozen=True)
class NodeInfo:
    name: str
    op_type: str
    module: str | None  # the module path ("" at the top); None when unknown
    local: str  # the fx node's name, or the op type (older exporter)
    params: tuple[str, ...]  # initializer names it reads


def _legacy_module(name: str) -> tuple[str, str] | None:
    """'/layer1/layer1.0/conv1/Conv' → ('layer1.0.conv1', 'Conv'); None if not such a path."""
    if not name.startswith("/"):
        return None
    parts = [p for p in name.split("/") if p]
    if not parts:
        return None
    *scopes, last = parts
    path: list[str] = []
    raw: list[str] = []
    for part in scopes:
        # The exporter writes a child of a Sequential as its path under the Sequential:
        # /features/features.2/conv/conv.1/conv.1.0 is features.2.conv.1.0.
        if raw and part.startswith(raw[-1] + "."):
            path[-1] += part[len(raw[-1]) :]
            raw[-1] = part
        else:
            path.append(part)
            raw.append(part)
    return ".".join(path), _COUNTER.sub("", last)


def node_info(node, initializers: set[str]) -> NodeInfo:
    scopes = None
    for key, value in node.metadata_props.items():
        if key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = [str(s) for s in ast.literal_eval(value)]
            except (ValueError, SyntaxError):
                scopes = None
    params = tuple(v.name for v in node.inputs if v is not None and v.name in initializers)
    if scopes and len(scopes) >= 2:
        return NodeInfo(node.name, node.op_type, scopes[-2], _COUNTER.sub("", scopes[-1]), params)
    legacy = _legacy_module(node.name or "")
    if legacy is not None:
        return NodeInfo(node.name, node.op_type, legacy[0], legacy[1].lower(), params)
    return NodeInfo(node.name, node.op_type, None, node.op_type.lower(), params)


def _param_module(name: str) -> str | None:
    match = _PARAM.match(name)
    return match.group(1) if match else None


def _under(child: str, parent: str) -> bool:
    return not parent or child == parent or child.startswith(parent + ".")


@dataclass
class Namer:
    infos: dict[str, NodeInfo]
    param_users: Counter
    from_opbench: bool
    computed: set[str]  # nodes some layer computes (constants and views do not count)

    def module_nodes(self, module: str) -> set[str]:
        return {
            n
            for n, i in self.infos.items()
            if n in self.computed and i.module is not None and _under(i.module, module)
        }

    def base_name(self, op: str, nodes: Sequence[str], weights: Iterable[str]) -> str:
        first = self.infos.get(nodes[0]) if nodes else None
        if first is None:
            return op
        if self.from_opbench:  # the layer's nodes are '<layer>' and '<layer>/<OpType>[_k]'
            owner = first.name.split("/")[0]
            if _PLAIN.match(owner):
                return owner
        for param in weights:
            module = _param_module(param)
            if (
                module
                and self.param_users[param] == 1
                and (first.module is None or _under(first.module, module.rpartition(".")[0]))
            ):
                return module
        if first.module is not None and op in _NAMED_BY_OP:
            return f"{first.module}.{op}" if first.module else op
        if first.module is not None:
            last = first.module.rpartition(".")[2]
            if first.module and (
                self.module_nodes(first.module) <= set(nodes) or last == first.local
            ):
                return first.module
            return f"{first.module}.{first.local}" if first.module else first.local
        if _PLAIN.match(first.name) and not _GENERATED.match(first.name):
            return first.name
        return op


def assign(
    layers: Sequence,
    infos: dict[str, NodeInfo],
    param_users: Counter,
    from_opbench: bool,
    taken: set[str],
) -> list[tuple[str, str | None]]:
    """(name, reference_name) for each layer, in order."""
    computed = {n for layer in layers for n in layer.nodes}
    namer = Namer(infos, param_users, from_opbench, computed)
    used = set(taken)
    out = []
    for layer in layers:
        weights = [name for name, _ in layer.weights.values()]
        base = re.sub(r"[\s/]+", "_", namer.base_name(layer.op, layer.nodes, weights)).strip("_")
        base = base or layer.op
        name, k = base, 2
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        principal = layer.nodes[0] if layer.nodes else None
        out.append((name, principal if principal and principal != name else None))
    return out
