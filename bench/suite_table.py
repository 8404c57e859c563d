"""A run.json as the Markdown table docs/performance.md keeps: one row per (model, layer), the
median of every backend side by side, triton's ratios to each peer, and its throughput against
the ceilings.

Usage: python3 bench/suite_table.py RUN.json [--copy-tbps 4.27] [--peak-tflops 790]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opbench.results.io import read_run  # noqa: E402

SUBJECT = "triton"


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("--copy-tbps", type=float, default=4.27)
    parser.add_argument("--peak-tflops", type=float, default=790.0)
    args = parser.parse_args()
    run = read_run(Path(args.run))
    peers = [b for b in run.backends if b != SUBJECT]
    rows: dict[tuple[str, str], dict] = {}
    for r in run.layers:
        entry = rows.setdefault((r.model, "+".join(r.members)), {"shape": r.input_shape})
        entry[r.backend] = r
    head = ["model", "layer(s)", "input", *(f"{b} ms" for b in peers), f"{SUBJECT} ms"]
    head += [f"× {b}" for b in peers] + ["TB/s", "% of copy", "TFLOP/s", "rel. L2"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ratios: dict[str, list[float]] = {b: [] for b in peers}
    for (model, layer), entry in rows.items():
        subject = entry.get(SUBJECT)
        med = subject.median_ms if subject is not None and subject.correct else None
        cells = [model, layer, "×".join(map(str, entry["shape"]))]
        for b in peers:
            peer = entry.get(b)
            cells.append(f"{peer.median_ms:.4f}" if peer is not None and peer.median_ms else "—")
        cells.append(f"{med:.4f}" if med else (subject.status if subject is not None else "—"))
        for b in peers:
            peer = entry.get(b)
            if med and peer is not None and peer.median_ms:
                ratio = peer.median_ms / med
                ratios[b].append(ratio)
                cells.append(f"{ratio:.2f}×")
            else:
                cells.append("—")
        tbps = subject.bytes / (med * 1e-3) / 1e12 if med and subject.bytes else None
        tflops = subject.flops / (med * 1e-3) / 1e12 if med and subject.flops else None
        cells.append(f"{tbps:.2f}" if tbps else "—")
        cells.append(f"{100 * tbps / args.copy_tbps:.0f}%" if tbps else "—")
        cells.append(f"{tflops:.1f}" if tflops else "—")
        corr = subject.correctness if subject is not None else None
        cells.append(f"{corr.rel_l2:.1e}" if corr is not None else "—")
        print("| " + " | ".join(cells) + " |")
    print()
    for b in peers:
        g = geomean(ratios[b])
        if g:
            print(f"geomean {SUBJECT} speed-up over {b}: {g:.2f}× ({len(ratios[b])} layers)")


if __name__ == "__main__":
    main()
