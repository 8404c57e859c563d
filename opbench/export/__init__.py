"""Suites as ONNX and back: export for other engines (ONNX Runtime, SAS), import as suites.

graph.py/onnx_ops.py write ONNX from a suite with its seeded data; files.py writes the
`opbench export onnx` folder; onnx_import/ reads an ONNX model into a suite; sas*.py write the
`opbench export sas` bundle and its script.
"""
