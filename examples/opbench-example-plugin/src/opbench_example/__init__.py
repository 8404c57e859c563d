"""An example opbench plugin: Triton kernels for the built-in `rmsnorm` op and for a new
`swiglu` op, registered through the entry points in pyproject.toml."""

__version__ = "0.1.0"
