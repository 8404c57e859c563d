"""torch.compile (Inductor) of the same layer as the eager backend.

Compilation happens at build, before timing, and its time is reported as tuning time.

Two things keep every layer really compiled. Dynamo keeps one cache per *code object*, with
a budget of 8 recompilations, and every layer's forward is a closure over the same code: so
each layer gets a copy of that code of its own, or the ninth layer of a suite would silently
run eager (seen on the H200: torch-compile times equal to eager's, and a "recompile_limit"
warning). And grad mode is part of Dynamo's guards, so it is set outside the compiled
function, never inside: the build's first call and the timed calls then hit one entry.
"""

from __future__ import annotations

import itertools
import time
import types
from collections.abc import Callable, Sequence

from opbench.backends.base import Built, Weights
from opbench.backends.torch_eager import TorchEager
from opbench.spec.model import LayerSpec

_copies = itertools.count()


def with_own_code(fn: Callable) -> Callable:
    """fn with a code object of its own (same body, closure and globals), so that Dynamo
    gives it a cache of its own."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{next(_copies)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


class TorchCompile(TorchEager):
    name = "torch-compile"
    compiler: str | Callable = "inductor"  # tests swap in a counting backend
    mode: str | None = None
    #: the mode of the whole-forward compile that is this backend's CUDA-graph figure
    graph_mode: str = "reduce-overhead"
    time_conv_layout = False  # see TorchEager

    def unavailable_reason(self, device: str) -> str | None:
        try:
            import torch._dynamo  # noqa: F401
        except Exception as exc:  # pragma: no cover - depends on the install
            return f"torch.compile is not usable: {exc}"
        return None

    def build(self, layers: Sequence[LayerSpec], weights: Sequence[Weights], device: str) -> Built:
        import torch

        eager = self.forward(layers, weights, device, static_weights=True)
        compiled = self.compile(eager.fn, self.mode)
        layer = layers[0]
        from opbench.backends.base import torch_dtype
        from opbench.ops.inputs import make_input

        probes = eager.prepared(
            [
                make_input(shape, 0).to(device=device, dtype=torch_dtype(layer.dtype))
                for shape in layer.input_shapes
            ]
        )
        start = time.perf_counter()
        compiled(*probes)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return Built(
            fn=compiled,
            prepare_input=eager.prepare_input,
            note=eager.note,
            tuning_s=time.perf_counter() - start,
        )

    def compile(self, fn: Callable, mode: str | None) -> Callable:
        """torch.compile of fn (a function: given a code of its own; an nn.Module: as it is,
        its generated forward is its own code already), static shapes, in `mode`, grad mode
        off."""
        import torch

        options = {"backend": self.compiler, "dynamic": False}
        if mode is not None:
            options["mode"] = mode
        target = fn if isinstance(fn, torch.nn.Module) else with_own_code(fn)
        return torch.no_grad()(torch.compile(target, **options))

    def compile_model(self, module: Callable, inputs: Sequence) -> Callable:
        """The whole model (an nn.Module whose weights are its parameters:
        backends/torch_model.py) compiled as a user compiles a model for CUDA graphs
        (`graph_mode`): the end-to-end `cuda_graph` figure of this backend. The inputs are
        marked static like the parameters: every mode times the same fixed inputs."""
        import torch

        for tensor in inputs:
            torch._dynamo.mark_static_address(tensor)
        return self.compile(module, self.graph_mode)


class TorchCompileMaxAutotune(TorchCompile):
    """mode="max-autotune": Inductor also benchmarks its Triton templates (GEMM, conv) against
    the vendor libraries and may capture CUDA graphs. Minutes of compilation per layer; the
    strongest torch peer a kernel can be held against."""

    name = "torch-compile-max-autotune"
    mode = "max-autotune"
    graph_mode = "max-autotune"  # which already captures CUDA graphs
