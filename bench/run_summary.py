"""Tables for docs/performance.md from run.json files: per result device/host/stream times
and the launch-bound flag, and per model the end-to-end times in both modes.

    python bench/run_summary.py RUN.json [RUN.json ...] [--layers] [--models]
"""

from __future__ import annotations

import sys
from pathlib import Path

from opbench.results.io import read_run


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def layers_table(run) -> None:
    print("| model | layer | backend | device ms | host_ms | stream_ms | launch-bound | × torch |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    torch_ms = {(r.model, r.layer): r.median_ms for r in run.layers if r.backend == "torch"}
    for r in run.layers:
        if r.status != "ok":
            print(f"| {r.model} | {r.layer} | {r.backend} | {r.status}: {r.message} | | | | |")
            continue
        base = torch_ms.get((r.model, r.layer))
        ratio = (
            f"{base / r.median_ms:.2f}×" if base and r.median_ms and r.backend != "torch" else ""
        )
        print(f"| {r.model} | {'+'.join(r.members)} | {r.backend} | {fmt(r.median_ms)} | "
              f"{fmt(r.host_ms)} | {fmt(r.stream_ms)} | {'yes' if r.launch_bound else ''} | {ratio} |")  # fmt: skip


def models_table(run) -> None:
    rows: dict[tuple[str, str], dict[str, float | None]] = {}
    for e in run.end_to_end:
        median = e.stats.median if e.stats else None
        rows.setdefault((e.model, e.mode), {})[e.backend] = median
    backends = sorted({b for row in rows.values() for b in row}, key=lambda b: b != "torch")
    print(
        "| model | mode | "
        + " | ".join(f"{b} ms" for b in backends)
        + " | × torch eager (same mode) |"
    )
    print("| --- | --- | " + " | ".join("---" for _ in backends) + " | --- |")
    for (model, mode), row in rows.items():
        base = row.get("torch")
        ratios = ", ".join(
            f"{b} {base / row[b]:.2f}×" for b in backends if b != "torch" and row.get(b) and base
        )
        print(
            f"| {model} | {mode} | "
            + " | ".join(fmt(row.get(b)) for b in backends)
            + f" | {ratios} |"
        )


def main() -> None:
    paths = [Path(a) for a in sys.argv[1:] if not a.startswith("--")]
    show_layers = "--models" not in sys.argv or "--layers" in sys.argv
    show_models = "--layers" not in sys.argv or "--models" in sys.argv
    for path in paths:
        run = read_run(path)
        print(f"\n### {run.suite} ({path}), {run.env.get('gpu_name')}, {run.started_at}\n")
        if show_layers:
            layers_table(run)
            print()
        if show_models:
            models_table(run)


if __name__ == "__main__":
    main()
