"""opbench: prove, layer by layer, that Triton kernels beat a reference engine."""

__version__ = "0.1.0"
