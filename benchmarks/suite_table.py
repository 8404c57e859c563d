"""A run.json as the Markdown table docs/performance.md keeps: one row per (model, layer), the
median of every backend side by side, triton's ratios to each peer, and its throughput against
the ceilings.

A fused triton group (`attn_norm+qkv`) is compared with the sum of each peer's times over the
layers it covers. A quantized-linear peer (torch-fp8, torch-int8) has rows for the linears
alone: where it lacks a member, torch's time stands in and the cell is marked `+t` (the group
against PyTorch with that quantized GEMM, the rest eager); a peer with no row for any member
gives no ratio.

Usage: python3 benchmarks/suite_table.py RUN.json [--copy-tbps 4.27] [--peak-tflops 790]
CPU check of the plumbing: python3 benchmarks/suite_table.py --tiny (runs two layers of
quickstart's mlp through `opbench run` in the interpreter, then tables that run)
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opbench.compare.model import QUANT_PEERS  # noqa: E402
from opbench.results.io import read_run  # noqa: E402
from opbench.results.model import Status  # noqa: E402

SUBJECT = "triton"
# They time the quantized linears and nothing else.
QUANT_PEER_BACKENDS = tuple(peer.backend for peer in QUANT_PEERS)


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def peer_ms(by_layer: dict, model: str, members, peer: str) -> tuple[float | None, bool]:
    """`peer`'s time over `members` (the sum of its correct rows) and whether torch stood in
    for a member it has no row for (quantized-linear peers only); None if any is missing."""
    total, filled, own = 0.0, False, 0
    for member in members:
        row = by_layer.get((model, member), {}).get(peer)
        if (row is None or row.status == Status.UNSUPPORTED) and peer in QUANT_PEER_BACKENDS:
            row, filled = by_layer.get((model, member), {}).get("torch"), True
        else:
            own += row is not None
        if row is None or not row.median_ms or not row.correct:
            return None, filled
        total += row.median_ms
    return (total if own else None), filled


def tiny_run(out: Path) -> Path:
    """Two layers of quickstart's mlp through `opbench run` on the CPU: the run folder."""
    from typer.testing import CliRunner

    from opbench.cli.main import app

    suite = ROOT / "suites" / "quickstart.yaml"
    argv = ["run", str(suite), "-m", "mlp", "-l", "ln", "-l", "fc1", "--device", "cpu",
            "--quick", "--out", str(out)]  # fmt: skip
    done = CliRunner().invoke(app, argv)
    if done.exit_code != 0:
        raise SystemExit(f"opbench run failed (exit {done.exit_code}):\n{done.output}")
    return out / "quickstart" / "latest"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", nargs="?")
    parser.add_argument("--copy-tbps", type=float, default=4.27)
    parser.add_argument("--peak-tflops", type=float, default=790.0)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    if args.tiny:
        import os
        import tempfile

        os.environ["TRITON_INTERPRET"] = "1"  # before the run imports triton
        args.run = str(tiny_run(Path(tempfile.mkdtemp(prefix="suite-table-"))))
    if args.run is None:
        parser.error("give a RUN.json (or --tiny)")
    run = read_run(Path(args.run))
    peers = [b for b in run.backends if b != SUBJECT]
    rows: dict[tuple[str, str], dict] = {}
    by_layer: dict[tuple[str, str], dict] = {}  # a peer's one-layer rows, for fused groups
    for r in run.layers:
        entry = rows.setdefault((r.model, "+".join(r.members)), {"shape": r.input_shape})
        entry[r.backend] = r
        entry["members"] = r.members
        if len(r.members) == 1:
            by_layer.setdefault((r.model, r.members[0]), {})[r.backend] = r
    head = ["model", "layer(s)", "input", *(f"{b} ms" for b in peers), f"{SUBJECT} ms"]
    head += [f"× {b}" for b in peers] + ["TB/s", "% of copy", "TFLOP/s", "rel. L2"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ratios: dict[tuple[str, bool], list[float]] = {(b, f): [] for b in peers for f in (0, 1)}
    for (model, layer), entry in rows.items():
        subject = entry.get(SUBJECT)
        med = subject.median_ms if subject is not None and subject.correct else None
        cells = [model, layer, "×".join(map(str, entry["shape"]))]
        peer_times = {b: peer_ms(by_layer, model, entry["members"], b) for b in peers}
        for b in peers:
            ms, filled = peer_times[b]
            cells.append(f"{ms:.4f}{' +t' if filled else ''}" if ms else "—")
        cells.append(f"{med:.4f}" if med else (subject.status if subject is not None else "—"))
        for b in peers:
            ms, filled = peer_times[b]
            if med and ms:
                ratio = ms / med
                ratios[b, filled].append(ratio)
                cells.append(f"{ratio:.2f}×{' +t' if filled else ''}")
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
    for (b, filled), values in ratios.items():
        g = geomean(values)
        if g:
            what = f"{b} (+t: torch for the layers it lacks)" if filled else b
            print(f"geomean {SUBJECT} speed-up over {what}: {g:.2f}× ({len(values)} rows)")


if __name__ == "__main__":
    main()
