"""Every backend, in one explicit list. Names are known without importing torch;
the implementation module is imported only when a backend is used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opbench.backends.base import Backend

# name -> "module:attribute" of a zero-argument factory.
BACKENDS: dict[str, str] = {
    "torch": "opbench.backends.torch_eager:TorchEager",
    "torch-compile": "opbench.backends.torch_compile:TorchCompile",
    "torch-compile-max-autotune": "opbench.backends.torch_compile:TorchCompileMaxAutotune",
    "torch-int8": "opbench.backends.torch_int8:TorchInt8",
    "triton": "opbench.backends.triton:TritonBackend",
}

BACKEND_NAMES = tuple(BACKENDS)


def get_backend(name: str) -> Backend:
    module_name, attr = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), attr)()
