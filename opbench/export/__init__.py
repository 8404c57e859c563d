"""Suites out as files for other engines (ONNX Runtime, SAS).

graph.py writes ONNX from a suite with its seeded data, each layer's nodes written by its op
(`Op.to_onnx`, through onnx_ops.py's LayerScope); files.py writes the
`opbench export onnx` folder; sas*.py write the `opbench export sas` bundle and its script.
Reading an ONNX model into a suite is an input stage: opbench/importers/onnx.
"""
