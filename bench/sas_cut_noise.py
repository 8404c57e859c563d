"""How often a SAS cut difference is UNCERTAIN, and how many rounds make it rare: a simulation.

ResNet-50 as torchvision's ONNX export gives it (batch norms folded: 53 convs, 49 ReLUs, 16
adds, max pool, global average pool, flatten, classifier = 122 layers) is cut as
`opbench export sas` cuts it (each layer and everything it depends on). True per-layer times
come from a simple cost model (below); a cut's true time is the baseline plus its layers'
times. Each timing of a cut is that time with a relative noise of NOISE (2%: normal, one
draw per cut and round, independent), written as the script writes its CSV (with --rounds
N+1: a `round` column, the first round a warm-up the reader drops) and read by opbench's own
reader; the verdicts are compare's own code: `prefix_noise` (the interval reaches zero, the
reader flagged the difference negative or below its noise, or it subtracts a cut that fell)
makes a row UNCERTAIN; otherwise PASS when the speed-up's lower bound reaches the target,
FAIL when its upper bound stays below it, else UNCERTAIN. opbench's own time is taken as
exact, at a true speed-up of 2x (and 1.2x) against the target 1.5x.

    python bench/sas_cut_noise.py [--trials 200] [--batch 1] [--noise 0.02]

Cost model (an assumption, not a SAS measurement): a layer takes 0.02 ms plus
max(FLOPs / 2 TFLOP/s, bytes / 200 GB/s) with bytes = input + output + weights in float32;
the baseline (a call with no layer) costs 10% of the whole model.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opbench.compare.model import Interval  # noqa: E402

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


def _write_csv(path: Path, layers, draws: dict[str, list[float]], rounds: int) -> None:
    """The CSV the SAS script writes: one row per cut (and round, with a warm-up round)."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        if rounds == 1:
            writer.writerow(
                ["layer", "type", "inputs", "prefix_median_ms", "prefix_std_ms", "runs"]
            )
            writer.writerow(["input", "input", "", draws["input"][0], NOISE_OF["input"], 10])
            for name, reads, _f, _b in layers:
                writer.writerow(
                    [name, "layer", " ".join(reads), draws[name][0], NOISE_OF[name], 10]
                )
            return
        writer.writerow(["layer", "type", "inputs", "prefix_median_ms", "round"])
        for r in range(rounds + 1):  # round 0 is the warm-up the reader drops
            writer.writerow(["input", "input", "", draws["input"][r], r])
            for name, reads, _f, _b in layers:
                writer.writerow([name, "layer", " ".join(reads), draws[name][r], r])


NOISE_OF: dict[str, float] = {}  # with one round: the spread of a cut's calls, as the CSV says


def simulate(batch: int, noise: float, rounds: int, trials: int, speedups: tuple[float, ...],
             seed: int = 0) -> dict[str, float]:  # fmt: skip
    from opbench.compare.rows import prefix_noise
    from opbench.compare.verdict import reference_interval, speedup_interval, verdict_of
    from opbench.reference.interface import ReaderOptions
    from opbench.reference.sas_prefix import READER

    layers = resnet50(batch)
    true = {n: 0.02 + max(f / 2e12, b / 200e9) * 1e3 for n, _r, f, b in layers}
    baseline = 0.1 * sum(true.values()) / 0.9
    sets = ancestors(layers)
    cut_true = {n: baseline + sum(true[m] for m in sets[n]) for n in true}
    cut_true["input"] = baseline
    NOISE_OF.clear()
    NOISE_OF.update({n: noise * t for n, t in cut_true.items()})
    rng = random.Random(seed)
    counts = {"rows": 0, "noise": 0, "time": 0.0, "decided_time@2.0": 0.0}
    for s in speedups:
        counts[f"uncertain@{s}"] = counts[f"wrong@{s}"] = 0
    path = Path(tempfile.mkdtemp()) / "sas_prefix_resnet50.csv"
    for _ in range(trials):
        draws = {n: [t * (1 + noise * rng.gauss(0, 1)) for _ in range(rounds + 1)]
                 for n, t in cut_true.items()}  # fmt: skip
        _write_csv(path, layers, draws, rounds)
        profile = READER.read(path, ReaderOptions())
        for pos, row in enumerate(profile.layers):
            if row.status != "timed" or row.name == "flatten":  # flatten: exempt in compare
                continue
            counts["rows"] += 1
            counts["time"] += true[row.name]
            reference = reference_interval(row)
            noisy = prefix_noise(profile, [pos], reference)
            if noisy is not None:  # UNCERTAIN whatever opbench's time
                counts["noise"] += 1
            for s in speedups:
                ours = true[row.name] / s  # opbench's time at a true speed-up s
                verdict = "UNCERTAIN" if noisy else verdict_of(
                    speedup_interval(reference, Interval(ours, ours, ours)), 1.5
                )  # fmt: skip
                if verdict == "UNCERTAIN":
                    counts[f"uncertain@{s}"] += 1
                    continue
                if s == 2.0:
                    counts["decided_time@2.0"] += true[row.name]
                if (verdict == "PASS") != (s >= 1.5):
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
    print("| rounds | untrusted difference | UNCERTAIN at 2x | time judged at 2x | wrong at 2x "
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
