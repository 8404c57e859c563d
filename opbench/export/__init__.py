"""Suites out as files for other engines (ONNX Runtime, SAS).

graph.py/onnx_ops.py write ONNX from a suite with its seeded data; files.py writes the
`opbench export onnx` folder; sas*.py write the `opbench export sas` bundle and its script.
Reading an ONNX model into a suite is an input stage: opbench/importers/onnx.
"""
