"""Reading an ONNX file for import: static shapes, shape arithmetic folded, patterns found.

1. `onnx_ir.load` (weights kept in external data files are read from beside the model), the
   file checked (file_checks.py: external data, opsets, dangling inputs, cycles) and every
   node given an identity of its own (`node_ids`);
2. symbolic input dims get values: the batch from `--batch`, others from `--dim NAME=N`;
3. onnxscript's constant folding with node-level ONNX shape inference
   (`FoldConstantsPass(shape_inference=True)`), then dead nodes removed: Shape/Gather/Concat
   arithmetic, masks built from Trilu/Where, weight transposes become constants, and every value
   gets a static shape. The default rewrite rules of `onnxscript.optimizer.optimize` are not
   run: they merge nodes under new names, and the layers must keep the file's node names;
4. rules.apply_rules.

Every node removed on the way is returned with its op type, so the import can account for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from opbench.errors import InputError

# Limits for constant folding: a weight transpose of a large model must still fold.
_FOLD_LIMIT = 1 << 31


@dataclass
class Loaded:
    model: object  # onnx_ir.Model
    folded: list[tuple[str, str]] = field(default_factory=list)  # (node, op type) folded away
    unused: list[tuple[str, str]] = field(default_factory=list)  # dead nodes removed
    node_count: int = 0
    node_names: list[str] = field(default_factory=list)
    symbols: dict[str, int] = field(default_factory=dict)  # symbolic dims and their values
    batch_symbol: str | None = None
    batch_axis: int | None = None  # where the batch symbol sits in the first input


def _data_inputs(model) -> list:
    initializers = set(model.graph.initializers)
    return [v for v in model.graph.inputs if v.name not in initializers]


def read(path: Path):
    """The checked model (file_checks.py), each node named by `node_ids`."""
    import logging

    from onnxscript import ir

    from opbench.importers.onnx.file_checks import check_file

    if not path.is_file():
        raise InputError(f"no such ONNX file: {path}")
    # onnx_ir warns of a node input it cannot find, then loads it anyway: check_file says so
    serde = logging.getLogger("onnx_ir.serde")
    level = serde.level
    serde.setLevel(logging.ERROR)
    try:
        model = ir.load(str(path))
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad input file
        raise InputError(f"{path}: not an ONNX model ({type(exc).__name__})") from None
    finally:
        serde.setLevel(level)
    nodes = list(model.graph)
    for node, name in zip(nodes, node_ids([(n.name, n.op_type) for n in nodes]), strict=True):
        node.name = name
    check_file(model, path)
    return model


def node_ids(nodes: list[tuple[str | None, str]]) -> list[str]:
    """The name each node of the file is known by in the import, from (name, op type) in the
    file's order: its own name where no earlier node has it, `_unnamed_<Op>_<i>` for a node
    without a name, `<name>#<i>` for a later node of a name already taken (i: its position).
    A node's identity is its position and its name: two nodes of one name are two layers, never
    one. reference/onnxruntime.py names ONNX Runtime's rows of a shared name the same way."""
    taken: set[str] = set()
    ids = []
    for i, (name, op_type) in enumerate(nodes):
        if not name:
            name = f"_unnamed_{op_type}_{i}"
        if name in taken:
            name = f"{name}#{i}"
        taken.add(name)
        ids.append(name)
    return ids


def small_constants_in_memory(model, limit: int = 1 << 16) -> None:
    """Constants kept in an external data file that shape inference needs to read (shapes,
    axes, scalars: every integer constant and every small one) are loaded into memory; large
    weights stay where they are until used."""
    from onnxscript import ir

    for value in model.graph.initializers.values():
        tensor = value.const_value
        if isinstance(tensor, ir.ExternalTensor) and (
            tensor.dtype.is_integer() or tensor.nbytes <= limit
        ):
            value.const_value = ir.Tensor(tensor.numpy(), name=tensor.name)


def fix_dims(model, batch: int | None, dims: Mapping[str, int], source: str) -> Loaded:
    """Give every symbolic input dim a value; the first input's first symbolic dim is the
    batch (`--batch`), any other needs `--dim NAME=N`."""
    from onnxscript import ir

    loaded = Loaded(model)
    inputs = _data_inputs(model)
    if not inputs:
        raise InputError(f"{source}: the graph has no data input")
    for value in inputs:
        if value.shape is None:
            raise InputError(f"{source}: graph input {value.name!r} has no shape")
        new = []
        for dim in value.shape:
            if isinstance(dim, int):
                new.append(dim)
                continue
            symbol = str(dim) if dim is not None and str(dim) else f"{value.name}[{len(new)}]"
            if symbol not in loaded.symbols:
                if symbol in dims:
                    loaded.symbols[symbol] = int(dims[symbol])
                elif loaded.batch_symbol is None and batch is not None:
                    loaded.symbols[symbol] = batch
                    loaded.batch_symbol = symbol
                    if value is inputs[0]:
                        loaded.batch_axis = len(new)
                elif loaded.batch_symbol is None:
                    raise InputError(
                        f"{source}: graph input {value.name!r} has a symbolic batch dimension "
                        f"{symbol!r}: give --batch N"
                    )
                else:
                    raise InputError(
                        f"{source}: graph input {value.name!r} has a symbolic dimension "
                        f"{symbol!r}: give --dim {symbol}=N"
                    )
            new.append(loaded.symbols[symbol])
        value.shape = ir.Shape(new)
    return loaded


