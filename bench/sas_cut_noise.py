"""How often a SAS cut difference is UNCERTAIN, and how many rounds make it rare: a simulation.

ResNet-50 as torchvision's ONNX export gives it (batch norms folded: 53 convs, 49 ReLUs, 16
adds, max pool, global average pool, flatten, classifier = 122 layers) is cut as
`opbench export sas` cuts it (each layer and everything it depends on). True per-layer times
come from a simple cost model (below); a cut's true time is the baseline plus its layers'
times. Each timing of a cut is that time with a relative noise of NOISE (2%: normal, one
draw per cut and round, independent). The derived times and their noise come from opbench's
own reader code (reference/prefix_graph.solve, sas_prefix.round_noise), and the verdict from
compare's rules: the reference interval is t ± 1.96·noise; a row whose interval reaches zero
is UNCERTAIN ("within the noise"); otherwise PASS when the speed-up's lower bound reaches the
target, FAIL when its upper bound stays below it, else UNCERTAIN. opbench's own time is taken
as exact, at a true speed-up of 2x (and 1.2x) against the target 1.5x.

    python bench/sas_cut_noise.py [--trials 200] [--batch 1] [--noise 0.02]

Cost model (an assumption, not a SAS measurement): a layer takes 0.02 ms plus
max(FLOPs / 2 TFLOP/s, bytes / 200 GB/s) with bytes = input + output + weights in float32;
the baseline (a call with no layer) costs 10% of the whole model.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opbench.reference.prefix_graph import CutRow, solve  # noqa: E402
from opbench.reference.sas_prefix import round_noise  # noqa: E402

Z95 = 1.96


def resnet50(batch: int) -> list[tuple[str, tuple[str, ...], float, float]]:
    """(name, reads, flops, bytes) of each layer, walk order."""
    layers: list[tuple[str, tuple[str, ...], float, float]] = []
    shape: dict[str, tuple[int, int, int]] = {"input": (3, 224, 224)}

    def numel(s: tuple[int, int, int]) -> int:
        return s[0] * s[1] * s[2] * batch

    def conv(name, x, cout, k, stride, pad):
        c, h, w = shape[x]
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        shape[name] = (cout, ho, wo)
        weights = cout * c * k * k + cout
        flops = 2.0 * batch * cout * ho * wo * c * k * k
        layers.append((name, (x,), flops, 4.0 * (numel(shape[x]) + numel(shape[name]) + weights)))
        return name

    def elementwise(name, xs):
        shape[name] = shape[xs[0]]
        moved = sum(numel(shape[x]) for x in xs) + numel(shape[name])
        layers.append((name, tuple(xs), float(numel(shape[name])), 4.0 * moved))
        return name

    def pool(name, x, k, stride, pad):
        c, h, w = shape[x]
        shape[name] = (c, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)
        moved = numel(shape[x]) + numel(shape[name])
        layers.append((name, (x,), float(numel(shape[name]) * k * k), 4.0 * moved))
        return name

    x = elementwise("relu", [conv("conv1", "input", 64, 7, 2, 3)])
    x = pool("maxpool", x, 3, 2, 1)
    for stage, (blocks, mid) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)], start=1):
        for i in range(blocks):
            p = f"layer{stage}_{i}"
            stride = 2 if i == 0 and stage > 1 else 1
            y = elementwise(f"{p}_relu1", [conv(f"{p}_conv1", x, mid, 1, 1, 0)])
            y = elementwise(f"{p}_relu2", [conv(f"{p}_conv2", y, mid, 3, stride, 1)])
            y = conv(f"{p}_conv3", y, mid * 4, 1, 1, 0)
            short = conv(f"{p}_down", x, mid * 4, 1, stride, 0) if i == 0 else x
            x = elementwise(f"{p}_out", [elementwise(f"{p}_add", [y, short])])
    c, _, _ = shape[x]
    shape["avgpool"] = (c, 1, 1)
    layers.append(("avgpool", (x,), float(numel(shape[x])), 4.0 * numel(shape[x])))
    shape["flatten"] = shape["avgpool"]
    layers.append(("flatten", ("avgpool",), 0.0, 0.0))
    layers.append(
        ("fc", ("flatten",), 2.0 * batch * 2048 * 1000, 4.0 * (2048 * 1000 + 3048 * batch))
    )
    return layers


def ancestors(layers) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, reads, _f, _b in layers:
        members = {name}
        for r in reads:
            members |= out.get(r, set())
        out[name] = members
    return out


def simulate(batch: int, noise: float, rounds: int, trials: int, speedups: tuple[float, ...],
             seed: int = 0) -> dict[str, float]:  # fmt: skip
    layers = resnet50(batch)
    true = {n: 0.02 + max(f / 2e12, b / 200e9) * 1e3 for n, _r, f, b in layers}
    baseline = 0.1 * sum(true.values()) / 0.9
    sets = ancestors(layers)
    cut_true = {n: baseline + sum(true[m] for m in sets[n]) for n in true}
    cut_true["input"] = baseline
    rng = random.Random(seed)
    counts = {"rows": 0, "noise": 0, "time": 0.0, "decided_time@2.0": 0.0}
    for s in speedups:
        counts[f"uncertain@{s}"] = counts[f"wrong@{s}"] = 0
    for _ in range(trials):
        draws = {
            n: [t * (1 + noise * rng.gauss(0, 1)) for _ in range(rounds)]
            for n, t in cut_true.items()
        }
        rows = [CutRow("input", (), statistics.median(draws["input"]),
                       round_noise(draws["input"]) if rounds > 1 else noise * baseline, True)]  # fmt: skip
        for name, reads, _f, _b in layers:
            samples = draws[name]
            spread = round_noise(samples) if rounds > 1 else noise * cut_true[name]
            rows.append(CutRow(name, reads, statistics.median(samples), spread))
        solution = solve(rows)
        for name, found in solution.derived.items():
            if name == "flatten":
                continue  # moves no data: exempt from verdicts in compare
            counts["rows"] += 1
            counts["time"] += true[name]
            lo = found.value - Z95 * (found.noise or 0.0)
            hi = found.value + Z95 * (found.noise or 0.0)
            if lo <= 0:
                counts["noise"] += 1
            for s in speedups:
                ours = true[name] / s  # opbench's time at a true speed-up s
                if lo <= 0 or not (lo / ours >= 1.5 or hi / ours < 1.5):
                    counts[f"uncertain@{s}"] += 1
                else:
                    if s == 2.0:
                        counts["decided_time@2.0"] += true[name]
                    if (lo / ours >= 1.5) != (s >= 1.5):
                        counts[f"wrong@{s}"] += 1
    rows_total = counts.pop("rows")
    time_total = counts.pop("time")
    shares = {k: v / rows_total for k, v in counts.items() if not k.startswith("decided")}
    shares["decided_time@2.0"] = counts["decided_time@2.0"] / time_total
    return shares


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, nargs="*", default=[1, 3, 5, 10, 20, 50, 100, 200])
    args = parser.parse_args(argv)
    print(f"ResNet-50, batch {args.batch}, {args.noise:.0%} noise per cut timing, "
          f"{args.trials} trials; rounds = timed rounds kept (--rounds N+1: the first is warm-up)")  # fmt: skip
    print("| rounds | within noise | UNCERTAIN at 2x | time judged at 2x | wrong at 2x "
          "| UNCERTAIN at 1.2x | wrong at 1.2x |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rounds in args.rounds:
        r = simulate(args.batch, args.noise, rounds, args.trials, (2.0, 1.2))
        print(f"| {rounds} | {r['noise']:.1%} | {r['uncertain@2.0']:.1%} | "
              f"{r['decided_time@2.0']:.0%} | {r['wrong@2.0']:.2%} | {r['uncertain@1.2']:.1%} | "
              f"{r['wrong@1.2']:.2%} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
