"""Do reused plans reproduce a run on another machine? Triton medians of two run.json files.

    python bench/plan_repro.py FIRST/run.json SECOND/run.json [--min-ms 0.02] [--within 0.05]

FIRST is a run whose plans were written with --plans-out; SECOND the same suite on another
fresh machine run with --plans. Every result of the triton backend that both runs measured
(status ok) and whose first median is at least --min-ms is compared; the table lists each with
its plan sources, and the script exits 1 when any differs by more than --within.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opbench.results.io import read_run


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--min-ms", type=float, default=0.02)
    parser.add_argument("--within", type=float, default=0.05)
    args = parser.parse_args()
    first, second = read_run(args.first), read_run(args.second)
    print(f"GPUs: {first.env.get('gpu_uuid')} then {second.env.get('gpu_uuid')}")
    worst, compared, misses = 0.0, 0, []
    print("| model | layer | first ms | second ms | diff | plan sources (second) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for a in first.layers:
        if a.backend != args.backend or not a.correct or a.median_ms is None:
            continue
        b = second.find(a.model, a.layer, a.backend)
        if b is None or not b.correct or b.median_ms is None or a.median_ms < args.min_ms:
            continue
        diff = b.median_ms / a.median_ms - 1
        sources = sorted({c.get("source", "?") for c in (b.plan or {}).get("choices", [])})
        print(f"| {a.model} | {a.layer} | {a.median_ms:.4f} | {b.median_ms:.4f} | {diff:+.1%} "
              f"| {', '.join(sources) or '-'} |")  # fmt: skip
        compared += 1
        worst = max(worst, abs(diff))
        if abs(diff) > args.within:
            misses.append(f"{a.model}/{a.layer} {diff:+.1%}")
    print(f"{compared} results >= {args.min_ms} ms compared; largest difference {worst:.1%}; "
          f"{len(misses)} beyond {args.within:.0%}" + (f": {', '.join(misses)}" if misses else ""))  # fmt: skip
    return 1 if misses or not compared else 0


if __name__ == "__main__":
    sys.exit(main())