def _fold_gather_elements(graph) -> None:
    """GatherElements of two constants (BERT's token-type ids: a buffer row taken at
    positions 0..S-1), folded with numpy: ONNX's reference evaluator, which onnxscript's
    folder calls, fails on it ("cannot reshape array of size 1 into shape (1,16)")."""
    import numpy as np
    from onnxscript import ir

    for node in list(graph):
        if node.domain or node.op_type != "GatherElements" or len(node.inputs) != 2:
            continue
        data, index = (v.const_value if v is not None else None for v in node.inputs)
        if data is None or index is None:
            continue
        axis_attr = node.attributes.get("axis")
        axis = int(axis_attr.value) if axis_attr is not None else 0
        array, idx = data.numpy(), index.numpy().astype(np.int64)
        idx = np.where(idx < 0, idx + array.shape[axis], idx)
        out = node.outputs[0]
        value = ir.Value(name=out.name, const_value=ir.Tensor(np.take_along_axis(array, idx, axis)))
        value.shape, value.type = ir.Shape(idx.shape), out.type
        graph.register_initializer(value)
        ir.convenience.replace_all_uses_with(out, value)
        if out in graph.outputs:
            continue
        graph.remove(node, safe=True)


def _quiet_folder(log: Callable[[str], None]):
    """onnxscript's folder warns through `logging` when it cannot evaluate a node; the user
    gets the node as unsupported with its reason instead, the message goes to the log."""
    import contextlib
    import logging

    class _ToLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            log(f"onnxscript constant folding: {record.getMessage()}")

    @contextlib.contextmanager
    def quiet():
        logger = logging.getLogger("onnxscript.optimizer._constant_folding")
        handler, propagate = _ToLog(), logger.propagate
        logger.addHandler(handler)
        logger.propagate = False
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.propagate = propagate

    return quiet()


def fold(loaded: Loaded, log: Callable[[str], None] = lambda _m: None) -> None:
    """Constant folding and shape inference (onnxscript), then dead nodes removed."""
    import onnx_ir.passes.common as common_passes
    from onnxscript.optimizer import _constant_folding

    model = loaded.model
    graph = model.graph
    before = {id(n): (n.name or f"#{i}", n.op_type) for i, n in enumerate(graph)}
    loaded.node_count = len(before)
    loaded.node_names = [name for name, _ in before.values()]
    # Shapes the exporter wrote may hold symbols that are now numbers: infer them again.
    inputs = {id(v) for v in graph.inputs}
    for node in graph:
        for out in node.outputs:
            if id(out) not in inputs and out.const_value is None:
                out.shape = None
    _fold_gather_elements(graph)
    with _quiet_folder(log):
        _constant_folding.FoldConstantsPass(
            shape_inference=True, input_size_limit=_FOLD_LIMIT, output_size_limit=_FOLD_LIMIT
        )(model)
    after_fold = {id(n) for n in graph}
    common_passes.RemoveUnusedNodesPass()(model)
    after = {id(n) for n in graph}
    for key, (name, op_type) in before.items():
        if key not in after_fold:
            loaded.folded.append((name, op_type))
        elif key not in after:
            loaded.unused.append((name, op_type))


def load(
    path: Path,
    *,
    batch: int | None,
    dims: Mapping[str, int],
    log: Callable[[str], None] = lambda _m: None,
) -> Loaded:
    from opbench.importers.onnx.rules import apply_rules

    model = read(path)
    small_constants_in_memory(model)
    loaded = fix_dims(model, batch, dims, str(path))
    try:
        fold(loaded, log)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model the folder cannot read is bad input
        raise InputError(f"{path}: constant folding failed ({type(exc).__name__}: {exc})") from None
    try:
        apply_rules(model, log)
    except Exception as exc:  # noqa: BLE001 - without the patterns, their nodes are listed
        log(f"onnxscript's rewriter failed ({type(exc).__name__}: {exc}); no pattern folded")
    return loaded
