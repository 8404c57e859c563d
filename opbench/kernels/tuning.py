"""The one way kernels choose a configuration, with one on-disk plan cache.

A family lists its candidate configurations for an input (`Config`: meta-parameters, warps,
stages) and a key naming everything the choice depends on (shape, dtype, strides ...).
`choose` then returns, in this order:

1. the plan a run was asked to reuse (`reuse`, from `opbench run --plans`), when it was
   recorded for the same kernel, key and GPU; when it no longer fits (another GPU, another
   shape) it warns and tunes again;
2. the only candidate, and under the CPU interpreter always the first: nothing is timed;
3. the choice this process or an earlier one made (memory, then the JSON cache
   $OPBENCH_CACHE_DIR/plans.json, default ~/.cache/opbench);
4. the plan the package ships for this GPU model (`shipped_plans.py`; off when
   OPBENCH_NO_SHIPPED_PLANS=1, as when `opbench plans tune` regenerates the tables);
5. a tuned choice: every candidate is compiled and timed over several samples, each after an
   L2 flush (`triton.testing.do_bench`, median), then the best two are timed again over more
   samples and the faster median wins. Candidates that fail to compile are skipped.

What was chosen, and how, is a `Choice`; a bound layer reports its choices as its plan.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from opbench.kernels.shipped_plans import lookup

INTERPRETER_TAG = "interpreter"
# Set to 1 to ignore the package's shipped plans (regenerating them, or measuring tuning).
NO_SHIPPED_ENV = "OPBENCH_NO_SHIPPED_PLANS"
# Samples per candidate: do_bench's rep budget in ms (each sample follows an L2 flush).
FIRST_ROUND_MS, FINAL_ROUND_MS = 20, 100


class PlanMismatch(UserWarning):
    """A reused plan was recorded for another kernel key or GPU: the kernel is tuned again."""


@dataclass(frozen=True)
class Config:
    """One configuration of a kernel: meta-parameters (constexprs and host-side choices,
    sorted by name) and launch options."""

    meta: tuple[tuple[str, Any], ...]
    num_warps: int = 4
    num_stages: int = 3
    maxnreg: int | None = None

    @staticmethod
    def of(num_warps: int = 4, num_stages: int = 3, maxnreg: int | None = None, **meta) -> Config:
        return Config(tuple(sorted(meta.items())), num_warps, num_stages, maxnreg)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.meta)

    def __getitem__(self, name: str) -> Any:
        return self.kwargs[name]

    def with_meta(self, **changes: Any) -> Config:
        return replace(self, meta=tuple(sorted({**self.kwargs, **changes}.items())))

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.maxnreg is not None:
            options["maxnreg"] = self.maxnreg
        return options

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages,
                "maxnreg": self.maxnreg}  # fmt: skip

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Config:
        return Config.of(
            num_warps=int(data["num_warps"]),
            num_stages=int(data["num_stages"]),
            maxnreg=data.get("maxnreg"),
            **dict(data["meta"]),
        )


@dataclass(frozen=True)
class Choice:
    """What one kernel of a bound layer runs with, and where that came from.

    source: "fixed" (one candidate, or the interpreter), "tuned", "cache" (an earlier
    process's tuning), "reused" (a plan handed in), "retuned" (a plan handed in that did not
    fit; `note` says why).
    """

    kernel: str
    key: str
    device: str
    config: Config
    source: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        record = {"kernel": self.kernel, "key": self.key, "device": self.device,
                  "config": self.config.to_json(), "source": self.source}  # fmt: skip
        if self.note:
            record["note"] = self.note
        return record


@dataclass
class _Reuse:
    """Plans handed in for the layer being built: consumed in order, per kernel name."""

    records: list[Mapping[str, Any]]
    used: set[int] = field(default_factory=set)

    def take(self, kernel: str) -> Mapping[str, Any] | None:
        for i, record in enumerate(self.records):
            if i not in self.used and record.get("kernel") == kernel:
                self.used.add(i)
                return record
        # The layer binds again (the check's second input, same shape): the same plan holds.
        used = [self.records[i] for i in sorted(self.used)]
        return next((r for r in reversed(used) if r.get("kernel") == kernel), None)


_REUSE: contextvars.ContextVar[_Reuse | None] = contextvars.ContextVar(
    "opbench_reuse", default=None
)
_MEMORY: dict[str, Config] = {}
_DISK: dict[str, Any] | None = None
TUNING_SECONDS = [0.0]
# How many `_tune` calls are under way (a candidate's set-up may tune a nested kernel).
_TUNING_DEPTH = [0]


@contextlib.contextmanager
def reuse(plan: Mapping[str, Any] | None) -> Iterator[None]:
    """Within the block, `choose` takes its configurations from `plan` (a recorded
    `{"choices": [...]}`) where they fit."""
    records = list((plan or {}).get("choices", []))
    token = _REUSE.set(_Reuse(records) if records else None)
    try:
        yield
    finally:
        _REUSE.reset(token)


def device_tag(device: Any) -> str:
    """What a plan is valid on: the GPU model, its compute capability and the Triton version."""
    from opbench.kernels.host import INTERPRET

    if INTERPRET:
        return INTERPRETER_TAG
    import torch
    import triton

    props = torch.cuda.get_device_properties(device)
    return f"{props.name}|sm{props.major}{props.minor}|triton-{triton.__version__}"


def choose(
    kernel: str,
    key: str,
    candidates: Sequence[Config],
    device: Any,
    make_call: Callable[[Config], Callable[[], None]] | None = None,
) -> Choice:
    """The configuration `kernel` runs with for `key` (see the module docstring).

    make_call: a config -> a ready zero-argument launch on the bound tensors (compiling it);
    needed only when there is something to time.
    """
    if not candidates:
        raise ValueError(f"{kernel}: no candidate configuration")
    tag = device_tag(device)
    source, note = "fixed", ""
    hint = _REUSE.get()
    record = hint.take(kernel) if hint is not None else None
    if record is not None:
        if record.get("key") == key and record.get("device") == tag:
            config = Config.from_json(record["config"])
            _MEMORY[f"{tag}|{kernel}|{key}"] = config
            return Choice(kernel, key, tag, config, "reused")
        note = (f"plan recorded for {record.get('key')} on {record.get('device')}; "
                f"now {key} on {tag}")  # fmt: skip
        warnings.warn(f"{kernel}: {note}: tuning again", PlanMismatch, stacklevel=2)
        source = "retuned"
    if len(candidates) == 1 or tag == INTERPRETER_TAG:
        return Choice(kernel, key, tag, candidates[0], source, note)
    if is_precompiling():  # a nested choice while another kernel precompiles: nothing is timed
        return Choice(kernel, key, tag, candidates[0], "fixed", "precompile only")
    full_key = f"{tag}|{kernel}|{key}"
    if full_key in _MEMORY and not note:
        return Choice(kernel, key, tag, _MEMORY[full_key], "cache")
    cached = _disk().get(full_key)
    if cached is not None and not note:
        config = Config.from_json(cached["config"])
        _MEMORY[full_key] = config
        return Choice(kernel, key, tag, config, "cache")
    shipped = None if note or os.environ.get(NO_SHIPPED_ENV) == "1" else lookup(tag, kernel, key)
    if shipped is not None:
        config = Config.from_json(shipped["config"])
        _MEMORY[full_key] = config
        return Choice(kernel, key, tag, config, "shipped")
    if make_call is None:
        raise ValueError(f"{kernel}: {len(candidates)} candidates and no way to time them")
    config, timings = _tune(kernel, candidates, make_call)
    _MEMORY[full_key] = config
    _remember(full_key, config, timings)
    return Choice(kernel, key, tag, config, source if note else "tuned", note)


def _tune(
    kernel: str, candidates: Sequence[Config], make_call: Callable[[Config], Callable[[], None]]
) -> tuple[Config, list[dict]]:
    from triton.testing import do_bench

    start = time.perf_counter()
    _TUNING_DEPTH[0] += 1
    try:
        return _time_candidates(kernel, candidates, make_call, do_bench)
    finally:
        _TUNING_DEPTH[0] -= 1
        if _TUNING_DEPTH[0] == 0:
            # Only the outermost tuning counts: a candidate whose set-up tunes a kernel of its
            # own (a fused group's) would otherwise book that time twice.
            TUNING_SECONDS[0] += time.perf_counter() - start


def _time_candidates(
    kernel: str,
    candidates: Sequence[Config],
    make_call: Callable[[Config], Callable[[], None]],
    do_bench: Callable[..., Any],
) -> tuple[Config, list[dict]]:
    precompile(candidates, make_call)
    timings: list[dict] = []
    ranked: list[tuple[float, int, Callable[[], None]]] = []
    for i, config in enumerate(candidates):
        try:
            call = make_call(config)
            ms = float(do_bench(call, warmup=5, rep=FIRST_ROUND_MS, return_mode="median"))
        except Exception as err:  # a config the compiler or the GPU rejects (shared memory ...)
            timings.append(
                {"config": config.to_json(), "error": f"{type(err).__name__}: {err}"[:200]}
            )
            continue
        timings.append({"config": config.to_json(), "ms": ms})
        ranked.append((ms, i, call))
    if not ranked:
        raise RuntimeError(f"no {kernel} configuration ran: {timings[0].get('error')}")
    ranked.sort(key=lambda item: item[:2])
    # Timing noise decides between near-equal candidates: the best two are timed again over
    # a longer run, and that run picks.
    finals = [(float(do_bench(call, warmup=10, rep=FINAL_ROUND_MS, return_mode="median")), i)
              for _, i, call in ranked[:2]]  # fmt: skip
    best = min(finals)[1]
    for ms, i in finals:
        timings[i]["final_ms"] = ms
    return candidates[best], timings


# Set by `precompile` while Triton compiles every candidate in parallel: a KernelCall made then
# (kernels/launch.py) only starts its compile (JITFunction.warmup under Triton's
# AsyncCompileMode) and can never launch; a nested `choose` times nothing.
_PRECOMPILING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "opbench_precompiling", default=False
)


@contextlib.contextmanager
def precompiling() -> Iterator[None]:
    token = _PRECOMPILING.set(True)
    try:
        yield
    finally:
        _PRECOMPILING.reset(token)


def is_precompiling() -> bool:
    return _PRECOMPILING.get()


def precompile(
    candidates: Sequence[Config], make_call: Callable[[Config], Callable[[], None]]
) -> None:
    """Compile every candidate at once, on a pool of threads (Triton's AsyncCompileMode): a
    conv's shapes are compile-time constants, so each candidate of each new shape is a compile
    of about a second, and Triton's compiler spends most of it outside the GIL. Whatever fails
    here is compiled again, one at a time, by the timed pass, which reports it.
    OPBENCH_PARALLEL_COMPILE=0 turns this off."""
    if len(candidates) < 2 or os.environ.get("OPBENCH_PARALLEL_COMPILE", "1") == "0":
        return
    from concurrent.futures import ThreadPoolExecutor

    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # a Triton without it: the timed pass compiles as it goes
        return
    workers = max(1, min(len(candidates), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool, AsyncCompileMode(pool, ignore_errors=True):
        with precompiling():
            for config in candidates:
                try:
                    make_call(config)
                except Exception:  # the timed pass meets it again and records it
                    pass


def cache_path() -> Path:
    root = os.environ.get("OPBENCH_CACHE_DIR") or os.path.join("~", ".cache", "opbench")
    return Path(root).expanduser() / "plans.json"


def clear_memory() -> None:
    """Forget choices held in memory (the disk cache is read again on the next lookup)."""
    global _DISK
    _MEMORY.clear()
    _DISK = None


def _read_disk() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _disk() -> dict[str, Any]:
    global _DISK
    if _DISK is None:
        _DISK = _read_disk()
    return _DISK


def _remember(full_key: str, config: Config, timings: list[dict]) -> None:
    entries = _read_disk()  # merge: other processes may have written other keys meanwhile
    entries[full_key] = {"config": config.to_json(), "candidates": timings}
    _disk()[full_key] = entries[full_key]
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a re-tune in the next process
