"""Triton 3.6's interpreter patches `triton.language` once per launch (GridExecutor) and then
again at every call of a @triton.jit helper inside the kernel (InterpretedFunction.__call__),
program by program: `inspect.getmembers` over tl, tl.tensor and tl.math each time. Inside a
launch that already patched the same modules the second patching changes nothing (the members
it would wrap are wrapped already, the rest is set to the same values), yet it was about a
quarter of the interpreter's time in the kernels with helpers (row quantizers, norms, the
split-K GEMM's epilogue).

`install()` skips only that repeated patching: a helper called inside a launch that has
already patched the language modules its module reads (the kernel's own, or those an earlier
helper patched: Triton never undoes a helper's patching) runs as Triton runs it, minus the
re-patch.
Anywhere else (a helper called outside a launch, another Triton release) Triton's own code
runs unchanged."""

from __future__ import annotations

import inspect

import triton


def install() -> None:
    if not triton.__version__.startswith("3.6."):
        return
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    grid_class = getattr(interpreter, "GridExecutor", None)
    helper_class = getattr(interpreter, "InterpretedFunction", None)
    if grid_class is None or helper_class is None or getattr(grid_class, "_opbench_fast", False):
        return
    lang = interpreter.tl
    modules = (lang, lang.core)
    launch, helper = grid_class.__call__, helper_class.__call__
    patched: list[set[int]] = []  # the language modules each running launch has patched
    langs: dict[int, frozenset[int]] = {}

    def langs_of(fn) -> frozenset[int]:
        key = id(fn.__globals__)
        if key not in langs:
            values = fn.__globals__.values()
            langs[key] = frozenset(id(v) for v in values if inspect.ismodule(v) and v in modules)
        return langs[key]

    def launch_tracked(self, *args, **kwargs):
        patched.append(set(langs_of(self.fn)))
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    def helper_unpatched(self, *args, **kwargs):
        if not patched:
            return helper(self, *args, **kwargs)
        if not langs_of(self.fn) <= patched[-1]:
            # e.g. tl.sum, whose module reads `core`: patched here as Triton does (and, as in
            # Triton, left patched for the rest of the launch), once per launch
            patched[-1] |= langs_of(self.fn)
            return helper(self, *args, **kwargs)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    grid_class.__call__ = launch_tracked
    helper_class.__call__ = helper_unpatched
    grid_class._opbench_fast = True
