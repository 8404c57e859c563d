"""On the GPU: issue #17's targets for the harness, on one suite.

    python benchmarks/harness_speed.py SUITE [--modes events,graph,fixed,second] [--out DIR]
    python benchmarks/harness_speed.py --tiny    (CPU: the plumbing, on one layer of quickstart's
        mlp in the modes fixed and second; the targets are printed, never judged)

For each mode, `opbench run` is run on a copy of SUITE whose defaults.timing is changed:
  events  adaptive timing (the default), CUDA events
  graph   adaptive timing, cuda_graph: true
  fixed   a fixed 5 × 100 ms schedule, CUDA events (the reference for events' medians)
  fixed-graph  the same with cuda_graph: true (the reference for graph's medians)
  second  the events run again in the same process tree and machine: it must tune nothing

Reported: wall time per result (the sum of each result's build/tune/check/time phases, and the
whole run's wall time divided by its results), the stop reasons, the largest difference of
adaptive medians from the fixed schedule over results >= 0.05 ms, and the second run's tuning
seconds. Targets (#17): median wall per result <= 1.0 s; medians within 2% of the fixed
schedule; the second run spends no time tuning. Exit 1 when a measured target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from opbench.results.io import read_run

ROOT = Path(__file__).resolve().parents[1]

TIMING = {
    "events": {},
    "graph": {"cuda_graph": True},
    "fixed": {"rounds": 5, "rep_ms": 100},
    "fixed-graph": {"rounds": 5, "rep_ms": 100, "cuda_graph": True},
    "second": {},
}
MEDIAN_FLOOR_MS = 0.05
MEDIAN_AGREEMENT = 0.02
WALL_TARGET_S = 1.0


def suite_copy(source: Path, mode: str, folder: Path) -> Path:
    data = yaml.safe_load(source.read_text())
    defaults = data.setdefault("defaults", {}) or {}
    data["defaults"] = defaults
    defaults["timing"] = {**(defaults.get("timing") or {}), **TIMING[mode]}
    path = folder / f"{source.stem}.{mode}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_mode(source: Path, mode: str, out: Path, work: Path, only: tuple[str, ...] = ()) -> dict:
    # "second" reuses the events suite file, so any tuning cache keyed on it is hit.
    suite = suite_copy(source, "events" if mode == "second" else mode, work)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "opbench", "run", str(suite), "--out", str(out / mode), *only],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    tail = "\n".join(proc.stdout.splitlines()[-3:])
    print(f"[{mode}] exit {proc.returncode} in {wall:.1f} s\n{tail}", flush=True)
    run_dir = next((out / mode).iterdir()) / "latest"
    run = read_run(run_dir)
    per_result = [sum(r.phases_s.values()) for r in run.layers if r.phases_s]
    stops: dict[str, int] = {}
    for r in run.layers:
        stops[str(r.stop_reason)] = stops.get(str(r.stop_reason), 0) + 1
    return {
        "mode": mode,
        "exit": proc.returncode,
        "wall_s": wall,
        "results": len(run.layers),
        "end_to_end": len(run.end_to_end),
        "wall_per_result_s": wall / max(1, len(run.layers) + len(run.end_to_end)),
        "median_phases_per_result_s": statistics.median(per_result) if per_result else None,
        "tune_s": sum((r.phases_s or {}).get("tune", 0.0) for r in run.layers),
        "stop_reasons": stops,
        "medians": {"/".join((r.model, r.layer, r.backend)): r.median_ms for r in run.layers},
    }


def agreement(adaptive: dict, fixed: dict) -> tuple[float, str, int]:
    """(largest |adaptive / fixed - 1| over results >= the floor, which result, how many)."""
    worst, which, count = 0.0, "", 0
    for key, ref in fixed["medians"].items():
        got = adaptive["medians"].get(key)
        if ref is None or got is None or ref < MEDIAN_FLOOR_MS:
            continue
        count += 1
        diff = abs(got / ref - 1.0)
        if diff > worst:
            worst, which = diff, key
    return worst, which, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, nargs="?")
    parser.add_argument("--modes", default="events,graph,fixed,fixed-graph,second")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    only: tuple[str, ...] = ()
    if args.tiny:
        args.suite = args.suite or ROOT / "suites" / "quickstart.yaml"
        args.modes, only = "fixed,second", ("-m", "mlp", "-l", "ln", "--device", "cpu", "--quick")
    if args.suite is None:
        parser.error("give a SUITE (or --tiny)")
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(TIMING)
    if unknown:
        print(f"unknown mode(s) {sorted(unknown)}; known: {sorted(TIMING)}", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="harness-speed-"))
    with tempfile.TemporaryDirectory() as work:
        rows = {m: run_mode(args.suite, m, out, Path(work), only) for m in modes}

    ok = True
    print(f"\nsuite {args.suite} · runs in {out}")
    print(
        "| mode | results (+e2e) | wall s | wall per result s | median phases per result s | tune s | stops |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for m, r in rows.items():
        med = r["median_phases_per_result_s"]
        print(
            f"| {m} | {r['results']} (+{r['end_to_end']}) | {r['wall_s']:.1f} | "
            f"{r['wall_per_result_s']:.2f} | {med if med is None else f'{med:.2f}'} | "
            f"{r['tune_s']:.1f} | {r['stop_reasons']} |"
        )
        if m in ("events", "graph", "second") and med is not None and med > WALL_TARGET_S:
            ok = False
            print(f"  MISSED: median wall per result {med:.2f} s > {WALL_TARGET_S} s ({m})")
    for m, ref in (("events", "fixed"), ("second", "fixed"), ("graph", "fixed-graph")):
        if m not in rows or ref not in rows:
            continue
        worst, which, count = agreement(rows[m], rows[ref])
        ok &= worst <= MEDIAN_AGREEMENT
        print(
            f"{m} vs {ref} (5 × 100 ms): largest difference {100 * worst:.2f}% ({which}) over "
            f"{count} results >= {MEDIAN_FLOOR_MS} ms: "
            + ("PASS" if worst <= MEDIAN_AGREEMENT else "MISSED")
        )
    if "second" in rows:
        tuned = rows["second"]["tune_s"]
        print(f"second run tuning: {tuned:.2f} s: {'PASS' if tuned == 0 else 'MISSED'}")
        ok &= tuned == 0
    (out / "harness_speed.json").write_text(json.dumps(rows, indent=1))
    if args.tiny:  # interpreted CPU times: the targets mean nothing; every mode must have run
        return 0 if all(r["exit"] == 0 for r in rows.values()) else 1
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
