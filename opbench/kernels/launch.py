"""Bind once, launch at the driver's floor: the one launch path of every kernel family.

A family's `bind_*` function does the once-per-input work: it checks the input, allocates
the output and any workspace, chooses a configuration (`tuning.choose`), and fixes the grid,
every argument and every constexpr of each kernel it runs, as a `KernelCall`. Fixing them
lets the call skip what Triton's JIT dispatcher does on every launch (binding and
specialising each argument, hashing the options, looking the compiled kernel up; tens of
microseconds of Python): a `KernelCall` fetches the compiled kernel once and then calls its
own launcher, `CompiledKernel.run(grid0, grid1, grid2, stream, function, packed_metadata,
launch_metadata, enter_hook, exit_hook, *args)`, the same call Triton 3.6's
`JITFunction.run` ends with. The stream is read on every launch (a CUDA-graph capture runs on
its own stream); nothing else is.

Under TRITON_INTERPRET=1 there is no compiled kernel: a `KernelCall` calls the JIT function
with the same fixed arguments, so CPU tests run the same bind path and produce the same
outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from opbench.kernels.host import INTERPRET
from opbench.kernels.tuning import Choice, Config, is_precompiling


def _never_launched() -> None:
    raise RuntimeError("a KernelCall made to precompile was launched")


class KernelCall:
    """One launch of one `@triton.jit` kernel with grid, arguments and options fixed.

    args: the leading positional arguments; named: the remaining parameters by name
    (constexprs and any others); options: num_warps, num_stages, maxnreg.
    Compiling happens here (at bind), so a configuration that does not fit the GPU (shared
    memory, registers) raises here, not in the timed call.
    """

    __slots__ = ("kernel", "grid", "args", "named", "options", "call")

    def __init__(
        self,
        kernel: Any,
        grid: Sequence[int],
        args: Sequence[Any],
        named: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> None:
        self.kernel = kernel
        self.grid = (*grid, 1, 1, 1)[:3]
        self.args = tuple(args)
        self.named = dict(named)
        self.options = dict(options)
        if is_precompiling() and not INTERPRET:  # only start the compile: tuning.precompile
            self.kernel.warmup(*self.args, grid=self.grid, **self.named, **self.options)
            self.call: Callable[[], None] = _never_launched
            return
        self.call = self._jit_call if INTERPRET else self._compiled_call()

    def _jit_call(self) -> None:
        """Through the JIT function (the interpreter's path; also the unbound reference)."""
        self.kernel[self.grid](*self.args, **self.named, **self.options)

    def _compiled_call(self) -> Callable[[], None]:
        from triton import knobs
        from triton.runtime.driver import driver

        compiled = self.kernel.warmup(*self.args, grid=self.grid, **self.named, **self.options)
        if hasattr(compiled, "result"):  # an asynchronous compile
            compiled = compiled.result()
        run = compiled.run  # loads the module; raises OutOfResources for a config too large
        function, packed = compiled.function, compiled.packed_metadata
        full_args = signature_args(self.kernel.arg_names, self.args, self.named)
        grid0, grid1, grid2 = self.grid
        device = torch.cuda.current_device()
        current_stream = driver.active.get_current_stream
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        if enter.calls or leave.calls:  # a profiler listens: give it what the JIT path gives

            def call() -> None:
                stream = current_stream(device)
                metadata = compiled.launch_metadata(self.grid, stream, *full_args)
                run(grid0, grid1, grid2, stream, function, packed, metadata, enter, leave,
                    *full_args)  # fmt: skip

            return call

        def call() -> None:
            run(grid0, grid1, grid2, current_stream(device), function, packed, None, None, None,
                *full_args)  # fmt: skip

        return call


def signature_args(names: Sequence[str], args: Sequence[Any], named: Mapping[str, Any]) -> list:
    """Every parameter of the kernel in signature order, constexprs included: the argument
    list a compiled kernel's launcher takes (it skips the constexprs itself)."""
    missing = [name for name in names[len(args) :] if name not in named]
    if missing:
        raise TypeError(f"kernel arguments missing: {missing}")
    return [*args, *(named[name] for name in names[len(args) :])]


def config_call(
    kernel: Any, grid: Sequence[int], args: Sequence[Any], named: Mapping[str, Any], config: Config
) -> KernelCall:
    """A KernelCall whose constexprs are `named` plus the configuration's meta-parameters
    that are kernel parameters (a config may also carry host-side choices)."""
    params = set(kernel.arg_names)
    meta = {k: v for k, v in config.meta if k in params}
    return KernelCall(kernel, grid, args, {**named, **meta}, config.options())


def sequence(calls: Sequence[KernelCall], out: torch.Tensor) -> Callable[[], torch.Tensor]:
    """One zero-argument launcher running `calls` in order and returning `out`. Unrolled for
    one and two calls so the timed call does the least Python possible."""
    fns = tuple(c.call for c in calls)
    if len(fns) == 1:
        (only,) = fns

        def launch_one() -> torch.Tensor:
            only()
            return out

        return launch_one
    if len(fns) == 2:
        first, second = fns

        def launch_two() -> torch.Tensor:
            first()
            second()
            return out

        return launch_two

    def launch_all() -> torch.Tensor:
        for fn in fns:
            fn()
        return out

    return launch_all


def no_launch(out: torch.Tensor) -> Callable[[], torch.Tensor]:
    """For an empty tensor: nothing to compute."""
    return lambda: out


@dataclass(frozen=True)
class BoundKernels:
    """A layer bound to one input.

    launch: runs every kernel on the bound tensors and returns `out`; the timed call.
    out: the output buffer, allocated (or checked) at bind and written by every launch.
    choices: the configuration each kernel runs with, for the result's `plan`.
    calls: the kernel launches `launch` runs, in order.
    keep: tensors the launches use that nothing else holds (workspace, the input's views).
    extra: further outputs the same launches write (add → norm's sum), fixed at bind like out.
    """

    launch: Callable[[], torch.Tensor]
    out: torch.Tensor
    choices: tuple[Choice, ...] = ()
    calls: tuple[KernelCall, ...] = ()
    keep: tuple[Any, ...] = field(default=(), repr=False)
    extra: tuple[torch.Tensor, ...] = ()

    @staticmethod
    def of(
        calls: Sequence[KernelCall],
        out: torch.Tensor,
        choices: Sequence[Choice] = (),
        keep: Sequence[Any] = (),
        extra: Sequence[torch.Tensor] = (),
    ) -> BoundKernels:
        launch = sequence(calls, out) if calls else no_launch(out)
        return BoundKernels(launch, out, tuple(choices), tuple(calls), tuple(keep), tuple(extra))

    def plan(self) -> dict:
        """The JSON-able plan: one record per chosen kernel configuration."""
        return {"choices": [c.to_json() for c in self.choices]}


def tuned_call(
    name: str,
    kernel: Any,
    key: str,
    candidates: Sequence[Config],
    grid: Callable[[Config], Sequence[int]],
    args: Sequence[Any],
    named: Mapping[str, Any],
    device: Any,
    config: Config | None = None,
) -> tuple[KernelCall, Choice]:
    """The KernelCall of `kernel` with the configuration `tuning.choose` picks among
    `candidates` (or `config`, when the caller forces one), and that choice."""

    def make(cfg: Config) -> KernelCall:
        return config_call(kernel, grid(cfg), args, named, cfg)

    return chosen_call(name, key, make, candidates, device, config)


def chosen_call(
    name: str,
    key: str,
    make: Callable[[Config], KernelCall],
    candidates: Sequence[Config],
    device: Any,
    config: Config | None = None,
) -> tuple[KernelCall, Choice]:
    """The KernelCall `make` builds for the configuration `tuning.choose` picks among
    `candidates` (or `config`, when the caller forces one: recorded as "forced", nothing
    timed), and that choice. For launchers whose call is more than `config_call`."""
    if config is not None:
        from opbench.kernels.tuning import device_tag

        choice = Choice(name, key, device_tag(device), config, "forced")
    else:
        from opbench.kernels.tuning import choose

        choice = choose(name, key, candidates, device, lambda cfg: make(cfg).call)
    return make(choice.config), choice


def quantized_choice(
    name: str,
    key: str,
    quantize: Sequence[KernelCall],
    make: Callable[[Config], KernelCall],
    candidates: Sequence[Config],
    device: Any,
    config: Config | None = None,
) -> tuple[list[KernelCall], Choice]:
    """A quantized path's calls: its bound quantization passes, then the kernel `chosen_call`
    picks. The passes run once first, since the candidates read what they write while they
    are timed (not when `config` is forced or under the interpreter: nothing is timed)."""
    if config is None and not INTERPRET:
        for call in quantize:
            call.call()
    call, choice = chosen_call(name, key, make, candidates, device, config)
    return [*quantize, call], choice


def by_kernel(
    kernel: str,
    make_kernel: Callable[[Config], KernelCall],
    make_other: Callable[[Config], KernelCall],
) -> Callable[[Config], KernelCall]:
    """One `make` over two kernels' candidates: `make_kernel` for configs whose KERNEL is
    `kernel`, `make_other` for the rest."""
    return lambda cfg: make_kernel(cfg) if cfg["KERNEL"] == kernel else make_other(cfg)
