"""The correctness check on a GPU: poisoning of the caching allocator, fooling kernels, margins.

1. poison: for output sizes from 4 kB (small pool) to 64 MB (large pool), the right answer is
   computed and freed; an allocation of the same size then holds that answer (the hazard, shown
   without poisoning) and holds only poison after `poison_free_memory`.
2. fooling: three kernels (writes nothing, writes half, right only on its first call with each
   input), as the triton backend's relu, through run_suite on CUDA after the torch backend
   computed the answer, fp16, on the issue's 4x512x512 and a small odd shape: every run must fail.
3. margins (--runs DIR...): for every result of the run.json files under DIR, rel_l2 / tolerance
   and max_abs / max_abs_limit, the worst per (op, dtype, quant), and any failed check.

    cd <repo> && PYTHONPATH=. python3 bench/check_cuda.py --runs-per-kernel 30
    cd <repo> && PYTHONPATH=. python3 bench/check_cuda.py --skip-poison --skip-fooling --runs $OUT/runs

Exits 1 when anything above does not hold.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from opbench.measure.poison import poison_free_memory, unwritten
from opbench.results.io import read_run

SIZES = (4 << 10, 300 << 10, 3 << 20, 64 << 20)


def check_poison(device: str) -> bool:
    ok = True
    for nbytes in SIZES:
        n = nbytes // 2
        for poisoned in (False, True):
            x = torch.randn(n, device=device, dtype=torch.float16)
            answer = torch.relu(x)
            ptr = answer.data_ptr()
            expected = answer.clone()
            del answer
            if poisoned:
                poison_free_memory(device, nbytes)
            out = torch.empty(n, device=device, dtype=torch.float16)
            same_block = out.data_ptr() == ptr
            holds_answer = bool(torch.equal(out, expected))
            left = unwritten(out)
            print(
                f"  {nbytes >> 10:>6} kB poisoned={poisoned!s:5} same block={same_block!s:5} "
                f"old answer={holds_answer!s:5} poison={left}/{n}"
            )
            if poisoned and left != n:
                ok = False
            del x, out, expected
    return ok


def check_fooling(device: str, runs: int) -> bool:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    import test_fooling_kernels as fooling  # the kernels the CPU test uses

    from opbench.backends import triton as triton_backend
    from opbench.pipeline import RunOptions, run_suite
    from opbench.spec.load import load_suite_text

    ok = True
    for shape in ((4, 512, 512), fooling.SHAPE):
        text = fooling.SUITE.replace(f"batch: {fooling.SHAPE[0]}", f"batch: {shape[0]}")
        text = text.replace(f"input: {list(fooling.SHAPE[1:])}", f"input: {list(shape[1:])}")
        suite = load_suite_text(text, "fool.yaml")
        for builder in (fooling.writes_nothing, fooling.writes_half, fooling.right_once):
            triton_backend.BUILDERS["relu"] = builder
            fooled = honest_failed = 0
            reasons: set[str] = set()
            for _ in range(runs):
                run = run_suite(suite, RunOptions(device=device, end_to_end=False))
                by = {r.backend: r for r in run.layers}
                fooled += bool(by["triton"].correct)
                honest_failed += not by["torch"].correct
                reasons.update(f.split(":")[0] for f in by["triton"].correctness.failures)
            print(
                f"  {shape} {builder.__name__:15} fooled {fooled}/{runs}, torch failed "
                f"{honest_failed}/{runs}; reasons seen: {sorted(reasons)}"
            )
            ok = ok and fooled == 0 and honest_failed == 0
    return ok


def margins(folders: list[Path]) -> bool:
    worst: dict[tuple[str, str, str], tuple[float, float, str]] = {}
    ok = True
    for folder in folders:
        for path in sorted(folder.rglob("run.json")):
            if path.parent.is_symlink():
                continue
            for r in read_run(path).layers:
                c = r.correctness
                if c is None:
                    continue
                if not c.passed:
                    ok = False
                    print(
                        f"  FAILED {path.parent.name} {r.model}/{r.layer} {r.backend}: {c.failures}"
                    )
                rel = c.rel_l2 / c.tolerance
                mx = c.max_abs / c.max_abs_limit if c.max_abs_limit else 0.0
                key = (r.op, r.dtype, r.quant)
                old = worst.get(key, (0.0, 0.0, ""))
                where = f"{r.model}/{r.layer}" if max(rel, mx) >= max(old[:2]) else old[2]
                worst[key] = (max(old[0], rel), max(old[1], mx), where)
    print(f"  {'op':28} {'dtype':9} {'quant':5} {'rel/tol':>8} {'max/limit':>9}")
    for (op, dtype, quant), (rel, mx, where) in sorted(worst.items()):
        print(f"  {op:28} {dtype:9} {quant:5} {rel:8.2f} {mx:9.2f}  {where}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs-per-kernel", type=int, default=30)
    parser.add_argument("--skip-poison", action="store_true")
    parser.add_argument("--skip-fooling", action="store_true")
    parser.add_argument("--runs", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    ok = True
    if not args.skip_poison:
        print("1. poisoning the caching allocator")
        ok &= check_poison(args.device)
    if not args.skip_fooling:
        print("2. fooling kernels through run_suite")
        ok &= check_fooling(args.device, args.runs_per_kernel)
    if args.runs:
        print("3. margins of the results under", *args.runs)
        ok &= margins(args.runs)
    print("all held" if ok else "SOMETHING DID NOT HOLD")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
