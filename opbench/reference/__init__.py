"""Reference timings: per-layer times exported by another engine, read into one schema.

A reader per format (sas, sas-prefix, onnxruntime, tensorrt, openvino, torch-profiler) turns
a file into a `ReferenceProfile` of `ReferenceTiming`s (model.py), all in milliseconds.
`registry.read_reference(path, format="auto", options)` is the entry point; `registry.detect`
tells the format from the file's first bytes. Pure Python: nothing here imports torch or
triton. reference_timings/README.md documents every accepted format.
"""
