"""Per-layer median differences between runs of one suite made in different ways (1 GPU, N
GPUs under torchrun, N GPUs with --exclusive-timing), for docs/performance.md.

Usage: python3 bench/interference.py BASE.json OTHER.json [OTHER.json ...] [--min-ms 0.1]
The first run is the reference (normally the 1-GPU run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opbench.results.io import read_run  # noqa: E402


def medians(path: str) -> dict[tuple[str, str, str], float]:
    run = read_run(Path(path))
    return {r.key: r.median_ms for r in run.layers if r.status == "ok" and r.median_ms is not None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--min-ms", type=float, default=0.1)
    args = parser.parse_args()
    base = medians(args.runs[0])
    print(f"reference: {args.runs[0]} ({len(base)} results)")
    print(
        "| run | results compared | layers ≥ min | median |Δ| | max |Δ| | within 2% | worst layer |"
    )
    print("|---|---|---|---|---|---|---|")
    for path in args.runs[1:]:
        other = medians(path)
        common = [k for k in base if k in other]
        long = [k for k in common if base[k] >= args.min_ms]
        deltas = {k: other[k] / base[k] - 1 for k in long}
        if not deltas:
            print(f"| {path} | {len(common)} | 0 | – | – | – | – |")
            continue
        worst = max(deltas, key=lambda k: abs(deltas[k]))
        within = sum(abs(d) <= 0.02 for d in deltas.values())
        print(
            f"| {path} | {len(common)} | {len(long)} | "
            f"{100 * statistics.median(abs(d) for d in deltas.values()):.2f}% | "
            f"{100 * abs(deltas[worst]):.2f}% | {within}/{len(long)} | "
            f"{'/'.join(worst)} {100 * deltas[worst]:+.2f}% |"
        )


if __name__ == "__main__":
    main()
