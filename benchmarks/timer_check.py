"""Does opbench's timer agree with triton.testing.do_bench, and with itself across runs?

Usage (GPU machine, repository root):
    PYTHONPATH=. python3 benchmarks/timer_check.py SUITE [RUN1.json RUN2.json]
CPU check of the plumbing (Triton interpreter, quickstart's mlp; the numbers mean nothing):
    PYTHONPATH=. python3 benchmarks/timer_check.py --tiny

For every layer of SUITE on the torch backend (and triton where it builds), time the same bound
call with opbench's timer (benchmarks/timing.py) and with do_bench(return_mode="median"), the
outside reference this check exists for, and print both medians and their difference. Given two
run.json files of the same suite, also print the run-to-run difference of each layer's median.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

TINY = "--tiny" in sys.argv
if TINY:  # before the first `import triton`
    os.environ["TRITON_INTERPRET"] = "1"

from timing import median_ms  # noqa: E402

from opbench.backends.base import Unsupported  # noqa: E402
from opbench.backends.registry import get_backend  # noqa: E402
from opbench.pipeline.data import ModelData  # noqa: E402
from opbench.results.io import read_run  # noqa: E402
from opbench.spec.load import load_suite  # noqa: E402

QUICKSTART = Path(__file__).resolve().parents[1] / "suites" / "quickstart.yaml"


def reference_ms(fn, device: str) -> float:
    """do_bench's median on CUDA; on the CPU (--tiny) five perf_counter calls stand in."""
    if device == "cpu":
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)
    import triton

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def agreement(suite_path: Path, device: str, only: str | None = None) -> int:
    """Prints one row per (layer, backend) of every model (or the model `only`); returns how
    many rows were timed."""
    suite = load_suite(suite_path)
    print(
        f"{'model/layer':40s} {'backend':8s} {'opbench ms':>11s} {'do_bench ms':>11s} {'diff %':>7s}"
    )
    timed = 0
    for model in suite.models if only is None else [suite.model(only)]:
        data = ModelData(suite, model, device)
        for backend_name in ("torch", "triton"):
            backend = get_backend(backend_name)
            for i, layer in enumerate(model.layers):
                name = f"{model.name}/{layer.name}"
                try:
                    built = backend.build([layer], [data.weights(i)], device)
                except Unsupported as exc:
                    print(f"{name:40s} {backend_name:8s} unsupported: {str(exc)[:80]}")
                    continue
                launch = built.bind_input(*built.prepared(data.inputs(i))).launch
                ours = median_ms(launch, device, tiny=TINY)
                theirs = reference_ms(launch, device)
                diff = 100 * (ours - theirs) / theirs
                print(f"{name:40s} {backend_name:8s} {ours:11.4f} {theirs:11.4f} {diff:7.2f}")
                timed += 1
    return timed


def run_to_run(path_a: str, path_b: str) -> None:
    a, b = read_run(path_a), read_run(path_b)
    print(
        f"\n{'model/layer':40s} {'backend':8s} {'run 1 ms':>10s} {'run 2 ms':>10s} {'diff %':>7s}"
    )
    for ra in a.layers:
        rb = b.find(ra.model, ra.layer, ra.backend)
        if rb is None or ra.median_ms is None or rb.median_ms is None:
            continue
        diff = 100 * (rb.median_ms - ra.median_ms) / ra.median_ms
        name = ra.model + "/" + "+".join(ra.members)
        print(f"{name:40s} {ra.backend:8s} {ra.median_ms:10.4f} {rb.median_ms:10.4f} {diff:7.2f}")


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--tiny"]
    if TINY:
        return 0 if agreement(QUICKSTART, "cpu", only="mlp") else 1
    if len(args) not in (1, 3):
        print(__doc__, file=sys.stderr)
        return 2
    agreement(Path(args[0]), "cuda")
    if len(args) == 3:
        run_to_run(args[1], args[2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
