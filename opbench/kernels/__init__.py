"""Triton kernels, one file per op family: `@triton.jit` kernels and their launchers.

Launchers take and return torch tensors. They allocate outputs, compute the grid
and launch; they never fall back to a torch computation. Build-time preparation
(quantizing weights, folding batchnorm) is done by small helpers in the same file
and happens before timing starts.
"""


class Unsupported(Exception):
    """Raised by a kernel's prepare function when it cannot run a configuration.

    The triton backend turns it into an `unsupported` result carrying this reason;
    nothing else ever runs the layer in its place.
    """
