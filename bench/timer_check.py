"""Does opbench's timer agree with triton.testing.do_bench, and with itself across runs?

Usage (GPU machine):  python3 bench/timer_check.py SUITE [RUN1.json RUN2.json]

For every layer of SUITE on the torch backend (and triton where it builds), time the same
callable with opbench's timer and with do_bench(return_mode="median"), and print both medians
and their difference. Given two run.json files of the same suite, also print the run-to-run
difference of each layer's median.
"""

from __future__ import annotations

import sys

import torch
import triton

from opbench.backends.registry import get_backend
from opbench.measure.timer import time_callable
from opbench.pipeline import ModelData
from opbench.results.io import read_run
from opbench.results.stats import median
from opbench.spec.load import load_suite


def agreement(suite_path: str) -> None:
    suite = load_suite(suite_path)
    print(
        f"{'model/layer':40s} {'backend':8s} {'opbench ms':>11s} {'do_bench ms':>11s} {'diff %':>7s}"
    )
    for model in suite.models:
        data = ModelData(suite, model, "cuda")
        for backend_name in ("torch", "triton"):
            backend = get_backend(backend_name)
            for i, layer in enumerate(model.layers):
                try:
                    built = backend.build([layer], [data.weights(i)], "cuda")
                    x = data.input(i)
                    fn = built.fn
                    fn(x)
                    torch.cuda.synchronize()
                except Exception as exc:
                    print(
                        f"{model.name + '/' + layer.name:40s} {backend_name:8s} skipped: {type(exc).__name__}: {str(exc)[:80]}"
                    )
                    continue
                ours = median(
                    [
                        t
                        for r in time_callable(lambda: fn(x), layer.timing, "cuda").rounds
                        for t in r
                    ]
                )
                theirs = triton.testing.do_bench(
                    lambda: fn(x), warmup=25, rep=100, return_mode="median"
                )
                diff = 100 * (ours - theirs) / theirs
                print(
                    f"{model.name + '/' + layer.name:40s} {backend_name:8s} {ours:11.4f} {theirs:11.4f} {diff:7.2f}"
                )


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


if __name__ == "__main__":
    agreement(sys.argv[1])
    if len(sys.argv) == 4:
        run_to_run(sys.argv[2], sys.argv[3])
