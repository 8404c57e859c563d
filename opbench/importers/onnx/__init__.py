"""ONNX models in: the graph of suite layers an ONNX file computes (`opbench suite from-onnx`,
`opbench run model.onnx`).

    importer.py  import_onnx: the steps below, the batch axis, the result
    load.py      read, static shapes, onnxscript constant folding + shape inference
    rules.py     onnxscript rewrite rules: node groups that are one op (norms, GELU, SiLU,
                 linear + bias, rotary embedding, repeat_kv, the attention core), kept as
                 functions so no node is lost
    views.py     ONNX values as views of batch-first tensors (where the batch is)
    attention.py q, k, v head splits (repeat_kv read as kv heads), constant masks and scale
    masks.py     masks computed from a model input: the key padding mask, checked by evaluation
    walk.py      the walk's state; steps.py view nodes as layers where data moves
    dispatch.py  which op reads a node: the registry's (`Op.onnx_imports`, `Op.read_onnx`)
    layouts.py   the node described to the op; its reading placed (NCHW, rows, joins, ...)
    handlers*.py views, constants, placeholders; attention's and rope's placing, repeat_kv;
                 names.py layer names; model.py the result
    suite_yaml.py the suite file; as_suite.py the suite of `opbench run model.onnx`
    file_data.py the file's own weights and constants, ONNX Runtime's outputs

`import_onnx` tries the input's possible batch axes (a symbolic one first, then each dim) and
keeps the reading with the fewest unsupported nodes: the batch is the axis the graph carries
through without mixing it, which is how a sequence-first model is told from a batch-first one.
"""

from opbench.importers.onnx.importer import import_onnx

__all__ = ["import_onnx"]
