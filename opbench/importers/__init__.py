"""Input stages that turn a model file into suite layers, beside the suite loader (spec/load).

onnx/ reads an ONNX model into the layers of a suite. An importer may use spec/ and ops/ (what a
layer is); it never imports pipeline/, backends/ or export/ (tests/unit/architecture).
"""
