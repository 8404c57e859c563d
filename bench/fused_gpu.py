"""The fused kernels of issue 26 on the GPU: each checked against float64 (or float32 on the GPU
for the large ones), then timed against the unfused chain it replaces, in Triton and in torch.

Usage (GPU machine, repository root; writes $OUT/fused_gpu.json when $OUT is set):
    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 bench/fused_gpu.py
CPU check of the plumbing (interpreter, tiny shapes; the numbers mean nothing):
    PYTHONPATH=. python3 bench/fused_gpu.py --cpu-smoke
Some cases only: --only=conv_res_b1,depthwise_b32 (names in `main`).

Cases (fp16; ResNet-50, MobileNetV2 and LLaMA-7B shapes):
- conv_res: a bottleneck's conv3 (1x1, 64 → 256, 56x56) → folded bn → + skip → relu, batch 1 and
  32: one fused conv; the Triton conv then the add+relu as two more passes; torch eager (cuDNN
  conv, batch_norm, add, relu).
- linear_res: o_proj (4096 → 4096) + residual at M = 2048 and 16: fused epilogue; Triton GEMM
  then torch add; torch eager.
- swiglu: gate/up (4096 → 2 x 11008) at M = 2048 and 16: the interleaved one-GEMM kernel; two
  Triton GEMMs + silu·mul in torch; torch eager (two F.linear, silu, mul) and one F.linear over
  the concatenated weight + silu·mul (the best a torch user writes by hand).
- add_rmsnorm: 2 x 2048 x 4096: one pass writing both; Triton add then Triton rmsnorm; torch.
- depthwise: MobileNetV2 3x3 dw 144 ch 56x56 stride 1 (+bn+relu6), batch 32 and 1; torch (cuDNN).
All times are `triton.testing.do_bench` medians (L2 flushed before every call) of bound
launches. Also reports how long tuning took, with the parallel precompile (kernels/tuning.py)
on for the first conv shape and off for a second of the same size.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable

SMOKE = "--cpu-smoke" in sys.argv
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from opbench.kernels import tuning  # noqa: E402
from opbench.kernels.conv.conv import build_conv2d  # noqa: E402
from opbench.kernels.conv.depthwise import build_depthwise_conv2d  # noqa: E402
from opbench.kernels.gemm.linear import Linear  # noqa: E402
from opbench.kernels.gemm.swiglu import build_swiglu  # noqa: E402
from opbench.kernels.memory.norm import bind_norm  # noqa: E402

DEVICE = "cpu" if SMOKE else "cuda"
H = torch.float16
ROWS: list[dict] = []


def sync() -> None:
    if not SMOKE:
        torch.cuda.synchronize()


def randn(*shape: int, dtype=H, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE) * scale).to(dtype)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def reference_device(*tensors: torch.Tensor) -> tuple[str, torch.dtype]:
    """float64 on the CPU for small problems, float32 on the GPU for large ones."""
    big = sum(t.numel() for t in tensors) > 2**24
    return (DEVICE, torch.float32) if big and not SMOKE else ("cpu", torch.float64)


def device_ms(fn: Callable[[], object]) -> float:
    if SMOKE:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def poisoned_check(name: str, launch: Callable[[], torch.Tensor], out: torch.Tensor,
                   ref: torch.Tensor, limit: float) -> float:  # fmt: skip
    out.fill_(float("nan"))
    launch()
    sync()
    assert not torch.isnan(out).any(), f"{name}: unwritten outputs"
    err = rel_err(out.to(ref.device), ref)
    assert err <= limit, f"{name}: relative L2 error {err:.2e} > {limit:.0e}"
    return err


def record(case: str, shape: str, err: float, times: dict[str, float], fused: str) -> None:
    row = {"case": case, "shape": shape, "rel_l2": err, "ms": times, "fused": fused}
    row["x"] = {k: times[k] / times[fused] for k in times if k != fused}
    ROWS.append(row)
    peers = "  ".join(f"{k} {v:.4f} ms ({row['x'].get(k, 1):.2f}x)" for k, v in times.items())
    print(f"{case:12s} {shape:24s} err {err:.1e}  {peers}", flush=True)


# ---- cases -----------------------------------------------------------------------------------


def conv_res(n: int, c: int, cout: int, hw: int) -> None:
    x, skip = randn(n, c, hw, hw), randn(n, cout, hw, hw)
    w = randn(cout, c, 1, 1, scale=c**-0.5)
    bn = {"running_mean": torch.randn(cout, device=DEVICE), "eps": 1e-5,
          "running_var": torch.rand(cout, device=DEVICE) + 0.5,
          "weight": torch.randn(cout, device=DEVICE), "bias": torch.randn(cout, device=DEVICE)}  # fmt: skip
    geometry = {"stride": 1, "padding": 0, "dilation": 1}
    fused = build_conv2d(w, None, activation="relu", batchnorm=bn, **geometry)
    start = time.perf_counter()
    bound = fused.bind(x, residual=skip)
    sync()
    tune_s = time.perf_counter() - start
    dev, dt = reference_device(x, skip)
    y = F.conv2d(x.to(dev, dt), w.to(dev, dt))
    y = F.batch_norm(y, bn["running_mean"].to(dev, dt), bn["running_var"].to(dev, dt),
                     bn["weight"].to(dev, dt), bn["bias"].to(dev, dt), False, 0.0, 1e-5)  # fmt: skip
    ref = F.relu(y + skip.to(dev, dt))
    err = poisoned_check("conv_res", bound.launch, bound.out, ref, 5e-3)
    plain = build_conv2d(w, None, batchnorm=bn, **geometry).bind(x)
    scratch = torch.empty_like(skip)

    def two_pass():  # the unfused chain's extra passes: add then relu, each a full tensor pass
        plain.launch()
        torch.add(plain.out, skip, out=scratch)
        torch.relu_(scratch)

    bnw = [bn[k].to(H) for k in ("running_mean", "running_var", "weight", "bias")]

    def torch_eager():
        y = F.batch_norm(F.conv2d(x, w), *bnw[:2], *bnw[2:], False, 0.0, 1e-5)
        return F.relu(y + skip)

    times = {"triton_fused": device_ms(bound.launch), "triton_conv+add+relu": device_ms(two_pass),
             "torch_eager": device_ms(torch_eager)}  # fmt: skip
    record("conv_res", f"{n}x{c}x{hw}x{hw}->{cout}", err, times, "triton_fused")
    ROWS[-1]["tune_s"] = round(tune_s, 2)


def linear_res(m: int, k: int, n: int) -> None:
    x, skip = randn(m, k), randn(m, n)
    w = randn(n, k, scale=k**-0.5)
    layer = Linear(w, None)
    fused = layer.bind(x, residual=skip)
    plain = Linear(w, None).bind(x)
    dev, dt = reference_device(x, w)
    ref = x.to(dev, dt) @ w.to(dev, dt).T + skip.to(dev, dt)
    err = poisoned_check("linear_res", fused.launch, fused.out, ref, 5e-3)
    scratch = torch.empty_like(skip)

    def two_pass():
        plain.launch()
        torch.add(plain.out, skip, out=scratch)

    times = {"triton_fused": device_ms(fused.launch), "triton_gemm+add": device_ms(two_pass),
             "torch_eager": device_ms(lambda: F.linear(x, w) + skip)}  # fmt: skip
    record("linear_res", f"M{m} K{k} N{n}", err, times, "triton_fused")


def swiglu(m: int, k: int, n: int) -> None:
    x = randn(m, k)
    wg, wu = randn(n, k, scale=k**-0.5), randn(n, k, scale=k**-0.5)
    fused = build_swiglu(wg, wu).bind(x)
    gate, up = Linear(wg, None).bind(x), Linear(wu, None).bind(x)
    dev, dt = reference_device(x, wg, wu)
    xr = x.to(dev, dt)
    ref = F.silu(xr @ wg.to(dev, dt).T) * (xr @ wu.to(dev, dt).T)
    err = poisoned_check("swiglu", fused.launch, fused.out, ref, 5e-3)
    scratch = torch.empty(m, n, dtype=H, device=DEVICE)
    both = torch.cat([wg, wu])

    def triton_unfused():
        gate.launch()
        up.launch()
        torch.mul(F.silu(gate.out), up.out, out=scratch)

    def torch_concat():
        g, u = F.linear(x, both).chunk(2, dim=-1)
        return F.silu(g) * u

    times = {"triton_fused": device_ms(fused.launch), "triton_2gemm+silu_mul": device_ms(triton_unfused),
             "torch_eager": device_ms(lambda: F.silu(F.linear(x, wg)) * F.linear(x, wu)),
             "torch_concat_weight": device_ms(torch_concat)}  # fmt: skip
    record("swiglu", f"M{m} K{k} N{n}", err, times, "triton_fused")


def add_rmsnorm(rows: int, hidden: int) -> None:
    x, r = randn(rows, hidden), randn(rows, hidden)
    w = randn(hidden)
    fused = bind_norm(x, w, None, 1e-6, rms=True, residual=r)
    total = torch.empty_like(x)
    plain = bind_norm(total, w, None, 1e-6, rms=True)
    dev, dt = reference_device(x, r)
    s = x.to(dev, dt) + r.to(dev, dt)
    ref = s / torch.sqrt((s * s).mean(-1, keepdim=True) + 1e-6) * w.to(dev, dt)
    err = poisoned_check("add_rmsnorm", fused.launch, fused.out, ref, 5e-3)
    assert rel_err(fused.extra[0].to(s.device), s) <= 5e-3, "add_rmsnorm: the sum is wrong"

    def two_pass():
        torch.add(x, r, out=total)
        plain.launch()

    def torch_eager():
        h = x + r
        return h, F.rms_norm(h, (hidden,), w, 1e-6)

    times = {"triton_fused": device_ms(fused.launch), "triton_add+rmsnorm": device_ms(two_pass),
             "torch_eager": device_ms(torch_eager)}  # fmt: skip
    record("add_rmsnorm", f"{rows}x{hidden}", err, times, "triton_fused")


def depthwise(n: int, c: int, hw: int) -> None:
    x = randn(n, c, hw, hw)
    w = randn(c, 1, 3, 3, scale=1 / 3)
    conv = build_depthwise_conv2d(w, None, padding=1, activation="relu6" if not SMOKE else "relu")
    bound = conv.bind(x)
    dev, dt = reference_device(x)
    y = F.conv2d(x.to(dev, dt), w.to(dev, dt), padding=1, groups=c)
    ref = y.clamp(0, 6) if not SMOKE else F.relu(y)
    err = poisoned_check("depthwise", bound.launch, bound.out, ref, 5e-3)
    times = {"triton": device_ms(bound.launch),
             "torch_eager": device_ms(lambda: F.conv2d(x, w, padding=1, groups=c).clamp_(0, 6))}  # fmt: skip
    record("depthwise", f"{n}x{c}x{hw}x{hw}", err, times, "triton")


def precompile_effect() -> None:
    """Tuning wall time of one conv shape with the parallel precompile, one without."""
    for flag, hw in (("1", 28), ("0", 27)):
        os.environ["OPBENCH_PARALLEL_COMPILE"] = flag
        x = randn(8, 128, hw, hw)
        conv = build_conv2d(randn(128, 128, 3, 3, scale=0.03), None, stride=1, padding=1,
                            dilation=1)  # fmt: skip
        before = tuning.TUNING_SECONDS[0]
        start = time.perf_counter()
        conv.bind(x)
        sync()
        ROWS.append({"case": "tuning", "parallel_compile": flag == "1", "shape": f"8x128x{hw}x{hw} 3x3",
                     "wall_s": round(time.perf_counter() - start, 2),
                     "tuning_s": round(tuning.TUNING_SECONDS[0] - before, 2)})  # fmt: skip
        print(ROWS[-1], flush=True)
    os.environ["OPBENCH_PARALLEL_COMPILE"] = "1"


def main() -> int:
    if SMOKE:
        cases = {"conv_res": lambda: conv_res(1, 8, 12, 5), "linear_res": lambda: linear_res(3, 24, 20),
                 "swiglu": lambda: swiglu(3, 24, 20), "add_rmsnorm": lambda: add_rmsnorm(5, 24),
                 "depthwise": lambda: depthwise(1, 6, 7)}  # fmt: skip
    else:
        cases = {"tuning": precompile_effect,
                 "conv_res_b1": lambda: conv_res(1, 64, 256, 56),
                 "conv_res_b32": lambda: conv_res(32, 64, 256, 56),
                 "conv_res_deep": lambda: conv_res(32, 512, 2048, 7),
                 "swiglu_prefill": lambda: swiglu(2048, 4096, 11008),
                 "swiglu_decode": lambda: swiglu(16, 4096, 11008),
                 "linear_res_prefill": lambda: linear_res(2048, 4096, 4096),
                 "linear_res_decode": lambda: linear_res(16, 4096, 4096),
                 "add_rmsnorm": lambda: add_rmsnorm(4096, 4096),
                 "depthwise_b32": lambda: depthwise(32, 144, 56),
                 "depthwise_b1": lambda: depthwise(1, 144, 56)}  # fmt: skip
    only = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), None)
    if only:
        cases = {k: v for k, v in cases.items() if k in only.split(",")}
    failed = 0
    for case in cases.values():
        try:
            case()
        except Exception:  # one case's failure is reported, the others still run
            failed += 1
            traceback.print_exc()
            ROWS.append({"case": "error", "trace": traceback.format_exc()[-2000:]})
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "fused_gpu.json"), "w") as f:
            json.dump(ROWS, f, indent=1)
    print(f"{len(cases) - failed} of {len(cases)} cases ran")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
